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
	"runtime"
	"slices"
	"strings"
	"sync"
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
	from, to, err := report.ParsePeriod(q.Get("from"), q.Get("to"), a.o.Loc, a.o.Now(), days)
	if err != nil {
		param := "from"
		if strings.HasPrefix(err.Error(), "to:") {
			param = "to"
		}
		return nil, &paramError{param, strings.TrimPrefix(strings.TrimPrefix(err.Error(), "to: "), "from: ")}
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
			p["qps"] = req / tl.seconds(i)
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
				p["cache_hit_share"] = ratio(float64(t.CacheHits), req)
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

// wgroup is one group of window stats per step.
type wgroup struct {
	key   window.Key
	stats []*window.Stats
}

// windowStats merges the alerting windows' minutes of tl's steps, grouped
// by by and filtered by where, with the sketches of qs: minutes of the
// last windowMemory from the aggregator, older ones from the store.
func (a *API) windowStats(ctx context.Context, tl *timeline, by []string, where map[string]string, qs ...window.Quantity) (map[string]*wgroup, error) {
	groups := map[string]*wgroup{}
	slot := func(k window.Key, i int) *window.Stats {
		gk := window.GroupKey(k, by)
		g := groups[gk]
		if g == nil {
			g = &wgroup{stats: make([]*window.Stats, len(tl.starts))}
			for _, l := range by {
				setLabel(&g.key, l, k.Label(l))
			}
			groups[gk] = g
		}
		if g.stats[i] == nil {
			g.stats[i] = &window.Stats{}
		}
		return g.stats[i]
	}
	cut := window.Minute(a.o.Now()).Add(-windowMemory)
	storeEnd := earlier(tl.to, cut)
	// Whole local days read merged from their day rows, where compacted;
	// the rest hour by hour, and minute by minute at the edges.
	days := a.storedDays(ctx, tl, storeEnd, by, where, qs)
	a.prefetchHours(ctx, tl, storeEnd, by, where, qs, days)
	for t := tl.from; t.Before(storeEnd); {
		if d, ok := days[t.Unix()]; ok {
			for _, g := range d.groups {
				slot(g.key, tl.index(t)).Merge(g.stats)
			}
			t = d.end
			continue
		}
		h := t.UTC().Truncate(time.Hour)
		hi := earlier(h.Add(time.Hour), earlier(storeEnd, days.nextStart(t)))
		i := tl.index(t)
		if i < 0 {
			t = hi
			continue
		}
		if t.Equal(h) && hi.Equal(h.Add(time.Hour)) && tl.wholeHour(h, storeEnd) {
			// A whole closed hour within one step: merged once, kept.
			hg, err := a.merged.get(ctx, "h", h, by, where, qs, a.hourLoader(ctx, h))
			if err != nil {
				return nil, err
			}
			for _, g := range hg {
				slot(g.key, i).Merge(g.stats)
			}
			t = hi
			continue
		}
		rows, err := a.o.Store.WindowMinutes(ctx, t, hi)
		if err != nil {
			return nil, err
		}
		for _, row := range rows {
			k := window.Key{Model: row.Model, BizLine: row.BizLine, Upstream: row.Upstream, Template: row.Template}
			if !matches(k, where) {
				continue
			}
			i := tl.index(row.Minute)
			if i < 0 {
				continue
			}
			if err := slot(k, i).MergeBinary(row.Data, qs...); err != nil {
				a.o.Log.Warn("skipping an unreadable window minute", "minute", row.Minute, "err", err)
			}
		}
		t = hi
	}
	if tl.to.After(cut) {
		memQ := window.AllQuantity
		if len(qs) == 1 {
			memQ = qs[0]
		}
		sel := window.Selector(where)
		for i, start := range tl.starts {
			end := tl.to
			if i+1 < len(tl.starts) {
				end = tl.starts[i+1]
			}
			if !end.After(cut) {
				continue
			}
			for _, g := range a.o.Windows.Window(later(start, cut), end, sel, by, memQ) {
				slot(g.Key, i).Merge(&g.Stats)
			}
		}
	}
	return groups, nil
}

func matches(k window.Key, where map[string]string) bool {
	for l, v := range where {
		if k.Label(l) != v {
			return false
		}
	}
	return true
}

// mergedCache keeps closed periods of the stored windows (UTC hours,
// local days) merged per group, by grouping and filter: stored periods do
// not change, and reading and decoding stored rows is most of the cost of
// a percentile over days (a dashboard asks for the same periods again and
// again, and its pages ask for several quantities at once). An entry
// holds the sketches of the quantities asked for and of hotQuantities,
// read in one pass; concurrent callers of a period being read wait for
// that read rather than repeating it.
type mergedCache struct {
	mu sync.Mutex
	m  map[string]*mergedEntry
}

type mergedEntry struct {
	mask    uint32        // the quantities whose sketches are merged
	groups  []hourGroup   // valid once loading is nil
	loading chan struct{} // closed when the read ends
}

type hourGroup struct {
	key   window.Key
	stats *window.Stats
}

// hotQuantities are read with any other: the latencies the Overview and
// Diagnostics pages show side by side.
var hotQuantities = []window.Quantity{window.TTFT, window.TPOT, window.E2E}

// maxCached bounds the cache (a month of hours for a few groupings); it
// is emptied when full.
const maxCached = 4000

// rowLoader hands every stored row of a period to emit, and says whether
// the period is there at all (a day not yet compacted is not).
type rowLoader func(emit func(k window.Key, data []byte)) (bool, error)

func maskOf(qs []window.Quantity) uint32 {
	var m uint32
	for _, q := range qs {
		m |= 1 << q
	}
	return m
}

// get is the period of kind starting at at, grouped by by, filtered by
// where, with the sketches of qs (and more), from the cache or from load;
// nil when load finds no period (not kept: it may come).
func (c *mergedCache) get(ctx context.Context, kind string, at time.Time, by []string, where map[string]string, qs []window.Quantity, load rowLoader) ([]hourGroup, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%d|%s", kind, at.Unix(), strings.Join(by, ","))
	for _, l := range slices.Sorted(maps.Keys(where)) {
		fmt.Fprintf(&b, "|%s=%q", l, where[l])
	}
	key := b.String()
	want := maskOf(qs)
	if len(qs) == 0 {
		want = 1<<window.AllQuantity - 1
	}
	var e *mergedEntry
	for {
		c.mu.Lock()
		e = c.m[key]
		if e == nil || e.loading == nil && e.mask&want != want {
			break // c.mu held: this caller reads the period
		}
		if e.loading == nil {
			c.mu.Unlock()
			return e.groups, nil
		}
		ch := e.loading
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	read := slices.Concat(qs, hotQuantities)
	if len(qs) == 0 {
		read = nil // every quantity
	}
	mine := &mergedEntry{mask: want | maskOf(hotQuantities), loading: make(chan struct{})}
	if len(qs) == 0 {
		mine.mask = want
	}
	if c.m == nil || len(c.m) >= maxCached {
		c.m = map[string]*mergedEntry{}
	}
	c.m[key] = mine
	c.mu.Unlock()

	groups := map[string]*hourGroup{}
	found, err := load(func(k window.Key, data []byte) {
		if len(data) == 0 || !matches(k, where) {
			return // a day's marker row, or not asked for
		}
		gk := window.GroupKey(k, by)
		g := groups[gk]
		if g == nil {
			g = &hourGroup{stats: &window.Stats{}}
			for _, l := range by {
				setLabel(&g.key, l, k.Label(l))
			}
			groups[gk] = g
		}
		_ = g.stats.MergeBinary(data, read...) // an unreadable row is skipped
	})
	hg := make([]hourGroup, 0, len(groups))
	for _, g := range groups {
		hg = append(hg, *g)
	}
	c.mu.Lock()
	if err != nil || !found {
		if c.m[key] == mine {
			delete(c.m, key)
		}
		hg = nil
	} else {
		mine.groups = hg
	}
	close(mine.loading)
	mine.loading = nil
	c.mu.Unlock()
	return hg, err
}

// hourLoader reads the stored UTC hour h: its hour rows, or its minutes
// where it has none.
func (a *API) hourLoader(ctx context.Context, h time.Time) rowLoader {
	return func(emit func(window.Key, []byte)) (bool, error) {
		return true, window.EachHourRow(ctx, a.o.Store, h, emit)
	}
}

// wholeHour says whether the UTC hour h lies whole in [tl.from, end) and
// within one step, and so can be read merged from the cache.
func (tl *timeline) wholeHour(h, end time.Time) bool {
	i := tl.index(h)
	return i >= 0 && !h.Before(tl.from) && !h.Add(time.Hour).After(end) && tl.index(h.Add(time.Hour-time.Minute)) == i
}

// storedDay is a compacted local day, merged per group.
type storedDay struct {
	end    time.Time
	groups []hourGroup
}

// storedDays are compacted days by their start (Unix s).
type storedDays map[int64]storedDay

// nextStart is the start of the first of the days after t, or a time
// far ahead when none is: where a stretch read by the hour must stop
// (in zones whose days start on the half hour, mid-hour).
func (ds storedDays) nextStart(t time.Time) time.Time {
	next := int64(math.MaxInt64)
	for s := range ds {
		if s > t.Unix() && s < next {
			next = s
		}
	}
	if next == math.MaxInt64 {
		return time.Unix(1<<40, 0)
	}
	return time.Unix(next, 0)
}

// storedDays are the local days lying whole in [tl.from, end) and within
// one step that the store has compacted (window.Compactor), by their
// start (Unix s), read a few at a time: a day's rows replace its 24
// hours'.
func (a *API) storedDays(ctx context.Context, tl *timeline, end time.Time, by []string, where map[string]string, qs []window.Quantity) storedDays {
	loc := a.o.Loc
	if loc == nil {
		loc = time.UTC
	}
	var starts []time.Time
	for d := store.FloorDay(tl.from, loc); d.Before(end); d = store.NextDay(d, loc) {
		e := store.NextDay(d, loc)
		if i := tl.index(d); i >= 0 && !d.Before(tl.from) && !e.After(end) && tl.index(e.Add(-time.Minute)) == i {
			starts = append(starts, d)
		}
	}
	out := storedDays{}
	var mu sync.Mutex
	parallel(ctx, starts, func(d time.Time) {
		hg, err := a.merged.get(ctx, "d", d, by, where, qs, func(emit func(window.Key, []byte)) (bool, error) {
			rows, err := a.o.Store.WindowDays(ctx, d, d.Add(time.Second))
			for _, r := range rows {
				emit(window.Key{Model: r.Model, BizLine: r.BizLine, Upstream: r.Upstream, Template: r.Template}, r.Data)
			}
			return len(rows) > 0, err // none: not compacted (yet), read by the hour
		})
		if err != nil {
			a.o.Log.Warn("could not read a compacted window day; reading its hours", "day", d, "err", err)
			return
		}
		if hg != nil {
			mu.Lock()
			out[d.Unix()] = storedDay{end: store.NextDay(d, loc), groups: hg}
			mu.Unlock()
		}
	})
	return out
}

// prefetchHours merges the whole stored hours of tl not yet cached and
// not within a compacted day, a few at a time: decoding sketches is
// CPU-bound, and a range of days has hundreds of hours to decode on its
// first call.
func (a *API) prefetchHours(ctx context.Context, tl *timeline, end time.Time, by []string, where map[string]string, qs []window.Quantity, days storedDays) {
	var hours []time.Time
	for t := tl.from; t.Before(end); {
		if d, ok := days[t.Unix()]; ok {
			t = d.end
			continue
		}
		h := t.UTC().Truncate(time.Hour)
		hi := earlier(h.Add(time.Hour), days.nextStart(t))
		if t.Equal(h) && hi.Equal(h.Add(time.Hour)) && tl.wholeHour(h, end) {
			hours = append(hours, h)
		}
		t = hi
	}
	parallel(ctx, hours, func(h time.Time) {
		// Errors are met again, and returned, by the caller's read.
		_, _ = a.merged.get(ctx, "h", h, by, where, qs, a.hourLoader(ctx, h))
	})
}

// parallel calls f for every item on a few goroutines (one per CPU, up to
// 4), until ctx ends.
func parallel[T any](ctx context.Context, items []T, f func(T)) {
	workers := min(runtime.GOMAXPROCS(0), 4, len(items))
	if workers <= 1 {
		for _, it := range items {
			if ctx.Err() != nil {
				return
			}
			f(it)
		}
		return
	}
	ch := make(chan T)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for it := range ch {
				f(it)
			}
		})
	}
	for _, it := range items {
		if ctx.Err() != nil {
			break
		}
		ch <- it
	}
	close(ch)
	wg.Wait()
}

func setLabel(k *window.Key, l, v string) {
	switch l {
	case "model":
		k.Model = v
	case "biz_line":
		k.BizLine = v
	case "upstream":
		k.Upstream = v
	case "template":
		k.Template = v
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

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
			groups[""] = &wgroup{stats: make([]*window.Stats, len(tl.starts))}
		}
		out := []series{}
		keys := make([]string, 0, len(groups))
		for k := range groups {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			g := groups[k]
			s := series{Key: map[string]string{}, Points: make([]point, len(tl.starts))}
			if by != "" {
				s.Key[by] = g.key.Label(by)
			}
			for i, start := range tl.starts {
				p50, p95, p99, n := quantiles(g.stats[i], qty)
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
	Key           string             `json:"key,omitempty"`
	Requests      int64              `json:"requests"`
	Errors        int64              `json:"errors"`
	ErrorRate     *float64           `json:"error_rate"`
	CacheHitShare *float64           `json:"cache_hit_share"`
	InputTokens   int64              `json:"input_tokens"`
	CachedTokens  int64              `json:"cached_input_tokens"`
	OutputTokens  int64              `json:"output_tokens"`
	CostNanos     map[string]int64   `json:"cost_nanos"`
	Cost          map[string]float64 `json:"cost"`
	E2EMean       *float64           `json:"e2e_mean_s"`
	TTFTMean      *float64           `json:"ttft_mean_s"`
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
	// The rollups answer whole hours.
	end := to
	from, to = from.UTC().Truncate(time.Hour), to.UTC().Truncate(time.Hour)
	if to.Before(end) {
		to = to.Add(time.Hour)
	}
	if !from.Before(to) {
		to = from.Add(time.Hour)
	}
	newRow := func(k string) *overviewRowAcc {
		return &overviewRowAcc{overviewRow: overviewRow{Key: k, CostNanos: map[string]int64{}, Cost: map[string]float64{}}}
	}
	total := newRow("")
	rows, err := a.o.Store.Report(ctx, store.ReportQuery{From: from, To: to, Measures: overviewMeasures})
	if err != nil {
		return nil, err
	}
	for _, row := range rows {
		total.add(row)
	}
	breakdown := func(d store.Dim) (map[string]any, error) {
		rows, err := a.o.Store.Report(ctx, store.ReportQuery{From: from, To: to, GroupBy: []store.Dim{d}, Measures: overviewMeasures})
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
		"totals": total.overviewRow, "qps": float64(total.Requests) / to.Sub(from).Seconds(),
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
			if g := groups[""]; g != nil {
				p.P50, p.P95, p.P99, p.Count = quantiles(g.stats[0], qty)
			}
			lat[qty.String()] = p
		}
		res["latency_s"] = lat
	} else {
		res["latency_s"] = nil
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
	o.CacheHitShare = ratio(float64(o.cacheHits), float64(o.Requests))
	o.E2EMean = ratio(float64(o.e2e)/1e9, float64(o.Requests))
	o.TTFTMean = ratio(float64(o.ttft)/1e9, float64(o.ttftN))
}
