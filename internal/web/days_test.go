package web

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
	"github.com/tollgate-dev/tollgate/internal/store/storetest"
	"github.com/tollgate-dev/tollgate/internal/window"
)

// hourCounting counts the stored hours read, to tell which rows a reader
// used.
type hourCounting struct {
	*sqlite.Store
	hourReads atomic.Int64
}

func (c *hourCounting) WindowHours(ctx context.Context, from, to time.Time) ([]store.WindowHour, error) {
	c.hourReads.Add(1)
	return c.Store.WindowHours(ctx, from, to)
}

// TestDayRowsReadLikeHours: percentiles and the overview over days are
// the same whether whole local days are read from their compacted rows or
// hour by hour, in a zone whose days start on the half hour (Kolkata);
// with the days compacted, their hours are not read at all.
func TestDayRowsReadLikeHours(t *testing.T) {
	ctx := context.Background()
	loc, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Skipf("no tzdata for Asia/Kolkata: %v", err)
	}
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "d.db"), slog.New(slog.DiscardHandler), sqlite.WithLocation(loc))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	start := now.Add(-4 * 24 * time.Hour)
	recs := make([]*record.Record, 0, 900)
	for i := 0; ; i++ {
		r := storetest.Record(i)
		r.Arrival = start.Add(time.Duration(i) * 7 * time.Minute)
		if !r.Arrival.Before(now.Add(-10 * time.Minute)) {
			break
		}
		r.Finish()
		recs = append(recs, r)
	}
	if err := st.Insert(ctx, store.Batch{Records: recs}); err != nil {
		t.Fatal(err)
	}
	win := window.New(window.Config{From: start.Add(-time.Hour), Keep: 5 * 24 * time.Hour}, st, nil, nil)
	for _, r := range recs {
		win.Add(r)
	}
	win.Flush(ctx, now)

	span := "from=" + now.Add(-3*24*time.Hour).Format(time.RFC3339) + "&to=" + now.Format(time.RFC3339)
	queries := []string{
		"/api/v1/overview?" + span,
		"/api/v1/percentiles?" + span + "&step=1d&by=model",
		"/api/v1/percentiles?" + span + "&step=1d&quantity=ttft&biz_line=biz-1",
		"/api/v1/percentiles?" + span + "&step=1h",
	}
	// answers gives each query's answer and how many stored hours it read
	// (a new API each time: nothing cached).
	answers := func(s *hourCounting) ([]string, []int64) {
		srv := httptest.NewServer(NewAPI(Options{Store: s, Loc: loc, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }, Windows: win}))
		defer srv.Close()
		var out []string
		var reads []int64
		for _, q := range queries {
			before := s.hourReads.Load()
			var v any
			getJSON(t, srv.URL+q, &v)
			b, _ := json.Marshal(v)
			out = append(out, string(b))
			reads = append(reads, s.hourReads.Load()-before)
		}
		return out, reads
	}
	before, readsBefore := answers(&hourCounting{Store: st})
	n, err := window.NewCompactor(st, loc, nil).Compact(ctx, now)
	if err != nil || n < 3 {
		t.Fatalf("compacted %d days, %v; want at least 3", n, err)
	}
	after, readsAfter := answers(&hourCounting{Store: st})
	for i, q := range queries {
		if before[i] != after[i] {
			t.Errorf("%s:\nhour by hour %s\nfrom days    %s", q, before[i], after[i])
		}
	}
	t.Logf("stored hours read per query: %v hour by hour, %v with days", readsBefore, readsAfter)
	// The overview's span, 13 Mar 12:00 – 16 Mar 11:00 UTC (the last hour
	// is in memory), holds two whole local days (13 Mar 18:30 – 15 Mar
	// 18:30 UTC): only the 6 whole hours before them and the 16 after
	// are read by the hour, the half hours at their edges by the minute.
	if readsBefore[0] < 60 || readsAfter[0] != 22 {
		t.Errorf("the overview read %d stored hours hour by hour and %d with days; want 60+ and 22", readsBefore[0], readsAfter[0])
	}
	// 1-day steps: every whole day from its rows, the last (open) day by
	// the hour.
	if readsAfter[1] >= readsBefore[1]/2 {
		t.Errorf("1-day steps read %d stored hours with days, %d without; want far fewer", readsAfter[1], readsBefore[1])
	}
}

// TestPeriodsReadOnce: the Overview page's calls at once (the overview,
// E2E and TTFT percentiles) read each stored hour once between them, and
// a later call for another quantity reads them again.
func TestPeriodsReadOnce(t *testing.T) {
	f := newSeriesFixtureWith(t, window.Config{From: now.Add(-4 * time.Hour)})
	st := &hourCounting{Store: f.st}
	srv := httptest.NewServer(NewAPI(Options{Store: st, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }, Windows: f.win}))
	defer srv.Close()
	span := "from=" + now.Add(-3*time.Hour).Format(time.RFC3339) + "&to=" + now.Format(time.RFC3339)
	page := []string{"/api/v1/overview?" + span, "/api/v1/percentiles?" + span + "&step=1h&quantity=e2e", "/api/v1/percentiles?" + span + "&step=1h&quantity=ttft"}
	done := make(chan struct{})
	for _, q := range page {
		go func() {
			defer func() { done <- struct{}{} }()
			resp, err := http.Get(srv.URL + q)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("GET %s: %s", q, resp.Status)
			}
		}()
	}
	for range page {
		<-done
	}
	// Stored whole hours before the last (in memory): now-3h and now-2h.
	if n := st.hourReads.Load(); n != 2 {
		t.Errorf("the page's calls read %d stored hours, want 2 (each once)", n)
	}
	var v any
	getJSON(t, srv.URL+"/api/v1/percentiles?"+span+"&step=1h&quantity=prefill", &v)
	if n := st.hourReads.Load(); n != 4 {
		t.Errorf("after a prefill call: %d stored hour reads, want 4 (prefill is not read with the latencies)", n)
	}
}
