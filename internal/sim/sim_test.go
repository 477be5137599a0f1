package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fastConfig keeps steps around 200µs so that tests run in milliseconds.
func fastConfig() Config {
	return Config{
		Seed:            1,
		PrefillBase:     100 * time.Microsecond,
		PrefillPerToken: time.Microsecond,
		DecodeBase:      200 * time.Microsecond,
		DecodePerSeq:    10 * time.Microsecond,
		OutputMean:      20,
		OutputMax:       64,
	}
}

// harness is one engine served over real HTTP.
type harness struct {
	t        testing.TB
	e        *Engine
	srv      *httptest.Server
	reg      *prometheus.Registry
	stats    chan RequestStats
	cancel   context.CancelFunc
	done     chan error
	stopOnce sync.Once
}

func start(t testing.TB, cfg Config) *harness {
	t.Helper()
	h := &harness{t: t, reg: prometheus.NewRegistry(), stats: make(chan RequestStats, 1000), done: make(chan error, 1)}
	user := cfg.OnFinish
	cfg.OnFinish = func(s RequestStats) {
		select {
		case h.stats <- s:
		default: // only benchmarks produce this many; tests read theirs
		}
		if user != nil {
			user(s)
		}
	}
	e, err := New(cfg, slog.New(slog.DiscardHandler), h.reg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.e = e
	var ctx context.Context
	ctx, h.cancel = context.WithCancel(context.Background())
	go func() { h.done <- e.Run(ctx) }()
	h.srv = httptest.NewServer(e.Handler())
	t.Cleanup(h.close)
	return h
}

// stopEngine ends Run and waits for it; in-flight requests fail.
func (h *harness) stopEngine() {
	h.stopOnce.Do(func() {
		h.cancel()
		if err := <-h.done; err != nil {
			h.t.Errorf("Run: %v", err)
		}
	})
}

// close stops the engine first, so that in-flight handlers end, then the
// server, which waits for them.
func (h *harness) close() {
	h.stopEngine()
	h.srv.Close()
}

// nextStats waits for the engine to report one sequence.
func (h *harness) nextStats() RequestStats {
	h.t.Helper()
	select {
	case s := <-h.stats:
		return s
	case <-h.t.Context().Done():
		h.t.Fatal("test ended waiting for OnFinish")
		return RequestStats{}
	}
}

func (h *harness) request(ctx context.Context, path string, body any, header ...string) *http.Response {
	h.t.Helper()
	var b []byte
	switch v := body.(type) {
	case string:
		b = []byte(v)
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			h.t.Fatal(err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.srv.URL+path, bytes.NewReader(b))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		h.t.Fatalf("POST %s: %v", path, err)
	}
	return resp
}

func (h *harness) post(path string, body any, header ...string) *http.Response {
	h.t.Helper()
	return h.request(context.Background(), path, body, header...)
}

// postJSON posts and decodes the JSON answer, checking the status.
func (h *harness) postJSON(path string, body any, wantStatus int, out any, header ...string) {
	h.t.Helper()
	resp := h.post(path, body, header...)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatalf("read body: %v", err)
	}
	if resp.StatusCode != wantStatus {
		h.t.Fatalf("POST %s: status %d, want %d; body %s", path, resp.StatusCode, wantStatus, raw)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		h.t.Fatalf("decode %s: %v", raw, err)
	}
}

func (h *harness) get(path string) (int, string) {
	h.t.Helper()
	resp, err := h.srv.Client().Get(h.srv.URL + path)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// readEvents returns the data payloads of an SSE body in order, and the
// error that ended the read (nil at a clean EOF).
func readEvents(r io.Reader) ([]string, error) {
	var events []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			events = append(events, data)
		}
	}
	return events, sc.Err()
}

func chatBody(content string, extra ...any) map[string]any {
	b := map[string]any{
		"model":    "Qwen/Qwen3-8B",
		"messages": []map[string]any{{"role": "user", "content": content}},
	}
	for i := 0; i+1 < len(extra); i += 2 {
		b[extra[i].(string)] = extra[i+1]
	}
	return b
}

// streamChunk decodes the parts of a chat or completion chunk the tests
// look at.
type streamChunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta *struct {
			Role    *string `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		Text         *string `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
}

func decodeChunks(t *testing.T, events []string) []streamChunk {
	t.Helper()
	if len(events) == 0 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("stream does not end with [DONE]: %q", events)
	}
	out := make([]streamChunk, len(events)-1)
	for i, ev := range events[:len(events)-1] {
		if err := json.Unmarshal([]byte(ev), &out[i]); err != nil {
			t.Fatalf("event %d %q: %v", i, ev, err)
		}
	}
	return out
}

func isUnexpectedEOF(err error) bool {
	return errors.Is(err, io.ErrUnexpectedEOF) || (err != nil && strings.Contains(err.Error(), "unexpected EOF"))
}

var vocabSet = func() map[string]bool {
	m := make(map[string]bool, len(vocab))
	for _, w := range vocab {
		m[w] = true
	}
	return m
}()
