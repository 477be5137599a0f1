package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
	"github.com/tollgate-dev/tollgate/internal/store/storetest"
)

// TestHeldRecords: a shipped batch drops every Record before its end,
// also one put after its entry had already been shipped; the bound holds.
func TestHeldRecords(t *testing.T) {
	h := &heldRecords{m: map[uint64]*record.Record{}}
	for s := uint64(1); s <= 5; s++ {
		h.put(s, &record.Record{RequestID: string(rune('a' + s))})
	}
	if r := h.get(3); r == nil || r.RequestID != "d" {
		t.Fatalf("get(3) = %+v", r)
	}
	h.drop(4) // 1–3 shipped
	h.put(2, &record.Record{})
	h.drop(6) // 4–5 shipped; the late 2 goes too
	if len(h.m) != 0 {
		t.Errorf("%d records held after all were shipped, want 0", len(h.m))
	}
	for s := range uint64(maxHeld + 10) {
		h.put(s, &record.Record{})
	}
	if len(h.m) != maxHeld {
		t.Errorf("%d records held, want the bound %d", len(h.m), maxHeld)
	}
}

// BenchmarkLedger: the ledger's cost per request as serve runs it — the
// queue's append and group commit, the shipper, the SQLite insert with
// its rollups — from many goroutines at once, as requests end.
func BenchmarkLedger(b *testing.B) {
	cfg := config.Default()
	cfg.Store.SQLite.Path = filepath.Join(b.TempDir(), "l.db")
	st, err := sqlite.Open(context.Background(), cfg.Store.SQLite.Path, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	lg, err := startLedger(cfg, st, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r := storetest.Record(int(n.Add(1)))
			r.Finish()
			if err := lg.sink(r)(context.Background()); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	lg.stop()
}
