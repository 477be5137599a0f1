package sqlite

import (
	"fmt"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// Rollup sums wait in memory across batches (pending.go). These tests
// hold the ledger's promise around that: every committed row is counted
// exactly once in the rollups, whatever crashed, amended, pruned or read
// the file in between.

// pendingRecords are n Records of one hour, costed, the i-th at
// base + i seconds.
func pendingRecords(seed, n int, base time.Time) []*record.Record {
	recs := spaced(n, base, time.Second, func(i int, r *record.Record) {
		r.RequestID = fmt.Sprintf("req-%06d-%d-%s", i, seed, base.Format("0102150405"))
		r.LogicalRequestID = r.RequestID
		r.Cost.Nanos = int64(1000 + i)
	})
	return recs
}

// ledgerTotals is what the rollups must say: the Totals of every ledger
// row, summed from the rows themselves.
func ledgerTotals(t *testing.T, s *Store) store.Totals {
	t.Helper()
	recs, err := s.Requests(t.Context(), store.Filter{Limit: 100000})
	if err != nil {
		t.Fatal(err)
	}
	var sum store.Totals
	for _, r := range recs {
		sum.Add(store.TotalsOf(r))
	}
	return sum
}

// reportTotals is what the rollups say: every model's sums over all time,
// from the hour, day and month rollups a report reads.
func reportTotals(t *testing.T, s *Store) store.Totals {
	t.Helper()
	var sum store.Totals
	for _, q := range []store.ReportQuery{
		{GroupBy: []store.Dim{store.DimModel}},                  // months and days
		{GroupBy: []store.Dim{store.DimModel, store.DimHour}},   // hours
		{GroupBy: []store.Dim{store.DimUser, store.DimMonth}},   // the per-user months
		{GroupBy: []store.Dim{store.DimModel, store.DimMinute}}, // minutes
	} {
		rows, err := s.Report(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		var one store.Totals
		for _, r := range rows {
			one.Add(r.Totals)
		}
		if sum.Requests == 0 {
			sum = one
		} else if diff := cmp.Diff(sum, one); diff != "" {
			t.Fatalf("report %v disagrees with the first (-first +this):\n%s", q.GroupBy, diff)
		}
	}
	return sum
}

func checkTotals(t *testing.T, s *Store, want int64) {
	t.Helper()
	got, led := reportTotals(t, s), ledgerTotals(t, s)
	if led.Requests != want {
		t.Fatalf("ledger holds %d requests, want %d", led.Requests, want)
	}
	if diff := cmp.Diff(led, got); diff != "" {
		t.Errorf("rollups differ from the ledger rows (-ledger +rollups):\n%s", diff)
	}
}

// tableRequests reads what the rollup_hour table holds now, without the
// flush a Report does first.
func tableRequests(t *testing.T, s *Store) int64 {
	t.Helper()
	var n int64
	if err := s.r.QueryRowContext(t.Context(), "SELECT COALESCE(SUM(requests), 0) FROM rollup_hour").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// crash drops s as a killed process would: connections gone, nothing
// written on the way out.
func crash(t *testing.T, s *Store) {
	t.Helper()
	for _, st := range append(s.upserts, s.insReq, s.insDet) {
		st.Close()
	}
	s.r.Close()
	s.w.Close()
}

func insert(t *testing.T, s *Store, recs []*record.Record) {
	t.Helper()
	if err := s.Insert(t.Context(), store.Batch{Records: recs, FirstDelivery: true}); err != nil {
		t.Fatal(err)
	}
}

var hour0 = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

// TestPendingRollupsWaitAndSurviveACrash: a batch's rows are committed
// while its sums wait; a crash loses the sums, and the next Open sums the
// rows again — once.
func TestPendingRollupsWaitAndSurviveACrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	s := openAt(t, path)
	insert(t, s, pendingRecords(1, 40, hour0))
	insert(t, s, pendingRecords(2, 40, hour0.Add(time.Hour)))
	if n := tableRequests(t, s); n != 0 {
		t.Fatalf("rollup_hour holds %d requests right after two small batches; want their sums still in memory", n)
	}
	crash(t, s)
	s = openAt(t, path)
	defer s.Close()
	if n := tableRequests(t, s); n != 80 {
		t.Errorf("rollup_hour holds %d requests after reopening; want the 80 rows summed again", n)
	}
	checkTotals(t, s, 80)
	// A clean close after more rows: nothing is summed twice on reopen.
	insert(t, s, pendingRecords(3, 10, hour0.Add(2*time.Hour)))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, path)
	defer s.Close()
	checkTotals(t, s, 90)
}

// TestPendingRollupsTwoProcesses: the CLI opens the file serve writes.
// Whichever writes the rollups first counts the other's pending rows from
// the ledger, and the other then drops what it held instead of adding it
// again.
func TestPendingRollupsTwoProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	serve := openAt(t, path)
	defer serve.Close()
	insert(t, serve, pendingRecords(1, 30, hour0))
	cli := openAt(t, path) // its Open catches up with serve's 30 rows
	checkTotals(t, cli, 30)
	insert(t, serve, pendingRecords(2, 20, hour0.Add(time.Minute)))
	checkTotals(t, serve, 50)
	insert(t, serve, pendingRecords(3, 5, hour0.Add(2*time.Minute)))
	checkTotals(t, cli, 55)
	if err := cli.Close(); err != nil {
		t.Fatal(err)
	}
	checkTotals(t, serve, 55)
}

// TestPendingRollupsAmend: late engine timing moves a row's totals
// whether they are still in memory or already in the tables, and a crash
// after the amendment still counts the amended row once.
func TestPendingRollupsAmend(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	s := openAt(t, path)
	flushed := pendingRecords(1, 10, hour0)
	insert(t, s, flushed)
	checkTotals(t, s, 10) // the report wrote them: these rows are in the tables
	waiting := pendingRecords(2, 10, hour0.Add(time.Minute))
	insert(t, s, waiting)
	et := record.EngineTiming{Signal: "vllm-span", Queue: 3 * time.Millisecond, Prefill: 20 * time.Millisecond, Decode: 80 * time.Millisecond}
	for _, id := range []string{flushed[2].RequestID, waiting[3].RequestID} {
		if err := s.SetEngineTiming(t.Context(), id, et); err != nil {
			t.Fatal(err)
		}
	}
	if got := ledgerTotals(t, s).SegmentNS[2]; got == 0 {
		t.Fatal("the amendments left no engine queue time in the ledger: the test amends nothing")
	}
	checkTotals(t, s, 20)
	// Again with the amended row's sums in memory at the crash.
	more := pendingRecords(3, 10, hour0.Add(2*time.Minute))
	insert(t, s, more)
	if err := s.SetEngineTiming(t.Context(), more[0].RequestID, et); err != nil {
		t.Fatal(err)
	}
	crash(t, s)
	s = openAt(t, path)
	defer s.Close()
	checkTotals(t, s, 30)
}

// TestPendingRollupsPruneNewest: pruning the newest rows hands their
// rowids to the next rows; the mark comes down with them, so rows written
// after the prune and lost from memory in a crash are still summed.
func TestPendingRollupsPruneNewest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	s := openAt(t, path)
	now := time.Date(2026, 3, 20, 12, 0, 0, 0, time.UTC)
	insert(t, s, pendingRecords(1, 10, now.Add(-2*time.Hour)))
	// Replayed old records, written last: the newest rowids.
	insert(t, s, pendingRecords(2, 5, now.AddDate(0, 0, -10)))
	if _, err := s.Prune(t.Context(), now, store.Retention{Ledger: 7 * 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	insert(t, s, pendingRecords(3, 7, now.Add(-time.Hour)))
	crash(t, s)
	s = openAt(t, path)
	defer s.Close()
	// The rollups keep the pruned rows (Retention.Hour and Day are 0: kept
	// for ever); the ledger does not. What must hold is that the 17 rows
	// still in the ledger are in the rollups, on top of the 5 pruned.
	got, led := reportTotals(t, s), ledgerTotals(t, s)
	if led.Requests != 17 || got.Requests != 22 {
		t.Fatalf("after prune and crash: ledger %d rows (want 17), rollups %d requests (want 17 + the 5 pruned)", led.Requests, got.Requests)
	}
}

// TestPendingRollupsBound: the sums in memory are bounded; a flood of
// distinct rollup rows is written before it outgrows maxPendingKeys.
func TestPendingRollupsBound(t *testing.T) {
	s := openAt(t, filepath.Join(t.TempDir(), "ledger.db"))
	defer s.Close()
	var all []*record.Record
	for i := range 3 {
		// A minute each: every Record its own rollup_minute row.
		recs := pendingRecords(i, maxPendingKeys/6, hour0.Add(time.Duration(i)*48*time.Hour))
		for j, r := range recs {
			r.Arrival = r.Arrival.Add(time.Duration(j) * time.Minute)
		}
		insert(t, s, recs)
		all = append(all, recs...)
		s.pend.mu.Lock()
		n := len(s.pend.acc.keys)
		s.pend.mu.Unlock()
		if n >= maxPendingKeys {
			t.Fatalf("%d rollup rows pending after batch %d; bound %d", n, i, maxPendingKeys)
		}
	}
	if tableRequests(t, s) == 0 {
		t.Fatal("nothing written after three large batches of distinct rows")
	}
	checkTotals(t, s, int64(len(all)))
}

// TestInsertYields: on one core, a large batch's insert lets other
// goroutines (a gateway's streams) run every few rows rather than only when
// the scheduler preempts it every 10 ms. Counted, not timed: a goroutine
// that yields in a loop runs once for each time the insert yields.
func TestInsertYields(t *testing.T) {
	s := openAt(t, filepath.Join(t.TempDir(), "ledger.db"))
	defer s.Close()
	recs := pendingRecords(1, 2048, hour0)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var turns atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				turns.Add(1)
				runtime.Gosched()
			}
		}
	}()
	insert(t, s, recs)
	n := turns.Load()
	close(stop)
	<-done
	if want := int64(len(recs) / yieldEvery / 2); n < want {
		t.Errorf("another goroutine ran %d times during the insert of %d rows; want at least %d (a turn every %d rows, halved)", n, len(recs), want, yieldEvery)
	}
}

// TestPendingRollupsFailedBatch: a batch that fails part-way commits
// nothing, and the sums its first rows added to memory go with it.
func TestPendingRollupsFailedBatch(t *testing.T) {
	s := openAt(t, filepath.Join(t.TempDir(), "ledger.db"))
	defer s.Close()
	insert(t, s, pendingRecords(1, 10, hour0))
	if _, err := s.w.ExecContext(t.Context(), `CREATE TRIGGER boom BEFORE INSERT ON requests
		WHEN NEW.request_id LIKE '%boom' BEGIN SELECT RAISE(ABORT, 'boom'); END`); err != nil {
		t.Fatal(err)
	}
	bad := pendingRecords(2, 20, hour0.Add(time.Minute))
	bad[15].RequestID += "-boom"
	if err := s.Insert(t.Context(), store.Batch{Records: bad}); err == nil {
		t.Fatal("the batch with the refused row was stored")
	}
	checkTotals(t, s, 10)
}
