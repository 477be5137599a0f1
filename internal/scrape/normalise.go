package scrape

import (
	"maps"
	"math"
	"slices"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// Sample is one upstream's engine state for one served model at one scrape.
// Fields that are unknown — not exposed by the engine, no data over the
// interval, the first scrape for deltas, or the target down — are NaN.
type Sample struct {
	At              time.Time
	Upstream, Model string // Model is "" for engines that label no model
	// Running and Waiting are requests in the engine's batch and queue.
	Running, Waiting float64
	// KVCacheUsage is the share of the KV cache in use, 0–1.
	KVCacheUsage float64
	// PrefixCacheHitRate is cached prompt tokens over queried prompt tokens
	// during the interval, 0–1, from counter deltas (or the engine's own
	// gauge on engines that only have that).
	PrefixCacheHitRate float64
	// Engine-side time to first token over the interval, in seconds, from
	// histogram bucket deltas.
	TTFTP50, TTFTP95, TTFTP99 float64
	// Token throughput over the interval, from counter deltas.
	PromptTokensPerS, GenerationTokensPerS float64
	// Up is false when the scrape failed; every value is then NaN.
	Up bool
}

// State is what Normalise keeps between two scrapes of one target: the
// cumulative counters and histograms the next deltas are taken from.
// A nil *State means "no previous scrape".
type State struct {
	at     time.Time
	models map[string]cumulative
}

// cumulative holds one model's monotonic series; NaN or an empty histogram
// when the target does not expose them.
type cumulative struct {
	prompt, generation, hits, queries float64
	ttft                              hist
}

// hist is a cumulative histogram: counts[i] observations ≤ bounds[i], bounds
// ascending and the last one +Inf.
type hist struct {
	bounds, counts []float64
}

// Normalise turns one scrape of an engine's /metrics into Samples, one per
// served model, sorted by model, with Upstream left empty. prev is the
// State returned by the previous call for the same target (nil the first
// time); interval values are NaN without it. The State returned is the one
// to pass next time. An engine without metrics, or an exposition with none
// of the engine's names, yields no Samples. Normalise is pure and never
// panics, whatever families holds.
func Normalise(engine string, families map[string]*dto.MetricFamily, prev *State, now time.Time) ([]Sample, *State) {
	sp, ok := specs[engine]
	if !ok {
		return nil, prev
	}
	r := reader{families: families, label: sp.modelLabel, models: map[string]bool{}}
	running := r.gauges(sp.running)
	waiting := r.gauges(sp.waiting)
	kv := r.gauges(sp.kvUsage)
	prompt := r.counters(sp.promptTokens)
	generation := r.counters(sp.generationTokens)
	ttft := r.histograms(sp.ttft)
	var hits, queries map[string]float64
	var hitGauge map[string]gauge
	pair, fromCounters := r.pair(sp.prefix)
	if fromCounters {
		hits, queries = r.counters([]string{pair.hits}), r.counters([]string{pair.queries})
	} else {
		hitGauge = r.gauges(sp.prefixGauge)
	}

	next := &State{at: now, models: make(map[string]cumulative, len(r.models))}
	var dt float64
	if prev != nil {
		dt = now.Sub(prev.at).Seconds()
	}
	out := make([]Sample, 0, len(r.models))
	for _, model := range slices.Sorted(maps.Keys(r.models)) {
		cur := cumulative{
			prompt:     valueOr(prompt, model),
			generation: valueOr(generation, model),
			hits:       valueOr(hits, model),
			queries:    valueOr(queries, model),
			ttft:       ttft[model],
		}
		next.models[model] = cur
		s := Sample{
			At:                   now,
			Model:                model,
			Running:              running[model].sum(),
			Waiting:              waiting[model].sum(),
			KVCacheUsage:         kv[model].mean(),
			PrefixCacheHitRate:   hitGauge[model].mean(),
			TTFTP50:              math.NaN(),
			TTFTP95:              math.NaN(),
			TTFTP99:              math.NaN(),
			PromptTokensPerS:     math.NaN(),
			GenerationTokensPerS: math.NaN(),
			Up:                   true,
		}
		if old, ok := prev.model(model); ok {
			if fromCounters {
				s.PrefixCacheHitRate = ratio(delta(cur.hits, old.hits), delta(cur.queries, old.queries))
			}
			if d, ok := cur.ttft.delta(old.ttft); ok {
				s.TTFTP50, s.TTFTP95, s.TTFTP99 = d.quantile(0.50), d.quantile(0.95), d.quantile(0.99)
			}
			if dt > 0 {
				s.PromptTokensPerS = delta(cur.prompt, old.prompt) / dt
				s.GenerationTokensPerS = delta(cur.generation, old.generation) / dt
			}
		}
		out = append(out, s)
	}
	return out, next
}

func (st *State) model(name string) (cumulative, bool) {
	if st == nil {
		return cumulative{}, false
	}
	c, ok := st.models[name]
	return c, ok
}

// delta is the increase of a counter between two scrapes. A counter that
// went down was reset by a restart, so all of its new value is new.
func delta(cur, prev float64) float64 {
	if cur < prev {
		return cur
	}
	return cur - prev // NaN if either is
}

// ratio is hits/queries clamped to 0–1; NaN when nothing was queried.
func ratio(hits, queries float64) float64 {
	if !(queries > 0) || math.IsNaN(hits) {
		return math.NaN()
	}
	return math.Min(1, math.Max(0, hits/queries))
}

// delta returns the observations made since prev. A bucket that went down,
// or a changed bucket layout, means the engine restarted: every current
// observation is then new. ok is false when either side has no histogram.
func (h hist) delta(prev hist) (hist, bool) {
	if len(h.bounds) == 0 || len(prev.bounds) == 0 {
		return hist{}, false
	}
	if !slices.Equal(h.bounds, prev.bounds) {
		return h, true
	}
	d := hist{bounds: h.bounds, counts: make([]float64, len(h.counts))}
	for i := range h.counts {
		if h.counts[i] < prev.counts[i] {
			return h, true
		}
		d.counts[i] = h.counts[i] - prev.counts[i]
	}
	return d, true
}

// quantile estimates the q-quantile the way PromQL's histogram_quantile
// does: find the bucket holding rank q·total and interpolate linearly
// between its bounds, taking 0 as the lower bound of the first bucket
// (when its upper bound is positive). A rank in the +Inf bucket returns the
// highest finite bound. NaN when the histogram is empty.
func (h hist) quantile(q float64) float64 {
	n := len(h.counts)
	if n < 2 || !math.IsInf(h.bounds[n-1], 1) {
		return math.NaN()
	}
	// Cumulative counts from sums over series or from deltas can dip;
	// histogram_quantile fixes that the same way.
	counts := slices.Clone(h.counts)
	for i := 1; i < n; i++ {
		counts[i] = math.Max(counts[i], counts[i-1])
	}
	total := counts[n-1]
	if !(total > 0) || math.IsInf(total, 0) {
		return math.NaN()
	}
	rank := q * total
	i := sort.SearchFloat64s(counts, rank)
	switch {
	case i >= n-1:
		return h.bounds[n-2]
	case i == 0 && h.bounds[0] <= 0:
		return h.bounds[0]
	}
	lower, below := 0.0, 0.0
	if i > 0 {
		lower, below = h.bounds[i-1], counts[i-1]
	}
	upper := h.bounds[i]
	return lower + (upper-lower)*(rank-below)/(counts[i]-below)
}

// reader aggregates the series of an exposition by served model.
type reader struct {
	families map[string]*dto.MetricFamily
	label    string
	models   map[string]bool // every model seen in a recognised family
}

// gauge accumulates one gauge over the series of a model.
type gauge struct {
	total float64
	n     int
}

func (g gauge) sum() float64 {
	if g.n == 0 {
		return math.NaN()
	}
	return g.total
}

func (g gauge) mean() float64 {
	if g.n == 0 {
		return math.NaN()
	}
	return g.total / float64(g.n)
}

// family returns the first of names that the exposition has series for.
func (r *reader) family(names []string) *dto.MetricFamily {
	for _, name := range names {
		if mf := r.families[name]; mf != nil && len(mf.GetMetric()) > 0 {
			return mf
		}
	}
	return nil
}

func (r *reader) pair(pairs []counterPair) (counterPair, bool) {
	for _, p := range pairs {
		if r.family([]string{p.hits}) != nil && r.family([]string{p.queries}) != nil {
			return p, true
		}
	}
	return counterPair{}, false
}

func (r *reader) modelOf(m *dto.Metric) string {
	if r.label == "" {
		return ""
	}
	for _, lp := range m.GetLabel() {
		if lp.GetName() == r.label {
			return lp.GetValue()
		}
	}
	return ""
}

// gauges reads the first family present as plain values per model.
func (r *reader) gauges(names []string) map[string]gauge {
	mf := r.family(names)
	if mf == nil {
		return nil
	}
	out := map[string]gauge{}
	for _, m := range mf.GetMetric() {
		v, ok := scalar(m)
		if !ok {
			continue
		}
		model := r.modelOf(m)
		r.models[model] = true
		g := out[model]
		g.total += v
		g.n++
		out[model] = g
	}
	return out
}

// counters sums the first family present per model. A histogram or
// summary counts with its sum (TGI's per-request token histograms).
func (r *reader) counters(names []string) map[string]float64 {
	mf := r.family(names)
	if mf == nil {
		return nil
	}
	out := map[string]float64{}
	for _, m := range mf.GetMetric() {
		v, ok := scalar(m)
		switch {
		case m.GetHistogram() != nil:
			v, ok = m.GetHistogram().GetSampleSum(), true
		case m.GetSummary() != nil:
			v, ok = m.GetSummary().GetSampleSum(), true
		}
		if !ok || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			continue
		}
		model := r.modelOf(m)
		r.models[model] = true
		out[model] += v
	}
	return out
}

// histograms merges the first histogram family present per model, adding
// the cumulative counts of equal bounds (sum by (le) in PromQL). A series
// without a +Inf bucket gets one from its sample count.
func (r *reader) histograms(names []string) map[string]hist {
	mf := r.family(names)
	if mf == nil {
		return nil
	}
	merged := map[string]map[float64]float64{}
	for _, m := range mf.GetMetric() {
		h := m.GetHistogram()
		if h == nil {
			continue
		}
		model := r.modelOf(m)
		r.models[model] = true
		buckets := merged[model]
		if buckets == nil {
			buckets = map[float64]float64{}
			merged[model] = buckets
		}
		hasInf := false
		for _, b := range h.GetBucket() {
			ub, c := b.GetUpperBound(), bucketCount(b)
			if math.IsNaN(ub) || !validCount(c) {
				continue
			}
			hasInf = hasInf || math.IsInf(ub, 1)
			buckets[ub] += c
		}
		if total := sampleCount(h); !hasInf && validCount(total) {
			buckets[math.Inf(1)] += total
		}
	}
	out := make(map[string]hist, len(merged))
	for model, buckets := range merged {
		bounds := slices.Sorted(maps.Keys(buckets))
		h := hist{bounds: bounds, counts: make([]float64, len(bounds))}
		for i, b := range bounds {
			h.counts[i] = buckets[b]
		}
		out[model] = h
	}
	return out
}

// scalar is the value of a counter, gauge or untyped series; non-finite
// values are treated as absent.
func scalar(m *dto.Metric) (float64, bool) {
	var v float64
	switch {
	case m.GetGauge() != nil:
		v = m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		v = m.GetCounter().GetValue()
	case m.GetUntyped() != nil:
		v = m.GetUntyped().GetValue()
	default:
		return 0, false
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, false
	}
	return v, true
}

// The text parser stores integral counts as integers and others as floats.
func bucketCount(b *dto.Bucket) float64 {
	if b.CumulativeCountFloat != nil {
		return b.GetCumulativeCountFloat()
	}
	return float64(b.GetCumulativeCount())
}

func sampleCount(h *dto.Histogram) float64 {
	if h.SampleCountFloat != nil {
		return h.GetSampleCountFloat()
	}
	if h.SampleCount == nil {
		return math.NaN()
	}
	return float64(h.GetSampleCount())
}

func validCount(c float64) bool { return c >= 0 && !math.IsInf(c, 1) }

func valueOr(m map[string]float64, model string) float64 {
	if v, ok := m[model]; ok {
		return v
	}
	return math.NaN()
}
