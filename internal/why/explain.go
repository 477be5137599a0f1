package why

import (
	"cmp"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// Options ask for one explanation.
type Options struct {
	// Figure to explain (Figures, or an alert signal's name); "" picks
	// the one that moved most.
	Figure string
	// Where are the labels the periods were cut by (an alert's group):
	// kept in the links to the requests.
	Where map[string]string
}

// Report is what changed between a baseline and now.
type Report struct {
	From         time.Time `json:"from"`
	To           time.Time `json:"to"`
	BaselineFrom time.Time `json:"baseline_from"`
	BaselineTo   time.Time `json:"baseline_to"`
	// Requests in each period (every request, not only those with the figure).
	Requests       int `json:"requests"`
	RequestsBefore int `json:"requests_before"`

	Figure string  `json:"figure"`
	Unit   string  `json:"unit"`
	Kind   Kind    `json:"kind"`
	Before float64 `json:"before"`
	Now    float64 `json:"now"`
	Ratio  float64 `json:"ratio"`
	// Threshold is, for a percentile, the baseline's percentile: a
	// request above it is "slow". MeasureBefore/Now are the decomposed
	// measure (the slow share, the mean, or the sum per minute).
	Threshold     float64 `json:"threshold,omitempty"`
	MeasureBefore float64 `json:"measure_before"`
	MeasureNow    float64 `json:"measure_now"`

	// Segments of a latency figure, the growing ones first.
	Segments []Segment `json:"segments,omitempty"`
	// Slices: each dimension's largest contributor, largest first;
	// Dimensions: each dimension's top three.
	Slices     []Contribution            `json:"slices,omitempty"`
	Dimensions map[string][]Contribution `json:"dimensions,omitempty"`
	// Explained is the slice that explains the change, if one does
	// (docs/metrics.md: at least 40 % of it, and 1.5 times its weight).
	Explained *Contribution `json:"explained,omitempty"`
	// Since is the first minute of the shift (zero when not found).
	Since time.Time `json:"since,omitzero"`
	// Changes are system-prompt changes of the period (PromptChanges).
	Changes []PromptChange `json:"prompt_changes,omitempty"`
	// Messages say it in order, as codes with parameters (the UI renders
	// them from its catalogues) and in English.
	Messages []Message `json:"messages"`
	Link     string    `json:"link,omitempty"`
	// Truncated: a period had more requests than Limit; its newest were read.
	Truncated bool `json:"truncated,omitempty"`
}

// Text is the report's messages as one paragraph.
func (r *Report) Text() string {
	var b strings.Builder
	for i, m := range r.Messages {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(m.Text)
	}
	return b.String()
}

// Message is one sentence: a catalogue code, its parameters, the English
// text, and the requests behind it.
type Message struct {
	Code   string            `json:"code"`
	Params map[string]string `json:"params,omitempty"`
	Text   string            `json:"text"`
	Link   string            `json:"link,omitempty"`
}

// minRequests is the least requests of each period a figure is judged on.
const minRequests = 10

// Explain compares cur with base.
func Explain(base, cur Period, o Options) (*Report, error) {
	rep := &Report{From: cur.From, To: cur.To, BaselineFrom: base.From, BaselineTo: base.To,
		Requests: len(cur.Records), RequestsBefore: len(base.Records)}
	var f Figure
	if o.Figure != "" {
		var ok bool
		if f, ok = FigureNamed(o.Figure); !ok {
			return nil, fmt.Errorf("figure %q: unknown; one of %s", o.Figure, strings.Join(FigureNames(), ", "))
		}
	} else {
		f = pick(base, cur)
	}
	rep.Figure, rep.Unit, rep.Kind = f.Name, f.Unit, f.Kind
	b, nb := figureValue(f, base)
	c, nc := figureValue(f, cur)
	rep.Before, rep.Now = b, c
	if nb < minRequests || nc < minRequests || math.IsNaN(b) || math.IsNaN(c) {
		rep.Messages = append(rep.Messages, msg("why.too_few", "Too few requests to compare: {now} now, {before} in the baseline.", "",
			"now", fmt.Sprint(nc), "before", fmt.Sprint(nb)))
		return rep, nil
	}
	if b > 0 {
		rep.Ratio = c / b
	}
	// The measure decomposed: a percentile is read as the share of
	// requests slower than the baseline's percentile.
	tau := math.NaN()
	if f.Kind == SlowShare {
		tau = b
		rep.Threshold = b
	}
	sb, sc := samples(f, base, tau), samples(f, cur, tau)
	rep.MeasureBefore, rep.MeasureNow = total(f.Kind, sb, base.minutes()), total(f.Kind, sc, cur.minutes())
	delta := rep.MeasureNow - rep.MeasureBefore
	link := func(d, v string) string { return requestsLink(cur, o.Where, d, v, f, tau) }
	rep.Link = link("", "")

	rep.Messages = append(rep.Messages, figureMessage(f, rep, rep.Link))
	if rep.Ratio > 0 && math.Abs(math.Log(rep.Ratio)) < math.Log(1.1) {
		return rep, nil // nothing moved: no cause to look for
	}

	rep.Segments = segments(f, base, cur)
	if len(rep.Segments) > 0 && rep.Segments[0].Share > 0 {
		s := rep.Segments[0]
		rep.Messages = append(rep.Messages, msg("why.segment",
			"{segment} carries {share} of the growth ({before} → {now} in the slowest requests).", rep.Link,
			"segment", s.Name, "share", pct(s.Share), "before", dur(s.Before), "now", dur(s.Now)))
		if (s.Name == record.SegEngineQueue || s.Name == record.SegGatewayQueue) && s.Share >= 0.5 {
			rep.Messages = append(rep.Messages, msg("why.advice_queue",
				"Requests wait for the engine, not in it: more requests arrive than it serves — scale out (replicas, GPUs) or limit concurrency per caller; a faster model will not help.", ""))
		}
	}

	if delta != 0 {
		rep.Dimensions = map[string][]Contribution{}
		for _, d := range Dims {
			cs := decompose(d, f.Kind, sb, sc, base.minutes(), cur.minutes())
			if named(cs) < 2 && d != DimInput {
				continue // one value (beside requests without one): says nothing
			}
			if d == DimInput && f.Name == "input_tokens_per_request" {
				continue // input growing moves requests to longer buckets: says nothing more
			}
			for i := range cs {
				cs[i].Share = (cs[i].Mix + cs[i].Rate) / delta
				cs[i].Link = link(d, cs[i].Value)
			}
			slices.SortStableFunc(cs, func(a, b Contribution) int { return cmp.Compare(b.Share, a.Share) })
			if len(cs) > 3 {
				cs = cs[:3]
			}
			rep.Dimensions[d] = cs
			if len(cs) > 0 {
				rep.Slices = append(rep.Slices, cs[0])
			}
		}
		slices.SortStableFunc(rep.Slices, func(a, b Contribution) int { return cmp.Compare(b.Share, a.Share) })
		// The slice that explains it: the largest qualifying one — but
		// an input-length bucket only when no actor (a template, key,
		// business line…) explains nearly as much: longer inputs are how
		// a prompt's growth shows, not who made it.
		var input *Contribution
		for i := range rep.Slices {
			c := &rep.Slices[i]
			if c.Share < 0.4 || c.Share < 1.5*c.WeightBefore {
				continue
			}
			if c.Dim == DimInput {
				input = c
				continue
			}
			if input == nil || c.Share >= 0.8*input.Share {
				rep.Explained = c
			}
			break
		}
		if rep.Explained == nil {
			rep.Explained = input
		}
		if e := rep.Explained; e != nil {
			code, text := "why.slice_rate", "{dim} {value} explains {share} of it: its requests got larger ({before} → {after} per request)."
			before, after := measure(f, e.Before), measure(f, e.Now)
			switch {
			case e.Main() == "mix":
				code, text = "why.slice_mix", "{dim} {value} explains {share} of it: it sent more ({n_before} → {n_after} requests)."
			case f.Kind == SlowShare:
				code, text = "why.slice_slow", "{dim} {value} explains {share} of it: its requests got slower ({before} → {after} of them over {threshold})."
				before, after = pct(e.Before), pct(e.Now)
			}
			rep.Messages = append(rep.Messages, msg(code, text, e.Link,
				"dim", e.Dim, "value", orNone(e.Value), "share", pct(e.Share), "threshold", measure(f, tau),
				"before", before, "after", after,
				"n_before", num(float64(e.RequestsBefore)), "n_after", num(float64(e.RequestsNow))))
			var also []string
			for i := range rep.Slices {
				c := &rep.Slices[i]
				if c != e && c.Dim != DimInput && c.Share >= 0.8*e.Share && c.Share >= 1.5*c.WeightBefore && len(also) < 3 {
					also = append(also, fmt.Sprintf("%s %s (%s)", c.Dim, orNone(c.Value), pct(c.Share)))
				}
			}
			if len(also) > 0 {
				rep.Messages = append(rep.Messages, msg("why.also", "So does {slices}.", "", "slices", strings.Join(also, ", ")))
			}
			if input != nil && input != e {
				rep.Messages = append(rep.Messages, msg("why.input", "Requests moved to {value} input tokens ({share} of the change).", input.Link,
					"value", input.Value, "share", pct(input.Share)))
			}
		} else {
			rep.Messages = append(rep.Messages, msg("why.spread",
				"No single slice explains it: it is spread over the traffic (the largest, {dim} {value}, {share}).", rep.Link,
				"dim", firstOr(rep.Slices, func(c Contribution) string { return c.Dim }), "value", firstOr(rep.Slices, func(c Contribution) string { return orNone(c.Value) }),
				"share", pct(firstOr(rep.Slices, func(c Contribution) float64 { return c.Share }))))
		}
		rep.Changes = PromptChanges(base, cur)
		for i, c := range rep.Changes {
			if i == 3 {
				break
			}
			rep.Messages = append(rep.Messages, msg("why.prompt",
				"template {template}: system prompt changed at {at} ({tokens_before} → {tokens_after} tokens, fingerprint {fp_before}… → {fp_after}…), sent by key {key}.",
				requestsLink(cur, o.Where, DimTemplate, c.Template, f, tau),
				"template", orNone(c.Template), "at", c.At.UTC().Format("15:04"), "tokens_before", num(float64(c.TokensBefore)), "tokens_after", num(float64(c.TokensAfter)),
				"fp_before", short(c.FingerprintBefore), "fp_after", short(c.FingerprintAfter), "key", orNone(cmp.Or(c.User, c.Key))))
		}
		rep.Since = since(f, cur, rep.Explained, tau, rep.MeasureBefore, rep.MeasureNow, base)
		if !rep.Since.IsZero() {
			rep.Messages = append(rep.Messages, msg("why.since", "Since {at} UTC.", "", "at", rep.Since.UTC().Format("15:04")))
		}
	}
	return rep, nil
}

// named is how many slices have a value.
func named(cs []Contribution) int {
	n := 0
	for _, c := range cs {
		if c.Value != "" && c.Value != Other {
			n++
		}
	}
	return n
}

// pick is the figure that moved most (by ratio, either way) among those
// both periods have enough requests for; TTFT P99 when none did.
func pick(base, cur Period) Figure {
	best, bestMove := Figures[0], 0.0
	for _, f := range Figures {
		if f.Kind == SlowShare && f.P != 0.99 {
			continue
		}
		b, nb := figureValue(f, base)
		c, nc := figureValue(f, cur)
		if nb < minRequests || nc < minRequests || !(b > 0) || !(c > 0) {
			continue
		}
		if m := math.Abs(math.Log(c / b)); m > bestMove {
			best, bestMove = f, m
		}
	}
	return best
}

// FigureNames lists the figures' names.
func FigureNames() []string {
	out := make([]string, len(Figures))
	for i, f := range Figures {
		out[i] = f.Name
	}
	return out
}

// since is the first minute of cur whose measure — of the slice that
// explains the change, or of all traffic — is past halfway from the
// baseline's to the period's, as the shift is.
func since(f Figure, cur Period, by *Contribution, tau, before, now float64, base Period) time.Time {
	lo, hi := before, now
	if by != nil {
		lo, hi = by.Before, by.Now
		if math.IsNaN(lo) || by.Main() == "mix" {
			lo, hi = before, now
		}
	}
	half := lo + (hi-lo)/2
	up := hi > lo
	byMinute := map[int64][]sample{}
	for _, s := range samples(f, cur, tau) {
		if by != nil && by.Main() == "rate" && dim(s.r, by.Dim) != by.Value {
			continue
		}
		m := s.r.Arrival.UTC().Truncate(time.Minute).Unix()
		byMinute[m] = append(byMinute[m], s)
	}
	for m := cur.From.UTC().Truncate(time.Minute); m.Before(cur.To); m = m.Add(time.Minute) {
		ss := byMinute[m.Unix()]
		if len(ss) == 0 {
			continue
		}
		v := total(f.Kind, ss, 1)
		if (up && v > half) || (!up && v < half) {
			return m
		}
	}
	return time.Time{}
}

func figureMessage(f Figure, rep *Report, link string) Message {
	return msg("why.figure", "{figure} went from {before} to {now} (×{ratio}).", link,
		"figure", f.Name, "before", measure(f, rep.Before), "now", measure(f, rep.Now), "ratio", fmt.Sprintf("%.1f", rep.Ratio))
}

// msg builds a message; kv are its parameters, which fill the text.
func msg(code, text, link string, kv ...string) Message {
	m := Message{Code: code, Link: link}
	if len(kv) > 0 {
		m.Params = map[string]string{}
	}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Params[kv[i]] = kv[i+1]
		text = strings.ReplaceAll(text, "{"+kv[i]+"}", kv[i+1])
	}
	m.Text = text
	return m
}

// measure formats a figure's value (or, for a percentile, a slice's slow share).
func measure(f Figure, v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case f.Unit == "s":
		return dur(v)
	}
	return num(v) + " " + f.Unit
}

// num writes v rounded, with thousands separators (3,006).
func num(v float64) string {
	s := fmt.Sprintf("%.0f", math.Abs(v))
	var b strings.Builder
	if v < 0 {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func pct(v float64) string { return fmt.Sprintf("%.0f %%", 100*v) }

func dur(s float64) string {
	if s < 1 {
		return fmt.Sprintf("%.0f ms", s*1000)
	}
	return fmt.Sprintf("%.2f s", s)
}

func orNone(v string) string {
	if v == "" {
		return "(none)"
	}
	return v
}

func firstOr[T any](cs []Contribution, f func(Contribution) T) T {
	var z T
	if len(cs) == 0 {
		return z
	}
	return f(cs[0])
}

// requestsLink lists the requests behind a claim: the period, the
// slice where the requests API filters by it, and for a percentile only
// the slow ones.
func requestsLink(cur Period, where map[string]string, d, v string, f Figure, tau float64) string {
	q := url.Values{}
	param := map[string]string{DimTemplate: "template", DimBizLine: "biz_line", DimModel: "model", DimUser: "user", DimEndUser: "end_user"}
	for l, val := range where {
		if p, ok := param[l]; ok {
			q.Set(p, val)
		}
	}
	if p, ok := param[d]; ok && v != Other {
		q.Set(p, v)
	}
	if f.Kind == SlowShare && strings.HasPrefix(f.Name, "e2e") && tau > 0 {
		q.Set("slow", time.Duration(tau*float64(time.Second)).Round(time.Millisecond).String())
	}
	q.Set("since", cur.From.UTC().Format(time.RFC3339))
	q.Set("until", cur.To.UTC().Format(time.RFC3339))
	return "/api/v1/requests?" + q.Encode()
}
