package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/tollgate-dev/tollgate/internal/billing"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/sim"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
	"github.com/tollgate-dev/tollgate/internal/store/storetest"
)

func runCmd(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	err = run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), err
}

func allRequests(t *testing.T, db string) []*record.Record {
	t.Helper()
	st, err := sqlite.Open(context.Background(), db, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	recs, err := st.Requests(context.Background(), store.Filter{Limit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// TestDemo runs the demo for a moment and checks its promise: every request
// it sent has exactly one ledger row.
func TestDemo(t *testing.T) {
	db := filepath.Join(t.TempDir(), "demo.db")
	out, errOut, err := runCmd(t, "demo", "--duration", "2s", "--rate", "25", "--db", db, "--listen", "127.0.0.1:0", "--sim-listen", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("demo: %v\n%s\n%s", err, out, errOut)
	}
	m := regexp.MustCompile(`demo stopped: (\d+) requests sent`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no summary in demo output:\n%s", out)
	}
	sent, _ := strconv.Atoi(m[1])
	recs := allRequests(t, db)
	if sent == 0 || len(recs) != sent {
		t.Fatalf("demo sent %d requests, ledger has %d rows", sent, len(recs))
	}
	users := map[string]bool{}
	priced := 0
	for _, r := range recs {
		users[r.UserID] = true
		if r.Usage.Source == record.SourceEngine && r.Usage.InputTokens == 0 {
			t.Errorf("request %s: engine usage without input tokens", r.RequestID)
		}
		// The demo's prices rate every request that used tokens.
		if r.Usage.InputTokens+r.Usage.OutputTokens > 0 {
			if r.Cost.Nanos <= 0 || r.Cost.Currency != "USD" {
				t.Errorf("request %s: %d tokens cost %d nanos %q, want a USD amount", r.RequestID, r.Usage.Total(), r.Cost.Nanos, r.Cost.Currency)
			}
			priced++
		}
	}
	if priced == 0 {
		t.Error("no demo request used tokens")
	}
	if len(users) < 2 {
		t.Errorf("demo traffic came from %d users, want several", len(users))
	}
	st, err := sqlite.Open(context.Background(), db, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	samples, err := st.EngineSamples(context.Background(), time.Now().Add(-time.Hour), time.Now().Add(time.Hour), "sim")
	st.Close()
	if err != nil || len(samples) == 0 || !samples[0].Up {
		t.Errorf("engine samples after the demo: %d (err %v), want the simulator scraped", len(samples), err)
	}
	for _, want := range []string{"/metrics", "requests --db " + db, "prices             demo figures, USD per 1M tokens"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
}

// startSimServer runs a simulator on loopback for the shutdown tests.
func startSimServer(t *testing.T, c sim.Config) string {
	t.Helper()
	eng, err := sim.New(c, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = eng.Run(ctx); close(done) }()
	srv := httptest.NewServer(eng.Handler())
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close(); cancel(); <-done })
	return srv.URL + "/v1"
}

// startServe runs the real serve wiring (SQLite included) until the
// returned cancel is called; wait blocks until serve has returned.
func startServe(t *testing.T, cfg *config.Config) (addr string, cancel func(), wait func() error) {
	t.Helper()
	ctx, cancelFn := context.WithCancel(context.Background())
	started := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), started) }()
	select {
	case addr = <-started:
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	return addr, cancelFn, func() error { return <-done }
}

func shutdownConfig(t *testing.T, upstream string, grace time.Duration) *config.Config {
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.Store.SQLite.Path = filepath.Join(t.TempDir(), "t.db")
	cfg.Upstreams[0].URL = upstream
	cfg.ShutdownGrace = grace
	return cfg
}

// openStream starts a streamed request and returns once its first token
// has arrived, so the shutdown below certainly finds it in flight.
func openStream(t *testing.T, addr string, tokens int) (*http.Response, *bufio.Reader) {
	t.Helper()
	body := `{"model":"Qwen/Qwen3-8B","messages":[{"role":"user","content":"hi"}],"stream":true}`
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set(sim.OutputTokensHeader, strconv.Itoa(tokens))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(line, `"content":" `) {
			return resp, br
		}
	}
}

// TestShutdownDrains: SIGTERM (ctx cancelled) lets an in-flight stream
// finish within the grace period, and its record reaches the ledger.
func TestShutdownDrains(t *testing.T) {
	up := startSimServer(t, sim.Config{DecodeBase: 10 * time.Millisecond})
	cfg := shutdownConfig(t, up, 30*time.Second)
	addr, cancel, wait := startServe(t, cfg)
	resp, br := openStream(t, addr, 40)
	cancel()
	rest, err := io.ReadAll(br)
	resp.Body.Close()
	if err != nil || !strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("stream cut during shutdown (err %v): %s", err, rest)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	recs := allRequests(t, cfg.Store.SQLite.Path)
	if len(recs) != 1 || recs[0].Status != 200 || recs[0].Usage.OutputTokens != 40 {
		t.Fatalf("ledger after drain: %d rows %+v", len(recs), recs)
	}
}

// TestShutdownGraceExpires: a stream longer than the grace period is cut,
// told so, and recorded as cut by shutdown with what it consumed.
func TestShutdownGraceExpires(t *testing.T) {
	up := startSimServer(t, sim.Config{DecodeBase: 20 * time.Millisecond})
	cfg := shutdownConfig(t, up, 100*time.Millisecond)
	addr, cancel, wait := startServe(t, cfg)
	resp, br := openStream(t, addr, 10000)
	cancel()
	rest, _ := io.ReadAll(br)
	resp.Body.Close()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(rest), "[DONE]") {
		t.Error("a 200-second stream finished within a 100ms grace period")
	}
	recs := allRequests(t, cfg.Store.SQLite.Path)
	if len(recs) != 1 {
		t.Fatalf("%d ledger rows, want 1", len(recs))
	}
	r := recs[0]
	if r.ErrorType != record.ErrShutdown || r.Status != http.StatusServiceUnavailable || r.Usage.OutputTokens < 1 {
		t.Errorf("recorded %d %q with %d output tokens; want 503 shutdown with the tokens streamed", r.Status, r.ErrorType, r.Usage.OutputTokens)
	}
}

func TestRequestsCLI(t *testing.T) {
	db := filepath.Join(t.TempDir(), "r.db")
	st, err := sqlite.Open(context.Background(), db, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	recs := storetest.Records(0, 5)
	if err := st.Insert(context.Background(), store.Batch{Records: recs}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	newest := recs[0]
	for _, r := range recs {
		if r.Arrival.After(newest.Arrival) {
			newest = r
		}
	}

	out, _, err := runCmd(t, "requests", "--db", db)
	if err != nil || !strings.Contains(out, "REQUEST ID") || strings.Count(out, "\n") != 6 {
		t.Errorf("table (err %v):\n%s", err, out)
	}
	out, _, err = runCmd(t, "requests", "--db", db, "--json", "--limit", "2")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil || len(lines) != 2 {
		t.Fatalf("--json --limit 2 gave %d lines (err %v)", len(lines), err)
	}
	var first map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if first["request_id"] != newest.RequestID {
		t.Errorf("first JSON line is %v, want the newest %s", first["request_id"], newest.RequestID)
	}
	for _, k := range []string{"request_id", "trace_id", "attempt", "model", "upstream", "user_id", "biz_line", "stream", "status", "error_type", "finish_reason", "usage", "timing", "response_bytes"} {
		if _, ok := first[k]; !ok {
			t.Errorf("JSON record lacks %q", k)
		}
	}

	// --sort: the slowest end to end first, over the whole ledger.
	slowest := recs[0]
	for _, r := range recs {
		if r.Derived.E2E > slowest.Derived.E2E {
			slowest = r
		}
	}
	out, _, err = runCmd(t, "requests", "--db", db, "--json", "--limit", "1", "--sort", "e2e")
	if err != nil || json.Unmarshal([]byte(strings.TrimSpace(out)), &first) != nil || first["request_id"] != slowest.RequestID {
		t.Errorf("--sort e2e --limit 1 gave %s (err %v), want the slowest %s", out, err, slowest.RequestID)
	}
	if _, _, err := runCmd(t, "requests", "--db", db, "--sort", "speed"); err == nil || !strings.Contains(err.Error(), "unknown sort") {
		t.Errorf("--sort speed: %v; want an error naming the sorts", err)
	}

	out, _, err = runCmd(t, "requests", "show", "--db", db, newest.RequestID)
	for _, want := range []string{"Identity", "Usage", "Timing", "Result", newest.RequestID, newest.ParentSpanID, newest.ResponseID} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("show lacks %q (err %v):\n%s", want, err, out)
		}
	}
	out, _, err = runCmd(t, "requests", "show", "--db", db, "--json", newest.RequestID)
	var shown record.Record
	if err != nil || json.Unmarshal([]byte(out), &shown) != nil || shown.RequestID != newest.RequestID {
		t.Errorf("show --json (err %v): %s", err, out)
	}

	if _, _, err := runCmd(t, "requests", "show", "--db", db, "nope"); err == nil || !strings.Contains(err.Error(), `no request "nope"`) {
		t.Errorf("unknown id: %v", err)
	}
	if _, _, err := runCmd(t, "requests", "--db", filepath.Join(t.TempDir(), "missing.db")); err == nil || !strings.Contains(err.Error(), "no ledger at") {
		t.Errorf("missing ledger: %v", err)
	}
}

func TestCommandLineErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yml")
	if err := os.WriteFile(bad, []byte("listen: 127.0.0.1:1\nupstreams:\n  - name: a\n    url: http://127.0.0.1:1/v1\n    engin: vllm\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args    []string
		wantErr string // substring of the returned error, or "usage"
	}{
		{[]string{}, "usage"},
		{[]string{"frobnicate"}, "usage"},
		{[]string{"serve", "--no-such-flag"}, "usage"},
		{[]string{"serve", "--config", bad}, "upstreams[0].engin: unknown key (line 5)"},
		{[]string{"serve", "--config", filepath.Join(t.TempDir(), "none.yml")}, "read config"},
		{[]string{"serve", "--upstream", "localhost:8000"}, `upstreams[0].url: must be an absolute http(s) URL`},
		{[]string{"serve", "--upstream", "http://127.0.0.1:8000/v1", "--engine", "triton"}, `upstreams[0].engine: must be one of`},
		{[]string{"requests", "--limit", "0"}, "usage"},
		{[]string{"requests", "show"}, "usage"},
		{[]string{"demo", "--rate", "-1"}, "usage"},
		{[]string{"config"}, "usage"},
		{[]string{"config", "check"}, "usage"},
		{[]string{"config", "check", "--config", bad}, "upstreams[0].engin: unknown key (line 5)"},
	}
	for _, tc := range cases {
		_, _, err := runCmd(t, tc.args...)
		switch {
		case err == nil:
			t.Errorf("%v: no error, want %q", tc.args, tc.wantErr)
		case tc.wantErr == "usage" && err != errUsage:
			t.Errorf("%v: %v, want a usage error", tc.args, err)
		case tc.wantErr != "usage" && !strings.Contains(err.Error(), tc.wantErr):
			t.Errorf("%v: %v, want it to mention %q", tc.args, err, tc.wantErr)
		}
	}
	for _, arg := range []string{"version", "--version"} {
		out, _, err := runCmd(t, arg)
		if err != nil || !strings.HasPrefix(out, "tollgate ") || !strings.Contains(out, "\n  revision: ") || !strings.Contains(out, "\n  go:       go1.") {
			t.Errorf("%s: %q %v", arg, out, err)
		}
	}
	good := filepath.Join(t.TempDir(), "good.yml")
	if err := os.WriteFile(good, []byte("listen: 127.0.0.1:1\nupstreams:\n  - {name: a, url: \"http://127.0.0.1:1/v1\", engine: vllm}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, _, err := runCmd(t, "config", "check", "--config", good); err != nil || !strings.Contains(out, ": ok (listen 127.0.0.1:1, store sqlite, 1 upstreams)") {
		t.Errorf("config check %s: %q %v", good, out, err)
	}
}

func TestRerateAndReconcileCLI(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "b.db")
	st, err := sqlite.Open(context.Background(), db, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	recs := storetest.Records(0, 4) // 2025-03-14, models model-0 and model-1
	if err := st.Insert(context.Background(), store.Batch{Records: recs}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	cfg := filepath.Join(dir, "c.yml")
	if err := os.WriteFile(cfg, []byte("store: {sqlite: {path: "+db+"}}\nprices:\n  - {model: model-*, currency: USD, input: 1, output: 2}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCmd(t, "rerate", "--config", cfg, "--from", "2025-03-01", "--to", "2025-04-01")
	if err != nil || !strings.Contains(out, "re-rated 4 requests") {
		t.Fatalf("rerate: %v\n%s", err, out)
	}
	out, _, err = runCmd(t, "report", "users", "--db", db, "--from", "2025-03-01", "--to", "2025-04-01", "--format", "csv")
	if err != nil || strings.Contains(out, ",0,USD") || !strings.Contains(out, "USD") {
		t.Errorf("costs after rerate (err %v):\n%s", err, out)
	}
	bill := filepath.Join(dir, "bill.csv")
	if err := os.WriteFile(bill, []byte("day,model,input,output\n2025-03-14,model-0-2025-01-01,1,1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err = runCmd(t, "reconcile", "--bill", bill, "--bill-format", "generic", "--map", "day=day,model=model,input=input,output=output", "--db", db, "--json")
	var rep struct {
		Lines []struct {
			Model string `json:"model"`
			Side  string `json:"side"`
		} `json:"lines"`
	}
	// model-1 is in the ledger only: critical, exit status 4.
	var ex *exitError
	if !errors.As(err, &ex) || ex.code != exitCritical || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Lines) != 2 {
		t.Errorf("reconcile (err %v):\n%s", err, out)
	}
	// The run is kept in the ledger file for the dashboard, unless --no-save.
	if _, _, err := runCmd(t, "reconcile", "--bill", bill, "--bill-format", "generic", "--map", "day=day,model=model,input=input,output=output", "--db", db, "--no-save"); !errors.As(err, &ex) {
		t.Errorf("reconcile --no-save: %v", err)
	}
	runs, err := billing.OpenRuns(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer runs.Close()
	kept, err := runs.List(context.Background(), 10)
	if err != nil || len(kept) != 1 {
		t.Fatalf("kept runs: %+v %v, want the one run without --no-save", kept, err)
	}
	if k := kept[0]; k.Bill != bill || k.Format != "generic" || k.From != "2025-03-14" || k.To != "2025-03-14" || k.Lines != 2 || !k.OverTolerance {
		t.Errorf("kept run: %+v", k)
	}
	for _, args := range [][]string{{"rerate"}, {"reconcile"}, {"reconcile", "--bill", bill, "--bill-format", "generic", "--db", db}} {
		if _, _, err := runCmd(t, args...); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

// TestTokensCountGolden: `tokens count --jsonl` gives Hugging Face's ids on
// the golden corpus, through the CLI's own reading and writing.
func TestTokensCountGolden(t *testing.T) {
	var corpus []string
	var want [][]int
	for path, v := range map[string]any{"corpus.json": &corpus, "qwen3.ids.json": &want} {
		b, err := os.ReadFile(filepath.Join("..", "..", "internal", "tokenizer", "testdata", "golden", path))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatal(err)
		}
	}
	corpus, want = corpus[:200], want[:200]
	var in bytes.Buffer
	for _, s := range corpus {
		b, _ := json.Marshal(s)
		in.Write(append(b, '\n'))
	}
	var out, errb bytes.Buffer
	if err := runTokens(context.Background(), []string{"count", "--model", "qwen3", "--jsonl"}, &in, &out, &errb); err != nil {
		t.Fatalf("%v: %s", err, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != len(corpus) {
		t.Fatalf("%d result lines for %d inputs", len(lines), len(corpus))
	}
	for i, l := range lines {
		var r result
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		if r.Count != len(want[i]) || !slices.Equal(r.IDs, want[i]) {
			t.Errorf("string %d: got %v, want %v", i, r.IDs, want[i])
		}
	}
	for _, args := range [][]string{{}, {"count"}, {"count", "--model", "llama-9"}} {
		if err := runTokens(context.Background(), args, strings.NewReader("x"), io.Discard, io.Discard); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

// TestServeExportsTraces: with trace_export set, serve sends the request's
// span over OTLP/HTTP (gzipped protobuf) and flushes it on shutdown. The
// span continues the caller's trace as a child of the caller's span (the
// client's traceparent), with the GenAI attributes of the upstream it
// went to, the engine's response id and the session as conversation.
func TestServeExportsTraces(t *testing.T) {
	otlpURL, exports := otlpReceiver(t)
	up := startSimServer(t, sim.Config{})
	upURL, _ := url.Parse(up)
	cfg := shutdownConfig(t, up, 5*time.Second)
	cfg.TraceExport.Endpoint = otlpURL
	cfg.OTLP.HTTPListen, cfg.OTLP.GRPCListen = "", ""
	addr, cancel, wait := startServe(t, cfg)

	const traceID, caller = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions",
		strings.NewReader(`{"model":"Qwen/Qwen3-8B","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Traceparent", "00-"+traceID+"-"+caller+"-01")
	req.Header.Set(cfg.Headers.Session, "conv-7")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	id := resp.Header.Get("X-Tollgate-Request-Id")
	cancel()
	if err := wait(); err != nil {
		t.Fatal(err)
	}

	var span ptrace.Span
	select {
	case td := <-exports:
		var n int
		rss := td.ResourceSpans()
		for i := range rss.Len() {
			sss := rss.At(i).ScopeSpans()
			for j := range sss.Len() {
				spans := sss.At(j).Spans()
				for k := range spans.Len() {
					if s := spans.At(k); s.Kind() == ptrace.SpanKindClient {
						span, n = s, n+1
					}
				}
			}
		}
		if n != 1 {
			t.Fatalf("%d request spans exported, want 1", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no span exported")
	}
	if got := span.TraceID().String(); got != traceID {
		t.Errorf("trace id %s, want the caller's %s", got, traceID)
	}
	if got := span.ParentSpanID().String(); got != caller {
		t.Errorf("parent span id %q, want the caller's span %s", got, caller)
	}
	port, _ := strconv.Atoi(upURL.Port())
	want := map[string]any{
		"gen_ai.request.model":   "Qwen/Qwen3-8B",
		"gen_ai.response.id":     "chatcmpl-" + id, // the simulated engine, like vLLM, names its answer after X-Request-Id
		"gen_ai.conversation.id": "conv-7",
		"server.address":         upURL.Hostname(),
		"server.port":            int64(port),
		"tollgate.request_id":    id,
	}
	attrs := span.Attributes().AsRaw()
	for k, v := range want {
		if attrs[k] != v {
			t.Errorf("%s = %v, want %v", k, attrs[k], v)
		}
	}

	// The ledger row is the span: the same ids, the caller's span kept.
	recs := allRequests(t, cfg.Store.SQLite.Path)
	if len(recs) != 1 {
		t.Fatalf("%d ledger rows, want 1", len(recs))
	}
	r := recs[0]
	if r.SpanID != span.SpanID().String() || r.ParentSpanID != caller || r.ResponseID != want["gen_ai.response.id"] {
		t.Errorf("ledger span %s parent %q response %q; exported span %s", r.SpanID, r.ParentSpanID, r.ResponseID, span.SpanID())
	}
}

// otlpReceiver is an OTLP/HTTP trace receiver that decodes exports with
// the OpenTelemetry Collector's pdata (ptraceotlp), as a collector does:
// each export's spans arrive on the channel. It takes what a collector's
// OTLP/HTTP receiver takes from an SDK: protobuf on /v1/traces, gzipped
// or not.
func otlpReceiver(t *testing.T) (string, <-chan ptrace.Traces) {
	t.Helper()
	exports := make(chan ptrace.Traces, 64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want a protobuf POST to /v1/traces", http.StatusUnsupportedMediaType)
			return
		}
		body := io.Reader(r.Body)
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		req := ptraceotlp.NewExportRequest()
		if err == nil {
			err = req.UnmarshalProto(b)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out, _ := ptraceotlp.NewExportResponse().MarshalProto()
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
		select {
		case exports <- req.Traces():
		default:
			t.Errorf("more than %d exports", cap(exports))
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, exports
}
