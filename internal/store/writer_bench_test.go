package store

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// discard is a Store that writes nothing, so that BenchmarkEnqueue measures
// the queue rather than a database.
type discard struct{ Store }

func (discard) Insert(context.Context, Batch) error { return nil }

// BenchmarkEnqueue measures the gateway's side of the Writer. It lives in
// package store so that it can empty the queue off the clock instead of
// running a consumer that competes for the CPU.
func BenchmarkEnqueue(b *testing.B) {
	r := &record.Record{RequestID: "bench", Arrival: time.Now()}
	b.Run("accepted", func(b *testing.B) {
		w := NewWriter(discard{}, WriterConfig{}, nil, nil)
		b.ReportAllocs()
		for b.Loop() {
			if !w.Enqueue(r) {
				b.StopTimer()
				for len(w.ch) > 0 {
					<-w.ch
				}
				w.Enqueue(r)
				b.StartTimer()
			}
		}
	})
	b.Run("queue full", func(b *testing.B) {
		// Under overload every request takes this path: it must stay as
		// cheap as accepting.
		w := NewWriter(discard{}, WriterConfig{QueueSize: 1}, nil, nil)
		w.Enqueue(r)
		b.ReportAllocs()
		for b.Loop() {
			w.Enqueue(r)
		}
	})
	b.Run("parallel with Run", func(b *testing.B) {
		// Many handlers enqueueing while Run drains: contention on the
		// queue. drops/op > 0 means Run fell behind the producers, which
		// with a no-op store says only that producers and consumer share
		// too few cores.
		w := NewWriter(discard{}, WriterConfig{}, nil, nil)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- w.Run(ctx) }()
		b.ReportAllocs()
		var dropped atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !w.Enqueue(r) {
					dropped.Add(1)
				}
			}
		})
		b.ReportMetric(float64(dropped.Load())/float64(b.N), "drops/op")
		cancel()
		<-done
	})
}
