package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/tollgate-dev/tollgate/internal/capture"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/sim"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
)

// TestServeCapture: serve with capture on, the OpenAI SDK and the
// simulator. A failed request and a slow streamed one are captured with
// the prompt's email, mainland mobile number and PRC ID-card number
// redacted, and a fast successful one is not; only an admin token reads
// the captures; no file serve wrote holds the personal data in clear;
// and the rows go once their retention has passed.
func TestServeCapture(t *testing.T) {
	const (
		email  = "li.lei@example.com"
		phone  = "13912345678"
		idCard = "11010519491231002X"
		marker = "CAPTURE-MARKER-7781"
		order  = "ORD-20261129"
	)
	prompt := "I am " + email + ", phone " + phone + ", ID " + idCard + ", order " + order + " — " + marker
	dir := t.TempDir()
	// A model with no built-in tokenizer: the gateway's background load of
	// Qwen's would outlive this test alone (the package checks for leaks).
	cfg := quietConfig(t, startSimServer(t, sim.Config{Seed: 3, Models: []string{"capture-test-model"}}))
	cfg.Store.SQLite.Path = filepath.Join(dir, "t.db")
	cfg.Capture = capture.Config{Enabled: true, Slow: time.Second, Retention: 24 * time.Hour, Redact: []capture.Rule{
		{Preset: "cn_id_card"}, {Preset: "cn_mobile"}, {Preset: "email"}, {Name: "order", Pattern: `ORD-\d{8}`},
	}}
	cfg.API.Tokens = []config.APIToken{
		{Name: "ops", TokenSHA256: config.HashKey("tok-read"), Role: "read"},
		{Name: "root", TokenSHA256: config.HashKey("tok-admin"), Role: "admin"},
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	addr, cancel, wait := startServe(t, cfg)

	client := openai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey("sk-capture"), option.WithMaxRetries(0))
	params := openai.ChatCompletionNewParams{Model: "capture-test-model", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}}
	var ids []string
	id := func(resp *http.Response) { ids = append(ids, resp.Header.Get("X-Request-Id")) }

	// Fast and successful: not captured.
	var resp *http.Response
	if _, err := client.Chat.Completions.New(t.Context(), params, option.WithResponseInto(&resp), option.WithHeader(sim.OutputTokensHeader, "3")); err != nil {
		t.Fatalf("fast request: %v", err)
	}
	id(resp)
	// Failed: the engine answers 500.
	_, err := client.Chat.Completions.New(t.Context(), params, option.WithResponseInto(&resp), option.WithHeader(sim.FaultHeader, "error"))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 500 {
		t.Fatalf("failed request: %v; want the engine's 500", err)
	}
	id(resp)
	// Slow: a stream that stalls for 1.5s after two tokens (slow: 1s leaves a fast request ample margin on a busy machine).
	stream := client.Chat.Completions.NewStreaming(t.Context(), params, option.WithResponseInto(&resp),
		option.WithHeader(sim.OutputTokensHeader, "6"), option.WithHeader(sim.FaultHeader, "stall-after=2:1500ms"))
	var answer strings.Builder
	for stream.Next() {
		if c := stream.Current(); len(c.Choices) > 0 {
			answer.WriteString(c.Choices[0].Delta.Content)
		}
	}
	if err := stream.Err(); err != nil || answer.Len() == 0 {
		t.Fatalf("slow stream: %v, %q", err, answer.String())
	}
	id(resp)
	fast, failed, slow := ids[0], ids[1], ids[2]

	// The captures are written off the request path: poll, with a deadline.
	api := func(path, token string) (int, []byte) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, b
	}
	type view struct {
		RequestID string  `json:"request_id"`
		Reason    string  `json:"reason"`
		Request   *string `json:"request"`
		Response  *string `json:"response"`
	}
	var list struct{ Captures []view }
	for deadline := time.Now().Add(10 * time.Second); ; {
		code, b := api("/api/v1/captures", "tok-admin")
		if code != 200 {
			t.Fatalf("GET /api/v1/captures as admin: %d %s", code, b)
		}
		if err := json.Unmarshal(b, &list); err != nil {
			t.Fatal(err)
		}
		if len(list.Captures) >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling the API, not synchronising
	}
	got := map[string]string{}
	for _, c := range list.Captures {
		got[c.RequestID] = c.Reason
	}
	if len(got) != 2 || got[failed] != "failed" || got[slow] != "slow" {
		t.Fatalf("captures %v; want %s failed and %s slow (fast %s not captured)", got, failed, slow, fast)
	}
	for _, rid := range []string{failed, slow} {
		code, b := api("/api/v1/captures/"+rid, "tok-admin")
		var c view
		if code != 200 || json.Unmarshal(b, &c) != nil || c.Request == nil {
			t.Fatalf("GET capture %s: %d %s", rid, code, b)
		}
		for _, want := range []string{"[REDACTED:email]", "[REDACTED:cn_mobile]", "[REDACTED:cn_id_card]", "[REDACTED:order]", marker} {
			if !strings.Contains(*c.Request, want) {
				t.Errorf("capture %s: request %s lacks %q", rid, *c.Request, want)
			}
		}
		if rid == slow && *c.Response != answer.String() {
			t.Errorf("slow capture's response %q, want the streamed text %q", *c.Response, answer.String())
		}
		if rid == failed && !strings.Contains(*c.Response, "error") {
			t.Errorf("failed capture's response %q, want the engine's error", *c.Response)
		}
	}
	// Roles: read tokens and anonymous callers never see captured text.
	for _, c := range []struct {
		token string
		want  int
	}{{"", 401}, {"sk-capture", 401}, {"tok-read", 403}} {
		if code, b := api("/api/v1/captures/"+failed, c.token); code != c.want {
			t.Errorf("capture with %q: %d %s, want %d", c.token, code, b, c.want)
		}
	}
	cancel()
	if err := wait(); err != nil {
		t.Fatal(err)
	}

	// Nothing serve wrote holds the personal data in clear: redaction
	// happens before anything is stored.
	noFileHolds(t, dir, "", email, phone, idCard, order)
	if recs := allRequests(t, cfg.Store.SQLite.Path); len(recs) != 3 {
		t.Errorf("%d ledger rows, want 3", len(recs))
	}

	// Retention: a day later, the retention pass takes both captures.
	st, err := sqlite.Open(context.Background(), cfg.Store.SQLite.Path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cs, err := st.Captures(t.Context(), store.CaptureFilter{})
	if err != nil || len(cs) != 2 {
		t.Fatalf("captures in the file: %d, %v", len(cs), err)
	}
	if n, err := st.PruneCaptures(t.Context(), time.Now().Add(-cfg.Capture.Retention)); err != nil || n != 0 {
		t.Errorf("captures pruned within their retention: %d, %v", n, err)
	}
	n, err := st.Prune(t.Context(), time.Now().Add(cfg.Capture.Retention+time.Minute), store.Retention{Captures: cfg.Capture.Retention})
	if err != nil || n < 2 {
		t.Errorf("Prune a day later: %d rows, %v", n, err)
	}
	if cs, _ := st.Captures(t.Context(), store.CaptureFilter{}); len(cs) != 0 {
		t.Errorf("%d captures outlived their retention: %v", len(cs), slices.Collect(func(yield func(string) bool) {
			for _, c := range cs {
				yield(c.RequestID)
			}
		}))
	}
}
