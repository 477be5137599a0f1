package traceexport

import (
	"context"
	"log/slog"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// discard is a span exporter that drops everything, so the benchmark
// measures what Export costs the request path.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkExport is the cost of one Record (a request span with its
// attributes and events, and eight segment spans) on the caller.
func BenchmarkExport(b *testing.B) {
	for _, c := range []struct {
		name  string
		ratio float64
	}{{"sampled", 1}, {"unsampled", 1e-9}} {
		b.Run(c.name, func(b *testing.B) {
			e := newExporter(Config{SampleRatio: c.ratio}, slog.New(slog.DiscardHandler), discard{})
			defer e.Shutdown(context.Background())
			r := streamed()
			r.TraceID = "4bf92f3577b34da6ffffffffffffffff" // kept only at ratio 1
			b.ReportAllocs()
			for b.Loop() {
				e.Export(r)
			}
		})
	}
}
