// Package why says what changed between two periods of traffic: which
// figure moved, which segment of the requests' time carries the growth,
// which slice of the traffic explains it — and whether because it sent
// more ("mix") or because its requests got slower or longer ("rate") —
// and since when. It reads finished Records (the ledger), so it can cut by
// every dimension a Record has, and it sits beside the alerts: the alert
// engine asks it to explain each latency or tokens alert (through a
// function the wiring hands it), `tollgate why` and GET /api/v1/why ask it
// for a period.
//
// The definitions (the slow share behind a percentile, the shift-share
// decomposition, the first minute of the shift) are in docs/metrics.md,
// "What changed".
package why

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// Dims are the dimensions a change is decomposed along, in the order a
// tie is broken.
var Dims = []string{DimTemplate, DimKey, DimUser, DimBizLine, DimModel, DimServedModel, DimUpstream, DimEndUser, DimInput}

// The dimensions.
const (
	DimTemplate    = "template"
	DimBizLine     = "biz_line"
	DimModel       = "model"
	DimServedModel = "served_model"
	DimUpstream    = "upstream"
	DimUser        = "user"
	DimKey         = "key"
	DimEndUser     = "end_user"
	DimInput       = "input_tokens" // the input-length bucket
)

// maxSlices bounds the values of one dimension decomposed apart (client-
// controlled values such as end users); the rest are summed as Other.
const maxSlices = 50

// Other is the slice of the values beyond maxSlices.
const Other = "(other)"

// maxValueLen bounds a slice's value as reported.
const maxValueLen = 64

// inputBuckets are the input-length buckets, in tokens (as diagnose's).
var inputBuckets = []int64{512, 2048, 8192, 32768}

// InputBucket names the input-length bucket of n tokens.
func InputBucket(n int64) string {
	lo := int64(0)
	for _, hi := range inputBuckets {
		if n < hi {
			return fmt.Sprintf("%d–%d", lo, hi)
		}
		lo = hi
	}
	return fmt.Sprintf("≥%d", lo)
}

// dim is the value of dimension d of r.
func dim(r *record.Record, d string) string {
	v := ""
	switch d {
	case DimTemplate:
		v = r.TemplateID
	case DimBizLine:
		v = r.BizLine
	case DimModel:
		v = r.Model
	case DimServedModel:
		v = r.ServedModel
	case DimUpstream:
		v = r.Upstream
	case DimUser:
		v = r.UserID
	case DimKey:
		v = r.KeyID
	case DimEndUser:
		v = r.EndUser
	case DimInput:
		return InputBucket(r.Usage.InputTokens)
	}
	if len(v) > maxValueLen {
		v = v[:maxValueLen]
	}
	return v
}

// Kind is how a figure is decomposed.
type Kind string

const (
	// SlowShare: a percentile, as the share of requests slower than the
	// baseline's percentile (docs/metrics.md).
	SlowShare Kind = "slow_share"
	// Mean: a per-request average (tokens per request).
	Mean Kind = "mean"
	// Rate: a sum per minute (tokens per minute), split into volume
	// ("mix": more requests) and size ("rate": more per request).
	Rate Kind = "rate"
)

// Figure is a measurable figure of a period.
type Figure struct {
	Name, Unit string
	Kind       Kind
	// P is the percentile of a SlowShare figure (0.99).
	P float64
	// value is the per-request value, ok false when the request has none.
	value func(r *record.Record) (float64, bool)
	// segments are the time segments that add up to the value (latencies).
	segments []string
}

func seconds(d time.Duration) float64 { return d.Seconds() }

// ttftSegments are the segments before the first token.
var ttftSegments = []string{record.SegGatewayQueue, record.SegConnect, record.SegEngineQueue, record.SegPrefill}

// Figures are the figures why can explain.
var Figures = func() []Figure {
	streamed := func(r *record.Record) bool { return r.Stream && r.OK() }
	var out []Figure
	for _, p := range []float64{0.99, 0.95, 0.5} {
		n := fmt.Sprintf("%g", p*100)
		out = append(out,
			Figure{Name: "ttft_p" + n, Unit: "s", Kind: SlowShare, P: p, segments: ttftSegments, value: func(r *record.Record) (float64, bool) {
				if !streamed(r) || r.Derived.TTFT == nil {
					return 0, false
				}
				return seconds(*r.Derived.TTFT), true
			}},
			Figure{Name: "e2e_p" + n, Unit: "s", Kind: SlowShare, P: p, segments: record.SegmentNames, value: func(r *record.Record) (float64, bool) {
				return seconds(r.Derived.E2E), r.Derived.E2E > 0
			}},
			Figure{Name: "tpot_p" + n, Unit: "s", Kind: SlowShare, P: p, value: func(r *record.Record) (float64, bool) {
				if !streamed(r) || r.Derived.TPOT == nil {
					return 0, false
				}
				return seconds(*r.Derived.TPOT), true
			}},
		)
	}
	return append(out,
		Figure{Name: "input_tokens_per_request", Unit: "tokens", Kind: Mean, value: func(r *record.Record) (float64, bool) {
			return float64(r.Usage.InputTokens), true
		}},
		Figure{Name: "output_tokens_per_request", Unit: "tokens", Kind: Mean, value: func(r *record.Record) (float64, bool) {
			return float64(r.Usage.OutputTokens), true
		}},
		Figure{Name: "tokens_per_minute", Unit: "tokens/min", Kind: Rate, value: func(r *record.Record) (float64, bool) {
			return float64(r.Usage.InputTokens + r.Usage.OutputTokens), true
		}},
	)
}()

// FigureNamed is the figure of a name; alert signals name theirs
// ("ttft_p99", "tokens" for tokens_per_minute).
func FigureNamed(name string) (Figure, bool) {
	switch name {
	case "tokens", "max_input_tokens":
		name = map[string]string{"tokens": "tokens_per_minute", "max_input_tokens": "input_tokens_per_request"}[name]
	}
	i := slices.IndexFunc(Figures, func(f Figure) bool { return f.Name == name })
	if i < 0 {
		return Figure{}, false
	}
	return Figures[i], true
}

// Period is a set of finished Records and the time they cover.
type Period struct {
	From, To time.Time
	Records  []*record.Record
}

func (p Period) minutes() float64 { return max(p.To.Sub(p.From).Minutes(), 1.0/60) }

// Contribution is one slice's part of the change of the measure.
type Contribution struct {
	Dim   string `json:"dim"`
	Value string `json:"value"`
	// Mix is the part due to the slice's weight (its share of requests,
	// or its requests per minute for a Rate figure); Rate the part due
	// to its own value; in the measure's unit. Mix + Rate over every
	// slice of a dimension is the measure's whole change.
	Mix  float64 `json:"mix"`
	Rate float64 `json:"rate"`
	// Share is (Mix + Rate) over the whole change.
	Share float64 `json:"share"`
	// Requests and the slice's measure in the baseline and now.
	RequestsBefore int     `json:"requests_before"`
	RequestsNow    int     `json:"requests_now"`
	Before         float64 `json:"before"`
	Now            float64 `json:"now"`
	// WeightBefore is the slice's share of the baseline's requests.
	WeightBefore float64 `json:"weight_before"`
	Link         string  `json:"link,omitempty"`
}

// Main says whether the rate or the mix part is the larger.
func (c Contribution) Main() string {
	if math.Abs(c.Rate) >= math.Abs(c.Mix) {
		return "rate"
	}
	return "mix"
}

// measure is a per-request value and the weight of the slice it is in.
type sample struct {
	y    float64
	r    *record.Record
	keep bool
}

// decompose splits the change of the measure between base and cur along
// dimension d. ys are the measure of each request (nil entries are left
// out); for Rate the slices are weighted by requests per minute, else by
// their share of requests.
func decompose(d string, kind Kind, base, cur []sample, bmin, cmin float64) []Contribution {
	type acc struct {
		n0, n1   int
		s0, s1   float64
		hasValue bool
	}
	slices0 := map[string]*acc{}
	order := []string{}
	get := func(v string) *acc {
		a := slices0[v]
		if a == nil {
			if len(slices0) >= maxSlices {
				v = Other
				if a = slices0[v]; a != nil {
					return a
				}
			}
			a = &acc{}
			slices0[v] = a
			order = append(order, v)
		}
		return a
	}
	var N0, N1 int
	var S0, S1 float64
	for _, s := range base {
		a := get(dim(s.r, d))
		a.n0++
		a.s0 += s.y
		N0++
		S0 += s.y
	}
	for _, s := range cur {
		a := get(dim(s.r, d))
		a.n1++
		a.s1 += s.y
		N1++
		S1 += s.y
	}
	if N0 == 0 || N1 == 0 {
		return nil
	}
	Y0 := S0 / float64(N0) // the baseline's measure per request
	var out []Contribution
	for _, v := range order {
		a := slices0[v]
		c := Contribution{Dim: d, Value: v, RequestsBefore: a.n0, RequestsNow: a.n1}
		var w0, w1 float64
		if kind == Rate {
			w0, w1 = float64(a.n0)/bmin, float64(a.n1)/cmin
		} else {
			w0, w1 = float64(a.n0)/float64(N0), float64(a.n1)/float64(N1)
		}
		c.WeightBefore = float64(a.n0) / float64(N0)
		y0, y1 := math.NaN(), math.NaN()
		if a.n0 > 0 {
			y0 = a.s0 / float64(a.n0)
		}
		if a.n1 > 0 {
			y1 = a.s1 / float64(a.n1)
		}
		c.Before, c.Now = y0, y1
		switch {
		case a.n0 == 0:
			// A slice that was not there: all it brings is its sending.
			if kind == Rate {
				c.Mix = w1 * y1
			} else {
				c.Mix = w1 * (y1 - Y0)
			}
		case kind == Rate:
			c.Mix = (w1 - w0) * y0
			if a.n1 > 0 {
				c.Rate = w1 * (y1 - y0)
			}
		default:
			// Centred on the baseline's measure: a slice sending more
			// requests like the average ones moves nothing.
			c.Mix = (w1 - w0) * (y0 - Y0)
			if a.n1 > 0 {
				c.Rate = w1 * (y1 - y0)
			}
		}
		out = append(out, c)
	}
	return out
}

// total is the measure of a period: per request, or per minute (Rate).
func total(kind Kind, ss []sample, minutes float64) float64 {
	var s float64
	for _, x := range ss {
		s += x.y
	}
	if kind == Rate {
		return s / minutes
	}
	if len(ss) == 0 {
		return math.NaN()
	}
	return s / float64(len(ss))
}

// quantile is the value at p of vs (sorted in place), nearest rank.
func quantile(vs []float64, p float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	slices.Sort(vs)
	i := int(math.Ceil(p*float64(len(vs)))) - 1
	return vs[min(max(i, 0), len(vs)-1)]
}

// figureValue is the figure over a period: its percentile, mean or per-minute sum.
func figureValue(f Figure, p Period) (float64, int) {
	var vs []float64
	for _, r := range p.Records {
		if v, ok := f.value(r); ok {
			vs = append(vs, v)
		}
	}
	switch f.Kind {
	case SlowShare:
		return quantile(vs, f.P), len(vs)
	case Rate:
		var s float64
		for _, v := range vs {
			s += v
		}
		return s / p.minutes(), len(vs)
	}
	if len(vs) == 0 {
		return math.NaN(), 0
	}
	var s float64
	for _, v := range vs {
		s += v
	}
	return s / float64(len(vs)), len(vs)
}

// samples are the measure of every request of p that has the figure: for
// SlowShare 1 when slower than tau, else 0.
func samples(f Figure, p Period, tau float64) []sample {
	var out []sample
	for _, r := range p.Records {
		v, ok := f.value(r)
		if !ok {
			continue
		}
		if f.Kind == SlowShare {
			v = b2f(v > tau)
		}
		out = append(out, sample{y: v, r: r})
	}
	return out
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Segment is one time segment's part in the growth of a latency figure:
// its mean over the slowest requests (the tail beyond the percentile) in
// the baseline and now.
type Segment struct {
	Name   string  `json:"name"`
	Before float64 `json:"before"` // seconds
	Now    float64 `json:"now"`
	// Share of the tail's growth this segment carries (of the growing
	// segments' sum).
	Share float64 `json:"share"`
}

// tail is the requests of p at or beyond the figure's percentile.
func tail(f Figure, p Period) []*record.Record {
	q, _ := figureValue(f, p)
	var out []*record.Record
	for _, r := range p.Records {
		if v, ok := f.value(r); ok && v >= q {
			out = append(out, r)
		}
	}
	return out
}

// segments compares the mean segments of the two tails.
func segments(f Figure, base, cur Period) []Segment {
	if len(f.segments) == 0 {
		return nil
	}
	tb, tc := tail(f, base), tail(f, cur)
	if len(tb) == 0 || len(tc) == 0 {
		return nil
	}
	mean := func(rs []*record.Record, s string) float64 {
		var sum time.Duration
		for _, r := range rs {
			sum += r.Derived.Segments.Get(s)
		}
		return sum.Seconds() / float64(len(rs))
	}
	var out []Segment
	var grow float64
	for _, s := range f.segments {
		g := Segment{Name: s, Before: mean(tb, s), Now: mean(tc, s)}
		if d := g.Now - g.Before; d > 0 {
			grow += d
		}
		out = append(out, g)
	}
	for i := range out {
		if d := out[i].Now - out[i].Before; d > 0 && grow > 0 {
			out[i].Share = d / grow
		}
	}
	slices.SortStableFunc(out, func(a, b Segment) int { return cmp.Compare(b.Share, a.Share) })
	return out
}
