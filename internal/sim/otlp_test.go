package sim

import (
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/tollgate-dev/tollgate/internal/otlp"
	"github.com/tollgate-dev/tollgate/internal/record"
)

// A traceparent as the gateway sends it: its trace, its own span as the
// parent, sampled.
const (
	gwTrace       = "4bf92f3577b34da6a3ce929d0e0e4736"
	gwSpan        = "00f067aa0ba902b7"
	gwTraceParent = "00-" + gwTrace + "-" + gwSpan + "-01"
)

// spanSink is what tollgate's receiver hands over.
type spanSink struct {
	mu    sync.Mutex
	spans []otlp.Span
}

func (s *spanSink) add(sp otlp.Span) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spans = append(s.spans, sp)
}

func (s *spanSink) get() []otlp.Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]otlp.Span(nil), s.spans...)
}

// startTraced runs an engine that exports its spans to a tollgate
// receiver. The export is batched; stopEngine flushes it, so once it
// returns every span is in the sink.
func startTraced(t *testing.T, cfg Config) (*harness, *spanSink) {
	t.Helper()
	sink := &spanSink{}
	srv := httptest.NewServer(otlp.NewReceiver(sink.add, nil, nil).Handler())
	t.Cleanup(srv.Close) // after the harness's own cleanup has flushed
	cfg.OTLPEndpoint = srv.URL
	return start(t, cfg), sink
}

// wantSpan is the span vLLM would send for these stats.
func wantSpan(st RequestStats, traceID, parent string) otlp.Span {
	return otlp.Span{
		TraceID: traceID, ParentSpanID: parent, Name: "llm_request", RequestID: st.RequestID,
		FinishReasons: []string{st.FinishReason},
		Timing: record.EngineTiming{
			Signal:           otlp.SignalVLLMSpan,
			Queue:            st.Queue,
			TTFT:             st.TTFT,
			Prefill:          st.Prefill,
			Decode:           st.Decode,
			Inference:        st.Prefill + st.Decode,
			E2E:              st.E2E,
			PromptTokens:     int64(st.PromptTokens),
			CompletionTokens: int64(st.OutputTokens),
		},
	}
}

var ignoreSpanIDAndTime = cmpopts.IgnoreFields(otlp.Span{}, "SpanID", "Received")

func TestSpanToReceiver(t *testing.T) {
	tests := []struct {
		name   string
		path   string
		body   any
		seqs   int
		finish string
	}{
		{"chat", "/v1/chat/completions", chatBody("hello"), 1, "stop"},
		{"chat stream", "/v1/chat/completions", chatBody("hello", "stream", true), 1, "stop"},
		{"chat length", "/v1/chat/completions", chatBody("hello", "max_tokens", 2), 1, "length"},
		{"completions batch", "/v1/completions", map[string]any{"prompt": []string{"one", "two three"}}, 2, "stop"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, sink := startTraced(t, fastConfig())
			resp := h.post(tt.path, tt.body, "traceparent", gwTraceParent, OutputTokensHeader, "4")
			readAll(t, resp.Body)
			resp.Body.Close()
			var want []otlp.Span
			for range tt.seqs {
				st := h.nextStats()
				if st.FinishReason != tt.finish {
					t.Fatalf("finish %q, want %q", st.FinishReason, tt.finish)
				}
				want = append(want, wantSpan(st, gwTrace, gwSpan))
			}
			h.stopEngine()

			got := sink.get()
			sortByID := cmpopts.SortSlices(func(a, b otlp.Span) bool { return a.RequestID < b.RequestID })
			if diff := cmp.Diff(want, got, ignoreSpanIDAndTime, sortByID); diff != "" {
				t.Errorf("spans (-want +got):\n%s", diff)
			}
			for _, s := range got {
				if len(s.SpanID) != 16 || s.SpanID == gwSpan {
					t.Errorf("span id %q: want a new span under the gateway's", s.SpanID)
				}
			}
		})
	}
}

// Without a traceparent vLLM starts a trace of its own; a traceparent
// whose sampled flag is off yields no span at all, as with vLLM's default
// ParentBased sampler.
func TestSpanTraceContext(t *testing.T) {
	h, sink := startTraced(t, fastConfig())
	for _, header := range [][]string{
		nil,
		{"traceparent", "00-" + gwTrace + "-" + gwSpan + "-00"},
	} {
		resp := h.post("/v1/chat/completions", chatBody("hi"), header...)
		readAll(t, resp.Body)
		resp.Body.Close()
	}
	root := h.nextStats()
	h.nextStats()
	h.stopEngine()

	got := sink.get()
	if len(got) != 1 {
		t.Fatalf("got %d spans, want the untraced request's only: %+v", len(got), got)
	}
	if got[0].TraceID == "" || got[0].TraceID == gwTrace || got[0].ParentSpanID != "" {
		t.Errorf("span %+v: want a root span of a new trace", got[0])
	}
	if diff := cmp.Diff(wantSpan(root, got[0].TraceID, ""), got[0], ignoreSpanIDAndTime); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// Sequences failed by shutdown are traced too, before the final flush.
func TestSpanOnShutdown(t *testing.T) {
	h, sink := startTraced(t, fastConfig())
	resp := h.post("/v1/chat/completions", chatBody("long", "stream", true),
		"traceparent", gwTraceParent, OutputTokensHeader, "100000000")
	defer resp.Body.Close()
	readUntilToken(t, resp.Body)
	h.stopEngine()
	st := h.nextStats()
	if diff := cmp.Diff([]otlp.Span{wantSpan(st, gwTrace, gwSpan)}, sink.get(), ignoreSpanIDAndTime); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got := sink.get(); len(got) == 1 && !cmp.Equal(got[0].FinishReasons, []string{"abort"}) {
		t.Errorf("finish reasons %q, want [abort]", got[0].FinishReasons)
	}
}

// Nobody listening: the engine logs, drops the spans and still stops.
func TestSpanEndpointDown(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	cfg := fastConfig()
	cfg.OTLPEndpoint = "http://" + addr + "/"
	h := start(t, cfg)
	resp := h.post("/v1/chat/completions", chatBody("hi"), "traceparent", gwTraceParent)
	readAll(t, resp.Body)
	resp.Body.Close()
	h.nextStats()
	h.stopEngine() // reports a Run error, if any, through the harness
}

func TestOTLPEndpointConfig(t *testing.T) {
	for _, endpoint := range []string{"127.0.0.1:4318", "grpc://127.0.0.1:4317", "http://", "http://[::1"} {
		_, err := New(Config{OTLPEndpoint: endpoint}, slog.New(slog.DiscardHandler), nil)
		if err == nil || !strings.Contains(err.Error(), "OTLPEndpoint") {
			t.Errorf("OTLPEndpoint %q: error %v, want one naming OTLPEndpoint", endpoint, err)
		}
	}
	for _, endpoint := range []string{"http://127.0.0.1:4318", "https://collector.example:4318/v1/traces"} {
		if _, err := New(Config{OTLPEndpoint: endpoint}, nil, nil); err != nil {
			t.Errorf("OTLPEndpoint %q: %v", endpoint, err)
		}
	}
}

// perRequestBody is the part of a response or chunk these tests read.
type perRequestBody struct {
	Choices []json.RawMessage `json:"choices"`
	Metrics json.RawMessage   `json:"metrics"`
}

// wantEngineTiming is what tollgate reads from the metrics object for
// these stats. The sim's queue starts at arrival, so queue + prefill is
// the span's TTFT.
func wantEngineTiming(st RequestStats) record.EngineTiming {
	return record.EngineTiming{
		Signal: otlp.SignalVLLMMetrics, Queue: st.Queue, Prefill: st.Prefill, Decode: st.Decode,
		TTFT: st.TTFT, Inference: st.Prefill + st.Decode,
	}
}

func TestPerRequestMetricsWhole(t *testing.T) {
	cfg := fastConfig()
	cfg.PerRequestMetrics = true
	h := start(t, cfg)
	for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
		body := any(chatBody("hello"))
		if path == "/v1/completions" {
			body = map[string]any{"prompt": "hello"}
		}
		var got perRequestBody
		h.postJSON(path, body, http.StatusOK, &got, OutputTokensHeader, "5")
		st := h.nextStats()
		timing, ok := otlp.ParsePerRequestMetrics(got.Metrics)
		if !ok {
			t.Fatalf("%s: no metrics in %s", path, got.Metrics)
		}
		if diff := cmp.Diff(wantEngineTiming(st), timing); diff != "" {
			t.Errorf("%s: (-want +got):\n%s", path, diff)
		}
		var m map[string]*float64
		if err := json.Unmarshal(got.Metrics, &m); err != nil {
			t.Fatal(err)
		}
		itl := float64(st.Decode) / 1e6 / 4
		if m["mean_itl_ms"] == nil || *m["mean_itl_ms"] != itl {
			t.Errorf("%s: mean_itl_ms %v, want %v", path, m["mean_itl_ms"], itl)
		}
		tps := 5 / (st.Prefill + st.Decode).Seconds()
		if m["tokens_per_second"] == nil || *m["tokens_per_second"] != tps {
			t.Errorf("%s: tokens_per_second %v, want %v", path, m["tokens_per_second"], tps)
		}
	}

	// One token: no inter-token latency, written as null.
	var one perRequestBody
	h.postJSON("/v1/chat/completions", chatBody("x"), http.StatusOK, &one, OutputTokensHeader, "1")
	h.nextStats()
	if !strings.Contains(string(one.Metrics), `"mean_itl_ms":null`) {
		t.Errorf("metrics %s: want mean_itl_ms null", one.Metrics)
	}

	// Several prompts: no single sequence speaks for the request.
	var batch perRequestBody
	h.postJSON("/v1/completions", map[string]any{"prompt": []string{"a", "b"}}, http.StatusOK, &batch)
	h.nextStats()
	h.nextStats()
	if batch.Metrics != nil {
		t.Errorf("batch response has metrics %s", batch.Metrics)
	}
}

func TestPerRequestMetricsStream(t *testing.T) {
	cfg := fastConfig()
	cfg.PerRequestMetrics = true
	h := start(t, cfg)
	events := func(body map[string]any) []perRequestBody {
		resp := h.post("/v1/chat/completions", body, OutputTokensHeader, "1")
		defer resp.Body.Close()
		evs, err := readEvents(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		var out []perRequestBody
		for _, ev := range evs[:len(evs)-1] { // the last is [DONE]
			var c perRequestBody
			if err := json.Unmarshal([]byte(ev), &c); err != nil {
				t.Fatalf("%q: %v", ev, err)
			}
			out = append(out, c)
		}
		return out
	}

	chunks := events(chatBody("hi", "stream", true, "stream_options", map[string]any{"include_usage": true}))
	st := h.nextStats()
	for _, c := range chunks[:len(chunks)-1] {
		if c.Metrics != nil {
			t.Errorf("a chunk before the last has metrics: %s", c.Metrics)
		}
	}
	last := chunks[len(chunks)-1]
	if len(last.Choices) != 0 {
		t.Fatalf("last chunk is not the usage chunk")
	}
	timing, ok := otlp.ParsePerRequestMetrics(last.Metrics)
	if !ok {
		t.Fatalf("usage chunk has no metrics")
	}
	if diff := cmp.Diff(wantEngineTiming(st), timing); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if strings.Contains(string(last.Metrics), "mean_itl_ms") {
		t.Errorf("chunk metrics %s: null fields must be left out", last.Metrics)
	}

	// Without include_usage there is no usage chunk, so no metrics.
	for _, c := range events(chatBody("hi", "stream", true)) {
		if c.Metrics != nil {
			t.Errorf("metrics without include_usage: %s", c.Metrics)
		}
	}
	h.nextStats()
}
