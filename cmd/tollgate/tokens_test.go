package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/sim"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
	"github.com/tollgate-dev/tollgate/internal/store/storetest"
	"github.com/tollgate-dev/tollgate/internal/tokenizer"
)

// TestFirstRequestAfterStartCounted is issue 18's defect 3 end to end:
// serve starts with a configured tokenizer (Qwen3's real tokenizer.json,
// which takes a second or so to load) in front of an engine that reports
// no usage, and a request is sent the moment serve listens — before the
// tokenizer has loaded. Its ledger row must carry the input tokens
// `tollgate tokens count --chat` gives for that body, not 0 "counted by
// chunks"; and /readyz, asked at the same moment, must say the gateway
// is not ready yet, naming the tokenizer.
func TestFirstRequestAfterStartCounted(t *testing.T) {
	const model = "acme/chat-8b" // no built-in family: only the configured tokenizer counts it
	tokFile, err := filepath.Abs("../../internal/tokenizer/data/qwen3/tokenizer.json.xz")
	if err != nil {
		t.Fatal(err)
	}
	up := startSimServer(t, sim.Config{Models: []string{model}, Dialect: sim.DialectNoUsage, EOS: true, DecodeBase: 200 * time.Microsecond})
	cfg := shutdownConfig(t, up, 10*time.Second)
	cfg.OTLP.HTTPListen, cfg.OTLP.GRPCListen = "", ""
	cfg.EngineMetrics.Interval = 0
	cfg.Tokenizers = map[string]tokenizer.Spec{model: {Tokenizer: tokFile}}
	// The default 5 s is ample for a second's load, but not under the
	// race detector (ten); the bound itself is tested in the gateway.
	cfg.TokenizerWait = time.Minute

	var logs lockedBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, slog.New(slog.NewJSONHandler(&logs, nil)), started) }()
	var addr string
	select {
	case addr = <-started:
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	listening := time.Now()

	// The first millisecond after listening: the request, then /readyz.
	body := `{"model":"` + model + `","messages":[{"role":"system","content":"You are a terse assistant."},{"role":"user","content":"Name three rivers in China, 用中文回答。"}],"stream":true}`
	type answer struct {
		id, text string
		err      error
	}
	answered := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set(sim.OutputTokensHeader, "9")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		var text strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var c struct {
				Choices []struct {
					Delta struct{ Content string } `json:"delta"`
				} `json:"choices"`
			}
			if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok && json.Unmarshal([]byte(line), &c) == nil && len(c.Choices) > 0 {
				text.WriteString(c.Choices[0].Delta.Content)
			}
		}
		answered <- answer{id: resp.Header.Get("X-Tollgate-Request-Id"), text: text.String(), err: sc.Err()}
	}()
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	ready := string(b)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(ready, "tokenizers still loading: "+model+" ("+tokFile+")") {
		t.Errorf("/readyz right after listening = %d %q, want 503 naming %s's tokenizer", resp.StatusCode, ready, model)
	}
	a := <-answered
	if a.err != nil || a.id == "" {
		t.Fatalf("request: %v (id %q)", a.err, a.id)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}

	var rec *record.Record
	for _, r := range allRequests(t, cfg.Store.SQLite.Path) {
		if r.RequestID == a.id {
			rec = r
		}
	}
	if rec == nil {
		t.Fatalf("no ledger row for %s", a.id)
	}
	// The request really came first: the tokenizer finished loading after
	// it arrived (serve's own log line says when).
	loaded := logTime(t, logs.String(), "tokenizer loaded")
	if !loaded.After(rec.Arrival) {
		t.Fatalf("the tokenizer loaded at %s, before the request arrived at %s: the test proves nothing", loaded, rec.Arrival)
	}
	t.Logf("request arrived %s after serve listened; its tokenizer loaded %s after that",
		rec.Arrival.Sub(listening).Round(time.Microsecond), loaded.Sub(rec.Arrival).Round(time.Millisecond))

	var count bytes.Buffer
	if err := runTokens(context.Background(), []string{"count", "--tokenizer", tokFile, "--chat"}, strings.NewReader(body), &count, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	wantIn, err := strconv.ParseInt(strings.TrimSpace(count.String()), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runTokens(context.Background(), []string{"count", "--tokenizer", tokFile}, strings.NewReader(a.text), &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	wantOut, _ := strconv.ParseInt(strings.TrimSpace(out.String()), 10, 64)
	wantOut++ // the end-of-sequence token the engine counts and never shows
	if rec.Usage.Source != record.SourceTokenizer || rec.Usage.InputTokens != wantIn || rec.Usage.OutputTokens != wantOut || wantOut != 9 {
		t.Errorf("ledger usage %+v; want source tokenizer, input %d (tokens count --chat), output %d (9 generated, the last one the end token)", rec.Usage, wantIn, wantOut)
	}
}

// logTime is the time of the first JSON log line with message msg.
func logTime(t *testing.T, logs, msg string) time.Time {
	t.Helper()
	for line := range strings.SplitSeq(logs, "\n") {
		var l struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == msg {
			return l.Time
		}
	}
	t.Fatalf("no %q in serve's log:\n%s", msg, logs)
	return time.Time{}
}

// TestUnknownInputShown: a row whose input nobody counted (source chunks)
// shows its input as unknown in explain, requests show, the requests
// table and the JSON — never as a count of 0 — while a counted one shows
// its count.
func TestUnknownInputShown(t *testing.T) {
	db := filepath.Join(t.TempDir(), "r.db")
	st, err := sqlite.Open(context.Background(), db, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	recs := storetest.Records(0, 2)
	unknown, known := recs[0], recs[1]
	unknown.Usage = record.Usage{OutputTokens: 7, Source: record.SourceChunks}
	known.Usage = record.Usage{InputTokens: 31, OutputTokens: 7, Source: record.SourceEngine}
	if err := st.Insert(context.Background(), store.Batch{Records: recs}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	out, _, err := runCmd(t, "explain", "--db", db, unknown.RequestID)
	if err != nil || !strings.Contains(out, "tokens in unknown, out 7 [chunks]") {
		t.Errorf("explain (err %v):\n%s", err, out)
	}
	out, _, err = runCmd(t, "explain", "--db", db, known.RequestID)
	if err != nil || !strings.Contains(out, "tokens in 31 (cached 0), out 7 [engine]") {
		t.Errorf("explain of a counted row (err %v):\n%s", err, out)
	}
	out, _, err = runCmd(t, "requests", "show", "--db", db, unknown.RequestID)
	if err != nil || !regexp.MustCompile(`input tokens +unknown`).MatchString(out) || !regexp.MustCompile(`total +unknown \(7 output`).MatchString(out) {
		t.Errorf("requests show (err %v):\n%s", err, out)
	}
	out, _, err = runCmd(t, "requests", "--db", db)
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case strings.Contains(line, unknown.RequestID) && (len(f) < 9 || f[len(f)-7] != "-" || f[len(f)-6] != "-"):
			t.Errorf("table row of the unknown input: %q, want IN and CACHED -", line)
		case strings.Contains(line, known.RequestID) && (len(f) < 9 || f[len(f)-7] != "31"):
			t.Errorf("table row of the counted input: %q, want IN 31", line)
		}
	}
	out, _, err = runCmd(t, "requests", "show", "--db", db, "--json", unknown.RequestID)
	if err != nil || !strings.Contains(out, `"input_unknown": true`) {
		t.Errorf("requests show --json (err %v):\n%s", err, out)
	}
}

// TestExplainSaysEngineTimingPending is issue 18's defect 7: vLLM exports
// its spans in batches (every 5 s), so for a while after a request its
// segments are inferred. explain and requests show now say "engine timing
// pending" until the span arrives, then show the engine's own figures.
// serve runs in-process with its OTLP receiver; the simulator exports its
// vLLM span there through the real OpenTelemetry SDK batcher.
func TestExplainSaysEngineTimingPending(t *testing.T) {
	otlpAddr := freePort(t)
	up := startSimServer(t, sim.Config{OTLPEndpoint: "http://" + otlpAddr, DecodeBase: 200 * time.Microsecond})
	cfg := shutdownConfig(t, up, 10*time.Second)
	cfg.OTLP.HTTPListen, cfg.OTLP.GRPCListen = otlpAddr, ""
	cfg.EngineMetrics.Interval = 0
	addr, cancel, wait := startServe(t, cfg)
	defer func() { cancel(); _ = wait() }()

	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"Qwen/Qwen3-8B","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":8}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	id := resp.Header.Get("X-Tollgate-Request-Id")

	// explain polls until the row is in the ledger (the write-ahead queue
	// ships it), then until the span has been joined.
	explain := func(until func(string) bool) string {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			out, _, err := runCmd(t, "explain", "--db", cfg.Store.SQLite.Path, id)
			if err == nil && until(out) {
				return out
			}
			if time.Now().After(deadline) {
				t.Fatalf("explain %s after 30s (err %v):\n%s", id, err, out)
			}
			time.Sleep(20 * time.Millisecond) // polling with a deadline
		}
	}
	first := explain(func(string) bool { return true })
	if !strings.Contains(first, "inferred:upstream TTFT (engine queue included) — engine timing pending") || !strings.Contains(first, "engine timing pending: the engine exports its own span in batches") {
		t.Errorf("explain before the span arrived:\n%s", first)
	}
	show, _, err := runCmd(t, "requests", "show", "--db", cfg.Store.SQLite.Path, id)
	if err != nil || !regexp.MustCompile(`engine timing +pending: the engine's own span is expected within`).MatchString(show) {
		t.Errorf("requests show before the span arrived (err %v):\n%s", err, show)
	}
	joined := explain(func(out string) bool { return strings.Contains(out, "engine (vllm-span)") })
	if strings.Contains(joined, "pending") {
		t.Errorf("explain once the span arrived still says pending:\n%s", joined)
	}
}

// TestNoEngineTimingPendingWithoutReceiver: with no OTLP receiver
// listening no span can arrive, so no Record says its engine timing is
// pending (it did, for join_window, before serve left the joiner out).
func TestNoEngineTimingPendingWithoutReceiver(t *testing.T) {
	up := startSimServer(t, sim.Config{DecodeBase: 200 * time.Microsecond})
	cfg := shutdownConfig(t, up, 10*time.Second)
	cfg.OTLP.HTTPListen, cfg.OTLP.GRPCListen = "", ""
	cfg.EngineMetrics.Interval = 0
	addr, cancel, wait := startServe(t, cfg)
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"Qwen/Qwen3-8B","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	cancel()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	recs := allRequests(t, cfg.Store.SQLite.Path)
	if len(recs) != 1 || recs[0].Engine != "vllm" || recs[0].EngineTimingDue != 0 || recs[0].EngineTimingPending(time.Now()) {
		t.Fatalf("records %+v; want one vllm request with no engine timing expected", recs)
	}
	out, _, err := runCmd(t, "explain", "--db", cfg.Store.SQLite.Path, recs[0].RequestID)
	if err != nil || strings.Contains(out, "pending") {
		t.Errorf("explain (err %v):\n%s", err, out)
	}
}
