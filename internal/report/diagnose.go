package report

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// The diagnosis helpers are seed 001 §5.2's techniques for finding where
// jitter comes from: latency by input-length bucket (prefill trouble shows
// only in long inputs), cache hit versus miss, the P99/P50 ratio (the long
// tail), token-timeline decay ("slower towards the end") and first-packet
// merging. They read recent ledger rows, bounded in number.

// LedgerReader is what the diagnosis reads.
type LedgerReader interface {
	Requests(ctx context.Context, f store.Filter) ([]*record.Record, error)
	Request(ctx context.Context, id string) ([]*record.Record, error)
}

// inputBuckets are the input-length buckets, in tokens.
var inputBuckets = []int64{512, 2048, 8192, 32768}

func bucketName(in int64) string {
	lo := int64(0)
	for _, hi := range inputBuckets {
		if in < hi {
			return fmt.Sprintf("%d–%d", lo, hi)
		}
		lo = hi
	}
	return fmt.Sprintf("≥%d", lo)
}

// quantile is the nearest-rank quantile of sorted values (exact, from the
// rows themselves).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

type durs []time.Duration

func (d durs) q(q float64) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(quantile(s, q)) / float64(time.Millisecond)
}

// Diagnose builds the diagnosis tables over successful streamed requests
// in [from, to) — a non-streamed answer's TTFT is the whole answer, which
// would blur every TTFT figure — at most limit rows (newest first), and
// the timelines of at most 200 sampled ones.
func Diagnose(ctx context.Context, src LedgerReader, from, to time.Time, where store.Filter, limit int) ([]*Result, error) {
	where.Since, where.Until, where.Limit = from, to, limit
	recs, err := src.Requests(ctx, where)
	if err != nil {
		return nil, err
	}
	var ok []*record.Record
	for _, r := range recs {
		if r.OK() && r.Stream && r.Derived.TTFT != nil {
			ok = append(ok, r)
		}
	}
	period := func(res *Result) *Result { res.From, res.To = stamp(from), stamp(to); return res }
	out := []*Result{period(byInput(ok)), period(byCache(ok)), period(tails(ok)), period(segmentShares(ok))}
	tl, err := decay(ctx, src, ok)
	if err != nil {
		return nil, err
	}
	out = append(out, period(tl))
	return out, nil
}

var latencyColumns = []Column{{"requests", KindInt}, {"ttft_p50_ms", KindFloat}, {"ttft_p95_ms", KindFloat}, {"ttft_p99_ms", KindFloat}, {"e2e_p50_ms", KindFloat}, {"e2e_p99_ms", KindFloat}}

func latencyRow(rs []*record.Record) []any {
	var ttft, e2e durs
	for _, r := range rs {
		ttft = append(ttft, *r.Derived.TTFT)
		e2e = append(e2e, r.Derived.E2E)
	}
	return []any{int64(len(rs)), ttft.q(.5), ttft.q(.95), ttft.q(.99), e2e.q(.5), e2e.q(.99)}
}

func byInput(rs []*record.Record) *Result {
	groups := map[string][]*record.Record{}
	for _, r := range rs {
		b := bucketName(r.Usage.InputTokens)
		groups[b] = append(groups[b], r)
	}
	res := &Result{Title: "Latency by input length (tokens): trouble in prefill shows in the long buckets only", Columns: append([]Column{{"input_tokens", KindText}}, latencyColumns...)}
	for _, b := range orderedBuckets() {
		if g := groups[b]; len(g) > 0 {
			res.Rows = append(res.Rows, append([]any{b}, latencyRow(g)...))
		}
	}
	return res
}

func orderedBuckets() []string {
	var out []string
	lo := int64(0)
	for _, hi := range inputBuckets {
		out = append(out, fmt.Sprintf("%d–%d", lo, hi))
		lo = hi
	}
	return append(out, fmt.Sprintf("≥%d", lo))
}

func byCache(rs []*record.Record) *Result {
	var hit, miss []*record.Record
	for _, r := range rs {
		if r.Usage.CachedInputTokens > 0 {
			hit = append(hit, r)
		} else {
			miss = append(miss, r)
		}
	}
	res := &Result{Title: "Prefix-cache hit versus miss: if only misses jitter, look at the cache", Columns: append([]Column{{"prefix_cache", KindText}}, latencyColumns...)}
	for _, g := range []struct {
		name string
		rs   []*record.Record
	}{{"hit", hit}, {"miss", miss}} {
		if len(g.rs) > 0 {
			res.Rows = append(res.Rows, append([]any{g.name}, latencyRow(g.rs)...))
		}
	}
	return res
}

// TailFlag is the P99/P50 ratio above which the tail is flagged.
const TailFlag = 5.0

func tails(rs []*record.Record) *Result {
	res := &Result{Title: "Long tail: P99 / P50 (a large ratio means users feel it as \"stuck now and then\")", Columns: []Column{
		{"figure", KindText}, {"p50_ms", KindFloat}, {"p99_ms", KindFloat}, {"p99_over_p50", KindFloat}}}
	var ttft, e2e, tpot durs
	for _, r := range rs {
		ttft = append(ttft, *r.Derived.TTFT)
		e2e = append(e2e, r.Derived.E2E)
		if r.Derived.TPOT != nil {
			tpot = append(tpot, *r.Derived.TPOT)
		}
	}
	for _, f := range []struct {
		name string
		d    durs
	}{{"ttft", ttft}, {"tpot", tpot}, {"e2e", e2e}} {
		if len(f.d) == 0 {
			continue
		}
		p50, p99 := f.d.q(.5), f.d.q(.99)
		ratio := 0.0
		if p50 > 0 {
			ratio = p99 / p50
		}
		res.Rows = append(res.Rows, []any{f.name, p50, p99, ratio})
		if ratio > TailFlag {
			res.Notes = append(res.Notes, fmt.Sprintf("%s P99 is %.1f× its P50: a long tail. See the input-length and cache tables, and the segments.", f.name, ratio))
		}
	}
	return res
}

func segmentShares(rs []*record.Record) *Result {
	res := &Result{Title: "Where the time goes: share of E2E per segment", Columns: []Column{{"segment", KindText}, {"share", KindPercent}, {"p50_ms", KindFloat}, {"p99_ms", KindFloat}}}
	var total time.Duration
	per := map[string]durs{}
	sums := map[string]time.Duration{}
	for _, r := range rs {
		total += r.Derived.E2E
		for _, n := range record.SegmentNames {
			d := r.Derived.Segments.Get(n)
			per[n] = append(per[n], d)
			sums[n] += d
		}
	}
	for _, n := range record.SegmentNames {
		if sums[n] == 0 {
			continue
		}
		res.Rows = append(res.Rows, []any{n, float64(sums[n]) / float64(max(total, 1)), per[n].q(.5), per[n].q(.99)})
	}
	return res
}

// DecayFlag: the second half's time per token this much above the first
// half's counts as "slower towards the end".
const DecayFlag = 1.5

// decayRatio compares the time per token of the second half of a token
// timeline with the first half's; 0 when the timeline is too short.
func decayRatio(tl []record.TimelinePoint) float64 {
	if len(tl) < 3 {
		return 0
	}
	a, m, z := tl[0], tl[len(tl)/2], tl[len(tl)-1]
	if m.Index <= a.Index || z.Index <= m.Index || m.Offset <= a.Offset {
		return 0
	}
	first := float64(m.Offset-a.Offset) / float64(m.Index-a.Index)
	second := float64(z.Offset-m.Offset) / float64(z.Index-m.Index)
	return second / first
}

func decay(ctx context.Context, src LedgerReader, rs []*record.Record) (*Result, error) {
	res := &Result{Title: "Token timelines (sampled requests): decay and first-packet merging", Columns: []Column{{"figure", KindText}, {"requests", KindInt}, {"share", KindPercent}}}
	var streams, merged, looked, slower int64
	for _, r := range rs {
		if !r.Stream {
			continue
		}
		streams++
		if r.Derived.FirstPacketMerge {
			merged++
		}
		if !r.Sampled || looked >= 200 {
			continue
		}
		full, err := src.Request(ctx, r.RequestID)
		if err != nil || len(full) == 0 {
			continue
		}
		for _, f := range full {
			if f.RequestID == r.RequestID {
				if decayRatio(f.Timeline) > 0 {
					looked++
					if decayRatio(f.Timeline) > DecayFlag {
						slower++
					}
				}
			}
		}
	}
	res.Rows = append(res.Rows,
		[]any{"first packet merged", merged, ratio(merged, streams)},
		[]any{fmt.Sprintf("slower towards the end (second half > %.1f× first half per token)", DecayFlag), slower, ratio(slower, looked)})
	if ratio(merged, streams) > 0.1 {
		res.Notes = append(res.Notes, "Many first chunks carry several tokens: something buffers the start of streams, so TTFT looks shorter than users feel it.")
	}
	if ratio(slower, looked) > 0.2 {
		res.Notes = append(res.Notes, "Many streams slow down towards the end: look at KV-cache pressure and batch size growth on the engine.")
	}
	return res, nil
}

// Waterfall prints one request's segments as a terminal waterfall; now
// tells whether the engine's own timing is still pending.
func Waterfall(w io.Writer, r *record.Record, now time.Time) {
	d := r.Derived
	e2e := d.E2E
	pending := r.EngineTimingPending(now)
	fmt.Fprintf(w, "Request %s — %s via %s, %s, E2E %s\n\n", r.RequestID, orNone(r.Model), orNone(r.Upstream), statusWord(r), msText(e2e))
	const width = 40
	var at time.Duration
	for _, n := range record.SegmentNames {
		seg := d.Segments.Get(n)
		if seg <= 0 {
			continue
		}
		start, end := 0, 0
		if e2e > 0 {
			start, end = int(width*at/e2e), int(width*(at+seg)/e2e)
		}
		if end == start {
			end = start + 1
		}
		bar := strings.Repeat(" ", min(start, width)) + strings.Repeat("█", max(min(end, width)-start, 0))
		src := d.Segments.Source[n]
		if pending && strings.HasPrefix(src, "inferred:") {
			src += " — engine timing pending"
		}
		fmt.Fprintf(w, "  %-16s %10s  |%-*s|  %s\n", n, msText(seg), width, bar, src)
		at += seg
	}
	fmt.Fprintf(w, "  %-16s %10s\n\n", "sum", msText(d.Segments.Sum()))
	if pending {
		fmt.Fprintf(w, "  engine timing pending: the engine exports its own span in batches (vLLM every 5 s); it is\n"+
			"  expected within %s (otlp.join_window). Until it arrives the engine's queue and prefill\n"+
			"  are inferred: run explain again in a few seconds.\n\n",
			r.Arrival.Add(r.EngineTimingDue).Sub(now).Round(time.Second))
	}
	opt := func(p *time.Duration) string {
		if p == nil {
			return "-"
		}
		return msText(*p)
	}
	in := "unknown" // nobody counted it: never shown as 0
	if u := r.Usage; u.InputKnown() {
		in = fmt.Sprintf("%d (cached %d)", u.InputTokens, u.CachedInputTokens)
	}
	fmt.Fprintf(w, "  TTFT %s (upstream %s)   TPOT %s   tokens in %s, out %d [%s]\n",
		opt(d.TTFT), opt(d.UpstreamTTFT), opt(d.TPOT), in, r.Usage.OutputTokens, r.Usage.Source)
	if e := r.EngineTiming; e != nil {
		// A figure the engine never reports is absent, not zero.
		reported := func(field string, d time.Duration) string {
			if !e.Reports(field) {
				return "— (not reported)"
			}
			return msText(d)
		}
		fmt.Fprintf(w, "  engine (%s): queue %s, prefill %s, decode %s, e2e %s\n", e.Signal,
			reported(record.EngineQueue, e.Queue), msText(e.Prefill), msText(e.Decode), reported(record.EngineE2E, e.E2E))
	}
	if len(r.Timeline) > 2 {
		fmt.Fprintf(w, "  token timeline: %d points, second half %.2f× the first half's time per token\n", len(r.Timeline), decayRatio(r.Timeline))
	}
}

func statusWord(r *record.Record) string {
	if r.ErrorType != "" {
		return fmt.Sprintf("%d %s", r.Status, r.ErrorType)
	}
	return fmt.Sprint(r.Status)
}

func msText(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}
