package window

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
)

// TestPlan: a query's period is cut into pieces that cover it once, whole
// UTC hours read as hours only where they lie in one step, minutes at
// edges not aligned to hours, a compacted day where it lies (an hour
// stretch stopping at its half-hour start), and memory from the cut on.
func TestPlan(t *testing.T) {
	kolkata, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Skipf("no tzdata for Asia/Kolkata: %v", err)
	}
	at := func(hm string) time.Time {
		v, err := time.Parse("15:04", hm)
		if err != nil {
			t.Fatal(err)
		}
		return t0.Truncate(24 * time.Hour).Add(time.Duration(v.Hour())*time.Hour + time.Duration(v.Minute())*time.Minute)
	}
	ats := func(hms ...string) []time.Time {
		var out []time.Time
		for _, hm := range hms {
			out = append(out, at(hm))
		}
		return out
	}
	day2 := time.Date(2026, 11, 2, 0, 0, 0, 0, kolkata) // 1 Nov 18:30 UTC
	for _, tc := range []struct {
		name          string
		q             Query
		storeEnd, cut time.Time
		days          map[int64]int64
		want          []string
	}{{
		name: "boundaries not aligned to hours",
		q:    Query{From: at("10:17"), To: at("13:42")},
		want: []string{"minute 10:17-11:00", "hour 11:00-12:00 #0", "hour 12:00-13:00 #0", "minute 13:00-13:42"},
	}, {
		name: "an hour across two steps",
		q:    Query{From: at("10:00"), To: at("13:00"), Steps: ats("10:00", "11:30")},
		want: []string{"hour 10:00-11:00 #0", "minute 11:00-12:00", "hour 12:00-13:00 #1"},
	}, {
		name: "steps shorter than an hour",
		q:    Query{From: at("10:00"), To: at("11:30"), Steps: ats("10:00", "10:30", "11:00")},
		want: []string{"minute 10:00-11:00", "minute 11:00-11:30"},
	}, {
		name:     "memory from a cut inside a step",
		q:        Query{From: at("10:00"), To: at("13:00"), Steps: ats("10:00", "11:00", "12:00")},
		storeEnd: at("12:20"), cut: at("12:20"),
		want: []string{"hour 10:00-11:00 #0", "hour 11:00-12:00 #1", "minute 12:00-12:20", "memory 12:20-13:00 #2"},
	}, {
		name:     "memory only",
		q:        Query{From: at("12:30"), To: at("13:00")},
		storeEnd: at("12:00"), cut: at("12:00"),
		want: []string{"memory 12:30-13:00 #0"},
	}, {
		name: "empty range",
		q:    Query{From: at("12:00"), To: at("12:00")},
	}, {
		name: "a compacted day starting on the half hour",
		q:    Query{From: day2.Add(-6*time.Hour - 30*time.Minute), To: day2.Add(29*time.Hour + 30*time.Minute)},
		days: map[int64]int64{day2.Unix(): store.NextDay(day2, kolkata).Unix()},
		want: []string{
			"hour 12:00-13:00 #0", "hour 13:00-14:00 #0", "hour 14:00-15:00 #0", "hour 15:00-16:00 #0", "hour 16:00-17:00 #0", "hour 17:00-18:00 #0",
			"minute 18:00-18:30", "day 18:30-18:30 #0", "minute 18:30-19:00",
			"hour 19:00-20:00 #0", "hour 20:00-21:00 #0", "hour 21:00-22:00 #0", "hour 22:00-23:00 #0", "hour 23:00-00:00 #0",
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			q := tc.q.normalized()
			end := tc.storeEnd
			if end.IsZero() {
				end = q.To
			}
			ps := q.plan(end, tc.cut, tc.days)
			var got []string
			for _, p := range ps {
				s := fmt.Sprintf("%s %s-%s", p.res, p.from.UTC().Format("15:04"), p.to.UTC().Format("15:04"))
				if p.step >= 0 {
					s += fmt.Sprintf(" #%d", p.step)
				}
				got = append(got, s)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
			// Whatever the case: the pieces tile [From, To) in order.
			at := q.From
			for _, p := range ps {
				if !p.from.Equal(at) || !p.to.After(p.from) {
					t.Errorf("piece %s %v–%v: want one starting at %v", p.res, p.from, p.to, at)
				}
				at = p.to
			}
			if len(ps) > 0 && !at.Equal(q.To) {
				t.Errorf("the pieces end at %v, want %v", at, q.To)
			}
		})
	}
	// The days a compacted row can answer: whole in the range, in one step.
	q := Query{From: day2.Add(-6 * time.Hour), To: day2.Add(40 * time.Hour)}.normalized()
	if got := q.candidateDays(q.To, kolkata); len(got) != 1 || !got[0].Equal(day2) {
		t.Errorf("candidate days %v, want only %v", got, day2)
	}
	q = Query{From: day2, To: day2.Add(48 * time.Hour), Steps: []time.Time{day2, day2.Add(12 * time.Hour)}}.normalized()
	if got := q.candidateDays(q.To, kolkata); len(got) != 1 || !got[0].Equal(day2.Add(24*time.Hour)) {
		t.Errorf("a day across two steps is no candidate: %v, want only %v", got, day2.Add(24*time.Hour))
	}
}

// readLog records which stored resolutions a Reader read.
type readLog struct {
	*sqlite.Store
	mu                   sync.Mutex
	minutes, hours, days int
	dayRows              int
}

func (l *readLog) WindowMinutes(ctx context.Context, from, to time.Time) ([]store.WindowMinute, error) {
	l.mu.Lock()
	l.minutes++
	l.mu.Unlock()
	return l.Store.WindowMinutes(ctx, from, to)
}

func (l *readLog) WindowHours(ctx context.Context, from, to time.Time) ([]store.WindowHour, error) {
	l.mu.Lock()
	l.hours++
	l.mu.Unlock()
	return l.Store.WindowHours(ctx, from, to)
}

func (l *readLog) WindowDays(ctx context.Context, from, to time.Time) ([]store.WindowDay, error) {
	rows, err := l.Store.WindowDays(ctx, from, to)
	l.mu.Lock()
	l.days++
	l.dayRows += len(rows)
	l.mu.Unlock()
	return rows, err
}

// TestReadCountsEveryRequestOnce: over three days of traffic with gaps (a
// silent hour, silent minutes), stored as minutes only (before the
// aggregator saw an hour whole), as hour rows, as compacted local days
// (Kolkata: days start on the half hour) and as minutes still in memory,
// every query — boundaries not aligned to hours, steps of a minute to a
// day, hours across steps, grouped, filtered — answers per step exactly
// what the requests that finished in it add up to, counts and quantiles,
// read cold and from the cache.
func TestReadCountsEveryRequestOnce(t *testing.T) {
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
	start := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	silent := start.Add(30 * time.Hour) // an hour without a request
	// The aggregator sees every hour whole from 14:00 on: the hours
	// before it are stored as minutes only.
	a := New(Config{From: start.Add(5 * time.Hour), Keep: 3 * time.Hour}, st, nil, nil)
	var recs []*record.Record
	now := start
	for m := range 3 * 24 * 60 {
		at := start.Add(time.Duration(m)*time.Minute + 7*time.Second)
		if m%97 < 3 || !at.Before(silent) && at.Before(silent.Add(time.Hour)) {
			continue // silent minutes
		}
		for i := range 1 + m%3 {
			model := []string{"m", "n"}[(m+i)%2]
			r := req(model, at, time.Duration(40+(m*7+i)%900)*time.Millisecond, time.Duration(1+m%5)*time.Second, int64(10+m%300), int64(1+i))
			if m%11 == 0 {
				r.Status, r.UpstreamStatus = 500, 500
				r.Finish()
			}
			a.Add(r)
			recs = append(recs, r)
		}
		if m%10 == 9 {
			now = at.Add(53 * time.Second)
			a.Flush(ctx, now)
		}
	}
	now = now.Add(30 * time.Second)
	a.Flush(ctx, now) // the minutes closed for a minute and more are stored
	c := NewCompactor(st, loc, nil)
	c.Horizon = 5 * 24 * time.Hour
	if n, err := c.Compact(ctx, now); err != nil || n < 2 {
		t.Fatalf("compacted %d days, %v; want 2 at least", n, err)
	}

	log := &readLog{Store: st}
	r := NewReader(log, ReaderOptions{Days: log, Loc: loc, Memory: a, Recent: time.Hour, Now: func() time.Time { return now },
		Cache: 100, Hot: []Quantity{E2E}})
	every := func(from, to time.Time, d time.Duration) []time.Time {
		var out []time.Time
		for t := from; t.Before(to); t = t.Add(d) {
			out = append(out, t)
		}
		return out
	}
	localDays := func(from, to time.Time) []time.Time {
		out := []time.Time{from}
		for d := store.NextDay(from, loc); d.Before(to); d = store.NextDay(d, loc) {
			out = append(out, d)
		}
		return out
	}
	end := now.Truncate(time.Minute)
	first := store.NextDay(store.FloorDay(start, loc), loc) // 1 Nov 18:30 UTC
	for _, tc := range []struct {
		name string
		q    Query
	}{
		{"one step, boundaries not aligned", Query{From: start.Add(2*time.Hour + 17*time.Minute), To: end.Add(-23 * time.Minute), By: []string{"model"}}},
		{"local days by model", Query{From: first, To: end, Steps: localDays(first, end), By: []string{"model"}, Quantities: []Quantity{TTFT}}},
		{"local days, filtered", Query{From: first, To: end, Steps: localDays(first, end), Sel: Selector{"model": "m"}, Quantities: []Quantity{E2E}}},
		{"90-minute steps from a half hour", Query{From: start.Add(30 * time.Minute), To: end, Steps: every(start.Add(30*time.Minute), end, 90*time.Minute), Quantities: []Quantity{TTFT}}},
		{"hours across the silent one", Query{From: silent.Add(-3 * time.Hour), To: silent.Add(3 * time.Hour), Steps: every(silent.Add(-3*time.Hour), silent.Add(3*time.Hour), time.Hour), By: []string{"model"}}},
		{"5-minute steps into memory", Query{From: end.Add(-3 * time.Hour), To: end, Steps: every(end.Add(-3*time.Hour), end, 5*time.Minute), Quantities: []Quantity{OutputTokens}}},
		{"counts only", Query{From: start, To: end, Quantities: []Quantity{NoQuantity}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := tc.q.normalized()
			want := map[Key][]*Stats{}
			for _, rec := range recs {
				fin := Minute(rec.Arrival.Add(rec.Derived.E2E))
				k := Key{Model: rec.Model, BizLine: rec.BizLine, Upstream: rec.Upstream, Template: rec.TemplateID}
				i := slices.IndexFunc(q.Steps, func(s time.Time) bool { return !fin.Before(s) && fin.Before(q.stepEnd(slices.Index(q.Steps, s))) })
				if i < 0 || !q.Sel.match(k) {
					continue
				}
				gk := project(k, q.By)
				if want[gk] == nil {
					want[gk] = make([]*Stats, len(q.Steps))
				}
				if want[gk][i] == nil {
					want[gk][i] = &Stats{}
				}
				want[gk][i].Add(rec)
			}
			check := func(round string) {
				got, err := r.Read(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != len(want) {
					t.Fatalf("%s: %d groups, want %d", round, len(got), len(want))
				}
				compared := 0
				for k, w := range want {
					g := got[k]
					if g == nil || g.Key != k {
						t.Fatalf("%s: no group %+v", round, k)
					}
					for i := range q.Steps {
						gs, ws := g.Steps[i], w[i]
						if (gs == nil) != (ws == nil) {
							t.Fatalf("%s %+v step %d (%v): %v, want %v", round, k, i, q.Steps[i], gs, ws)
						}
						if ws == nil {
							continue
						}
						compared++
						if gs.Requests != ws.Requests || gs.Errors != ws.Errors || gs.Input != ws.Input || gs.Output != ws.Output ||
							gs.MaxInput != ws.MaxInput || !cmp.Equal(gs.CostNanos, ws.CostNanos) {
							t.Errorf("%s %+v step %d (%v): %d requests %d errors %d/%d tokens max %d %v, want %d %d %d/%d max %d %v", round, k, i, q.Steps[i],
								gs.Requests, gs.Errors, gs.Input, gs.Output, gs.MaxInput, gs.CostNanos, ws.Requests, ws.Errors, ws.Input, ws.Output, ws.MaxInput, ws.CostNanos)
						}
						for _, qty := range q.Quantities {
							if qty == NoQuantity {
								continue // counts only (the cache may hold hot sketches besides)
							}
							for _, p := range []float64{0.5, 0.95, 0.99} {
								gv, gn := gs.Quantile(qty, p)
								wv, wn := ws.Quantile(qty, p)
								if gn != wn || gv != wv && !(math.IsNaN(gv) && math.IsNaN(wv)) {
									t.Errorf("%s %+v step %d (%v): %s p%v %v over %d, want %v over %d", round, k, i, q.Steps[i], qty, p*100, gv, gn, wv, wn)
								}
							}
						}
					}
				}
				if compared == 0 {
					t.Errorf("%s: nothing compared", round)
				}
			}
			check("cold")
			check("cached")
		})
	}
	// Every resolution was read: the test covers the mix.
	if log.minutes == 0 || log.hours == 0 || log.dayRows == 0 {
		t.Errorf("reads: %d of minutes, %d of hours, %d day rows; want some of each", log.minutes, log.hours, log.dayRows)
	}
}

// storedHour is a SQLite store holding the hour from t0: 120 requests,
// one every 30 s, their TTFT 100 ms to 219 ms and input 1 to 120 tokens.
func storedHour(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "w.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	a := New(Config{From: t0}, st, nil, nil)
	for i := range 120 {
		a.Add(req("m", t0.Add(time.Duration(i)*30*time.Second), time.Duration(100+i)*time.Millisecond, time.Second, int64(i+1), 9))
	}
	a.Flush(t.Context(), t0.Add(2*time.Hour))
	return st
}

// TestReadCacheWidens: a period cached with one quantity's sketches is
// read again for another one, and then answers both.
func TestReadCacheWidens(t *testing.T) {
	ctx := context.Background()
	st := storedHour(t)
	log := &readLog{Store: st}
	r := NewReader(log, ReaderOptions{Cache: 10})
	q := Query{From: t0, To: t0.Add(time.Hour), Quantities: []Quantity{TTFT}}
	read := func(qs ...Quantity) *Stats {
		q.Quantities = qs
		got, err := r.Read(ctx, q)
		if err != nil || got[Key{}] == nil {
			t.Fatalf("read %v: %v, %v", qs, got, err)
		}
		return got[Key{}].Steps[0]
	}
	read(TTFT)
	read(TTFT)
	if log.hours != 1 {
		t.Errorf("the hour was read %d times for one quantity, want once", log.hours)
	}
	s := read(InputTokens)
	if log.hours != 2 {
		t.Errorf("the hour was read %d times, want twice (a new quantity)", log.hours)
	}
	if v, n := s.Quantile(InputTokens, 1); n != 120 || v < 118.8 || v > 121.2 {
		t.Errorf("input tokens max %v over %d, want 120 over 120", v, n)
	}
	s = read(TTFT, InputTokens)
	if _, n := s.Quantile(TTFT, 0.5); n != 120 || log.hours != 2 {
		t.Errorf("both from the cache: TTFT over %d, %d hour reads; want 120 and 2", n, log.hours)
	}
}

// TestReadAnswersAreTheirOwn: two readers of the same cached hour each
// get Stats of their own. Reading a quantile sorts a sketch's buffer in
// place, so answers that shared the cache's Stats raced (under -race)
// and could corrupt the cached hour for every later reader.
func TestReadAnswersAreTheirOwn(t *testing.T) {
	ctx := context.Background()
	st := storedHour(t)
	r := NewReader(st, ReaderOptions{Cache: 10})
	q := Query{From: t0, To: t0.Add(time.Hour), Quantities: []Quantity{TTFT}}
	read := func() *Stats {
		got, err := r.Read(ctx, q)
		if err != nil || got[Key{}] == nil {
			t.Fatalf("read: %v, %v", got, err)
		}
		return got[Key{}].Steps[0]
	}
	s1, s2 := read(), read()
	if s1 == s2 {
		t.Fatal("two reads of a cached hour got the same *Stats")
	}
	var wg sync.WaitGroup
	for _, s := range []*Stats{s1, s2} {
		wg.Go(func() {
			if _, n := s.Quantile(TTFT, 0.99); n != 120 {
				t.Errorf("TTFT over %d requests, want 120", n)
			}
		})
	}
	wg.Wait()
}
