package why

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
)

var t0 = time.Date(2026, 3, 2, 14, 0, 0, 0, time.UTC)

// req is a finished streamed request arriving at at: queue and prefill
// as its engine reported them, then 100 ms of decode.
type req struct {
	template, key string
	input         int64
	queue         time.Duration
	prefill       time.Duration
}

func (q req) at(at time.Time) *record.Record {
	prefill := q.prefill
	if prefill == 0 {
		prefill = 180 * time.Millisecond
	}
	first := q.queue + prefill + 2*time.Millisecond
	end := first + 100*time.Millisecond
	r := &record.Record{Model: "m", BizLine: "b", Upstream: "u", TemplateID: q.template, KeyID: q.key, UserID: q.key,
		Arrival: at, Stream: true, Status: 200, UpstreamStatus: 200, FinishReason: "stop",
		Usage:        record.Usage{InputTokens: q.input, OutputTokens: 20, Source: record.SourceEngine},
		EngineTiming: &record.EngineTiming{Signal: "vllm-span", Queue: q.queue, Prefill: prefill, Decode: 100 * time.Millisecond}}
	r.Marks.UpstreamSent = time.Millisecond
	r.Marks.FirstUpstreamToken, r.Marks.FirstClientToken = first, first
	r.Marks.LastUpstreamToken, r.Marks.LastToken, r.Marks.End = end, end, end
	r.Finish()
	return r
}

// period spreads the requests of each group evenly over [from, from+d).
func period(from time.Time, d time.Duration, groups ...[]*record.Record) Period {
	p := Period{From: from, To: from.Add(d)}
	for _, g := range groups {
		p.Records = append(p.Records, g...)
	}
	return p
}

// n requests like q, spread over [from, from+d).
func n(count int, q req, from time.Time, d time.Duration) []*record.Record {
	out := make([]*record.Record, count)
	for i := range out {
		out[i] = q.at(from.Add(time.Duration(i) * d / time.Duration(count)))
	}
	return out
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9*max(1, math.Abs(b)) }

func contribution(t *testing.T, rep *Report, d, v string) Contribution {
	t.Helper()
	for _, c := range rep.Dimensions[d] {
		if c.Value == v {
			return c
		}
	}
	t.Fatalf("no contribution of %s=%s in %+v", d, v, rep.Dimensions[d])
	return Contribution{}
}

// TestDecomposition: tokens per request over hand-made periods whose
// decomposition is known. Baseline: templates a and b 40 requests of 100
// tokens each, c 20 of 1,000 (280 per request).
func TestDecomposition(t *testing.T) {
	base := func() Period {
		return period(t0, time.Hour, n(40, req{template: "a", input: 100}, t0, time.Hour), n(40, req{template: "b", input: 100}, t0, time.Hour),
			n(20, req{template: "c", input: 1000}, t0, time.Hour))
	}
	now := t0.Add(time.Hour)
	for _, tc := range []struct {
		name            string
		cur             Period
		total           float64
		mixA, mixC      float64
		rateC           float64
		main, code      string
		explainedByC    bool
		explainedCShare float64
	}{
		// c sends twice its share, its requests as large as before.
		{name: "pure mix", cur: period(now, 15*time.Minute, n(30, req{template: "a", input: 100}, now, 15*time.Minute),
			n(30, req{template: "b", input: 100}, now, 15*time.Minute), n(40, req{template: "c", input: 1000}, now, 15*time.Minute)),
			total: 180, mixA: 18, mixC: 144, rateC: 0, main: "mix", code: "why.slice_mix", explainedByC: true, explainedCShare: 0.8},
		// c's requests double in size, its share unchanged.
		{name: "pure rate", cur: period(now, 15*time.Minute, n(40, req{template: "a", input: 100}, now, 15*time.Minute),
			n(40, req{template: "b", input: 100}, now, 15*time.Minute), n(20, req{template: "c", input: 2000}, now, 15*time.Minute)),
			total: 200, mixA: 0, mixC: 0, rateC: 200, main: "rate", code: "why.slice_rate", explainedByC: true, explainedCShare: 1},
		// Both: c sends twice its share and its requests double.
		{name: "both", cur: period(now, 15*time.Minute, n(30, req{template: "a", input: 100}, now, 15*time.Minute),
			n(30, req{template: "b", input: 100}, now, 15*time.Minute), n(40, req{template: "c", input: 2000}, now, 15*time.Minute)),
			total: 580, mixA: 18, mixC: 144, rateC: 400, main: "rate", code: "why.slice_rate", explainedByC: true, explainedCShare: 544.0 / 580},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := Explain(base(), tc.cur, Options{Figure: "input_tokens_per_request"})
			if err != nil {
				t.Fatal(err)
			}
			if got := rep.MeasureNow - rep.MeasureBefore; !near(got, tc.total) {
				t.Fatalf("change %v, want %v", got, tc.total)
			}
			var sumMix, sumRate float64
			for _, c := range rep.Dimensions[DimTemplate] {
				sumMix += c.Mix
				sumRate += c.Rate
			}
			if !near(sumMix+sumRate, tc.total) {
				t.Errorf("mix %v + rate %v over the templates ≠ the change %v", sumMix, sumRate, tc.total)
			}
			a, c := contribution(t, rep, DimTemplate, "a"), contribution(t, rep, DimTemplate, "c")
			if !near(a.Mix, tc.mixA) || !near(a.Rate, 0) || !near(c.Mix, tc.mixC) || !near(c.Rate, tc.rateC) {
				t.Errorf("a mix %v rate %v, c mix %v rate %v; want a %v/0, c %v/%v", a.Mix, a.Rate, c.Mix, c.Rate, tc.mixA, tc.mixC, tc.rateC)
			}
			if e := rep.Explained; e == nil || e.Dim != DimTemplate || e.Value != "c" || e.Main() != tc.main || !near(e.Share, tc.explainedCShare) {
				t.Fatalf("explained by %+v, want template c (%s, share %.3f)", e, tc.main, tc.explainedCShare)
			}
			if !hasCode(rep, tc.code) {
				t.Errorf("messages %v lack %s", texts(rep), tc.code)
			}
		})
	}
}

// TestSpread: every template's requests grow alike: no slice explains
// the change, and the report says it is spread.
func TestSpread(t *testing.T) {
	now := t0.Add(time.Hour)
	base := period(t0, time.Hour, n(50, req{template: "a", input: 100}, t0, time.Hour), n(50, req{template: "b", input: 200}, t0, time.Hour))
	cur := period(now, 15*time.Minute, n(50, req{template: "a", input: 300}, now, 15*time.Minute), n(50, req{template: "b", input: 600}, now, 15*time.Minute))
	rep, err := Explain(base, cur, Options{Figure: "input_tokens_per_request"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Explained != nil {
		t.Errorf("explained by %+v; every template grew alike", rep.Explained)
	}
	if !hasCode(rep, "why.spread") {
		t.Errorf("messages %v lack why.spread", texts(rep))
	}
}

// TestRunawayKey: one key at 50 times its usual token rate is named, as
// sending more (mix), and the figure picked by itself is tokens per
// minute.
func TestRunawayKey(t *testing.T) {
	now := t0.Add(time.Hour)
	base := period(t0, time.Hour, n(600, req{template: "a", key: "k-app", input: 1000}, t0, time.Hour),
		n(60, req{template: "a", key: "k-script", input: 1000}, t0, time.Hour))
	cur := period(now, 5*time.Minute, n(50, req{template: "a", key: "k-app", input: 1000}, now, 5*time.Minute),
		n(250, req{template: "a", key: "k-script", input: 1000}, now, 5*time.Minute))
	rep, err := Explain(base, cur, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Figure != "tokens_per_minute" {
		t.Fatalf("figure %s, want tokens_per_minute", rep.Figure)
	}
	e := rep.Explained
	if e == nil || (e.Dim != DimKey && e.Dim != DimUser) || e.Value != "k-script" || e.Main() != "mix" || e.Share < 0.95 {
		t.Fatalf("explained by %+v, want key k-script sending more", e)
	}
	// 1 request a minute of 1,020 tokens → 50 a minute: 49 × 1,020 more.
	if c := contribution(t, rep, DimKey, "k-script"); !near(c.Mix, 49*1020) {
		t.Errorf("k-script's volume part %v, want %v", c.Mix, 49*1020)
	}
}

// TestPromptGrowth: the seeds' incident in small: template chat-a's
// prompt grows and its prefill goes from 180 ms to 8.5 s: TTFT P99 is the
// figure, prefill the segment, chat-a the slice, from the first minute
// of the growth.
func TestPromptGrowth(t *testing.T) {
	now := t0.Add(time.Hour)
	base := period(t0, time.Hour, n(900, req{template: "chat-a", input: 300}, t0, time.Hour), n(2700, req{template: "other", input: 300}, t0, time.Hour))
	onset := now.Add(3 * time.Minute)
	cur := period(now, 15*time.Minute, n(45, req{template: "chat-a", input: 300}, now, 3*time.Minute),
		n(180, req{template: "chat-a", input: 3200, prefill: 8500 * time.Millisecond}, onset, 12*time.Minute),
		n(900, req{template: "other", input: 300}, now, 15*time.Minute))
	rep, err := Explain(base, cur, Options{Figure: "ttft_p99"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Ratio < 10 {
		t.Errorf("TTFT P99 ×%.1f, want above 10 (≈ 0.28 s → 8.6 s)", rep.Ratio)
	}
	if len(rep.Segments) == 0 || rep.Segments[0].Name != record.SegPrefill || rep.Segments[0].Share < 0.95 {
		t.Errorf("segments %+v, want prefill first with nearly all the growth", rep.Segments)
	}
	if e := rep.Explained; e == nil || e.Value != "chat-a" && e.Dim != DimInput {
		t.Errorf("explained by %+v, want template chat-a (or its input bucket)", e)
	}
	if c := contribution(t, rep, DimTemplate, "chat-a"); c.Share < 0.95 || c.Main() != "rate" {
		t.Errorf("chat-a: %+v, want nearly all the change, as rate", c)
	}
	if !rep.Since.Equal(onset) {
		t.Errorf("since %v, want the onset %v", rep.Since, onset)
	}
	all := strings.Join(texts(rep), " ")
	for _, want := range []string{"ttft_p99 went from", "prefill carries", "Since 15:03"} {
		if !strings.Contains(all, want) {
			t.Errorf("messages %q lack %q", all, want)
		}
	}
	if !strings.Contains(rep.Dimensions[DimTemplate][0].Link, "template=chat-a") {
		t.Errorf("link %q does not list chat-a's requests", rep.Dimensions[DimTemplate][0].Link)
	}
}

// TestQueueSurge: every request waits in the engine's queue: the engine
// queue is the dominant segment, with the scaling advice.
func TestQueueSurge(t *testing.T) {
	now := t0.Add(time.Hour)
	base := period(t0, time.Hour, n(600, req{template: "a", input: 300}, t0, time.Hour), n(600, req{template: "b", input: 300}, t0, time.Hour))
	cur := period(now, 5*time.Minute, n(300, req{template: "a", input: 300, queue: 18 * time.Second}, now, 5*time.Minute),
		n(300, req{template: "b", input: 300, queue: 18 * time.Second}, now, 5*time.Minute))
	rep, err := Explain(base, cur, Options{Figure: "ttft_p99"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Segments) == 0 || rep.Segments[0].Name != record.SegEngineQueue {
		t.Fatalf("segments %+v, want engine_queue first", rep.Segments)
	}
	if !hasCode(rep, "why.advice_queue") {
		t.Errorf("messages %v lack the scaling advice", texts(rep))
	}
}

func TestUnknownFigure(t *testing.T) {
	_, err := Explain(Period{}, Period{}, Options{Figure: "ttft_p42"})
	if err == nil || !strings.Contains(err.Error(), `figure "ttft_p42"`) {
		t.Errorf("err = %v, want one naming the figure", err)
	}
}

func hasCode(rep *Report, code string) bool {
	for _, m := range rep.Messages {
		if m.Code == code {
			return true
		}
	}
	return false
}

func texts(rep *Report) []string {
	var out []string
	for _, m := range rep.Messages {
		out = append(out, m.Text)
	}
	return out
}

// TestWatch: a template settled on a system prompt raises one event when
// it changes; one alternating between two raises none; one whose prompt
// differs by request raises none.
func TestWatch(t *testing.T) {
	var got []string
	w := NewWatch(sendFunc(func(ev store.Event) { got = append(got, ev.Subject+": "+ev.Message) }))
	send := func(tmpl, fp string, tokens int64, at time.Time) {
		r := req{template: tmpl, key: "k"}.at(at)
		r.SystemSHA256, r.SystemTokens = fp, tokens
		w.Observe(r)
	}
	for i := range 60 {
		at := t0.Add(time.Duration(i) * time.Second)
		fp := "aaaa"
		if i >= 40 {
			fp = "bbbb"
		}
		send("grows", fp, map[string]int64{"aaaa": 226, "bbbb": 3006}[fp], at)
		send("alternates", []string{"cccc", "dddd"}[i%5/4], 100, at)
		send("per-user", fmt.Sprintf("u%03d", i), 100, at)
		// Mostly one prompt, another every fifth request, then a third:
		// the change is from the usual one, not the last seen.
		mixed := []string{"1111", "1111", "1111", "1111", "2222"}[i%5]
		if i >= 40 {
			mixed = "3333"
		}
		send("mixed", mixed, map[string]int64{"1111": 200, "2222": 1800, "3333": 3000}[mixed], at)
	}
	want := []string{"template grows: system prompt changed at 14:00 (226 → 3,006 tokens, fingerprint aaaa… → bbbb…), sent by key k.",
		"template mixed: system prompt changed at 14:00 (200 → 3,000 tokens, fingerprint 1111… → 3333…), sent by key k."}
	if !slices.Equal(got, want) {
		t.Errorf("events %q, want only %q", got, want)
	}
}

type sendFunc func(store.Event)

func (f sendFunc) Send(ev store.Event) { f(ev) }
