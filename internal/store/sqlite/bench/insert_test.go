package bench

import (
	"context"
	"log/slog"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
)

// BenchmarkInsert is the SQLite half of BenchmarkLedger (internal/ledger)
// without the write-ahead queue: Store.Insert of realistic Records (this
// package's generator) in batches of config's default size, back to back,
// then Close (which writes the rollup sums still in memory), one op = one
// Record. Its batches do not depend on timing, so it compares two versions
// of the store more steadily than the whole path:
//
//		GOMAXPROCS=1 go test ./internal/store/sqlite/bench -run XXX -bench BenchmarkInsert -benchtime 100000x -count 5
//
//	  - day: a day's Records spread over the day, nearly every one in rollup
//	    rows of its own (the rollups' worst case);
//	  - live: the same Records arriving at 2,000/s, as under load (Live).
func BenchmarkInsert(b *testing.B) {
	b.Run("day", func(b *testing.B) {
		recs, err := Records(b.N)
		if err != nil {
			b.Fatal(err)
		}
		benchInsert(b, recs)
	})
	b.Run("live", func(b *testing.B) {
		recs, err := Live(b.N, time.Date(2026, 3, 10, 14, 0, 0, 0, time.UTC), 2000)
		if err != nil {
			b.Fatal(err)
		}
		benchInsert(b, recs)
	})
}

func benchInsert(b *testing.B, recs []*record.Record) {
	batch := config.Default().Store.BatchSize
	path := filepath.Join(b.TempDir(), "l.db")
	st, err := sqlite.Open(context.Background(), path, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	cpu0, at := processCPU(), time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < len(recs); i += batch {
		if err := st.Insert(context.Background(), store.Batch{Records: recs[i:min(i+batch, len(recs))], FirstDelivery: true}); err != nil {
			b.Fatal(err)
		}
	}
	// Close writes the rollup sums still in memory: part of the cost.
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(at).Seconds(), "records/s")
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/record")
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
