package otlp

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tollgate-dev/tollgate/internal/record"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The ids a gateway would send: the trace and its own span, which the
// engine's span names as its parent.
const (
	testTrace   = "4bf92f3577b34da6a3ce929d0e0e4736"
	testParent  = "00f067aa0ba902b7"
	testSpanID  = "a1b2c3d4e5f60718"
	testRequest = "chatcmpl-7d1a9b0c"
)

var testReceived = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// vllmAttributes are an llm_request span's attributes as vLLM sets them:
// float seconds, int tokens, finish reasons as a JSON string.
func vllmAttributes(a pcommon.Map) {
	a.PutDouble("gen_ai.latency.time_to_first_token", 0.0421)
	a.PutDouble("gen_ai.latency.e2e", 0.8013)
	a.PutDouble("gen_ai.latency.time_in_queue", 0.0125)
	a.PutInt("gen_ai.usage.prompt_tokens", 42)
	a.PutInt("gen_ai.usage.completion_tokens", 100)
	a.PutDouble("gen_ai.latency.time_in_model_prefill", 0.0296)
	a.PutDouble("gen_ai.latency.time_in_model_decode", 0.75)
	a.PutDouble("gen_ai.latency.time_in_model_inference", 0.7796)
	a.PutStr("gen_ai.request.id", testRequest)
	a.PutStr("gen_ai.response.finish_reasons", `["stop"]`)
	a.PutInt("gen_ai.request.max_tokens", 128)
}

// wantTiming is what vllmAttributes say.
var wantTiming = record.EngineTiming{
	Signal:           SignalVLLMSpan,
	Queue:            12500 * time.Microsecond,
	TTFT:             42100 * time.Microsecond,
	Prefill:          29600 * time.Microsecond,
	Decode:           750 * time.Millisecond,
	Inference:        779600 * time.Microsecond,
	E2E:              801300 * time.Microsecond,
	PromptTokens:     42,
	CompletionTokens: 100,
}

func wantSpan() Span {
	return Span{
		TraceID: testTrace, SpanID: testSpanID, ParentSpanID: testParent,
		Name: VLLMSpanName, RequestID: testRequest, Timing: wantTiming,
		FinishReasons: []string{"stop"}, Received: testReceived,
	}
}

func mustTraceID(t testing.TB, s string) pcommon.TraceID {
	t.Helper()
	var id pcommon.TraceID
	if b, err := hex.DecodeString(s); err != nil || copy(id[:], b) != len(id) {
		t.Fatalf("trace id %q: %v", s, err)
	}
	return id
}

// vllmTraces is one export as vLLM's exporter builds it, plus a span of
// another kind that the receiver must count and drop.
func vllmTraces(t testing.TB) ptrace.Traces {
	t.Helper()
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "vllm")
	spans := rs.ScopeSpans().AppendEmpty().Spans()
	s := spans.AppendEmpty()
	s.SetName(VLLMSpanName)
	s.SetKind(ptrace.SpanKindServer)
	s.SetTraceID(mustTraceID(t, testTrace))
	s.SetSpanID(pcommon.SpanID{0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6, 0x07, 0x18})
	s.SetParentSpanID(pcommon.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7})
	vllmAttributes(s.Attributes())
	o := spans.AppendEmpty()
	o.SetName("model.forward")
	o.SetTraceID(mustTraceID(t, testTrace))
	o.SetSpanID(pcommon.SpanID{1, 2, 3, 4, 5, 6, 7, 8})
	return td
}

// spanLog collects what a receiver hands over.
type spanLog struct {
	mu    sync.Mutex
	spans []Span
}

func (l *spanLog) add(s Span) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.spans = append(l.spans, s)
}

func (l *spanLog) get() []Span {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Span(nil), l.spans...)
}

func newTestReceiver(t testing.TB) (*Receiver, *spanLog, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	log := &spanLog{}
	r := NewReceiver(log.add, slog.New(slog.DiscardHandler), reg)
	r.now = func() time.Time { return testReceived }
	return r, log, reg
}

func gzipped(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// post sends an export straight to the handler.
func post(r *Receiver, method, path, contentType, encoding string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if encoding != "" {
		req.Header.Set("Content-Encoding", encoding)
	}
	w := httptest.NewRecorder()
	r.Handler().ServeHTTP(w, req)
	return w
}

func marshal(t testing.TB, td ptrace.Traces, contentType string) []byte {
	t.Helper()
	var m ptrace.Marshaler = &ptrace.ProtoMarshaler{}
	if contentType == "application/json" {
		m = &ptrace.JSONMarshaler{}
	}
	b, err := m.MarshalTraces(td)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestReceiverEncodings(t *testing.T) {
	for _, ct := range []string{"application/x-protobuf", "application/json"} {
		for _, enc := range []string{"", "gzip"} {
			t.Run(ct+"/"+enc, func(t *testing.T) {
				r, log, _ := newTestReceiver(t)
				body := marshal(t, vllmTraces(t), ct)
				if enc == "gzip" {
					body = gzipped(t, body)
				}
				w := post(r, http.MethodPost, "/v1/traces", ct+"; charset=utf-8", enc, body)
				if w.Code != http.StatusOK {
					t.Fatalf("status %d, body %q", w.Code, w.Body)
				}
				if got := w.Header().Get("Content-Type"); got != ct {
					t.Errorf("response Content-Type %q, want %q", got, ct)
				}
				resp := ptraceotlp.NewExportResponse()
				unmarshal := resp.UnmarshalProto
				if ct == "application/json" {
					unmarshal = resp.UnmarshalJSON
				}
				if err := unmarshal(w.Body.Bytes()); err != nil {
					t.Fatalf("response %q is not an ExportTraceServiceResponse: %v", w.Body, err)
				}
				if n := resp.PartialSuccess().RejectedSpans(); n != 0 {
					t.Errorf("rejected %d spans", n)
				}
				if diff := cmp.Diff([]Span{wantSpan()}, log.get()); diff != "" {
					t.Errorf("spans (-want +got):\n%s", diff)
				}
				wantCount(t, r.llmSpans, 1)
				wantCount(t, r.other, 1)
				wantCount(t, r.requests.WithLabelValues("ok"), 1)
			})
		}
	}
}

func wantCount(t *testing.T, c prometheus.Collector, want float64) {
	t.Helper()
	if got := testutil.ToFloat64(c); got != want {
		t.Errorf("counter = %v, want %v", got, want)
	}
}

// The root path is served too: vLLM's http/protobuf exporter posts to its
// configured endpoint exactly as given.
func TestReceiverRootPath(t *testing.T) {
	r, log, _ := newTestReceiver(t)
	w := post(r, http.MethodPost, "/", "application/x-protobuf", "", marshal(t, vllmTraces(t), "application/x-protobuf"))
	if w.Code != http.StatusOK || len(log.get()) != 1 {
		t.Errorf("POST / = %d with %d spans, want 200 with 1", w.Code, len(log.get()))
	}
}

func TestReceiverRejects(t *testing.T) {
	proto := marshal(t, vllmTraces(t), "application/x-protobuf")
	bomb := gzipped(t, make([]byte, 64<<10)) // a few hundred bytes that expand to 64 KiB
	tests := []struct {
		name                       string
		method, path, ct, enc      string
		body                       []byte
		maxBody                    int64
		wantStatus                 int
		wantLabel, wantMsg, wantCT string
	}{
		{name: "no content type", ct: "", body: proto, wantStatus: 415, wantLabel: "unsupported_media_type", wantMsg: "want application/x-protobuf or application/json", wantCT: "text/plain"},
		{name: "text content type", ct: "text/plain", body: proto, wantStatus: 415, wantLabel: "unsupported_media_type", wantMsg: `Content-Type "text/plain"`, wantCT: "text/plain"},
		{name: "unknown encoding", ct: "application/x-protobuf", enc: "br", body: proto, wantStatus: 415, wantLabel: "unsupported_media_type", wantMsg: `Content-Encoding "br"`, wantCT: "application/x-protobuf"},
		{name: "bad protobuf", ct: "application/x-protobuf", body: []byte{0xff, 0xff, 0xff}, wantStatus: 400, wantLabel: "bad_request", wantMsg: "decode application/x-protobuf ExportTraceServiceRequest", wantCT: "application/x-protobuf"},
		{name: "bad json", ct: "application/json", body: []byte(`{"resourceSpans": [`), wantStatus: 400, wantLabel: "bad_request", wantMsg: "decode application/json ExportTraceServiceRequest", wantCT: "application/json"},
		{name: "bad gzip", ct: "application/json", enc: "gzip", body: []byte(`{"resourceSpans": []}`), wantStatus: 400, wantLabel: "bad_request", wantMsg: "read gzip", wantCT: "application/json"},
		{name: "too large", ct: "application/x-protobuf", body: proto, maxBody: 16, wantStatus: 413, wantLabel: "too_large", wantMsg: "body exceeds 16 bytes", wantCT: "application/x-protobuf"},
		{name: "gzip bomb", ct: "application/json", enc: "gzip", body: bomb, maxBody: 4 << 10, wantStatus: 413, wantLabel: "too_large", wantMsg: "decompressed body exceeds 4096 bytes", wantCT: "application/json"},
		{name: "GET", method: http.MethodGet, ct: "application/json", wantStatus: 405, wantLabel: "method_not_allowed", wantMsg: "use POST", wantCT: "text/plain"},
		{name: "wrong path", path: "/v1/metrics", ct: "application/json", body: []byte(`{}`), wantStatus: 404, wantLabel: "not_found", wantMsg: "/v1/metrics: not found", wantCT: "text/plain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, log, _ := newTestReceiver(t)
			if tt.maxBody > 0 {
				r.MaxBodyBytes = tt.maxBody
			}
			method, path := tt.method, tt.path
			if method == "" {
				method = http.MethodPost
			}
			if path == "" {
				path = "/v1/traces"
			}
			w := post(r, method, path, tt.ct, tt.enc, tt.body)
			if w.Code != tt.wantStatus {
				t.Fatalf("status %d, want %d; body %q", w.Code, tt.wantStatus, w.Body)
			}
			if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, tt.wantCT) {
				t.Errorf("Content-Type %q, want %s", ct, tt.wantCT)
			}
			msg := w.Body.String()
			if tt.wantCT == "application/json" {
				var st struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				}
				if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil || st.Code == 0 {
					t.Fatalf("body %q is not a google.rpc.Status: %v", msg, err)
				}
				msg = st.Message
			}
			if !strings.Contains(msg, tt.wantMsg) {
				t.Errorf("message %q does not say %q", msg, tt.wantMsg)
			}
			if len(log.get()) != 0 {
				t.Errorf("a rejected export delivered spans")
			}
			wantCount(t, r.requests.WithLabelValues(tt.wantLabel), 1)
		})
	}
}

// An llm_request span without a trace id can never be joined; OTLP's
// partial success tells the exporter so.
func TestReceiverPartialSuccess(t *testing.T) {
	r, log, _ := newTestReceiver(t)
	td := vllmTraces(t)
	td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0).SetTraceID(pcommon.NewTraceIDEmpty())
	w := post(r, http.MethodPost, "/v1/traces", "application/json", "", marshal(t, td, "application/json"))
	if w.Code != http.StatusOK {
		t.Fatalf("status %d", w.Code)
	}
	resp := ptraceotlp.NewExportResponse()
	if err := resp.UnmarshalJSON(w.Body.Bytes()); err != nil {
		t.Fatal(err)
	}
	if got := resp.PartialSuccess().RejectedSpans(); got != 1 {
		t.Errorf("rejected spans %d, want 1 (response %s)", got, w.Body)
	}
	if len(log.get()) != 0 {
		t.Errorf("a span without trace id was delivered")
	}
}

// Two receivers on one registry (a reload, a test) share their series
// instead of failing.
func TestReceiverSharedRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := NewReceiver(nil, nil, reg)
	b := NewReceiver(nil, nil, reg)
	post(a, http.MethodPost, "/v1/traces", "application/json", "", []byte(`{}`))
	post(b, http.MethodPost, "/v1/traces", "application/json", "", []byte(`{}`))
	wantCount(t, b.requests.WithLabelValues("ok"), 2)
}

func TestReceiverGRPC(t *testing.T) {
	r, log, _ := newTestReceiver(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	r.RegisterGRPC(srv)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := ptraceotlp.NewGRPCClient(conn).Export(t.Context(), ptraceotlp.NewExportRequestFromTraces(vllmTraces(t)))
	if err != nil {
		t.Fatalf("Export: %v", err)
	}
	if n := resp.PartialSuccess().RejectedSpans(); n != 0 {
		t.Errorf("rejected %d spans", n)
	}
	if diff := cmp.Diff([]Span{wantSpan()}, log.get()); diff != "" {
		t.Errorf("spans (-want +got):\n%s", diff)
	}
	wantCount(t, r.requests.WithLabelValues("ok"), 1)
}

// The receiver must answer every body with 200 or 400, never panic.
func FuzzReceiverBody(f *testing.F) {
	td := vllmTraces(f)
	f.Add(marshal(f, td, "application/x-protobuf"), false)
	f.Add(marshal(f, td, "application/json"), true)
	f.Add([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"llm_request","traceId":"x"}]}]}]}`), true)
	f.Fuzz(func(t *testing.T, body []byte, isJSON bool) {
		r := NewReceiver(func(Span) {}, nil, nil)
		ct := "application/x-protobuf"
		if isJSON {
			ct = "application/json"
		}
		w := post(r, http.MethodPost, "/v1/traces", ct, "", body)
		if w.Code != http.StatusOK && w.Code != http.StatusBadRequest {
			t.Errorf("status %d for %q", w.Code, body)
		}
	})
}
