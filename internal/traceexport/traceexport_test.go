package traceexport

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate-dev/tollgate/internal/record"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const msec = time.Millisecond

var arrival = time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)

// upstreams is the exporter's view of the configured upstreams.
var upstreams = map[string]string{"gpu-a": "http://10.0.0.7:8000/v1", "cpu-b": "https://llama.internal/v1"}

// streamed is a finished streamed chat request that vLLM served and timed:
// sent at 5ms, first token at 207ms, last at 1207ms, end at 1230ms. The
// client sent a traceparent: its span is the parent.
func streamed() *record.Record {
	maxTokens, temp := int64(256), 0.7
	r := &record.Record{
		RequestID: "req-1", LogicalRequestID: "req-1", Attempt: 1,
		TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7", ParentSpanID: "53995c3f42cd8ad8",
		UserID: "alice@example.com", KeyID: "k_5f2c", Team: "search", BizLine: "assistant", TemplateID: "tpl-7",
		SessionID: "conv-42", ResponseID: "chatcmpl-9f1c",
		Tags: map[string]string{"app": "secret-project"}, PromptSHA256: "9f86d081884c7d659a2feaa0c55ad015",
		Endpoint: "chat", Model: "Qwen/Qwen3-8B", ServedModel: "Qwen/Qwen3-8B-FP8", Upstream: "gpu-a", Engine: "vllm",
		Stream: true, MaxTokens: &maxTokens, Temperature: &temp, PromptBytes: 512, RequestBytes: 700,
		Arrival: arrival,
		Marks: record.Marks{AuthDone: 1 * msec, Admitted: 2 * msec, UpstreamSent: 5 * msec, UpstreamHeaders: 6 * msec,
			FirstUpstreamToken: 207 * msec, FirstClientToken: 208 * msec, LastUpstreamToken: 1207 * msec,
			LastToken: 1208 * msec, End: 1230 * msec},
		Status: 200, UpstreamStatus: 200, FinishReason: "stop", ResponseBytes: 9000, ContentChunks: 100,
		Usage:       record.Usage{InputTokens: 120, CachedInputTokens: 64, OutputTokens: 100, Source: record.SourceEngine},
		Cost:        record.Cost{Nanos: 42000, Currency: "USD"},
		ConnectWait: 2 * msec, ClientWrite: 110 * msec, ClientWriteTail: 10 * msec,
		EngineTiming: &record.EngineTiming{Signal: "vllm-span", Queue: 50 * msec, Prefill: 120 * msec, Decode: 850 * msec},
	}
	r.Finish()
	return r
}

// failed is an attempt the upstream answered with a 503 after 40ms; the
// client sent no traceparent, so its span is the trace's root.
func failed() *record.Record {
	r := &record.Record{
		RequestID: "req-2", LogicalRequestID: "req-2", Attempt: 1,
		TraceID: "0af7651916cd43dd8448eb211c80319c", SpanID: "b7ad6b7169203331",
		Endpoint: "completions", Model: "llama-3", Upstream: "cpu-b", Engine: "llamacpp", BizLine: "batch",
		Arrival: arrival,
		Marks:   record.Marks{UpstreamSent: 3 * msec, UpstreamHeaders: 40 * msec, End: 41 * msec},
		Status:  502, UpstreamStatus: 503, ErrorType: record.ErrUpstreamStatus, ErrorMessage: "upstream answered 503",
	}
	r.Finish()
	return r
}

// newTest is an Exporter writing to memory. Flush before reading.
func newTest(t *testing.T, cfg Config, bopts ...sdktrace.BatchSpanProcessorOption) (*Exporter, *tracetest.InMemoryExporter) {
	t.Helper()
	mem := tracetest.NewInMemoryExporter()
	e := newExporter(cfg, slog.New(slog.DiscardHandler), mem, bopts...)
	t.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	return e, mem
}

// spans flushes the batch processor and returns the spans exported so far.
// (The in-memory exporter forgets its spans on Shutdown, hence the flush.)
func spans(t *testing.T, e *Exporter, mem *tracetest.InMemoryExporter) tracetest.SpanStubs {
	t.Helper()
	if err := e.tp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	return mem.GetSpans()
}

// split returns the request span (the root) and its children, in order.
func split(t *testing.T, ss tracetest.SpanStubs) (tracetest.SpanStub, []tracetest.SpanStub) {
	t.Helper()
	var root []tracetest.SpanStub
	var children []tracetest.SpanStub
	for _, s := range ss {
		if s.SpanKind == trace.SpanKindClient {
			root = append(root, s)
		} else {
			children = append(children, s)
		}
	}
	if len(root) != 1 {
		t.Fatalf("%d request spans in %d spans, want 1", len(root), len(ss))
	}
	slices.SortFunc(children, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
	return root[0], children
}

func attrMap(kvs []attribute.KeyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

func TestRequestSpan(t *testing.T) {
	e, mem := newTest(t, Config{Upstreams: upstreams})
	r := streamed()
	e.Export(r)
	req, _ := split(t, spans(t, e, mem))

	if req.Name != "chat Qwen/Qwen3-8B" {
		t.Errorf("name %q", req.Name)
	}
	if got := req.SpanContext.TraceID().String(); got != r.TraceID {
		t.Errorf("trace id %s, want %s", got, r.TraceID)
	}
	if got := req.SpanContext.SpanID().String(); got != r.SpanID {
		t.Errorf("span id %s, want %s (the one sent upstream)", got, r.SpanID)
	}
	// A child of the client's span, in the client's trace.
	if got := req.Parent.SpanID().String(); got != r.ParentSpanID || req.Parent.TraceID().String() != r.TraceID || !req.Parent.IsRemote() {
		t.Errorf("parent %v (span %s), want the client's remote span %s", req.Parent, got, r.ParentSpanID)
	}
	if !req.SpanContext.IsSampled() {
		t.Error("not sampled")
	}
	if !req.StartTime.Equal(arrival) || !req.EndTime.Equal(arrival.Add(1230*msec)) {
		t.Errorf("span [%v, %v], want [arrival, arrival+1230ms]", req.StartTime, req.EndTime)
	}
	if req.Status.Code != codes.Unset {
		t.Errorf("status %v", req.Status)
	}
	if got := req.Resource.Set().Encoded(attribute.DefaultEncoder()); !strings.Contains(got, "service.name=tollgate") {
		t.Errorf("resource %s", got)
	}
	if req.InstrumentationScope.Name != scopeName {
		t.Errorf("scope %q", req.InstrumentationScope.Name)
	}

	want := map[string]any{
		"gen_ai.operation.name":                "chat",
		"gen_ai.provider.name":                 "vllm",
		"gen_ai.request.model":                 "Qwen/Qwen3-8B",
		"gen_ai.response.model":                "Qwen/Qwen3-8B-FP8",
		"gen_ai.response.id":                   "chatcmpl-9f1c",
		"gen_ai.conversation.id":               "conv-42",
		"server.address":                       "10.0.0.7",
		"server.port":                          int64(8000),
		"gen_ai.usage.input_tokens":            int64(120),
		"gen_ai.usage.cache_read.input_tokens": int64(64),
		"gen_ai.usage.output_tokens":           int64(100),
		"gen_ai.response.finish_reasons":       []string{"stop"},
		"gen_ai.response.time_to_first_chunk":  0.208,
		"gen_ai.request.max_tokens":            int64(256),
		"gen_ai.request.temperature":           0.7,
		"tollgate.request_id":                  "req-1",
		"tollgate.attempt":                     int64(1),
		"tollgate.retries":                     int64(0),
		"tollgate.biz_line":                    "assistant",
		"tollgate.team":                        "search",
		"tollgate.template_id":                 "tpl-7",
		"tollgate.endpoint":                    "chat",
		"tollgate.upstream":                    "gpu-a",
		"tollgate.engine":                      "vllm",
		"tollgate.engine_signal":               "vllm-span",
		"tollgate.stream":                      true,
		"tollgate.status":                      int64(200),
		"tollgate.upstream_status":             int64(200),
		"tollgate.usage_source":                "engine",
		"tollgate.e2e_ms":                      1230.0,
		"tollgate.ttft_ms":                     208.0,
		"tollgate.upstream_ttft_ms":            202.0,
		"tollgate.queue_ms":                    6.0,
		"tollgate.tpot_ms":                     msOf(*r.Derived.TPOT),
		"tollgate.decode_tokens_per_s":         100.0,
		"tollgate.prompt_bytes":                int64(512),
		"tollgate.response_bytes":              int64(9000),
		"tollgate.content_chunks":              int64(100),
		"tollgate.cost_nanos":                  int64(42000),
		"tollgate.cost_currency":               "USD",
	}
	if diff := cmp.Diff(want, attrMap(req.Attributes)); diff != "" {
		t.Errorf("attributes (-want +got):\n%s", diff)
	}
	// Nothing that identifies a person or a prompt.
	for _, kv := range req.Attributes {
		v := kv.Value.Emit()
		for _, secret := range []string{r.UserID, r.KeyID, r.PromptSHA256, "secret-project"} {
			if strings.Contains(v, secret) {
				t.Errorf("attribute %s = %q leaks %q", kv.Key, v, secret)
			}
		}
	}

	var events []string
	for _, ev := range req.Events {
		events = append(events, ev.Name+"@"+ev.Time.Sub(arrival).String())
	}
	wantEvents := []string{"auth_done@1ms", "admitted@2ms", "upstream_sent@5ms", "upstream_headers@6ms",
		"first_upstream_token@207ms", "first_client_token@208ms", "last_upstream_token@1.207s", "last_token@1.208s"}
	if diff := cmp.Diff(wantEvents, events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestSegmentSpans(t *testing.T) {
	e, mem := newTest(t, Config{})
	r := streamed()
	e.Export(r)
	req, children := split(t, spans(t, e, mem))

	seg := r.Derived.Segments
	type child struct {
		Name, Source string
		Start, Dur   time.Duration
	}
	var got []child
	var sum time.Duration
	for _, c := range children {
		if c.Parent.SpanID() != req.SpanContext.SpanID() || c.SpanContext.TraceID() != req.SpanContext.TraceID() {
			t.Errorf("%s: parent %v, want the request span %v", c.Name, c.Parent, req.SpanContext)
		}
		if c.SpanKind != trace.SpanKindInternal {
			t.Errorf("%s: kind %v", c.Name, c.SpanKind)
		}
		d := c.EndTime.Sub(c.StartTime)
		sum += d
		got = append(got, child{c.Name, attrMap(c.Attributes)["tollgate.segment.source"].(string), c.StartTime.Sub(arrival), d})
	}
	// Queue 50 and prefill 120 of the 200ms the engine took; 30ms network
	// joins connect; decode 850 of 900; the other 50 unattributed.
	want := []child{
		{"gateway_queue", "gateway", 0, 5 * msec},
		{"connect", seg.Source["connect"], 5 * msec, 32 * msec},
		{"engine_queue", "engine:vllm-span", 37 * msec, 50 * msec},
		{"prefill", "engine:vllm-span", 87 * msec, 120 * msec},
		{"decode", "engine:vllm-span", 207 * msec, 850 * msec},
		{"client_write", "gateway", 1057 * msec, 110 * msec},
		{"post_processing", "gateway", 1167 * msec, 13 * msec},
		{"unattributed", "remainder", 1180 * msec, 50 * msec},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("children (-want +got):\n%s", diff)
	}
	if sum != r.Derived.E2E {
		t.Errorf("children sum to %v, E2E is %v", sum, r.Derived.E2E)
	}
	if last := children[len(children)-1]; !last.EndTime.Equal(req.EndTime) {
		t.Errorf("last child ends at %v, the request at %v", last.EndTime, req.EndTime)
	}
	for _, c := range children {
		if c.StartTime.Before(req.StartTime) || c.EndTime.After(req.EndTime) {
			t.Errorf("%s [%v, %v] outside the request span", c.Name, c.StartTime, c.EndTime)
		}
	}
}

func TestFailedRequest(t *testing.T) {
	e, mem := newTest(t, Config{Upstreams: upstreams})
	r := failed()
	e.Export(r)
	req, children := split(t, spans(t, e, mem))

	if req.Parent.IsValid() || req.SpanContext.SpanID().String() != r.SpanID {
		t.Errorf("span %v with parent %v: want the trace's root, with the Record's id", req.SpanContext, req.Parent)
	}
	if req.Name != "text_completion llama-3" {
		t.Errorf("name %q", req.Name)
	}
	if req.Status.Code != codes.Error || req.Status.Description != "upstream answered 503" {
		t.Errorf("status %+v, want Error with the gateway's message", req.Status)
	}
	a := attrMap(req.Attributes)
	for k, want := range map[string]any{
		"error.type": "upstream_error", "tollgate.error_type": "upstream_error",
		"tollgate.status": int64(502), "tollgate.upstream_status": int64(503),
		"gen_ai.provider.name": "llamacpp", "tollgate.usage_source": "none",
		"server.address": "llama.internal", "server.port": int64(443),
	} {
		if !cmp.Equal(a[k], want) {
			t.Errorf("%s = %v, want %v", k, a[k], want)
		}
	}
	for _, k := range []string{"gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.response.time_to_first_chunk", "gen_ai.response.finish_reasons",
		"gen_ai.response.id", "gen_ai.conversation.id"} {
		if v, ok := a[k]; ok {
			t.Errorf("%s = %v on a request that reported nothing", k, v)
		}
	}
	var names []string
	var sum time.Duration
	for _, c := range children {
		names = append(names, c.Name)
		sum += c.EndTime.Sub(c.StartTime)
		if c.Status.Code != codes.Unset {
			t.Errorf("segment %s status %v: only the request span carries the failure", c.Name, c.Status)
		}
	}
	if want := []string{"gateway_queue", "prefill"}; !cmp.Equal(names, want) {
		t.Errorf("children %v, want %v", names, want)
	}
	if sum != 41*msec {
		t.Errorf("children sum to %v, want the 41ms E2E", sum)
	}
}

func TestRefusedRequest(t *testing.T) {
	// Refused at admission: no upstream, no engine, a 429 in 2ms.
	e, mem := newTest(t, Config{})
	r := &record.Record{RequestID: "req-3", TraceID: "5bf92f3577b34da6a3ce929d0e0e4736", SpanID: "10f067aa0ba902b7",
		Endpoint: "embeddings", Model: "bge-m3", Arrival: arrival, Marks: record.Marks{End: 2 * msec},
		Status: 429, ErrorType: record.ErrRateLimited}
	r.Finish()
	e.Export(r)
	req, children := split(t, spans(t, e, mem))
	a := attrMap(req.Attributes)
	if _, ok := a["gen_ai.provider.name"]; ok {
		t.Errorf("provider %v for a request no engine saw", a["gen_ai.provider.name"])
	}
	if req.Name != "embeddings bge-m3" || a["error.type"] != "rate_limited" || req.Status.Code != codes.Error {
		t.Errorf("name %q, error.type %v, status %v", req.Name, a["error.type"], req.Status)
	}
	if len(children) != 1 || children[0].Name != "gateway_queue" || children[0].EndTime.Sub(children[0].StartTime) != 2*msec {
		t.Errorf("children %+v, want one 2ms gateway_queue", children)
	}
}

func TestServerAttributes(t *testing.T) {
	type server struct {
		Address string
		Port    int64
	}
	for _, c := range []struct {
		base string
		want *server
	}{
		{"http://10.0.0.7:8000/v1", &server{"10.0.0.7", 8000}},
		{"https://api.openai.com/v1", &server{"api.openai.com", 443}},
		{"http://gpu-1/v1", &server{"gpu-1", 80}},
		{"http://[fd00::7]:30000", &server{"fd00::7", 30000}},
		{"/v1", nil},
		{"::", nil},
	} {
		var got *server
		if a := attrMap(serverAttributes(c.base)); len(a) > 0 {
			got = &server{a["server.address"].(string), a["server.port"].(int64)}
		}
		if !cmp.Equal(got, c.want) {
			t.Errorf("%q: %+v, want %+v", c.base, got, c.want)
		}
	}

	// Only a request that went to a known upstream names a server: not a
	// cache hit (answered by tollgate), not an upstream the config lacks.
	e, mem := newTest(t, Config{Upstreams: upstreams})
	hit, gone := streamed(), streamed()
	hit.CacheHit, hit.Upstream = true, "cache"
	gone.Upstream, gone.TraceID = "removed", "5bf92f3577b34da6a3ce929d0e0e4736"
	e.Export(hit)
	e.Export(gone)
	ss := spans(t, e, mem)
	if n := len(slices.DeleteFunc(slices.Clone(ss), func(s tracetest.SpanStub) bool { return s.SpanKind != trace.SpanKindClient })); n != 2 {
		t.Fatalf("%d request spans, want 2", n)
	}
	for _, s := range ss {
		a := attrMap(s.Attributes)
		if v, ok := a["server.address"]; ok {
			t.Errorf("%s: server.address %v", s.Name, v)
		}
	}
}

func TestNames(t *testing.T) {
	for _, c := range []struct{ endpoint, engine, model, name, provider string }{
		{"chat", "openai", "gpt-4o", "chat gpt-4o", "openai"},
		{"completions", "sglang", "m", "text_completion m", "sglang"},
		{"embeddings", "tgi", "e", "embeddings e", "tgi"},
		{"chat", "ollama", "", "chat", "ollama"},
		{"responses", "vllm", "q", "chat q", "vllm"},
		{"messages", "anthropic", "claude", "chat claude", "anthropic"},
	} {
		if got := spanName(operation(c.endpoint), c.model); got != c.name {
			t.Errorf("%s %q: name %q, want %q", c.endpoint, c.model, got, c.name)
		}
		if got := provider(c.engine); got != c.provider {
			t.Errorf("provider(%q) = %q, want %q", c.engine, got, c.provider)
		}
	}
}

func TestSampling(t *testing.T) {
	// TraceIDRatioBased keeps a trace when its last 8 bytes, shifted right
	// by one, fall under ratio·2⁶³: all zeros always, all ones never at ½.
	// It decides under the caller's span too (streamed has one), whose
	// sampled flag the Record does not keep.
	e, mem := newTest(t, Config{SampleRatio: 0.5})
	in, out := streamed(), streamed()
	in.TraceID, out.TraceID = "4bf92f3577b34da60000000000000000", "4bf92f3577b34da6ffffffffffffffff"
	e.Export(in)
	e.Export(out)
	ss := spans(t, e, mem)
	req, children := split(t, ss)
	if req.SpanContext.TraceID().String() != in.TraceID || len(children) != 8 {
		t.Errorf("kept trace %s with %d children, want %s with 8", req.SpanContext.TraceID(), len(children), in.TraceID)
	}
}

func TestInvalidIDs(t *testing.T) {
	e, mem := newTest(t, Config{})
	r := streamed()
	r.TraceID, r.SpanID = "", "zz"
	e.Export(r)
	req, children := split(t, spans(t, e, mem))
	if !req.SpanContext.IsValid() || children[0].Parent.SpanID() != req.SpanContext.SpanID() {
		t.Errorf("request span %v, first child's parent %v", req.SpanContext, children[0].Parent)
	}
}

// stuck is a span exporter that blocks until released, like a collector
// that stopped answering.
type stuck struct {
	release chan struct{}
	mu      sync.Mutex
	n       int
}

func (s *stuck) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	select {
	case <-s.release:
	case <-ctx.Done():
	}
	s.mu.Lock()
	s.n += len(spans)
	s.mu.Unlock()
	return nil
}

func (*stuck) Shutdown(context.Context) error { return nil }

func TestExportNeverBlocks(t *testing.T) {
	exp := &stuck{release: make(chan struct{})}
	e := newExporter(Config{}, slog.New(slog.DiscardHandler), exp,
		sdktrace.WithMaxQueueSize(16), sdktrace.WithMaxExportBatchSize(4))
	// With the exporter stuck, 200 requests (1800 spans) overflow the
	// queue many times over; Export must return every time all the same.
	const n = 200
	for range n {
		e.Export(streamed())
	}
	close(exp.release)
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	exp.mu.Lock()
	defer exp.mu.Unlock()
	if exp.n == 0 || exp.n >= n*9 {
		t.Errorf("%d spans exported of %d: want some, and the overflow dropped", exp.n, n*9)
	}
}

// failing is a span exporter whose collector is down.
type failing struct{ calls int }

func (f *failing) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error {
	f.calls++
	return io.ErrUnexpectedEOF
}
func (*failing) Shutdown(context.Context) error { return nil }

func TestExportFailuresLoggedOnce(t *testing.T) {
	var buf bytes.Buffer
	f := &failing{}
	l := &loggedExporter{SpanExporter: f, log: slog.New(slog.NewTextHandler(&buf, nil))}
	for range 3 {
		if err := l.ExportSpans(context.Background(), make([]sdktrace.ReadOnlySpan, 2)); err != nil {
			t.Errorf("error %v reached the batch processor", err)
		}
	}
	if got := strings.Count(buf.String(), "trace export failed"); got != 1 || f.calls != 3 {
		t.Errorf("%d log lines for %d failures, want 1 (a minute's worth):\n%s", got, f.calls, buf.String())
	}
	// A minute later the next failure is logged, with the count since.
	l.last = l.last.Add(-time.Minute)
	_ = l.ExportSpans(context.Background(), make([]sdktrace.ReadOnlySpan, 2))
	if !strings.Contains(buf.String(), "exports=3 spans=6") {
		t.Errorf("second line lacks the count:\n%s", buf.String())
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "trace export: endpoint is empty"},
		{Config{Endpoint: "127.0.0.1:4318"}, `trace export: endpoint "127.0.0.1:4318": want http(s)://host:port`},
		{Config{Endpoint: "grpc://collector:4317"}, `trace export: endpoint "grpc://collector:4317": want http(s)://host:port`},
		{Config{Endpoint: "http://c:4318", SampleRatio: 1.5}, "trace export: sample ratio 1.5: must be within [0, 1]"},
		{Config{Endpoint: "http://c:4318", SampleRatio: -1}, "trace export: sample ratio -1: must be within [0, 1]"},
	} {
		_, err := New(context.Background(), c.cfg, slog.New(slog.DiscardHandler))
		if err == nil || err.Error() != c.want {
			t.Errorf("%+v: error %v, want %q", c.cfg, err, c.want)
		}
	}
}

func TestTracesURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:4318":                "http://127.0.0.1:4318/v1/traces",
		"http://127.0.0.1:4318/":               "http://127.0.0.1:4318/v1/traces",
		"https://otel.example.com/otlp":        "https://otel.example.com/otlp/v1/traces",
		"http://127.0.0.1:4318/v1/traces":      "http://127.0.0.1:4318/v1/traces",
		"https://otel.example.com/x/v1/traces": "https://otel.example.com/x/v1/traces",
	} {
		if got, err := tracesURL(in); err != nil || got != want {
			t.Errorf("tracesURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestOTLPOverHTTP checks the wire: New posts gzipped OTLP protobuf to
// /v1/traces with the configured headers, and Shutdown flushes.
func TestOTLPOverHTTP(t *testing.T) {
	type got struct {
		path, auth, encoding string
		req                  *collectortrace.ExportTraceServiceRequest
	}
	var mu sync.Mutex
	var posts []got
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := io.Reader(r.Body)
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, _ := io.ReadAll(body)
		var req collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		posts = append(posts, got{r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("Content-Encoding"), &req})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(nil)
	}))
	defer srv.Close()

	e, err := New(context.Background(), Config{Endpoint: srv.URL, Headers: map[string]string{"Authorization": "Bearer t"}, ServiceName: "gw-eu"},
		slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	r := streamed()
	e.Export(r)
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(posts) != 1 {
		t.Fatalf("%d posts, want 1 on shutdown", len(posts))
	}
	p := posts[0]
	if p.path != "/v1/traces" || p.auth != "Bearer t" || p.encoding != "gzip" {
		t.Errorf("posted to %q, Authorization %q, Content-Encoding %q", p.path, p.auth, p.encoding)
	}
	rs := p.req.GetResourceSpans()
	if len(rs) != 1 || len(rs[0].GetScopeSpans()) != 1 {
		t.Fatalf("resource spans %v", rs)
	}
	var service string
	for _, kv := range rs[0].GetResource().GetAttributes() {
		if kv.GetKey() == "service.name" {
			service = kv.GetValue().GetStringValue()
		}
	}
	ss := rs[0].GetScopeSpans()[0].GetSpans()
	if service != "gw-eu" || len(ss) != 9 {
		t.Errorf("service %q with %d spans, want gw-eu with 9", service, len(ss))
	}
}
