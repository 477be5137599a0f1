package window

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
)

// TestCompactDays: in a zone whose days start on the half hour
// (Kolkata), each closed local day is written once, as the merge of its
// hours and of the minutes of its two half hours, equal to what was
// observed that day; a day not yet settled is not written; a second pass,
// or a restarted compactor, writes nothing again; days without traffic
// are written as empty markers.
func TestCompactDays(t *testing.T) {
	ctx := context.Background()
	loc, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Skipf("no tzdata for Asia/Kolkata: %v", err)
	}
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "w.db"), nil, sqlite.WithLocation(loc))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	start := time.Date(2026, 11, 2, 0, 0, 0, 0, loc).Add(-5 * time.Hour) // mid-day 1 Nov
	a := New(Config{From: start, Keep: 3 * time.Hour}, st, nil, nil)
	want := map[time.Time]map[string]int64{} // day → model → requests
	now := start
	for m := range 3 * 24 * 60 {
		at := start.Add(time.Duration(m)*time.Minute + 10*time.Second)
		for i := range 1 + m%3 {
			model := []string{"m", "n"}[(m+i)%2]
			a.Add(req(model, at, time.Duration(50+m%700)*time.Millisecond, time.Second, int64(m%4000), 7))
			d := store.FloorDay(at, loc)
			if want[d] == nil {
				want[d] = map[string]int64{}
			}
			want[d][model]++
		}
		if m%10 == 9 {
			now = at.Add(50 * time.Second)
			a.Flush(ctx, now)
		}
	}
	now = now.Add(2 * time.Minute)
	a.Flush(ctx, now) // every minute persisted
	day4 := time.Date(2026, 11, 4, 0, 0, 0, 0, loc)
	if end := store.NextDay(day4, loc); !now.Before(end) {
		t.Fatalf("the traffic ran to %v, past the end of 4 Nov: the test wants 4 Nov open", now)
	}

	c := NewCompactor(st, loc, nil)
	c.Horizon = 5 * 24 * time.Hour
	n, err := c.Compact(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	// From 30 Oct (the horizon: five days before 4 Nov's evening) to 3
	// Nov: 30–31 Oct empty, 1 Nov seen in part (from the evening), 2 and
	// 3 Nov whole; 4 Nov still open.
	if n != 5 {
		t.Errorf("first pass wrote %d days, want 5 (30 Oct – 3 Nov)", n)
	}
	for d, models := range want {
		rows, err := st.WindowDays(ctx, d, d.Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if !d.Before(day4) {
			if len(rows) != 0 {
				t.Errorf("%s: %d day rows, want none (not settled)", d.Format(time.DateOnly), len(rows))
			}
			continue
		}
		got := map[string]*Stats{}
		for _, r := range rows {
			if !r.Start.Equal(d) || !r.End.Equal(store.NextDay(d, loc)) {
				t.Errorf("%s: row bounds %v – %v", d.Format(time.DateOnly), r.Start, r.End)
			}
			s := &Stats{}
			if err := s.UnmarshalBinary(r.Data); err != nil {
				t.Fatalf("%s %s: %v", d.Format(time.DateOnly), r.Model, err)
			}
			got[r.Model] = s
		}
		ref, err := ReadRange(ctx, st, d, store.NextDay(d, loc))
		if err != nil {
			t.Fatal(err)
		}
		for model, n := range models {
			s := got[model]
			if s == nil {
				t.Errorf("%s %s: no day row", d.Format(time.DateOnly), model)
				continue
			}
			if s.Requests != n {
				t.Errorf("%s %s: %d requests in the day row, want %d", d.Format(time.DateOnly), model, s.Requests, n)
			}
			r := ref[Key{Model: model, BizLine: "b", Upstream: "u", Template: "t"}]
			for _, p := range []float64{0.5, 0.99} {
				gv, _ := s.Quantile(TTFT, p)
				rv, _ := r.Quantile(TTFT, p)
				if gv != rv {
					t.Errorf("%s %s: TTFT p%v %v from the day row, %v from its hours", d.Format(time.DateOnly), model, p*100, gv, rv)
				}
			}
		}
	}
	if rows, err := st.WindowDays(ctx, time.Date(2026, 10, 29, 0, 0, 0, 0, loc), time.Date(2026, 11, 1, 0, 0, 0, 0, loc)); err != nil || len(rows) != 2 {
		t.Errorf("29–31 Oct: %d rows (%v), want 2 empty markers (30 and 31 Oct)", len(rows), err)
	}
	if n, err := c.Compact(ctx, now); err != nil || n != 0 {
		t.Errorf("second pass: %d days, %v; want 0", n, err)
	}
	restarted := NewCompactor(st, loc, nil)
	restarted.Horizon = c.Horizon
	if n, err := restarted.Compact(ctx, now); err != nil || n != 0 {
		t.Errorf("a restarted compactor: %d days, %v; want 0", n, err)
	}
	// 4 Nov, once settled.
	later := store.NextDay(day4, loc).Add(time.Hour)
	if n, err := c.Compact(ctx, later); err != nil || n != 1 {
		t.Errorf("after 4 Nov settled: %d days, %v; want 1", n, err)
	}
}
