package web

import (
	"fmt"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/store"
)

// TestOverviewExactRange: the overview's headline figures count exactly
// the period asked — not the whole UTC hours around it — and its QPS
// divides by the part of the period that has passed. The periods start
// and end inside hours, with and without whole hours between; the
// clock stands inside the last one. On the old code (hours rounded out,
// QPS over the padded period) every case fails.
func TestOverviewExactRange(t *testing.T) {
	f := newSeriesFixture(t)
	clock := now.Add(-12*time.Minute - 30*time.Second) // 11:47:30
	o := Options{Store: f.st, Windows: f.win, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return clock }}
	srv := httptest.NewServer(NewAPI(o))
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		name     string
		from, to time.Time
	}{
		{"last 15 minutes", clock.Add(-15 * time.Minute), clock},
		{"across one hour boundary", now.Add(-99*time.Minute - 50*time.Second), clock.Add(-10 * time.Second)},
		{"whole hour between", now.Add(-170*time.Minute + 20*time.Second), clock},
		{"one drilled minute", now.Add(-75 * time.Minute), now.Add(-74 * time.Minute)},
		{"ends in the future", clock.Add(-30 * time.Minute), clock.Add(30 * time.Minute)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got struct {
				From, To string
				Totals   overviewRow                      `json:"totals"`
				QPS      float64                          `json:"qps"`
				ByModel  struct{ Top []overviewRow }      `json:"by_model"`
				Latency  map[string]struct{ Count int64 } `json:"latency_s"`
			}
			getJSON(t, fmt.Sprintf("%s/api/v1/overview?from=%s&to=%s", srv.URL, tc.from.Format(time.RFC3339), tc.to.Format(time.RFC3339)), &got)
			// The period to the minute: from rounded down, to up.
			from := tc.from.Truncate(time.Minute)
			to := tc.to.Truncate(time.Minute)
			if to.Before(tc.to) {
				to = to.Add(time.Minute)
			}
			var tot store.Totals
			models := map[string]int64{}
			var done int64
			for _, r := range f.recs {
				if r.Arrival.Before(from) || !r.Arrival.Before(to) {
					continue
				}
				tot.Add(store.TotalsOf(r))
				models[r.Model]++
				if r.Arrival.Add(r.Derived.E2E).Before(to) {
					done++
				}
			}
			if tot.Requests == 0 {
				t.Fatal("fixture: no request in the period")
			}
			if got.From != from.Format(time.RFC3339) || got.To != to.Format(time.RFC3339) {
				t.Errorf("period %s – %s, want %s – %s", got.From, got.To, from.Format(time.RFC3339), to.Format(time.RFC3339))
			}
			if got.Totals.Requests != tot.Requests || got.Totals.InputTokens != tot.Input || got.Totals.OutputTokens != tot.Output || got.Totals.Errors != tot.Errors {
				t.Errorf("totals %d requests, %d in, %d out, %d errors; want %d, %d, %d, %d",
					got.Totals.Requests, got.Totals.InputTokens, got.Totals.OutputTokens, got.Totals.Errors, tot.Requests, tot.Input, tot.Output, tot.Errors)
			}
			end := to
			if clock.Before(end) {
				end = clock
			}
			if want := float64(tot.Requests) / end.Sub(from).Seconds(); got.QPS != want {
				t.Errorf("qps %v, want %d requests ÷ %v elapsed = %v", got.QPS, tot.Requests, end.Sub(from), want)
			}
			for _, m := range got.ByModel.Top {
				if m.Requests != models[m.Key] {
					t.Errorf("model %s: %d requests, want %d", m.Key, m.Requests, models[m.Key])
				}
			}
			if want := float64(tot.Cached) / float64(tot.Input); got.Totals.PrefixCacheShare == nil || *got.Totals.PrefixCacheShare != want {
				t.Errorf("prefix cache share %v, want %v", got.Totals.PrefixCacheShare, want)
			}
			if want := float64(tot.CacheHits) / float64(tot.Requests); got.Totals.ResponseCacheShare == nil || *got.Totals.ResponseCacheShare != want {
				t.Errorf("response cache share %v, want %v", got.Totals.ResponseCacheShare, want)
			}
			if c := got.Latency["e2e"].Count; c != done {
				t.Errorf("E2E percentiles over %d requests, want %d", c, done)
			}
		})
	}
}

// TestLengthReportExactRange: the length report of a drilled minute (or
// any period not on whole hours) counts that period's requests, per
// model and template — templates are not kept by minute rollups, so the
// ragged ends are read from the ledger. The old code answered nothing for
// a minute.
func TestLengthReportExactRange(t *testing.T) {
	f := newSeriesFixture(t)
	srv := f.server(t, Options{})
	for _, p := range [][2]time.Time{
		{now.Add(-75 * time.Minute), now.Add(-74 * time.Minute)},
		{now.Add(-150*time.Minute + 30*time.Second), now.Add(-15 * time.Minute)},
	} {
		var got struct {
			Rows []map[string]any `json:"rows"`
		}
		getJSON(t, fmt.Sprintf("%s/api/v1/reports/length?from=%s&to=%s", srv.URL, p[0].Format(time.RFC3339), p[1].Format(time.RFC3339)), &got)
		want := map[string]int64{}
		var n int64
		from := p[0].Truncate(time.Minute)
		for _, r := range f.recs {
			if r.Arrival.Before(from) || !r.Arrival.Before(p[1]) {
				continue
			}
			want[orDash(r.Model)+"/"+orDash(r.TemplateID)]++
			n++
		}
		if n == 0 {
			t.Fatal("fixture: no request in the period")
		}
		gotN := map[string]int64{}
		for _, row := range got.Rows {
			gotN[fmt.Sprint(row["model"])+"/"+fmt.Sprint(row["template"])] += int64(row["requests"].(float64))
		}
		if fmt.Sprint(gotN) != fmt.Sprint(want) {
			t.Errorf("%s – %s: length report counts %v, want %v", p[0].Format(time.TimeOnly), p[1].Format(time.TimeOnly), gotN, want)
		}
	}
}

func orDash(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// TestSeriesPartialStep: the step in progress is marked partial and its
// QPS divides by its elapsed seconds, so it does not read as a dip; the
// steps before it are whole. The old code divided by the whole step.
func TestSeriesPartialStep(t *testing.T) {
	f := newSeriesFixture(t)
	clock := now.Add(-12*time.Minute - 30*time.Second) // 11:47:30: 30 s into its minute
	srv := httptest.NewServer(NewAPI(Options{Store: f.st, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return clock }}))
	t.Cleanup(srv.Close)
	var got struct {
		Series []struct {
			Points []struct {
				T        time.Time `json:"t"`
				Requests int64     `json:"requests"`
				QPS      float64   `json:"qps"`
				Partial  bool      `json:"partial"`
			} `json:"points"`
		} `json:"series"`
	}
	getJSON(t, fmt.Sprintf("%s/api/v1/series?from=%s&to=%s&step=1m&measures=requests", srv.URL, clock.Add(-10*time.Minute).Format(time.RFC3339), clock.Format(time.RFC3339)), &got)
	ps := got.Series[0].Points
	if len(ps) != 11 {
		t.Fatalf("%d points, want 11", len(ps))
	}
	for i, p := range ps {
		last := i == len(ps)-1
		secs := 60.0
		if last {
			secs = clock.Sub(p.T).Seconds()
		}
		if p.Partial != last || p.QPS != float64(p.Requests)/secs {
			t.Errorf("step %s: partial %v, qps %v for %d requests; want partial %v, qps over %v s", p.T.Format(time.TimeOnly), p.Partial, p.QPS, p.Requests, last, secs)
		}
	}
	if ps[len(ps)-1].Requests == 0 {
		t.Error("fixture: no request in the step in progress")
	}
}
