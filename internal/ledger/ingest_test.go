package ledger

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store/clickhouse"
	"github.com/tollgate-dev/tollgate/internal/store/clickhouse/chtest"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite/bench"
	"github.com/tollgate-dev/tollgate/internal/wal"
)

// BenchmarkLedgerClickHouse is issue 9's ingest figure: one replica's
// sustained rate of Records into ClickHouse through serve's own ledger
// (Open and Run, with the ClickHouse defaults of serve: batches of up to
// config.ClickHouseBatchSize rows, one a second), one op = one Record.
// Run it with a fixed count, as each op needs a Record made beforehand:
//
//		go test ./internal/ledger -run XXX -bench BenchmarkLedgerClickHouse -benchtime 1000000x
//
//	  - live: requests finish as in serve. Each hands its Record to the
//	    ledger's sink — binary encoding, append to the write-ahead queue —
//	    and waits for the group commit (fsync), as the gateway does before
//	    the response's last bytes; the shipper meanwhile sends batches to
//	    ClickHouse. producers requests finish at once: at 50,000 requests/s
//	    and LLM latencies of seconds, a replica holds far more in flight,
//	    and a closed loop of a few dozen would measure the fsync's latency,
//	    not the ledger. The clock stops when the last Record is in
//	    ClickHouse (the ledger's stop ships everything).
//	  - replay: the queue holds b.N Records from a previous run (a restart
//	    after an outage); the clock runs from the ledger's start until all
//	    are in ClickHouse. These batches are redeliveries, so the store
//	    looks up stored ids for each.
//
// Reported as BenchmarkIngest (internal/store/clickhouse) reports.
func BenchmarkLedgerClickHouse(b *testing.B) {
	chURL := chtest.Server(b)
	b.Run("live", func(b *testing.B) { benchLedgerCH(b, chURL, false) })
	b.Run("replay", func(b *testing.B) { benchLedgerCH(b, chURL, true) })
}

const producers = 1024

func benchLedgerCH(b *testing.B, chURL string, replay bool) {
	db := chtest.Database()
	b.Cleanup(func() {
		if _, err := chtest.Exec(context.Background(), chURL, "DROP DATABASE IF EXISTS "+db); err != nil {
			b.Errorf("drop %s: %v", db, err)
		}
	})
	st, err := clickhouse.Open(context.Background(), clickhouse.Config{HTTP: chURL, Database: db}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	cfg := Config{QueueDir: b.TempDir(), BatchSize: config.ClickHouseBatchSize, FlushInterval: config.ClickHouseFlushInterval}
	recs, err := bench.Records(b.N)
	if err != nil {
		b.Fatal(err)
	}
	if replay {
		fillQueue(b, cfg.QueueDir, func(yield func([]byte) bool) {
			var buf []byte
			for _, r := range recs {
				buf, _ = r.AppendBinary(buf[:0]) // Append copies it
				if !yield(buf) {
					return
				}
			}
		})
	}
	m := chtest.StartCPU(chURL)
	at := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	lg, stop := runLedger(b, cfg, st)
	if !replay {
		appendAll(b, lg, recs, producers)
	}
	stop()
	b.StopTimer()
	m.Report(b, at)

	n, err := chtest.Exec(context.Background(), chURL, "SELECT count() FROM "+db+".requests")
	if err != nil {
		b.Fatal(err)
	}
	if n != strconv.Itoa(b.N) {
		b.Fatalf("ClickHouse holds %s rows; want %d", n, b.N)
	}
}

// fillQueue writes payloads to a write-ahead queue in dir, as serve's
// sink does, and closes it unshipped: what a stopped replica leaves.
func fillQueue(tb testing.TB, dir string, payloads iter.Seq[[]byte]) {
	tb.Helper()
	q, err := wal.Open(wal.Options{Dir: dir, MaxBytes: 64 << 30}, nil, nil)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- q.Run(ctx) }()
	var last wal.Commit
	for p := range payloads {
		c, err := q.Append(p)
		if errors.Is(err, wal.ErrFull) { // the pending buffer: let it commit
			if err := last.Wait(context.Background()); err != nil {
				tb.Fatal(err)
			}
			c, err = q.Append(p)
		}
		if err != nil {
			tb.Fatal(fmt.Errorf("fill the queue: %w", err))
		}
		last = c
	}
	if err := last.Wait(context.Background()); err != nil {
		tb.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		tb.Fatal(err)
	}
	if err := q.Close(); err != nil {
		tb.Fatal(err)
	}
}

// appendAll appends every Record from producers goroutines, each waiting
// for its Record to be durable, as the gateway's requests do.
func appendAll(b *testing.B, lg *Ledger, recs []*record.Record, producers int) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range producers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(len(recs)) {
					return
				}
				if err := lg.Append(recs[i])(context.Background()); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
