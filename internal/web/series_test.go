package web

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/alert"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
	"github.com/tollgate-dev/tollgate/internal/store/storetest"
	"github.com/tollgate-dev/tollgate/internal/window"
)

// seriesFixture is a real store with 300 requests over the 3 hours
// before now (two currencies, failures, two models), and the alerting
// windows they fed: minutes older than an hour flushed to the store, the
// last hours in memory.
type seriesFixture struct {
	st   *sqlite.Store
	win  *window.Aggregator
	recs []*record.Record
}

func newSeriesFixture(t *testing.T) *seriesFixture {
	t.Helper()
	return newSeriesFixtureWith(t, window.Config{})
}

func newSeriesFixtureWith(t *testing.T, cfg window.Config) *seriesFixture {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "s.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	recs := make([]*record.Record, 300)
	for i := range recs {
		r := storetest.Record(i)
		r.Arrival = now.Add(-3*time.Hour + time.Duration(i)*35*time.Second)
		r.Cost = record.Cost{Nanos: int64(1000 + 37*i), Currency: "USD"}
		if i%5 == 0 {
			r.Cost.Currency = "CNY"
		}
		r.CacheHit = i%7 == 0
		r.Finish()
		recs[i] = r
	}
	if err := st.Insert(ctx, store.Batch{Records: recs}); err != nil {
		t.Fatal(err)
	}
	win := window.New(cfg, st, nil, nil)
	for _, r := range recs {
		win.Add(r)
	}
	// As Run would: minutes are stored as they close; memory keeps 2 h.
	win.Flush(ctx, now.Add(-time.Hour))
	win.Flush(ctx, now)
	return &seriesFixture{st: st, win: win, recs: recs}
}

func (f *seriesFixture) server(t *testing.T, o Options) *httptest.Server {
	o.Store = f.st
	o.Log = slog.New(slog.DiscardHandler)
	o.Now = func() time.Time { return now }
	srv := httptest.NewServer(NewAPI(o))
	t.Cleanup(srv.Close)
	return srv
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	code, b := get(t, url, "")
	if code != 200 {
		t.Fatalf("GET %s: %d %s", url, code, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, b)
	}
}

type seriesResp struct {
	Step   string `json:"step"`
	Series []struct {
		Key    map[string]string `json:"key"`
		Points []struct {
			T             time.Time        `json:"t"`
			Requests      int64            `json:"requests"`
			Errors        int64            `json:"errors"`
			Input         int64            `json:"input_tokens"`
			Output        int64            `json:"output_tokens"`
			CacheHits     int64            `json:"cache_hits"`
			CostNanos     map[string]int64 `json:"cost_nanos"`
			QPS           float64          `json:"qps"`
			ErrorRate     *float64         `json:"error_rate"`
			CacheHitShare *float64         `json:"response_cache_share"`
			E2EMean       *float64         `json:"e2e_mean_s"`
			Prefill       *float64         `json:"seg_prefill_mean_s"`
		} `json:"points"`
	} `json:"series"`
}

// TestSeriesEqualsLedgerSums: every point of every step and grouping is
// the sum of the ledger rows that arrived in it.
func TestSeriesEqualsLedgerSums(t *testing.T) {
	f := newSeriesFixture(t)
	srv := f.server(t, Options{})
	from, to := now.Add(-3*time.Hour), now
	for _, tc := range []struct {
		query string
		step  time.Duration
		by    func(*record.Record) string
		keep  func(*record.Record) bool
	}{
		{"step=1m", time.Minute, nil, nil},
		{"step=5m&by=model", 5 * time.Minute, func(r *record.Record) string { return r.Model }, nil},
		{"step=1h&by=template", time.Hour, func(r *record.Record) string { return r.TemplateID }, nil},
		{"step=5m&by=biz_line&model=model-1", 5 * time.Minute, func(r *record.Record) string { return r.BizLine }, func(r *record.Record) bool { return r.Model == "model-1" }},
		{"step=1d&by=upstream", 24 * time.Hour, func(r *record.Record) string { return r.Upstream }, nil},
	} {
		url := srv.URL + "/api/v1/series?from=" + from.Format(time.RFC3339) + "&to=" + to.Format(time.RFC3339) + "&" + tc.query
		var got seriesResp
		getJSON(t, url, &got)
		type want struct {
			store.Totals
			cost map[string]int64
		}
		wants := map[string]map[time.Time]*want{}
		for _, r := range f.recs {
			if tc.keep != nil && !tc.keep(r) {
				continue
			}
			k := ""
			if tc.by != nil {
				k = tc.by(r)
			}
			if wants[k] == nil {
				wants[k] = map[time.Time]*want{}
			}
			at := r.Arrival.UTC().Truncate(tc.step)
			w := wants[k][at]
			if w == nil {
				w = &want{cost: map[string]int64{}}
				wants[k][at] = w
			}
			w.Add(store.TotalsOf(r))
			w.cost[r.Cost.Currency] += r.Cost.Nanos
		}
		if len(got.Series) != len(wants) {
			t.Errorf("%s: %d series, want %d", tc.query, len(got.Series), len(wants))
		}
		for _, s := range got.Series {
			k := ""
			for _, v := range s.Key {
				k = v
			}
			var n int64
			for _, p := range s.Points {
				w := wants[k][p.T]
				if w == nil {
					if p.Requests != 0 || len(p.CostNanos) != 0 {
						t.Errorf("%s %q at %s: %d requests, want none", tc.query, k, p.T, p.Requests)
					}
					continue
				}
				n += p.Requests
				if p.Requests != w.Requests || p.Errors != w.Errors || p.Input != w.Input || p.Output != w.Output || p.CacheHits != w.CacheHits {
					t.Errorf("%s %q at %s: got %+v, want %+v", tc.query, k, p.T, p, w.Totals)
				}
				for c, nanos := range w.cost {
					if p.CostNanos[c] != nanos {
						t.Errorf("%s %q at %s: cost %v, want %v", tc.query, k, p.T, p.CostNanos, w.cost)
					}
				}
				// A step in progress (the day) divides by its elapsed part.
				step := min(tc.step, now.Sub(p.T)).Seconds()
				if p.QPS != float64(w.Requests)/step || *p.ErrorRate != float64(w.Errors)/float64(w.Requests) ||
					*p.CacheHitShare != float64(w.CacheHits)/float64(w.Requests) ||
					*p.E2EMean != float64(w.E2ESumNS)/1e9/float64(w.Requests) || *p.Prefill != float64(w.SegmentNS[3])/1e9/float64(w.Requests) {
					t.Errorf("%s %q at %s: derived figures %+v do not follow the sums %+v", tc.query, k, p.T, p, w.Totals)
				}
			}
			var wn int64
			for _, w := range wants[k] {
				wn += w.Requests
			}
			if n != wn {
				t.Errorf("%s %q: %d requests in the points, want %d", tc.query, k, n, wn)
			}
		}
	}
	// Dense points: a step without requests is there, with zeros and null rates.
	var got seriesResp
	getJSON(t, srv.URL+"/api/v1/series?from="+now.Add(-5*time.Hour).Format(time.RFC3339)+"&to="+now.Format(time.RFC3339)+"&step=1h", &got)
	if len(got.Series) != 1 || len(got.Series[0].Points) != 5 || got.Series[0].Points[0].Requests != 0 || got.Series[0].Points[0].ErrorRate != nil {
		t.Errorf("5 hourly points, the first empty: %+v", got)
	}
}

// TestPercentilesEqualWindowQuantiles: per step, P50/P95/P99 are the
// quantiles of the requests that finished in it, whether their minutes
// come from the store (older than an hour) or from memory.
func TestPercentilesEqualWindowQuantiles(t *testing.T) {
	f := newSeriesFixture(t)
	srv := f.server(t, Options{Windows: f.win})
	for _, tc := range []struct {
		step  time.Duration
		query string
		by    string
		qty   window.Quantity
	}{
		{time.Hour, "step=1h&quantity=e2e", "", window.E2E},
		{5 * time.Minute, "step=5m&quantity=ttft&by=model", "model", window.TTFT},
		{time.Minute, "step=1m&quantity=prefill&biz_line=biz-1", "", window.Prefill},
	} {
		url := srv.URL + "/api/v1/percentiles?from=" + now.Add(-3*time.Hour).Format(time.RFC3339) + "&to=" + now.Format(time.RFC3339) + "&" + tc.query
		var got struct {
			Series []struct {
				Key    map[string]string `json:"key"`
				Points []struct {
					T             time.Time `json:"t"`
					Count         int64     `json:"count"`
					P50, P95, P99 *float64
				} `json:"points"`
			} `json:"series"`
		}
		getJSON(t, url, &got)
		// Again: stored hours now come from the cache, and agree.
		_, b1 := get(t, url, "")
		_, b2 := get(t, url, "")
		if string(b1) != string(b2) {
			t.Errorf("%s: a second call differs:\n%s\n%s", tc.query, b1, b2)
		}
		want := map[string]map[time.Time]*window.Stats{}
		for _, r := range f.recs {
			if strings.Contains(tc.query, "biz_line=") && r.BizLine != "biz-1" {
				continue
			}
			k := ""
			if tc.by != "" {
				k = r.Model
			}
			at := window.Minute(r.Arrival.Add(r.Derived.E2E)).Truncate(tc.step)
			if !at.Before(now) {
				continue
			}
			if want[k] == nil {
				want[k] = map[time.Time]*window.Stats{}
			}
			if want[k][at] == nil {
				want[k][at] = &window.Stats{}
			}
			want[k][at].Add(r)
		}
		if len(got.Series) != len(want) {
			t.Fatalf("%s: %d series, want %d", tc.query, len(got.Series), len(want))
		}
		points := 0
		for _, s := range got.Series {
			k := s.Key[tc.by]
			for _, p := range s.Points {
				w := want[k][p.T]
				if w == nil {
					if p.Count != 0 || p.P50 != nil {
						t.Errorf("%s %q at %s: %+v, want no values", tc.query, k, p.T, p)
					}
					continue
				}
				for _, c := range []struct {
					got *float64
					q   float64
				}{{p.P50, 0.5}, {p.P95, 0.95}, {p.P99, 0.99}} {
					v, n := w.Quantile(tc.qty, c.q)
					if n == 0 {
						if c.got != nil {
							t.Errorf("%s %q at %s: P%v = %v, want null", tc.query, k, p.T, c.q*100, *c.got)
						}
						continue
					}
					points++
					if c.got == nil || *c.got != v || p.Count != n {
						t.Errorf("%s %q at %s: P%v = %v over %d, want %v over %d", tc.query, k, p.T, c.q*100, c.got, p.Count, v, n)
					}
				}
			}
		}
		if points == 0 {
			t.Errorf("%s: no quantiles compared", tc.query)
		}
	}
	// Without windows: 404.
	srv2 := f.server(t, Options{})
	if code, b := get(t, srv2.URL+"/api/v1/percentiles", ""); code != 404 || !strings.Contains(string(b), "percentiles not available") {
		t.Errorf("no windows: %d %s, want 404", code, b)
	}
}

// TestOverview: totals and breakdowns are the ledger's sums, latency the
// windows' quantiles over the range, alerts counted by state.
func TestOverview(t *testing.T) {
	f := newSeriesFixture(t)
	srv := f.server(t, Options{Windows: f.win, Alerts: func() []alert.Alert {
		return []alert.Alert{{Rule: "a", State: alert.Firing}, {Rule: "b", State: alert.Pending}, {Rule: "c", State: alert.Firing}}
	}})
	var got struct {
		Totals  overviewRow `json:"totals"`
		QPS     float64     `json:"qps"`
		ByModel struct {
			Top    []overviewRow
			Groups int
		} `json:"by_model"`
		ByBiz struct {
			Top    []overviewRow
			Groups int
		} `json:"by_biz_line"`
		Latency map[string]struct {
			Count         int64
			P50, P95, P99 *float64
		} `json:"latency_s"`
		Alerts map[string]int `json:"alerts"`
	}
	getJSON(t, srv.URL+"/api/v1/overview?from="+now.Add(-3*time.Hour).Format(time.RFC3339)+"&to="+now.Format(time.RFC3339), &got)
	var tot store.Totals
	cost := map[string]int64{}
	models := map[string]int64{}
	var all window.Stats
	for _, r := range f.recs {
		tot.Add(store.TotalsOf(r))
		cost[r.Cost.Currency] += r.Cost.Nanos
		models[r.Model]++
		if r.Arrival.Add(r.Derived.E2E).Before(now) {
			all.Add(r)
		}
	}
	if got.Totals.Requests != tot.Requests || got.Totals.Errors != tot.Errors || got.Totals.InputTokens != tot.Input ||
		got.Totals.OutputTokens != tot.Output || got.Totals.CachedTokens != tot.Cached || got.Totals.CostNanos["USD"] != cost["USD"] || got.Totals.CostNanos["CNY"] != cost["CNY"] {
		t.Errorf("totals %+v, want %+v and cost %v", got.Totals, tot, cost)
	}
	if got.QPS != float64(tot.Requests)/(3*3600) || *got.Totals.ErrorRate != float64(tot.Errors)/float64(tot.Requests) {
		t.Errorf("qps %v, error rate %v", got.QPS, *got.Totals.ErrorRate)
	}
	if got.ByModel.Groups != 2 || len(got.ByModel.Top) != 2 || got.ByModel.Top[0].Requests != models[got.ByModel.Top[0].Key] || got.ByBiz.Groups != 3 {
		t.Errorf("breakdowns %+v %+v, want %v", got.ByModel, got.ByBiz, models)
	}
	for name, q := range map[string]window.Quantity{"e2e": window.E2E, "ttft": window.TTFT} {
		v, n := all.Quantile(q, 0.95)
		if l := got.Latency[name]; l.P95 == nil || *l.P95 != v || l.Count != n {
			t.Errorf("%s P95 = %+v, want %v over %d", name, l, v, n)
		}
	}
	if got.Alerts["active"] != 3 || got.Alerts["firing"] != 2 || got.Alerts["pending"] != 1 {
		t.Errorf("alerts %v", got.Alerts)
	}
}

// TestSeriesBadParameters: a bad parameter is a 400 whose error names it.
func TestSeriesBadParameters(t *testing.T) {
	f := newSeriesFixture(t)
	srv := f.server(t, Options{Windows: f.win})
	for _, tc := range []struct{ url, param string }{
		{"/api/v1/series?step=2m", "step"},
		{"/api/v1/series?step=1m&from=2025-03-01&to=2025-03-16", "step"},
		{"/api/v1/series?step=1d&from=2010-01-01", "step"},
		{"/api/v1/series?from=yesterday", "from"},
		{"/api/v1/series?to=soon", "to"},
		{"/api/v1/series?from=2025-03-17&to=2025-03-16", "from"},
		{"/api/v1/series?by=user", "by"},
		{"/api/v1/series?measures=requests,bogus", "measures"},
		{"/api/v1/series?step=1m&by=template", "by"},
		{"/api/v1/series?step=5m&template=tpl-1", "template"},
		{"/api/v1/percentiles?quantity=latency", "quantity"},
		{"/api/v1/percentiles?by=key", "by"},
		{"/api/v1/percentiles?step=1w", "step"},
		{"/api/v1/percentiles?from=2025-01-01&step=1d", "from"},
		{"/api/v1/overview?from=x", "from"},
		{"/api/v1/overview?to=2025-13-01", "to"},
	} {
		code, b := get(t, srv.URL+tc.url, "")
		var e struct {
			Error struct{ Code, Parameter, Message string }
		}
		if code != 400 || json.Unmarshal(b, &e) != nil || e.Error.Parameter != tc.param || !strings.HasPrefix(e.Error.Message, tc.param+":") {
			t.Errorf("%s: %d %s, want 400 naming %q", tc.url, code, b, tc.param)
		}
	}
}

// TestSeriesRoles: a read token reads the new endpoints; no token is
// refused; without tokens only loopback clients are answered.
func TestSeriesRoles(t *testing.T) {
	f := newSeriesFixture(t)
	srv := f.server(t, Options{Windows: f.win, Tokens: []config.APIToken{{Name: "dash", TokenSHA256: config.HashKey("tok-read"), Role: "read"}}})
	for _, p := range []string{"/api/v1/series", "/api/v1/percentiles", "/api/v1/overview"} {
		if code, b := get(t, srv.URL+p, "tok-read"); code != 200 {
			t.Errorf("%s with a read token: %d %s", p, code, b)
		}
		if code, _ := get(t, srv.URL+p, ""); code != 401 {
			t.Errorf("%s without a token: %d, want 401", p, code)
		}
		a := NewAPI(Options{Store: f.st, Windows: f.win, Log: slog.New(slog.DiscardHandler)})
		req := httptest.NewRequest(http.MethodGet, p, nil)
		req.RemoteAddr = "192.0.2.7:5555"
		rec := httptest.NewRecorder()
		a.ServeHTTP(rec, req)
		if rec.Code != http.StatusForbidden {
			t.Errorf("%s from a remote client without tokens: %d, want 403", p, rec.Code)
		}
	}
}

// TestHourRowsReadLikeMinutes: percentiles and the overview are the same
// whether the stored hours were persisted merged (the windows saw them
// whole) or are read from their minutes only.
func TestHourRowsReadLikeMinutes(t *testing.T) {
	ctx := context.Background()
	minutes := newSeriesFixture(t)
	hours := newSeriesFixtureWith(t, window.Config{From: now.Add(-4 * time.Hour)})
	if hs, err := minutes.st.WindowHours(ctx, now.Add(-4*time.Hour), now); err != nil || len(hs) != 0 {
		t.Fatalf("minutes only: %d hour rows, %v", len(hs), err)
	}
	hs, err := hours.st.WindowHours(ctx, now.Add(-4*time.Hour), now)
	if err != nil || len(hs) == 0 {
		t.Fatalf("with From: %d hour rows, %v; want some", len(hs), err)
	}
	span := "from=" + now.Add(-3*time.Hour).Format(time.RFC3339) + "&to=" + now.Format(time.RFC3339)
	for _, q := range []string{
		"/api/v1/percentiles?" + span + "&step=1h&by=model",
		"/api/v1/percentiles?" + span + "&step=1h&quantity=ttft",
		"/api/v1/percentiles?" + span + "&step=5m",
		"/api/v1/overview?" + span,
	} {
		var a, b any
		getJSON(t, minutes.server(t, Options{Windows: minutes.win}).URL+q, &a)
		getJSON(t, hours.server(t, Options{Windows: hours.win}).URL+q, &b)
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if string(ja) != string(jb) {
			t.Errorf("%s:\nfrom minutes %s\nfrom hours   %s", q, ja, jb)
		}
	}
}
