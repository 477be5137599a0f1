package clickhouse

import (
	"math"
	"slices"
	"testing"
	"time"
	_ "time/tzdata" // the time zone tests run wherever the suite does

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/storetest"
)

// TestPruneLedger: the ledger and the sampled timelines go by their own
// retention, and Prune returns only once they are gone.
func TestPruneLedger(t *testing.T) {
	s := openTest(t)
	ctx := t.Context()
	recs := storetest.Records(0, 10) // one a second from storetest.Base
	if err := s.Insert(ctx, store.Batch{Records: recs}); err != nil {
		t.Fatal(err)
	}
	now := storetest.Base.Add(time.Hour)
	// Timelines of records 0–5 (arrived over 55m59s before now) go;
	// every sampled record among them had one.
	cut := now.Add(-(time.Hour - 6*time.Second))
	sampled := 0
	for _, r := range recs {
		if r.Arrival.Before(cut) && r.Sampled && r.Timeline != nil {
			sampled++
		}
	}
	n, err := s.Prune(ctx, now, store.Retention{Details: time.Hour - 6*time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(sampled) {
		t.Errorf("Prune(details) = %d, want %d", n, sampled)
	}
	for i, r := range recs {
		got, err := s.Request(ctx, r.RequestID)
		if err != nil {
			t.Fatal(err)
		}
		want := r
		if i < 6 {
			want = storetest.Unsampled(r)
		}
		if diff := cmp.Diff([]*record.Record{want}, got); diff != "" {
			t.Errorf("record %d after pruning details (-want +got):\n%s", i, diff)
		}
	}
	n, err = s.Prune(ctx, now, store.Retention{Ledger: time.Hour - 3*time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("Prune(ledger) = %d, want 3", n)
	}
	all, err := s.Requests(ctx, store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 7 || all[len(all)-1].RequestID != recs[3].RequestID {
		t.Errorf("after pruning the ledger: %d records, oldest %q; want 7, %q", len(all), all[len(all)-1].RequestID, recs[3].RequestID)
	}
	// Again: no ledger row left to prune, and of the timelines only
	// those of records 6–9 (3–5 went already).
	if n, err := s.Prune(ctx, now, store.Retention{Ledger: time.Hour - 3*time.Second, Details: time.Minute}); err != nil || n != 4 {
		t.Errorf("second Prune = %d, %v; want 4, nil", n, err)
	}
}

// TestWindowDayRacingCompactors: two replicas' compactors that both found a
// day unwritten both write it; readers see one of them whole — the first
// write — never a mix.
func TestWindowDayRacingCompactors(t *testing.T) {
	s := openTest(t)
	ctx := t.Context()
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	end := start.AddDate(0, 0, 1)
	t0 := time.Date(2026, 3, 2, 0, 15, 0, 0, time.UTC)
	s.now = func() time.Time { return t0.Add(time.Second) }
	late := []store.WindowDay{{Start: start, End: end, Model: "a", Data: []byte{9}}, {Start: start, End: end, Model: "z", Data: []byte{9}}}
	if ok, err := s.AddWindowDay(ctx, start, end, late); err != nil || !ok {
		t.Fatalf("AddWindowDay = %v, %v", ok, err)
	}
	// The other replica's write, with the earlier clock, lands after it:
	// it passed its check before this one's rows were there.
	other, err := Open(ctx, Config{HTTP: serverURL, Database: s.db}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	first := []store.WindowDay{{Start: start, End: end, Model: "m", Data: []byte{1, 0, 255}}}
	if err := other.insertWindowDays(ctx, start, end, first, math.MaxUint64-uint64(t0.UnixNano()), "other"); err != nil {
		t.Fatal(err)
	}
	for _, st := range []*Store{s, other} {
		got, err := st.WindowDays(ctx, start, end)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(first, got); diff != "" {
			t.Errorf("WindowDays (-want +got):\n%s", diff)
		}
	}
	if ok, err := other.AddWindowDay(ctx, start, end, late); err != nil || ok {
		t.Errorf("a third write of the day = %v, %v; want false, nil", ok, err)
	}
}

// TestReportPeriodsInZones: the period checks with days and months in a
// zone with daylight-saving changes (23- and 25-hour days, and a skipped
// midnight: Havana) and one whose midnights are off the UTC hour
// (Kolkata). UTC is in the suite (ReportAcrossMonths). Each zone costs
// some 600 queries, so the SQLite suite's New York and Shanghai, which
// take the same paths, are left out here.
func TestReportPeriodsInZones(t *testing.T) {
	needServer(t)
	for _, name := range []string{"America/Havana", "Asia/Kolkata"} {
		t.Run(name, func(t *testing.T) {
			loc, err := time.LoadLocation(name)
			if err != nil {
				t.Fatal(err)
			}
			s := openTestIn(t, loc)
			storetest.ReportPeriods(t, s, loc)
		})
	}
}

// TestReportZoneOverride: a query's Zone beats the store's; a request at
// 23:30 UTC is the next day in Shanghai.
func TestReportZoneOverride(t *testing.T) {
	s := openTest(t)
	sh, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	r := storetest.Record(1)
	r.Arrival = time.Date(2026, 1, 31, 23, 30, 0, 0, time.UTC)
	r.Finish()
	if err := s.Insert(t.Context(), store.Batch{Records: []*record.Record{r}}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		zone *time.Location
		want []string
	}{
		{nil, []string{"2026-01-31", "2026-01"}},
		{time.UTC, []string{"2026-01-31", "2026-01"}},
		{sh, []string{"2026-02-01", "2026-02"}},
	} {
		rows, err := s.Report(t.Context(), store.ReportQuery{GroupBy: []store.Dim{store.DimDay, store.DimMonth}, Zone: tt.zone, Measures: []string{"requests"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 1 || !slices.Equal(rows[0].Keys, tt.want) || rows[0].Requests != 1 {
			t.Errorf("zone %v: %+v, want keys %v", tt.zone, rows, tt.want)
		}
	}
}

// TestAmendmentsAreVersions: an amendment is a new version of the row;
// readers see it at once, a replay of the original does not undo it, and
// merges keep it.
func TestAmendmentsAreVersions(t *testing.T) {
	s := openTest(t)
	ctx := t.Context()
	recs := storetest.Records(0, 3)
	if err := s.Insert(ctx, store.Batch{Records: recs}); err != nil {
		t.Fatal(err)
	}
	et := record.EngineTiming{Signal: "vllm-span", Queue: 20 * time.Millisecond, Prefill: 50 * time.Millisecond, Decode: 600 * time.Millisecond}
	if err := s.SetEngineTiming(ctx, recs[1].RequestID, et); err != nil {
		t.Fatal(err)
	}
	rate := func(r *record.Record) record.Cost { return record.Cost{Nanos: 7, Currency: "EUR", PriceVersion: "v9"} }
	if n, err := s.Rerate(ctx, recs[0].Arrival, recs[2].Arrival.Add(time.Second), rate); err != nil || n != 3 {
		t.Fatalf("Rerate = %d, %v; want 3", n, err)
	}
	want := make([]*record.Record, len(recs))
	for i, r := range recs {
		c := *r
		c.Cost = rate(r)
		if i == 1 {
			c.EngineTiming = &et
		}
		c.Finish()
		want[i] = &c
	}
	check := func(when string) {
		t.Helper()
		for _, w := range want {
			got, err := s.Request(ctx, w.RequestID)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]*record.Record{w}, got); diff != "" {
				t.Errorf("%s: Request(%q) (-want +got):\n%s", when, w.RequestID, diff)
			}
		}
	}
	check("amended")
	if err := s.Insert(ctx, store.Batch{Records: recs}); err != nil { // a late replay of the originals
		t.Fatal(err)
	}
	check("after a replay")
	if err := s.c.exec(ctx, "", "OPTIMIZE TABLE "+s.table("requests")+" FINAL"); err != nil {
		t.Fatal(err)
	}
	if n := selectRowBinary(t, s, "SELECT count() FROM "+s.table("requests"), (*dec).u64); len(n) != 1 || n[0] != 3 {
		t.Errorf("rows after merging = %v, want 3", n)
	}
	check("after merging")
}
