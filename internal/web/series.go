package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/alert"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/report"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/window"
)

// Windows are the alerting windows held in memory: *window.Aggregator.
type Windows interface {
	Window(from, to time.Time, sel window.Selector, by []string, q window.Quantity) map[string]*window.Group
}

// windowMemory is how far back the in-memory windows answer; older
// minutes are read from the store (window_minute). The aggregator keeps
// 2 h by default (and loads them back after a restart), and a minute is
// stored a minute or two after it closes, so the split counts every
// minute once.
const windowMemory = time.Hour

// maxPoints bounds the steps of a series; maxWindowRange the period whose
// stored window minutes (sketches) one request may read.
const (
	maxPoints      = 2000
	maxWindowRange = 31 * 24 * time.Hour
)

// steps are the series' steps; a day is a day in the report time zone.
var steps = map[string]time.Duration{"1m": time.Minute, "5m": 5 * time.Minute, "1h": time.Hour, "1d": 0}

// stepNames in the order help texts list them.
var stepNames = []string{"1m", "5m", "1h", "1d"}

// seriesDims are what series group and filter by (the window labels).
var seriesDims = []string{"model", "biz_line", "upstream", "template"}

// defaultMeasures are what a series returns when none are named: what
// the dashboard's charts draw.
var defaultMeasures = func() []string {
	ms := []string{"requests", "errors", "cache_hits", "input_tokens", "cached_input_tokens", "output_tokens", "cost_nanos",
		"e2e_sum_ns", "ttft_sum_ns", "ttft_count"}
	for _, n := range record.SegmentNames {
		ms = append(ms, "seg_"+n+"_ns")
	}
	return ms
}()

// paramError is a bad query parameter: a 400 naming it.
type paramError struct{ param, msg string }

func (e *paramError) Error() string { return e.param + ": " + e.msg }

func badParam(param, format string, args ...any) error {
	return &paramError{param, fmt.Sprintf(format, args...)}
}

// writeParamErr answers 400 for a bad parameter, else as storeErr.
func (a *API) writeParamErr(w http.ResponseWriter, err error, what string) {
	var pe *paramError
	if errors.As(err, &pe) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": "bad_parameter", "parameter": pe.param, "message": pe.Error()}})
		return
	}
	a.storeErr(w, err, what, "could not read "+what)
}

// timeline is the steps of [from, to): from and to aligned to the step
// (UTC minutes and hours; local midnights for days).
type timeline struct {
	from, to time.Time
	step     string
	d        time.Duration // 0: days
	starts   []time.Time
	days     map[string]int // day steps: YYYY-MM-DD → index
}

func (a *API) parseTimeline(q url.Values, days int) (*timeline, error) {
	p := &queryParser{q: q, loc: a.o.Loc, now: a.o.Now()}
	from, to := p.period(days)
	if p.err != nil {
		return nil, p.err
	}
	tl := &timeline{step: q.Get("step")}
	if tl.step == "" {
		tl.step = "1h"
	}
	d, ok := steps[tl.step]
	if !ok {
		return nil, badParam("step", "%q is not one of %s", tl.step, strings.Join(stepNames, ", "))
	}
	tl.d = d
	if d > 0 {
		tl.from = from.UTC().Truncate(d)
		tl.to = to.UTC().Truncate(d)
		if tl.to.Before(to) {
			tl.to = tl.to.Add(d)
		}
		if n := tl.to.Sub(tl.from) / d; n > maxPoints {
			return nil, badParam("step", "%s steps from %s to %s are %d points, more than %d: widen the step or narrow the period",
				tl.step, tl.from.Format(time.RFC3339), tl.to.Format(time.RFC3339), n, maxPoints)
		}
		for t := tl.from; t.Before(tl.to); t = t.Add(d) {
			tl.starts = append(tl.starts, t)
		}
		return tl, nil
	}
	loc := a.o.Loc
	day := func(t time.Time, n int) time.Time {
		y, m, dd := t.In(loc).Date()
		return time.Date(y, m, dd+n, 0, 0, 0, 0, loc)
	}
	tl.from, tl.to = day(from, 0), day(to, 0)
	if tl.to.Before(to) {
		tl.to = day(to, 1)
	}
	tl.days = map[string]int{}
	for t := tl.from; t.Before(tl.to); t = day(t, 1) {
		if len(tl.starts) == maxPoints {
			return nil, badParam("step", "1d steps from %s to %s are more than %d points: narrow the period", tl.from.Format(time.DateOnly), tl.to.Format(time.DateOnly), maxPoints)
		}
		tl.days[t.Format(time.DateOnly)] = len(tl.starts)
		tl.starts = append(tl.starts, t)
	}
	return tl, nil
}

// index is the step t falls in, or -1.
func (tl *timeline) index(t time.Time) int {
	if t.Before(tl.from) || !t.Before(tl.to) {
		return -1
	}
	if tl.d > 0 {
		return int(t.Sub(tl.from) / tl.d)
	}
	i, ok := tl.days[t.In(tl.starts[0].Location()).Format(time.DateOnly)]
	if !ok {
		return -1
	}
	return i
}

// seconds is the length of step i (a local day may have 23 or 25 hours).
func (tl *timeline) seconds(i int) float64 {
	end := tl.to
	if i+1 < len(tl.starts) {
		end = tl.starts[i+1]
	}
	return end.Sub(tl.starts[i]).Seconds()
}

// parseBy reads by= (one dimension or none) and the filters.
func parseBy(q url.Values) (by string, where map[string]string, err error) {
	by = q.Get("by")
	if by != "" && !slices.Contains(seriesDims, by) {
		return "", nil, badParam("by", "%q is not one of %s", by, strings.Join(seriesDims, ", "))
	}
	where = map[string]string{}
	for _, d := range seriesDims {
		if v := q.Get(d); v != "" {
			where[d] = v
		}
	}
	return by, where, nil
}

// storeDim maps a series dimension to the store's.
var storeDim = map[string]store.Dim{"model": store.DimModel, "biz_line": store.DimBizLine, "upstream": store.DimUpstream, "template": store.DimTemplate}

// ratio is a/b, or nil (JSON null) when b is 0.
func ratio(a, b float64) *float64 {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return nil
	}
	v := a / b
	return &v
}

// series: GET /api/v1/series?from=&to=&step=&by=&model=&biz_line=&upstream=&template=&measures=
func (a *API) series(w http.ResponseWriter, r *http.Request) {
	res, err := a.buildSeries(r.Context(), r.URL.Query())
	if err != nil {
		a.writeParamErr(w, err, "the rollups")
		return
	}
	writeJSON(w, res)
}

type seriesOut struct {
	Key    map[string]string `json:"key"`
	Points []map[string]any  `json:"points"`
}

func (a *API) buildSeries(ctx context.Context, q url.Values) (map[string]any, error) {
	tl, err := a.parseTimeline(q, 1)
	if err != nil {
		return nil, err
	}
	by, where, err := parseBy(q)
	if err != nil {
		return nil, err
	}
	measures := defaultMeasures
	if v := q.Get("measures"); v != "" {
		measures = nil
		for _, m := range strings.Split(v, ",") {
			m = strings.TrimSpace(m)
			if !slices.Contains(store.MeasureNames(), m) {
				return nil, badParam("measures", "unknown measure %q; one of %s", m, strings.Join(store.MeasureNames(), ", "))
			}
			if !slices.Contains(measures, m) {
				measures = append(measures, m)
			}
		}
	}
	read := measures
	if !slices.Contains(read, "requests") {
		read = append(slices.Clone(read), "requests") // every rate divides by it
	}
	rq := store.ReportQuery{From: tl.from, To: tl.to, Where: map[store.Dim]string{}, Measures: read, Zone: a.o.Loc}
	switch tl.step {
	case "1m", "5m":
		rq.GroupBy = []store.Dim{store.DimMinute}
		if by == "template" {
			return nil, badParam("by", "minutes are kept by model, biz_line and upstream only: use step=1h or 1d to group by template")
		}
		if where["template"] != "" {
			return nil, badParam("template", "minutes are kept by model, biz_line and upstream only: use step=1h or 1d to filter by template")
		}
	case "1h":
		rq.GroupBy = []store.Dim{store.DimHour}
	default:
		rq.GroupBy = []store.Dim{store.DimDay}
	}
	if by != "" {
		rq.GroupBy = append(rq.GroupBy, storeDim[by])
	}
	for d, v := range where {
		rq.Where[storeDim[d]] = v
	}
	rows, err := a.o.Store.Report(ctx, rq)
	if err != nil {
		return nil, err
	}
	type group struct {
		totals []store.Totals
		cost   []map[string]int64
	}
	groups := map[string]*group{}
	for _, row := range rows {
		var t time.Time
		if tl.d > 0 {
			t, err = time.Parse(time.RFC3339, row.Keys[0])
		} else {
			t, err = time.ParseInLocation(time.DateOnly, row.Keys[0], a.o.Loc)
		}
		if err != nil {
			return nil, fmt.Errorf("series: bucket %q: %w", row.Keys[0], err)
		}
		i := tl.index(t)
		if i < 0 {
			continue
		}
		k := ""
		if by != "" {
			k = row.Keys[1]
		}
		g := groups[k]
		if g == nil {
			g = &group{totals: make([]store.Totals, len(tl.starts)), cost: make([]map[string]int64, len(tl.starts))}
			groups[k] = g
		}
		g.totals[i].Add(row.Totals)
		if row.CostNanos != 0 || row.Currency != "" {
			if g.cost[i] == nil {
				g.cost[i] = map[string]int64{}
			}
			g.cost[i][row.Currency] += row.CostNanos
		}
	}
	if len(groups) == 0 && by == "" {
		groups[""] = &group{totals: make([]store.Totals, len(tl.starts)), cost: make([]map[string]int64, len(tl.starts))}
	}
	field := map[string]store.Measure{}
	for _, m := range store.Measures {
		field[m.Name] = m
	}
	out := []seriesOut{}
	now := a.o.Now()
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range groups {
			if !yield(k) {
				return
			}
		}
	}) {
		g := groups[k]
		s := seriesOut{Key: map[string]string{}, Points: make([]map[string]any, len(tl.starts))}
		if by != "" {
			s.Key[by] = k
		}
		for i, start := range tl.starts {
			t := &g.totals[i]
			p := map[string]any{"t": start.Format(time.RFC3339)}
			req := float64(t.Requests)
			for _, m := range measures {
				if m == "cost_nanos" {
					continue
				}
				p[m] = *field[m].Field(t)
			}
			// The step in progress is partial: its rate divides by the
			// part that has passed, and readers mark it rather than
			// drawing its low count as a dip.
			secs := tl.seconds(i)
			if end := start.Add(time.Duration(secs * float64(time.Second))); end.After(now) {
				p["partial"] = true
				secs = report.Elapsed(start, end, now)
			}
			p["qps"] = req / secs
			if slices.Contains(measures, "cost_nanos") {
				cn, c := map[string]int64{}, map[string]float64{}
				for cur, n := range g.cost[i] {
					cn[cur] = n
					c[cur] = float64(n) / 1e9
				}
				p["cost_nanos"], p["cost"] = cn, c
			}
			if slices.Contains(measures, "errors") {
				p["error_rate"] = ratio(float64(t.Errors), req)
			}
			if slices.Contains(measures, "cache_hits") {
				p["response_cache_share"] = ratio(float64(t.CacheHits), req)
			}
			if slices.Contains(measures, "input_tokens") && slices.Contains(measures, "cached_input_tokens") {
				p["prefix_cache_share"] = ratio(float64(t.Cached), float64(t.Input))
			}
			if slices.Contains(measures, "e2e_sum_ns") {
				p["e2e_mean_s"] = ratio(float64(t.E2ESumNS)/1e9, req)
			}
			if slices.Contains(measures, "ttft_sum_ns") && slices.Contains(measures, "ttft_count") {
				p["ttft_mean_s"] = ratio(float64(t.TTFTSumNS)/1e9, float64(t.TTFTCount))
			}
			for j, n := range record.SegmentNames {
				if slices.Contains(measures, "seg_"+n+"_ns") {
					p["seg_"+n+"_mean_s"] = ratio(float64(t.SegmentNS[j])/1e9, req)
				}
			}
			s.Points[i] = p
		}
		out = append(out, s)
	}
	return map[string]any{"from": tl.from.Format(time.RFC3339), "to": tl.to.Format(time.RFC3339), "step": tl.step,
		"by": by, "measures": measures, "series": out}, nil
}

// windowStats merges the alerting windows of tl's steps, grouped by by
// and filtered by where, with the sketches of qs (window.Query).
func (a *API) windowStats(ctx context.Context, tl *timeline, by []string, where map[string]string, qs ...window.Quantity) (map[window.Key]*window.Series, error) {
	return a.windows.Read(ctx, window.Query{From: tl.from, To: tl.to, Steps: tl.starts, Sel: window.Selector(where), By: by, Quantities: qs})
}

// newWindowReader answers the API's window queries: the last windowMemory
// from the aggregator, older minutes, hours and compacted days from the
// store, closed periods merged once and kept (up to maxCached).
func newWindowReader(o Options) *window.Reader {
	var st window.HourReader
	var days window.DayReader
	if o.Store != nil {
		st, days = o.Store, o.Store
	}
	return window.NewReader(st, window.ReaderOptions{Days: days, Loc: o.Loc, Memory: o.Windows, Recent: windowMemory,
		Now: o.Now, Cache: maxCached, Hot: hotQuantities, Log: o.Log})
}

// hotQuantities are read with any other: the latencies the Overview and
// Diagnostics pages show side by side.
var hotQuantities = []window.Quantity{window.TTFT, window.TPOT, window.E2E}

// maxCached bounds the merged periods kept (a month of hours for a few
// groupings); the cache is emptied when full.
const maxCached = 4000

// quantiles are P50, P95 and P99 of q in s (nil when no values), and how
// many values they are over.
func quantiles(s *window.Stats, q window.Quantity) (p50, p95, p99 *float64, n int64) {
	if s == nil {
		return nil, nil, nil, 0
	}
	v := func(p float64) *float64 {
		x, c := s.Quantile(q, p)
		n = c
		if c == 0 || math.IsNaN(x) {
			return nil
		}
		return &x
	}
	return v(0.5), v(0.95), v(0.99), n
}

// percentiles: GET /api/v1/percentiles?from=&to=&step=&by=&quantity=&model=&biz_line=&upstream=&template=
func (a *API) percentiles(w http.ResponseWriter, r *http.Request) {
	if a.o.Windows == nil {
		writeErr(w, http.StatusNotFound, "not_found", "percentiles not available: this gateway keeps no alerting windows")
		return
	}
	q := r.URL.Query()
	res, err := func() (map[string]any, error) {
		tl, err := a.parseTimeline(q, 1)
		if err != nil {
			return nil, err
		}
		if tl.to.Sub(tl.from) > maxWindowRange {
			return nil, badParam("from", "percentiles read at most %d days of window minutes", int(maxWindowRange/(24*time.Hour)))
		}
		by, where, err := parseBy(q)
		if err != nil {
			return nil, err
		}
		name := q.Get("quantity")
		if name == "" {
			name = "e2e"
		}
		qty, ok := window.ParseQuantity(name)
		if !ok {
			return nil, badParam("quantity", "%q is not one of %s", name, strings.Join(window.QuantityNames[:], ", "))
		}
		var byl []string
		if by != "" {
			byl = []string{by}
		}
		groups, err := a.windowStats(r.Context(), tl, byl, where, qty)
		if err != nil {
			return nil, err
		}
		type point struct {
			T     string   `json:"t"`
			Count int64    `json:"count"`
			P50   *float64 `json:"p50"`
			P95   *float64 `json:"p95"`
			P99   *float64 `json:"p99"`
		}
		type series struct {
			Key    map[string]string `json:"key"`
			Points []point           `json:"points"`
		}
		if len(groups) == 0 && by == "" {
			groups[window.Key{}] = &window.Series{Steps: make([]*window.Stats, len(tl.starts))}
		}
		out := []series{}
		keys := slices.SortedFunc(maps.Keys(groups), func(x, y window.Key) int {
			return strings.Compare(window.GroupKey(x, byl), window.GroupKey(y, byl))
		})
		for _, k := range keys {
			g := groups[k]
			s := series{Key: map[string]string{}, Points: make([]point, len(tl.starts))}
			if by != "" {
				s.Key[by] = g.Key.Label(by)
			}
			for i, start := range tl.starts {
				p50, p95, p99, n := quantiles(g.Steps[i], qty)
				s.Points[i] = point{start.Format(time.RFC3339), n, p50, p95, p99}
			}
			out = append(out, s)
		}
		unit := "s"
		if qty == window.InputTokens || qty == window.OutputTokens {
			unit = "tokens"
		}
		return map[string]any{"from": tl.from.Format(time.RFC3339), "to": tl.to.Format(time.RFC3339), "step": tl.step,
			"by": by, "quantity": name, "unit": unit, "series": out}, nil
	}()
	if err != nil {
		a.writeParamErr(w, err, "the alerting windows")
		return
	}
	writeJSON(w, res)
}

// overviewMeasures are what the overview reads from the rollups.
var overviewMeasures = []string{"requests", "errors", "cache_hits", "input_tokens", "cached_input_tokens", "output_tokens", "cost_nanos", "e2e_sum_ns", "ttft_sum_ns", "ttft_count"}

// overviewTop is how many biz_lines and models the overview lists.
const overviewTop = 20

type overviewRow struct {
	Key       string   `json:"key,omitempty"`
	Requests  int64    `json:"requests"`
	Errors    int64    `json:"errors"`
	ErrorRate *float64 `json:"error_rate"`
	// PrefixCacheShare is cached input tokens ÷ input tokens: the
	// engine's prefix (KV) cache as its usage reports it.
	PrefixCacheShare *float64 `json:"prefix_cache_share"`
	// ResponseCacheShare is the requests tollgate's own response cache
	// answered ÷ requests.
	ResponseCacheShare *float64           `json:"response_cache_share"`
	InputTokens        int64              `json:"input_tokens"`
	CachedTokens       int64              `json:"cached_input_tokens"`
	OutputTokens       int64              `json:"output_tokens"`
	CostNanos          map[string]int64   `json:"cost_nanos"`
	Cost               map[string]float64 `json:"cost"`
	E2EMean            *float64           `json:"e2e_mean_s"`
	TTFTMean           *float64           `json:"ttft_mean_s"`
}

// overviewAcc holds overviewRow's running sums that are not shown.
type overviewAcc struct {
	cacheHits, e2e, ttft, ttftN int64
}

type overviewRowAcc struct {
	overviewRow
	overviewAcc
}

// overview: GET /api/v1/overview?from=&to= — what a manager's overview
// shows, in one call.
func (a *API) overview(w http.ResponseWriter, r *http.Request) {
	res, err := a.buildOverview(r.Context(), r.URL.Query())
	if err != nil {
		a.writeParamErr(w, err, "the rollups")
		return
	}
	writeJSON(w, res)
}

func (a *API) buildOverview(ctx context.Context, q url.Values) (map[string]any, error) {
	from, to, err := report.ParsePeriod(q.Get("from"), q.Get("to"), a.o.Loc, a.o.Now(), 1)
	if err != nil {
		param := "from"
		if strings.HasPrefix(err.Error(), "to:") {
			param = "to"
		}
		return nil, &paramError{param, strings.TrimPrefix(strings.TrimPrefix(err.Error(), "to: "), "from: ")}
	}
	// Exactly the period asked: whole hours from the hour rollups, the
	// ragged ends from the minute rollups (report.Exact); a rate divides
	// by the part of it that has passed.
	from, to = report.Span(from, to)
	elapsed := report.Elapsed(from, to, a.o.Now())
	newRow := func(k string) *overviewRowAcc {
		return &overviewRowAcc{overviewRow: overviewRow{Key: k, CostNanos: map[string]int64{}, Cost: map[string]float64{}}}
	}
	total := newRow("")
	rows, err := report.Exact(ctx, a.o.Store, a.o.Store, store.ReportQuery{From: from, To: to, Measures: overviewMeasures})
	if err != nil {
		return nil, err
	}
	for _, row := range rows {
		total.add(row)
	}
	breakdown := func(d store.Dim) (map[string]any, error) {
		rows, err := report.Exact(ctx, a.o.Store, a.o.Store, store.ReportQuery{From: from, To: to, GroupBy: []store.Dim{d}, Measures: overviewMeasures})
		if err != nil {
			return nil, err
		}
		byKey := map[string]*overviewRowAcc{}
		var list []*overviewRowAcc
		for _, row := range rows {
			o := byKey[row.Keys[0]]
			if o == nil {
				o = newRow(row.Keys[0])
				byKey[row.Keys[0]] = o
				list = append(list, o)
			}
			o.add(row)
		}
		slices.SortStableFunc(list, func(x, y *overviewRowAcc) int {
			if x.Requests != y.Requests {
				if x.Requests > y.Requests {
					return -1
				}
				return 1
			}
			return strings.Compare(x.Key, y.Key)
		})
		out := make([]overviewRow, 0, min(len(list), overviewTop))
		for _, o := range list[:min(len(list), overviewTop)] {
			out = append(out, o.overviewRow)
		}
		return map[string]any{"top": out, "groups": len(list)}, nil
	}
	byBiz, err := breakdown(store.DimBizLine)
	if err != nil {
		return nil, err
	}
	byModel, err := breakdown(store.DimModel)
	if err != nil {
		return nil, err
	}
	res := map[string]any{
		"from": from.Format(time.RFC3339), "to": to.Format(time.RFC3339),
		"totals": total.overviewRow, "qps": float64(total.Requests) / elapsed, "elapsed_s": elapsed,
		"by_biz_line": byBiz, "by_model": byModel,
	}
	type pct struct {
		Count int64    `json:"count"`
		P50   *float64 `json:"p50"`
		P95   *float64 `json:"p95"`
		P99   *float64 `json:"p99"`
	}
	if a.o.Windows != nil && to.Sub(from) <= maxWindowRange {
		tl := &timeline{from: from, to: to, step: "range", d: to.Sub(from), starts: []time.Time{from}}
		lat := map[string]pct{}
		qs := []window.Quantity{window.E2E, window.TTFT}
		groups, err := a.windowStats(ctx, tl, nil, nil, qs...)
		if err != nil {
			return nil, err
		}
		for _, qty := range qs {
			var p pct
			if g := groups[window.Key{}]; g != nil {
				p.P50, p.P95, p.P99, p.Count = quantiles(g.Steps[0], qty)
			}
			lat[qty.String()] = p
		}
		res["latency_s"] = lat
	} else {
		res["latency_s"] = nil
	}
	// The engines' own prefix-cache hit rate (vLLM's counters, scraped),
	// beside the share their usage reports: the mean of the samples in
	// the period, null when none was scraped.
	res["engine_prefix_cache_hit_rate"] = nil
	if ss, err := a.o.Store.EngineSamples(ctx, from, to, ""); err == nil {
		var sum float64
		n := 0
		for _, e := range ss {
			if !math.IsNaN(e.PrefixCacheHitRate) && !math.IsInf(e.PrefixCacheHitRate, 0) {
				sum += e.PrefixCacheHitRate
				n++
			}
		}
		if n > 0 {
			res["engine_prefix_cache_hit_rate"] = sum / float64(n)
		}
	} else if errors.Is(err, store.ErrNotConnected) {
		return nil, err
	}
	var firing, pending int
	if a.o.Alerts != nil {
		for _, al := range a.o.Alerts() {
			switch al.State {
			case alert.Firing:
				firing++
			case alert.Pending:
				pending++
			}
		}
	}
	res["alerts"] = map[string]int{"active": firing + pending, "firing": firing, "pending": pending}
	return res, nil
}

func (o *overviewRowAcc) add(row store.ReportRow) {
	o.Requests += row.Requests
	o.Errors += row.Errors
	o.InputTokens += row.Input
	o.CachedTokens += row.Cached
	o.OutputTokens += row.Output
	if row.Currency != "" || row.CostNanos != 0 {
		o.CostNanos[row.Currency] += row.CostNanos
		o.Cost[row.Currency] = float64(o.CostNanos[row.Currency]) / 1e9
	}
	o.cacheHits += row.CacheHits
	o.e2e += row.E2ESumNS
	o.ttft += row.TTFTSumNS
	o.ttftN += row.TTFTCount
	o.ErrorRate = ratio(float64(o.Errors), float64(o.Requests))
	o.ResponseCacheShare = ratio(float64(o.cacheHits), float64(o.Requests))
	o.PrefixCacheShare = ratio(float64(o.CachedTokens), float64(o.InputTokens))
	o.E2EMean = ratio(float64(o.e2e)/1e9, float64(o.Requests))
	o.TTFTMean = ratio(float64(o.ttft)/1e9, float64(o.ttftN))
}
