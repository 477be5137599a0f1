package clickhouse

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/clickhouse/chtest"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite/bench"
)

// BenchmarkIngest is the store's own insert rate into ClickHouse, one op
// = one Record: Store.Insert of whole batches one after another. Run it
// with a fixed count, as each op needs a Record made beforehand:
//
//	go test ./internal/store/clickhouse -run XXX -bench BenchmarkIngest -benchtime 200000x
//
// Sub-benchmarks by batch size (1000; 10,000; serve's default on
// ClickHouse, config.ClickHouseBatchSize) and by kind of batch:
//
//   - first: marked store.Batch.FirstDelivery, as the write-ahead queue sends a
//     batch the first time, so without the look-up of stored ids;
//   - checked: unmarked, as a retry or a replay, so with it. The look-up
//     reads the ids of the batch's whole days: its cost here, on a table
//     of b.N rows, is a lower bound of what it costs on a full day.
//
// Serve's whole path (queue, shipper, this insert) is measured by
// BenchmarkLedgerClickHouse in cmd/tollgate.
//
// Reported: records/s; cpu-µs/record of this process (encoding, HTTP);
// when the server's process can be found on this machine,
// ch-cpu-µs/record, what ClickHouse spent on the same inserts (its merges
// meanwhile included); and disk-bytes/record, the requests table's parts
// on disk per row. The Records come from the 10 M benchmark's generator
// (bench.Records: realistic traffic of one day).
func BenchmarkIngest(b *testing.B) {
	for _, size := range []int{1000, 10000, config.ClickHouseBatchSize} {
		for _, kind := range []string{"first", "checked"} {
			b.Run(fmt.Sprintf("%s/batch=%d", kind, size), func(b *testing.B) { benchInsert(b, size, kind == "first") })
		}
	}
}

func benchInsert(b *testing.B, size int, first bool) {
	s := openTest(b)
	recs, err := bench.Records(b.N)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	m := chtest.StartCPU(serverURL)
	at := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for batch := range slices.Chunk(recs, size) {
		if err := s.Insert(ctx, store.Batch{Records: batch, FirstDelivery: first}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	m.Report(b, at)
	checkRows(b, s, b.N)
}

// checkRows fails b unless the table holds want rows: a benchmark that
// lost rows would report a rate it did not reach.
func checkRows(b *testing.B, s *Store, want int) {
	b.Helper()
	out, err := s.c.text(context.Background(), "", "SELECT count() FROM "+quoteIdent(s.db)+".requests")
	if err != nil {
		b.Fatal(err)
	}
	if out != strconv.Itoa(want) {
		b.Fatalf("requests holds %s rows; want %d", out, want)
	}
	// The ledger's size on disk (compressed, marks included) per row, for
	// sizing ClickHouse's disk; the parts may not all be merged yet.
	out, err = s.c.text(context.Background(), "", "SELECT sum(bytes_on_disk) / sum(rows) FROM system.parts WHERE active AND database = "+
		quoteString(s.db)+" AND table = 'requests'")
	if err != nil {
		b.Fatal(err)
	}
	if v, err := strconv.ParseFloat(out, 64); err == nil {
		b.ReportMetric(v, "disk-bytes/record")
	}
}
