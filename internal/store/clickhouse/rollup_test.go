package clickhouse

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/storetest"
)

// TestPieces: a piece is a UTC hour, cut where a local midnight of the
// rollup zone falls inside it, and knows its local day.
func TestPieces(t *testing.T) {
	kolkata, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Fatal(err)
	}
	havana, err := time.LoadLocation("America/Havana")
	if err != nil {
		t.Fatal(err)
	}
	utc := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	tests := []struct {
		zone       *time.Location
		at         string
		start, end string
		day        string
	}{
		{time.UTC, "2026-03-01T10:20:00Z", "2026-03-01T10:00:00Z", "2026-03-01T11:00:00Z", "2026-03-01"},
		// Kolkata's midnight is 18:30 UTC: that hour is two pieces.
		{kolkata, "2026-03-01T18:10:00Z", "2026-03-01T18:00:00Z", "2026-03-01T18:30:00Z", "2026-03-01"},
		{kolkata, "2026-03-01T18:30:00Z", "2026-03-01T18:30:00Z", "2026-03-01T19:00:00Z", "2026-03-02"},
		{kolkata, "2026-03-01T19:59:59Z", "2026-03-01T19:00:00Z", "2026-03-01T20:00:00Z", "2026-03-02"},
		// Havana skips midnight on 2026-03-08: the day starts at 01:00
		// local, 05:00 UTC, on the hour.
		{havana, "2026-03-08T05:00:00Z", "2026-03-08T05:00:00Z", "2026-03-08T06:00:00Z", "2026-03-08"},
		{havana, "2026-03-08T04:59:59Z", "2026-03-08T04:00:00Z", "2026-03-08T05:00:00Z", "2026-03-07"},
	}
	for _, tt := range tests {
		start := pieceOf(utc(tt.at), tt.zone)
		p := pieceAt(start, tt.zone)
		want := piece{utc(tt.start).Unix(), utc(tt.end).Unix(), tt.day}
		if p != want {
			t.Errorf("%s in %v: piece [%v, %v) %s, want [%s, %s) %s", tt.at, tt.zone,
				time.Unix(p.start, 0).UTC(), time.Unix(p.end, 0).UTC(), p.day, tt.start, tt.end, tt.day)
		}
	}
}

// requestsOf is the report's request count (every group, every currency).
func requestsOf(t *testing.T, s *Store, q store.ReportQuery) int64 {
	t.Helper()
	rows, err := s.Report(t.Context(), q)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, r := range rows {
		n += r.Requests
	}
	return n
}

// late returns n records arriving in the hour after at, distinct from
// storetest's by id.
func late(prefix string, at time.Time, n int) []*record.Record {
	out := make([]*record.Record, n)
	for i := range out {
		r := storetest.Record(i)
		r.RequestID, r.LogicalRequestID = fmt.Sprintf("%s-%d", prefix, i), fmt.Sprintf("%s-%d", prefix, i)
		r.Arrival = at.Add(time.Duration(i) * time.Minute)
		r.Finish()
		out[i] = r
	}
	return out
}

// TestRollupLateWrites: a write into a piece already rolled up (a late
// replay) is counted by the next report; a second row for the same id
// from a racing replica is not.
func TestRollupLateWrites(t *testing.T) {
	s := openTest(t)
	ctx := t.Context()
	at := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	if err := s.Insert(ctx, store.Batch{Records: late("a", at, 5)}); err != nil {
		t.Fatal(err)
	}
	if n := requestsOf(t, s, store.ReportQuery{}); n != 5 {
		t.Fatalf("report = %d requests, want 5", n)
	}
	// A late replay into the same hour, through another replica's store.
	other, err := Open(ctx, Config{HTTP: serverURL, Database: s.db}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	more := late("b", at.Add(30*time.Second), 3)
	if err := other.Insert(ctx, store.Batch{Records: more}); err != nil {
		t.Fatal(err)
	}
	if n := requestsOf(t, s, store.ReportQuery{}); n != 8 {
		t.Errorf("after a late write: report = %d requests, want 8", n)
	}
	// A racing replica writes one of them again (its check ran before
	// the first write) and marks the piece.
	e := &enc{}
	encodeRow(e, more[0], math.MaxUint64-uint64(time.Now().UnixNano()))
	if err := s.c.insert(ctx, fmt.Sprintf("INSERT INTO %s.requests (%s) FORMAT RowBinary", quoteIdent(s.db), insertColumns), e.b); err != nil {
		t.Fatal(err)
	}
	if err := s.mark(ctx, more[:1]); err != nil {
		t.Fatal(err)
	}
	if n := requestsOf(t, other, store.ReportQuery{GroupBy: []store.Dim{store.DimDay}}); n != 8 {
		t.Errorf("after a racing duplicate: report = %d requests, want 8", n)
	}
	// The piece was recomputed three times; its latest version covers
	// every mark, older ones included, so nothing is left to redo.
	if p, err := s.pendingMarks(ctx); err != nil || len(p) != 0 {
		t.Errorf("pending after the reports: %v (%v), want none", p, err)
	}
}

// TestRollupStaleWinner: when a slower replica's recompute, made from an
// older snapshot of the ledger, lands with a higher version than a fresh
// one, the marks the fresh one covered are not covered by the winner, so
// the next pass recomputes the piece and the late row is counted.
func TestRollupStaleWinner(t *testing.T) {
	s := openTest(t)
	ctx := t.Context()
	at := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	if err := s.Insert(ctx, store.Batch{Records: late("a", at, 1)}); err != nil {
		t.Fatal(err)
	}
	if err := s.RollUp(ctx); err != nil {
		t.Fatal(err)
	}
	// The stale snapshot: the piece as it is now, one request (kept
	// aside, since a merge would replace it by the fresh rows).
	hour, snap := s.table(rollupHour), s.table("snapshot")
	if err := s.c.exec(ctx, "", "CREATE TABLE "+snap+" ENGINE = Memory AS SELECT * FROM "+hour); err != nil {
		t.Fatal(err)
	}
	if err := s.Insert(ctx, store.Batch{Records: late("b", at.Add(time.Minute), 1)}); err != nil {
		t.Fatal(err)
	}
	if err := s.RollUp(ctx); err != nil { // the fresh pass: two requests
		t.Fatal(err)
	}
	// The stale pass lands last, with a higher version.
	cols := "d, bucket, local_day, " + joinNames(hourDims) + ", " + joinMeasures()
	q := fmt.Sprintf("INSERT INTO %s (%s, ver) SELECT %s, toUInt64(%d) FROM %s",
		hour, cols, cols, uint64(time.Now().UnixNano())*2, snap)
	if err := s.c.exec(ctx, "", q); err != nil {
		t.Fatal(err)
	}
	if n := requestsOf(t, s, store.ReportQuery{}); n != 2 {
		t.Errorf("after a stale recompute won: report = %d requests, want 2", n)
	}
}

func joinNames(cols []string) string {
	out := ""
	for i, c := range cols {
		if i > 0 {
			out += ", "
		}
		out += c
	}
	return out
}

func joinMeasures() string {
	var names []string
	for _, m := range store.Measures {
		names = append(names, m.Name)
	}
	return joinNames(names)
}

// TestRollupConcurrentPasses: replicas writing and rolling up at once end
// with reports equal to what was written.
func TestRollupConcurrentPasses(t *testing.T) {
	s := openTest(t)
	ctx := t.Context()
	stores := []*Store{s}
	for range 2 {
		o, err := Open(ctx, Config{HTTP: serverURL, Database: s.db}, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		stores = append(stores, o)
	}
	at := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	errs := make(chan error, 3*10)
	for i, st := range stores {
		wg.Go(func() {
			for j := range 10 {
				// Every replica writes into the same two hours.
				recs := late(fmt.Sprintf("r%d-%d", i, j), at.Add(time.Duration(j%2)*time.Hour), 2)
				if err := st.Insert(ctx, store.Batch{Records: recs}); err != nil {
					errs <- err
					return
				}
				if err := st.RollUp(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, st := range stores {
		if n := requestsOf(t, st, store.ReportQuery{GroupBy: []store.Dim{store.DimHour}}); n != 60 {
			t.Errorf("report = %d requests, want 60", n)
		}
	}
}

// TestRollupAfterLedgerPrune: pieces before the ledger's retention cut
// are final. A late write into one, after its ledger rows went, does not
// make the pass recompute it from what is left (which would lose the
// pruned requests); later pieces still follow late writes.
func TestRollupAfterLedgerPrune(t *testing.T) {
	s := openTest(t)
	ctx := t.Context()
	at := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	if err := s.Insert(ctx, store.Batch{Records: late("old", at, 4)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Insert(ctx, store.Batch{Records: late("new", at.Add(24*time.Hour), 4)}); err != nil {
		t.Fatal(err)
	}
	now := at.Add(36 * time.Hour)
	if _, err := s.Prune(ctx, now, store.Retention{Ledger: 30 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if left, err := s.Requests(ctx, store.Filter{}); err != nil || len(left) != 4 {
		t.Fatalf("ledger after pruning: %d rows (%v), want 4", len(left), err)
	}
	if err := s.Insert(ctx, store.Batch{Records: late("replayed", at.Add(30*time.Second), 1)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Insert(ctx, store.Batch{Records: late("later", at.Add(24*time.Hour+30*time.Second), 1)}); err != nil {
		t.Fatal(err)
	}
	day := func(t time.Time) string { return t.Format(time.DateOnly) }
	rows, err := s.Report(ctx, store.ReportQuery{GroupBy: []store.Dim{store.DimDay}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, r := range rows {
		got[r.Keys[0]] += r.Requests
	}
	if got[day(at)] != 4 || got[day(at.Add(24*time.Hour))] != 5 {
		t.Errorf("requests by day = %v, want %s: 4 (final before the cut), %s: 5", got, day(at), day(at.Add(24*time.Hour)))
	}
}

// TestPruneMarks: marks older than markKeep that a recompute covered are
// deleted with their done rows; pending ones stay.
func TestPruneMarks(t *testing.T) {
	s := openTest(t)
	ctx := t.Context()
	at := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	if err := s.Insert(ctx, store.Batch{Records: late("a", at, 3)}); err != nil {
		t.Fatal(err)
	}
	if err := s.RollUp(ctx); err != nil {
		t.Fatal(err)
	}
	count := func(table string) uint64 {
		return selectRowBinary(t, s, "SELECT count() FROM "+s.table(table), (*dec).u64)[0]
	}
	if count(rollupDirty) != 1 || count(rollupDone) != 1 {
		t.Fatalf("before pruning: %d marks, %d done; want 1, 1", count(rollupDirty), count(rollupDone))
	}
	// Two hours on, one more write marks the next hour; Prune rolls it
	// up first, so every mark is covered, but the new one is recent.
	real := s.now
	s.now = func() time.Time { return real().Add(2 * markKeep) }
	if err := s.Insert(ctx, store.Batch{Records: late("b", at.Add(time.Hour), 1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prune(ctx, at, store.Retention{}); err != nil {
		t.Fatal(err)
	}
	if count(rollupDirty) != 1 || count(rollupDone) != 1 {
		t.Errorf("after pruning: %d marks, %d done; want 1, 1 (the recent ones)", count(rollupDirty), count(rollupDone))
	}
	if n := requestsOf(t, s, store.ReportQuery{}); n != 4 {
		t.Errorf("report = %d requests, want 4", n)
	}
}

// BenchmarkRollup: the roll-up pass over a month of records, every piece
// marked (as after a replay of the month), and a month report read from
// the rollups. ns/op is one whole pass or one report.
func BenchmarkRollup(b *testing.B) {
	s := openTest(b)
	ctx := b.Context()
	const n = 20000
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	recs := make([]*record.Record, n)
	for i := range recs {
		r := storetest.Record(i)
		r.Arrival = start.Add(time.Duration(i) * 30 * 24 * time.Hour / n)
		r.Finish()
		recs[i] = r
	}
	for chunk := range slices.Chunk(recs, 1000) {
		if err := s.Insert(ctx, store.Batch{Records: chunk}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("pass", func(b *testing.B) {
		for b.Loop() {
			if err := s.mark(ctx, recs); err != nil {
				b.Fatal(err)
			}
			if err := s.RollUp(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	})
	b.Run("report", func(b *testing.B) {
		q := store.ReportQuery{GroupBy: []store.Dim{store.DimUser, store.DimMonth}}
		for b.Loop() {
			if _, err := s.Report(ctx, q); err != nil {
				b.Fatal(err)
			}
		}
	})
}
