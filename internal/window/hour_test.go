package window

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
)

// countingStore counts the minute reads, to tell which rows a reader used.
type countingStore struct {
	*sqlite.Store
	minuteReads int
}

func (c *countingStore) WindowMinutes(ctx context.Context, from, to time.Time) ([]store.WindowMinute, error) {
	c.minuteReads++
	return c.Store.WindowMinutes(ctx, from, to)
}

// TestHourRows: an hour the aggregator saw whole is persisted merged once
// its minutes all are, equal to the merge of those minutes (counts and
// quantiles); readers use it without reading the minutes and without
// counting twice; an hour seen in part is not, and is read from minutes.
func TestHourRows(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "w.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a := New(Config{From: t0}, st, nil, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	add := func(from time.Time, n int) {
		for i := range n {
			model := []string{"m", "n"}[i%2]
			at := from.Add(time.Duration(rng.IntN(3600)) * time.Second)
			a.Add(req(model, at, time.Duration(50+rng.IntN(2000))*time.Millisecond, 3*time.Second, int64(rng.IntN(4000)), 7))
		}
	}
	for i := range 30 { // the half hour before From, seen in part
		a.Add(req("m", t0.Add(-time.Duration(i+1)*time.Minute), 100*time.Millisecond, time.Second, 10, 1))
	}
	a.Flush(ctx, t0.Add(30*time.Second))
	add(t0, 600)
	for m := 1; m <= 60; m++ { // flushed as time goes by
		a.Flush(ctx, t0.Add(time.Duration(m)*time.Minute))
	}
	if hs, err := st.WindowHours(ctx, t0, t0.Add(time.Hour)); err != nil || len(hs) != 0 {
		t.Fatalf("hour rows before the hour's grace ran out: %d, %v", len(hs), err)
	}
	a.Flush(ctx, t0.Add(61*time.Minute+10*time.Second))
	a.Flush(ctx, t0.Add(62*time.Minute))                                    // not written twice
	a.Add(req("m", t0.Add(10*time.Minute), time.Second, time.Second, 1, 1)) // late: counts in an open minute of the next hour

	hs, err := st.WindowHours(ctx, t0.Add(-2*time.Hour), t0.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 2 {
		t.Fatalf("%d hour rows, want 2 (one per model, of the hour seen whole only): %+v", len(hs), hs)
	}
	ms, err := st.WindowMinutes(ctx, t0, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	fromMinutes := map[string]*Stats{}
	for _, m := range ms {
		var s Stats
		if err := s.UnmarshalBinary(m.Data); err != nil {
			t.Fatal(err)
		}
		if fromMinutes[m.Model] == nil {
			fromMinutes[m.Model] = &Stats{}
		}
		fromMinutes[m.Model].Merge(&s)
	}
	for _, h := range hs {
		var s Stats
		if err := s.UnmarshalBinary(h.Data); err != nil {
			t.Fatal(err)
		}
		want := fromMinutes[h.Model]
		if s.Requests != want.Requests || s.Input != want.Input || s.Requests != 300 {
			t.Errorf("%s: hour row %d requests, %d input; minutes %d, %d (want 300 requests)", h.Model, s.Requests, s.Input, want.Requests, want.Input)
		}
		for q := range numQuantities {
			for _, p := range []float64{0.5, 0.95, 0.99} {
				v1, n1 := s.Quantile(q, p)
				v2, n2 := want.Quantile(q, p)
				if n1 != n2 || v1 != v2 && !(v1 != v1 && v2 != v2) {
					t.Errorf("%s %s P%v: hour row %v over %d, minutes %v over %d", h.Model, q, p*100, v1, n1, v2, n2)
				}
			}
		}
	}

	cs := &countingStore{Store: st}
	b := New(Config{}, cs, nil, nil)
	g, err := b.Hour(ctx, t0, nil, []string{"model"}, AllQuantity)
	if err != nil {
		t.Fatal(err)
	}
	if g["model=m"].Stats.Requests != 300 || g["model=n"].Stats.Requests != 300 {
		t.Errorf("Hour from the hour rows: m %d, n %d requests; want 300 each (no double counting)", g["model=m"].Stats.Requests, g["model=n"].Stats.Requests)
	}
	if cs.minuteReads != 0 {
		t.Errorf("Hour read minutes %d times although the hour has rows", cs.minuteReads)
	}
	// The hour before From has no row: read from its minutes.
	g, err = b.Hour(ctx, t0.Add(-time.Hour), nil, nil, NoQuantity)
	if err != nil {
		t.Fatal(err)
	}
	if g[""] == nil || g[""].Stats.Requests != 30 || cs.minuteReads != 1 {
		t.Errorf("Hour without hour rows = %+v after %d minute reads; want 30 requests from the minutes", g[""], cs.minuteReads)
	}
}

// TestHourRowsNeedFrom: without From, the first Flush starts the hours
// seen whole; a hour before it is only in minutes.
func TestHourRowsNeedFrom(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "w.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a := New(Config{}, st, nil, nil)
	a.Add(req("m", t0.Add(10*time.Minute), time.Second, time.Second, 1, 1))
	a.Flush(ctx, t0.Add(20*time.Minute)) // started mid-hour
	a.Add(req("m", t0.Add(70*time.Minute), time.Second, time.Second, 1, 1))
	a.Flush(ctx, t0.Add(2*time.Hour+5*time.Minute))
	hs, err := st.WindowHours(ctx, t0, t0.Add(3*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 || !hs[0].Hour.Equal(t0.Add(time.Hour)) {
		t.Errorf("hour rows %+v, want one, of %s", hs, t0.Add(time.Hour))
	}
}

// failingOnce fails its first minute and hour writes.
type failingOnce struct {
	*sqlite.Store
	minuteFails, hourFails int
}

func (f *failingOnce) AddWindowMinutes(ctx context.Context, ms []store.WindowMinute) error {
	if f.minuteFails > 0 {
		f.minuteFails--
		return context.DeadlineExceeded
	}
	return f.Store.AddWindowMinutes(ctx, ms)
}

func (f *failingOnce) AddWindowHours(ctx context.Context, hs []store.WindowHour) error {
	if f.hourFails > 0 {
		f.hourFails--
		return context.DeadlineExceeded
	}
	return f.Store.AddWindowHours(ctx, hs)
}

// TestFlushRetriesFailedWrites: minutes and an hour whose write failed
// are written by the next Flush, once each.
func TestFlushRetriesFailedWrites(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "w.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p := &failingOnce{Store: st, minuteFails: 1, hourFails: 1}
	a := New(Config{From: t0}, p, nil, nil)
	for i := range 120 {
		a.Add(req("m", t0.Add(time.Duration(i)*30*time.Second), 100*time.Millisecond, time.Second, 10, 1))
	}
	end := t0.Add(62 * time.Minute)
	a.Flush(ctx, end) // the minutes' write fails: nothing written, hours not tried
	if ms, _ := st.WindowMinutes(ctx, t0, t0.Add(time.Hour)); len(ms) != 0 {
		t.Fatalf("%d minutes stored after a failed write", len(ms))
	}
	a.Flush(ctx, end) // minutes written; the hour's write fails
	a.Flush(ctx, end) // the hour written
	a.Flush(ctx, end) // nothing again
	ms, err := st.WindowMinutes(ctx, t0, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, m := range ms {
		var s Stats
		if err := s.UnmarshalBinary(m.Data); err != nil {
			t.Fatal(err)
		}
		n += s.Requests
	}
	if n != 120 {
		t.Errorf("%d requests in the stored minutes, want 120 (each once)", n)
	}
	hs, err := st.WindowHours(ctx, t0, t0.Add(time.Hour))
	if err != nil || len(hs) != 1 {
		t.Errorf("%d hour rows (%v), want 1", len(hs), err)
	}
}
