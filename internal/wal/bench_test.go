package wal

import (
	"bytes"
	"context"
	"syscall"
	"testing"
	"time"
)

// BenchmarkAppendWait is the gateway's cost per finished request: Append
// its ledger row, wait for the group commit. Many goroutines, as many
// requests finish at once; a shipper with a no-op sink keeps the disk
// bounded and competes for the CPU as it would in production.
//
// entries/s is the log's throughput at that concurrency; fsyncs/1k and
// commits/1k show how much group commit shares (NoSync: commits only);
// cpu-ns/entry is the process's CPU time (user + system, fsync's included)
// per entry, which at GOMAXPROCS=1 is what an entry costs the gateway's core.
func BenchmarkAppendWait(b *testing.B) {
	// About the size of a ledger row's JSON.
	payload := bytes.Repeat([]byte(`{"request_id":"0123456789abcdef","tokens":1234}`), 11)[:512]
	for _, bc := range []struct {
		name        string
		noSync      bool
		parallelism int // goroutines per GOMAXPROCS
	}{
		{"fsync/goroutines=1xP", false, 1},
		{"fsync/goroutines=32xP", false, 32},
		{"nosync/goroutines=1xP", true, 1},
		{"nosync/goroutines=32xP", true, 32},
	} {
		b.Run(bc.name, func(b *testing.B) {
			w, err := Open(Options{Dir: b.TempDir(), NoSync: bc.noSync, SegmentBytes: 8 << 20}, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			go w.Run(context.Background())
			go w.Ship(context.Background(), 512, 100*time.Millisecond, func(context.Context, Batch) error { return nil })
			start, cpu0 := w.Stats(), processCPU()

			b.SetParallelism(bc.parallelism)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					c, err := w.Append(payload)
					if err != nil {
						b.Error(err)
						return
					}
					if err := c.Wait(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
			st, cpu := w.Stats(), processCPU()-cpu0
			appends := float64(st.Appends - start.Appends)
			b.ReportMetric(appends/b.Elapsed().Seconds(), "entries/s")
			b.ReportMetric(float64(st.Fsyncs-start.Fsyncs)*1000/appends, "fsyncs/1k")
			b.ReportMetric(float64(st.Commits-start.Commits)*1000/appends, "commits/1k")
			b.ReportMetric(float64(cpu.Nanoseconds())/appends, "cpu-ns/entry")
		})
	}
}

// processCPU is this process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
