package baseline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"time"

	"github.com/tollgate-dev/tollgate/internal/loadgen"
)

// Baseline is one run of a suite: what each prompt got.
type Baseline struct {
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	BaseURL   string    `json:"base_url"`
	Model     string    `json:"model"` // requested
	SuiteHash string    `json:"suite_hash"`
	// ServedModels and Fingerprints are the distinct "model" and
	// "system_fingerprint" values the answers carried.
	ServedModels []string `json:"served_models"`
	Fingerprints []string `json:"fingerprints,omitempty"`
	Samples      []Sample `json:"samples"`
}

// Sample is one request of the run.
type Sample struct {
	Prompt       string   `json:"prompt"`
	Rep          int      `json:"rep"`
	OK           bool     `json:"ok"`
	Error        string   `json:"error,omitempty"`
	TTFTMS       float64  `json:"ttft_ms"`
	TPOTMS       *float64 `json:"tpot_ms"` // nil with fewer than 2 output tokens
	E2ELMS       float64  `json:"e2el_ms"`
	InputTokens  int      `json:"input_tokens"`
	OutputTokens int      `json:"output_tokens"`
	FinishReason string   `json:"finish_reason"`
	// OutputSHA256 is the hash of the whole generated text.
	OutputSHA256 string `json:"output_sha256"`
	ServedModel  string `json:"served_model,omitempty"`
	Fingerprint  string `json:"fingerprint,omitempty"`
}

// Run sends the suite to baseURL (the suite's own when empty), one request
// at a time so latencies are not mixed with the suite's own load, each
// prompt Repeat times in rounds (every prompt once, then again).
func Run(ctx context.Context, s *Suite, baseURL string, header http.Header) (*Baseline, error) {
	if baseURL == "" {
		baseURL = s.BaseURL
	}
	if baseURL == "" {
		return nil, fmt.Errorf("no endpoint: set base_url in the suite or pass --base-url")
	}
	h := header.Clone()
	if h == nil {
		h = http.Header{}
	}
	for k, v := range s.Headers {
		h.Set(k, v)
	}
	c := loadgen.NewClient(baseURL, h, 1, 10*time.Minute)
	defer c.CloseIdle()
	b := &Baseline{CreatedAt: time.Now().UTC(), BaseURL: baseURL, Model: s.Model, SuiteHash: s.Hash()}
	for rep := range s.Repeat {
		for _, p := range s.Prompts {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			path, body := s.body(p)
			resp := c.Send(ctx, &loadgen.Request{Path: path, Body: body})
			b.Samples = append(b.Samples, sample(p.ID, rep, resp))
		}
	}
	for _, sm := range b.Samples {
		if sm.ServedModel != "" && !slices.Contains(b.ServedModels, sm.ServedModel) {
			b.ServedModels = append(b.ServedModels, sm.ServedModel)
		}
		if sm.Fingerprint != "" && !slices.Contains(b.Fingerprints, sm.Fingerprint) {
			b.Fingerprints = append(b.Fingerprints, sm.Fingerprint)
		}
	}
	return b, nil
}

func sample(id string, rep int, resp loadgen.Response) Sample {
	m := loadgen.Measure(resp.Sent, resp.Events)
	s := Sample{Prompt: id, Rep: rep, OK: resp.Err == nil && m.HasTTFT, TTFTMS: ms(m.TTFT), E2ELMS: ms(m.E2E),
		InputTokens: m.InputTokens, OutputTokens: m.OutputTokens, FinishReason: m.FinishReason}
	if resp.Err != nil {
		s.Error = resp.Err.Error()
	} else if !m.HasTTFT {
		s.Error = "no content in the stream"
	}
	if m.HasTPOT {
		v := ms(m.TPOT)
		s.TPOTMS = &v
	}
	h := sha256.New()
	for _, e := range resp.Events {
		h.Write([]byte(e.Text))
		if s.ServedModel == "" && e.Model != "" {
			s.ServedModel = e.Model
		}
		if s.Fingerprint == "" && e.Fingerprint != "" {
			s.Fingerprint = e.Fingerprint
		}
	}
	s.OutputSHA256 = hex.EncodeToString(h.Sum(nil))
	return s
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)

// CheckName rejects names that are not plain file names.
func CheckName(name string) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("baseline name %q: use letters, digits, '.', '_' and '-' (at most 100)", name)
	}
	return nil
}

// Save writes b as dir/NAME.json (creating dir), replacing a file of
// that name atomically.
func Save(dir string, b *Baseline) error {
	if err := CheckName(b.Name); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, b.Name+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, b.Name+".json"))
}

// Load reads dir/NAME.json.
func Load(dir, name string) (*Baseline, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name+".json")
	data, err := os.ReadFile(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("no baseline %q in %s (save one with `tollgate baseline run --save %s`)", name, dir, name)
		}
		return nil, err
	}
	var b Baseline
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("baseline %s: %w", path, err)
	}
	return &b, nil
}
