// Package traceexport sends every finished Record to an OTLP/HTTP trace
// endpoint as one span per request, with the OpenTelemetry GenAI semantic
// conventions, and one child span per latency segment. It sits at the end
// of the flow, beside the store and the metrics:
//
//	gateway ──▶ Record.Finish ──┬──▶ store
//	                            ├──▶ metrics
//	                            └──▶ traceexport ──OTLP/HTTP──▶ Jaeger, Tempo, a collector…
//
// # The request span
//
// The request span is the span whose id the gateway already sent upstream in
// traceparent (Record.SpanID), in the request's trace (Record.TraceID), so
// the engine's own span (vLLM's "llm_request", kind SERVER) nests under it.
// Its kind is CLIENT: the GenAI conventions model an inference as a client
// call to a remote model ("span kind SHOULD be CLIENT"), their attributes are
// defined from the caller's side (time_to_first_chunk is measured from the
// request's issue), and a CLIENT span parenting the engine's SERVER span is
// the shape trace backends expect across a process boundary. It runs from
// arrival to response end (E2E) so that, like the conventions ask, it covers
// the whole operation as the application saw it, gateway queue included.
// Its parent is the client's span (Record.ParentSpanID, from the client's
// traceparent), as a remote parent, so the request nests under the caller
// in the caller's trace; a request that came without a traceparent starts
// the trace and its span is the root.
//
// The SDK gives no way to choose a span's ids through the tracer API. The
// cleanest seam is the SDK's IDGenerator: Export puts the Record's ids in the
// context it starts the span with, and idGenerator returns them (random ids
// otherwise). The span then goes through the ordinary path: sampler, span
// limits, the batch span processor. Hand-built ReadOnlySpans would skip the
// sampler and the span limits.
//
// Sampling is by trace id (SampleRatio), for a span under a caller's as
// for a root, so that every replica and every attempt of a request decide
// alike. The caller's sampled flag is not followed: the Record does not
// keep it, and a trace-id ratio is what the caller's own SDK uses.
//
// # Segment spans
//
// Each non-zero segment of Record.Derived.Segments is a child span (kind
// INTERNAL) named after the segment, with attribute tollgate.segment.source
// saying where its figure came from. They tile the request span in
// record.SegmentNames order, unattributed last, so their durations add up to
// E2E exactly. The durations are the attribution; the positions are a layout
// (client writes really interleave with decode).
//
// Export never blocks: the spans go to the SDK's batch span processor, whose
// queue is bounded and drops when full (it counts the drops itself).
package traceexport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// Config says where the spans go.
type Config struct {
	// Endpoint is the OTLP/HTTP base URL, e.g. http://127.0.0.1:4318;
	// "/v1/traces" is appended unless the path already ends with it. An
	// https URL uses TLS.
	Endpoint string
	// Headers are sent with every export (e.g. an authorization header).
	Headers map[string]string
	// ServiceName is the resource's service.name; "tollgate" when empty.
	ServiceName string
	// SampleRatio is the share of traces exported, by trace id, so that
	// every replica and every attempt of a request decide alike; 1 when 0.
	SampleRatio float64
	// Upstreams are the upstreams' base URLs by name (Record.Upstream):
	// the request span's server.address and server.port.
	Upstreams map[string]string
}

// Exporter turns Records into spans. Safe for concurrent use.
type Exporter struct {
	tp      *sdktrace.TracerProvider
	tracer  trace.Tracer
	log     *slog.Logger
	servers map[string][]attribute.KeyValue // server.address and server.port by upstream name
}

const scopeName = "github.com/tollgate-dev/tollgate/internal/traceexport"

// New builds an Exporter sending to cfg.Endpoint. It does not connect: the
// first batch does, and export failures are logged, never returned to the
// request path.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Exporter, error) {
	target, err := tracesURL(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	if cfg.SampleRatio < 0 || cfg.SampleRatio > 1 {
		return nil, fmt.Errorf("trace export: sample ratio %v: must be within [0, 1]", cfg.SampleRatio)
	}
	opts := []otlptracehttp.Option{
		otlptracehttp.WithEndpointURL(target),
		otlptracehttp.WithCompression(otlptracehttp.GzipCompression),
	}
	if len(cfg.Headers) > 0 {
		opts = append(opts, otlptracehttp.WithHeaders(cfg.Headers))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("trace export to %q: %w", target, err)
	}
	return newExporter(cfg, log, exp), nil
}

// newExporter is New with the span exporter given: tests pass an in-memory
// one. Extra batch options tune the queue in tests.
func newExporter(cfg Config, log *slog.Logger, exp sdktrace.SpanExporter, bopts ...sdktrace.BatchSpanProcessorOption) *Exporter {
	if cfg.ServiceName == "" {
		cfg.ServiceName = "tollgate"
	}
	if cfg.SampleRatio == 0 {
		cfg.SampleRatio = 1
	}
	res := resource.NewWithAttributes(semconv.SchemaURL,
		semconv.ServiceName(cfg.ServiceName),
		semconv.TelemetrySDKName("opentelemetry"),
		semconv.TelemetrySDKLanguageGo,
		semconv.TelemetrySDKVersion(sdk.Version()),
	)
	// The segments follow the request span (a local parent); the request
	// span is judged by its trace id, under a caller's span or not.
	ratio := sdktrace.TraceIDRatioBased(cfg.SampleRatio)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithIDGenerator(idGenerator{}),
		sdktrace.WithSampler(sdktrace.ParentBased(ratio,
			sdktrace.WithRemoteParentSampled(ratio), sdktrace.WithRemoteParentNotSampled(ratio))),
		sdktrace.WithBatcher(&loggedExporter{SpanExporter: exp, log: log}, bopts...),
	)
	servers := make(map[string][]attribute.KeyValue, len(cfg.Upstreams))
	for name, base := range cfg.Upstreams {
		if a := serverAttributes(base); a != nil {
			servers[name] = a
		}
	}
	return &Exporter{
		tp:      tp,
		tracer:  tp.Tracer(scopeName, trace.WithSchemaURL(semconv.SchemaURL)),
		log:     log,
		servers: servers,
	}
}

// serverAttributes are server.address and server.port of an upstream's
// base URL, the port implied by the scheme when the URL has none; nil for
// a URL without a host.
func serverAttributes(base string) []attribute.KeyValue {
	u, err := url.Parse(base)
	if err != nil || u.Hostname() == "" {
		return nil
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		switch u.Scheme {
		case "http":
			port = 80
		case "https":
			port = 443
		default:
			return []attribute.KeyValue{semconv.ServerAddress(u.Hostname())}
		}
	}
	return []attribute.KeyValue{semconv.ServerAddress(u.Hostname()), semconv.ServerPort(port)}
}

// tracesURL turns the configured base URL into the traces endpoint, the way
// OTEL_EXPORTER_OTLP_ENDPOINT is turned into its per-signal URL.
func tracesURL(endpoint string) (string, error) {
	if endpoint == "" {
		return "", errors.New("trace export: endpoint is empty")
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("trace export: endpoint %q: want http(s)://host:port", endpoint)
	}
	if !strings.HasSuffix(u.Path, "/v1/traces") {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	}
	return u.String(), nil
}

// Export hands the spans of one finished Record to the batch processor and
// returns; it never waits for the network. Call it after Record.Finish; it
// only reads the Record.
func (e *Exporter) Export(r *record.Record) {
	ctx := context.Background()
	tid, terr := trace.TraceIDFromHex(r.TraceID)
	sid, serr := trace.SpanIDFromHex(r.SpanID)
	if terr == nil && serr == nil {
		ctx = context.WithValue(ctx, idsKey{}, ids{trace: tid, span: sid})
		// Under the caller's span. The SDK then asks idGenerator for a
		// span id alone, in the parent's trace, which is the Record's.
		if pid, err := trace.SpanIDFromHex(r.ParentSpanID); err == nil && pid.IsValid() {
			ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
				TraceID: tid, SpanID: pid, Remote: true}))
		}
	} else {
		e.log.Debug("record without valid trace ids; the span gets random ones",
			"request_id", r.RequestID, "trace_id", r.TraceID, "span_id", r.SpanID)
	}

	start := r.Arrival
	end := start.Add(r.Derived.E2E)
	op := operation(r.Endpoint)
	// What a sampler may look at goes in at the start; the rest is built
	// only for a span that is recorded.
	first := []attribute.KeyValue{semconv.GenAIOperationNameKey.String(op), semconv.GenAIRequestModel(r.Model)}
	if r.Engine != "" {
		first = append(first, semconv.GenAIProviderNameKey.String(provider(r.Engine)))
	}
	if !r.CacheHit { // a cache hit went to no upstream
		first = append(first, e.servers[r.Upstream]...)
	}
	_, span := e.tracer.Start(ctx, spanName(op, r.Model),
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithTimestamp(start),
		trace.WithAttributes(first...))
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(requestAttributes(r)...)
	for _, m := range marks(r) {
		span.AddEvent(m.name, trace.WithTimestamp(start.Add(m.at)))
	}
	if !r.OK() {
		span.SetAttributes(semconv.ErrorTypeKey.String(errorType(r)))
		span.SetStatus(codes.Error, statusMessage(r))
	}

	// The children's context holds the parent span but not the wanted ids,
	// so idGenerator gives them random span ids.
	pctx := trace.ContextWithSpan(context.Background(), span)
	at := start
	seg := r.Derived.Segments
	for _, name := range record.SegmentNames {
		d := seg.Get(name)
		if d <= 0 {
			continue
		}
		opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal), trace.WithTimestamp(at)}
		if src := seg.Source[name]; src != "" {
			opts = append(opts, trace.WithAttributes(attribute.String("tollgate.segment.source", src)))
		}
		_, child := e.tracer.Start(pctx, name, opts...)
		at = at.Add(d)
		child.End(trace.WithTimestamp(at))
	}
	span.End(trace.WithTimestamp(end))
}

// Shutdown exports what is queued, within ctx, and stops the exporter.
// Records exported after it are dropped.
func (e *Exporter) Shutdown(ctx context.Context) error {
	if err := e.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("trace export shutdown: %w", err)
	}
	return nil
}

func spanName(op, model string) string {
	if model == "" {
		return op
	}
	return op + " " + model
}

// idsKey carries the ids Export wants for the span it starts.
type idsKey struct{}

type ids struct {
	trace trace.TraceID
	span  trace.SpanID
}

// idGenerator gives a span the ids found in its start context, and random
// ids otherwise (the segment spans, or a Record without valid ids).
type idGenerator struct{}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if v, ok := ctx.Value(idsKey{}).(ids); ok {
		return v.trace, v.span
	}
	var t trace.TraceID
	for !t.IsValid() {
		putUint64(t[:8], rand.Uint64())
		putUint64(t[8:], rand.Uint64())
	}
	return t, randomSpanID()
}

// NewSpanID is called for a span with a parent in its context: a segment,
// or the request span under the client's span.
func (idGenerator) NewSpanID(ctx context.Context, traceID trace.TraceID) trace.SpanID {
	if v, ok := ctx.Value(idsKey{}).(ids); ok && v.trace == traceID {
		return v.span
	}
	return randomSpanID()
}

func randomSpanID() trace.SpanID {
	var s trace.SpanID
	for !s.IsValid() {
		putUint64(s[:], rand.Uint64())
	}
	return s
}

func putUint64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (56 - 8*i))
	}
}

// loggedExporter logs failed exports with the logger tollgate was given,
// at most once a minute with a count, so that an unreachable collector is
// seen without flooding the log. It swallows the error afterwards: the
// batch processor only hands it to the process-global OpenTelemetry error
// handler, which would print it a second time, unformatted, on stderr.
type loggedExporter struct {
	sdktrace.SpanExporter
	log *slog.Logger

	mu     sync.Mutex
	last   time.Time
	failed int // exports failed since the last log line
	spans  int // spans in them
}

func (l *loggedExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := l.SpanExporter.ExportSpans(ctx, spans)
	if err == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failed++
	l.spans += len(spans)
	if now := time.Now(); now.Sub(l.last) >= time.Minute {
		l.log.Warn("trace export failed; spans dropped", "err", err, "exports", l.failed, "spans", l.spans)
		l.last, l.failed, l.spans = now, 0, 0
	}
	return nil
}
