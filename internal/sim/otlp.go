package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// vLLM's request span, as OutputProcessor.do_tracing emits it
// (vllm/v1/engine/output_processor.py, names from vllm/tracing/utils.py):
// one span per finished sequence, kind SERVER, from arrival to the end,
// parented by the request's traceparent, durations in float seconds,
// finish reasons as a JSON-encoded list. internal/otlp documents the
// meaning of each attribute; the names are spelled out here, not shared,
// so that the receiver is tested against an independent writer as it
// would be against vLLM.
const vllmSpanName = "llm_request"

// spanFlushTimeout bounds the final export when Run returns.
const spanFlushTimeout = 5 * time.Second

// tracing is the engine's OpenTelemetry pipeline, alive while Run runs.
type tracing struct {
	exporter  sdktrace.SpanExporter
	transport *http.Transport
	provider  *sdktrace.TracerProvider
	tracer    trace.Tracer
}

// newTracing builds the exporter; nothing runs until start. The transport
// is the engine's own so that its idle connections can be closed at the
// end instead of outliving the engine.
func newTracing(endpoint string, log *slog.Logger) (*tracing, error) {
	if endpoint == "" {
		return nil, nil
	}
	if !strings.HasSuffix(endpoint, "/v1/traces") {
		endpoint = strings.TrimSuffix(endpoint, "/") + "/v1/traces"
	}
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     30 * time.Second,
	}
	// Spans are best effort, as in vLLM: a failed export is logged and
	// dropped rather than retried, which also keeps the flush at the end
	// of Run short when nobody listens.
	exp, err := otlptracehttp.New(context.Background(),
		otlptracehttp.WithEndpointURL(endpoint),
		otlptracehttp.WithHTTPClient(&http.Client{Transport: tr, Timeout: spanFlushTimeout}),
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}),
	)
	if err != nil {
		return nil, fmt.Errorf("sim config: OTLPEndpoint: %w", err)
	}
	return &tracing{exporter: loggingExporter{exp, log, endpoint}, transport: tr}, nil
}

// start creates the provider, whose batch processor runs a goroutine.
// vLLM uses the SDK's defaults too: a BatchSpanProcessor (a batch every
// 5 s at most) and the ParentBased(AlwaysOn) sampler, so a traceparent
// whose sampled flag is off gets no span.
func (t *tracing) start() {
	t.provider = sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(t.exporter),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "tollgate-sim"))),
	)
	t.tracer = t.provider.Tracer("github.com/tollgate-dev/tollgate/internal/sim")
}

// stop flushes the spans still queued and ends the pipeline.
func (t *tracing) stop(ctx context.Context, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), spanFlushTimeout)
	defer cancel()
	if err := t.provider.Shutdown(ctx); err != nil {
		log.Warn("flush request spans", "err", err)
	}
	t.transport.CloseIdleConnections()
}

// emit records one finished sequence as vLLM's llm_request span.
func (t *tracing) emit(st RequestStats) {
	parent := propagation.TraceContext{}.Extract(context.Background(),
		propagation.MapCarrier{"traceparent": st.TraceParent})
	_, span := t.tracer.Start(parent, vllmSpanName,
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(st.Arrival),
		trace.WithAttributes(vllmSpanAttributes(st)...))
	span.End(trace.WithTimestamp(st.Arrival.Add(st.E2E)))
}

// vllmSpanAttributes are do_tracing's attributes for one sequence. The
// sim has no separate API-server arrival, so arrival is both where TTFT
// and E2E start and where the queue starts; sampling parameters, which
// vLLM adds only when set, are left out.
func vllmSpanAttributes(st RequestStats) []attribute.KeyValue {
	reasons, _ := json.Marshal([]string{st.FinishReason})
	return []attribute.KeyValue{
		attribute.Float64("gen_ai.latency.time_to_first_token", st.TTFT.Seconds()),
		attribute.Float64("gen_ai.latency.e2e", st.E2E.Seconds()),
		attribute.Float64("gen_ai.latency.time_in_queue", st.Queue.Seconds()),
		attribute.Int("gen_ai.usage.prompt_tokens", st.PromptTokens),
		attribute.Int("gen_ai.usage.completion_tokens", st.OutputTokens),
		attribute.Float64("gen_ai.latency.time_in_model_prefill", st.Prefill.Seconds()),
		attribute.Float64("gen_ai.latency.time_in_model_decode", st.Decode.Seconds()),
		attribute.Float64("gen_ai.latency.time_in_model_inference", (st.Prefill + st.Decode).Seconds()),
		attribute.String("gen_ai.request.id", st.RequestID),
		attribute.String("gen_ai.response.finish_reasons", string(reasons)),
	}
}

// loggingExporter reports failed exports on the engine's logger instead of
// OpenTelemetry's global error handler.
type loggingExporter struct {
	sdktrace.SpanExporter
	log      *slog.Logger
	endpoint string
}

func (x loggingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if err := x.SpanExporter.ExportSpans(ctx, spans); err != nil {
		x.log.Warn("export request spans", "endpoint", x.endpoint, "spans", len(spans), "err", err)
	}
	return nil
}

// perRequestMetrics is vLLM's PerRequestTimingMetrics, written at the top
// level of a non-streamed response (null fields kept, as vLLM's
// model_dump() does). See build_per_request_timing_metrics in
// vllm/entrypoints/openai/engine/serving.py: the TTFT there runs from
// scheduling, so it is the prefill, not the span's TTFT.
type perRequestMetrics struct {
	TimeToFirstTokenMs *float64 `json:"time_to_first_token_ms"`
	GenerationTimeMs   *float64 `json:"generation_time_ms"`
	QueueTimeMs        *float64 `json:"queue_time_ms"`
	MeanITLMs          *float64 `json:"mean_itl_ms"`
	TokensPerSecond    *float64 `json:"tokens_per_second"`
}

// chunkMetrics is the same object on a stream's final chunk, which vLLM
// serializes with exclude_none: null fields are left out.
type chunkMetrics struct {
	TimeToFirstTokenMs *float64 `json:"time_to_first_token_ms,omitempty"`
	GenerationTimeMs   *float64 `json:"generation_time_ms,omitempty"`
	QueueTimeMs        *float64 `json:"queue_time_ms,omitempty"`
	MeanITLMs          *float64 `json:"mean_itl_ms,omitempty"`
	TokensPerSecond    *float64 `json:"tokens_per_second,omitempty"`
}

// newPerRequestMetrics computes the object for a sequence that finished
// with at least one token, so that every timestamp vLLM needs is known.
func newPerRequestMetrics(st RequestStats) *perRequestMetrics {
	ms := func(d time.Duration) *float64 {
		v := float64(d) / float64(time.Millisecond)
		return &v
	}
	m := &perRequestMetrics{
		TimeToFirstTokenMs: ms(st.Prefill),
		GenerationTimeMs:   ms(st.Decode),
		QueueTimeMs:        ms(st.Queue),
	}
	if st.OutputTokens > 1 {
		itl := float64(st.Decode) / float64(time.Millisecond) / float64(st.OutputTokens-1)
		m.MeanITLMs = &itl
	}
	if inference := st.Prefill + st.Decode; inference > 0 {
		tps := float64(st.OutputTokens) / inference.Seconds()
		m.TokensPerSecond = &tps
	}
	return m
}
