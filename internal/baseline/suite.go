// Package baseline is tollgate's regression check for a serving endpoint:
// a fixed suite of prompts, sent with deterministic sampling, whose
// per-prompt figures and output hashes are saved, and later compared with
// a new run to tell latency drift, output-length drift and changed outputs
// apart — and to say when it looks like the model or its version changed:
//
//	suite.yaml ──Run (internal/loadgen client)──▶ endpoint ──▶ Baseline (JSON file)
//	Baseline(saved) + Baseline(now) ──Compare──▶ Report
//
// Baselines are JSON files (one per name, in a directory) rather than
// ledger tables: they are small, meant to be reviewed and versioned next
// to their suite, copied between environments, and they need no schema
// migration in a store (SQLite or ClickHouse) whose tables are about
// traffic, not tests.
package baseline

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"go.yaml.in/yaml/v3"
)

// Suite is a fixed prompt set and how to send it.
type Suite struct {
	// BaseURL is the OpenAI-compatible endpoint (…/v1); --base-url
	// overrides it.
	BaseURL string `yaml:"base_url"`
	Model   string `yaml:"model"`
	// Temperature (default 0) and Seed (default 0) ask for deterministic
	// sampling where the engine allows it.
	Temperature *float64 `yaml:"temperature"`
	Seed        *int64   `yaml:"seed"`
	// MaxTokens is the default max_tokens of every prompt (default 256).
	MaxTokens int `yaml:"max_tokens"`
	// Repeat sends each prompt this many times (default 3), so latencies
	// form a distribution and non-deterministic outputs show.
	Repeat  int               `yaml:"repeat"`
	Headers map[string]string `yaml:"headers"`
	Prompts []Prompt          `yaml:"prompts"`
	// Schedule is what `tollgate baseline watch` does with the suite.
	Schedule Schedule `yaml:"schedule"`
}

// Schedule runs the suite periodically against a saved baseline.
type Schedule struct {
	// Every is the interval between runs (e.g. 1h); the first runs at once.
	Every time.Duration `yaml:"every"`
	// Baseline is the saved baseline's name to compare with.
	Baseline string `yaml:"baseline"`
}

// Prompt is one request of the suite: chat messages or a completions
// prompt.
type Prompt struct {
	ID        string    `yaml:"id"`
	Messages  []Message `yaml:"messages"`
	Prompt    string    `yaml:"prompt"`
	MaxTokens int       `yaml:"max_tokens"`
}

// Message is one chat message.
type Message struct {
	Role    string `yaml:"role" json:"role"`
	Content string `yaml:"content" json:"content"`
}

// LoadSuite reads a suite file strictly (unknown keys are errors) and
// validates it; errors name the key.
func LoadSuite(path string) (*Suite, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := ParseSuite(b)
	if err != nil {
		return nil, fmt.Errorf("suite %s: %w", path, err)
	}
	return s, nil
}

// ParseSuite decodes and validates a suite.
func ParseSuite(b []byte) (*Suite, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var s Suite
	if err := dec.Decode(&s); err != nil {
		return nil, err
	}
	if s.MaxTokens == 0 {
		s.MaxTokens = 256
	}
	if s.Repeat == 0 {
		s.Repeat = 3
	}
	if s.Temperature == nil {
		zero := 0.0
		s.Temperature = &zero
	}
	if s.Seed == nil {
		var zero int64
		s.Seed = &zero
	}
	return &s, s.validate()
}

func (s *Suite) validate() error {
	switch {
	case s.Model == "":
		return errors.New("model: required")
	case s.MaxTokens < 1:
		return fmt.Errorf("max_tokens: must be at least 1, got %d", s.MaxTokens)
	case s.Repeat < 1:
		return fmt.Errorf("repeat: must be at least 1, got %d", s.Repeat)
	case len(s.Prompts) == 0:
		return errors.New("prompts: at least one is required")
	case s.Schedule.Every < 0 || (s.Schedule.Every > 0 && s.Schedule.Every < time.Minute):
		return fmt.Errorf("schedule.every: must be at least 1m, got %s", s.Schedule.Every)
	case s.Schedule.Baseline != "" && CheckName(s.Schedule.Baseline) != nil:
		return fmt.Errorf("schedule.baseline: %w", CheckName(s.Schedule.Baseline))
	}
	seen := map[string]bool{}
	for i, p := range s.Prompts {
		switch {
		case p.ID == "":
			return fmt.Errorf("prompts[%d].id: required", i)
		case seen[p.ID]:
			return fmt.Errorf("prompts[%d].id: %q used twice", i, p.ID)
		case (len(p.Messages) == 0) == (p.Prompt == ""):
			return fmt.Errorf("prompts[%d] (%s): exactly one of messages and prompt", i, p.ID)
		case p.MaxTokens < 0:
			return fmt.Errorf("prompts[%d].max_tokens: must not be negative, got %d", i, p.MaxTokens)
		}
		for j, m := range p.Messages {
			if m.Role == "" {
				return fmt.Errorf("prompts[%d].messages[%d].role: required", i, j)
			}
		}
		seen[p.ID] = true
	}
	return nil
}

// body is the request sent for p: streamed, with usage, deterministic.
func (s *Suite) body(p Prompt) (path string, body []byte) {
	m := map[string]any{
		"model":          s.Model,
		"stream":         true,
		"stream_options": map[string]bool{"include_usage": true},
		"temperature":    *s.Temperature,
		"seed":           *s.Seed,
		"max_tokens":     s.MaxTokens,
	}
	if p.MaxTokens > 0 {
		m["max_tokens"] = p.MaxTokens
	}
	path = "/completions"
	if len(p.Messages) > 0 {
		path = "/chat/completions"
		m["messages"] = p.Messages
	} else {
		m["prompt"] = p.Prompt
	}
	b, _ := json.Marshal(m) // plain values: cannot fail
	return path, b
}

// Hash identifies what the suite sends (model, sampling, prompts), so a
// comparison can tell whether two runs asked the same questions.
func (s *Suite) Hash() string {
	h := sha256.New()
	for _, p := range s.Prompts {
		path, b := s.body(p)
		fmt.Fprintf(h, "%s %s %s\n", p.ID, path, b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}
