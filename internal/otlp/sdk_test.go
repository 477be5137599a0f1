package otlp

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// These tests send spans with the real OpenTelemetry Go SDK and its
// OTLP/HTTP exporter, as vLLM does with the Python SDK: a batch span
// processor, flushed explicitly so that the test decides when a span
// arrives relative to the end of "its" response.

// exporterEnv is an SDK tracer provider exporting to a receiver.
type exporterEnv struct {
	tp  *sdktrace.TracerProvider
	log *spanLog
}

func newExporterEnv(t *testing.T, onSpan func(Span), opts ...otlptracehttp.Option) *exporterEnv {
	t.Helper()
	env := &exporterEnv{log: &spanLog{}}
	r := NewReceiver(func(s Span) {
		env.log.add(s)
		if onSpan != nil {
			onSpan(s)
		}
	}, nil, nil)
	srv := httptest.NewServer(r.Handler())
	t.Cleanup(srv.Close) // runs last: after the provider's shutdown below
	opts = append([]otlptracehttp.Option{
		otlptracehttp.WithEndpointURL(srv.URL + "/v1/traces"),
		otlptracehttp.WithHTTPClient(srv.Client()),
	}, opts...)
	exp, err := otlptracehttp.New(t.Context(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	env.tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
	t.Cleanup(func() {
		if err := env.tp.Shutdown(context.Background()); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return env
}

// vllmSpan records one llm_request span as vLLM does: kind SERVER, started
// at arrival, parented by the traceparent the gateway sent.
func (env *exporterEnv) vllmSpan(t *testing.T, traceHex, parentHex string) trace.SpanID {
	t.Helper()
	tid, err := trace.TraceIDFromHex(traceHex)
	if err != nil {
		t.Fatal(err)
	}
	sid, err := trace.SpanIDFromHex(parentHex)
	if err != nil {
		t.Fatal(err)
	}
	parent := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true,
	}))
	arrival := time.Now().Add(-801300 * time.Microsecond)
	_, span := env.tp.Tracer("vllm.llm_engine").Start(parent, VLLMSpanName,
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(arrival),
		trace.WithAttributes(
			attribute.Float64("gen_ai.latency.time_to_first_token", 0.0421),
			attribute.Float64("gen_ai.latency.e2e", 0.8013),
			attribute.Float64("gen_ai.latency.time_in_queue", 0.0125),
			attribute.Int("gen_ai.usage.prompt_tokens", 42),
			attribute.Int("gen_ai.usage.completion_tokens", 100),
			attribute.Float64("gen_ai.latency.time_in_model_prefill", 0.0296),
			attribute.Float64("gen_ai.latency.time_in_model_decode", 0.75),
			attribute.Float64("gen_ai.latency.time_in_model_inference", 0.7796),
			attribute.String("gen_ai.request.id", testRequest),
			attribute.String("gen_ai.response.finish_reasons", `["stop"]`),
		))
	span.End()
	// An unrelated span in the same batch, as a traced engine may send.
	_, other := env.tp.Tracer("vllm.worker").Start(parent, "execute_model")
	other.End()
	return span.SpanContext().SpanID()
}

func (env *exporterEnv) flush(t *testing.T) {
	t.Helper()
	if err := env.tp.ForceFlush(t.Context()); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

func TestOTelSDKExporter(t *testing.T) {
	tests := []struct {
		name string
		opts []otlptracehttp.Option
	}{
		{"protobuf", nil},
		{"json", []otlptracehttp.Option{otlptracehttp.WithEncoding(otlptracehttp.EncodingJSON)}},
		{"protobuf+gzip", []otlptracehttp.Option{otlptracehttp.WithCompression(otlptracehttp.GzipCompression)}},
		{"json+gzip", []otlptracehttp.Option{
			otlptracehttp.WithEncoding(otlptracehttp.EncodingJSON),
			otlptracehttp.WithCompression(otlptracehttp.GzipCompression),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newExporterEnv(t, nil, tt.opts...)
			sid := env.vllmSpan(t, testTrace, testParent)
			env.flush(t)
			want := wantSpan()
			want.SpanID = sid.String()
			got := env.log.get()
			if len(got) == 1 {
				want.Received = got[0].Received
			}
			if diff := cmp.Diff([]Span{want}, got); diff != "" {
				t.Errorf("spans (-want +got):\n%s", diff)
			}
		})
	}
}

// The case: the gateway's response may end before or after
// vLLM's span reaches tollgate; the Joiner pairs them either way.
func TestJoinAcrossResponseEnd(t *testing.T) {
	j := NewJoiner(time.Minute, 100, nil)
	env := newExporterEnv(t, j.Offer)
	type result struct {
		timing record.EngineTiming
		calls  int
	}
	hook := func(r *result) func(record.EngineTiming) {
		return func(et record.EngineTiming) { r.timing, r.calls = et, r.calls+1 }
	}

	t.Run("span before the response ends", func(t *testing.T) {
		const trace, parent = "11111111111111111111111111111111", "1111111111111111"
		env.vllmSpan(t, trace, parent)
		env.flush(t) // the span is at the gateway, the response still running
		var r result
		j.Expect(trace, parent, hook(&r)) // the response ends
		if r.calls != 1 || r.timing != wantTiming {
			t.Errorf("got %d calls with %+v, want 1 with %+v", r.calls, r.timing, wantTiming)
		}
	})
	t.Run("span after the response ends", func(t *testing.T) {
		const trace, parent = "22222222222222222222222222222222", "2222222222222222"
		var r result
		j.Expect(trace, parent, hook(&r)) // the response has ended
		env.vllmSpan(t, trace, parent)
		if r.calls != 0 {
			t.Fatalf("called before any span was exported")
		}
		env.flush(t) // vLLM's batch goes out later
		if r.calls != 1 || r.timing != wantTiming {
			t.Errorf("got %d calls with %+v, want 1 with %+v", r.calls, r.timing, wantTiming)
		}
	})
	t.Run("other requests do not match", func(t *testing.T) {
		var r result
		j.Expect("33333333333333333333333333333333", testParent, hook(&r))
		env.vllmSpan(t, "33333333333333333333333333333333", "4444444444444444") // another attempt's span
		env.flush(t)
		if r.calls != 0 {
			t.Errorf("a span of another attempt was joined")
		}
	})
}
