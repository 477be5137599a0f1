package alert

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/window"
)

// coldStart drives the built-in rules over a gateway that starts with no
// history at t0: each minute's requests are added (finishing spread over
// the minute), the windows flushed and the rules evaluated every 30 s.
type coldStart struct {
	t0  time.Time
	agg *window.Aggregator
	e   *Engine
	g   *got
	rng *rand.Rand
}

func newColdStart(t *testing.T) *coldStart {
	t.Helper()
	cfg := Config{}
	if err := cfg.Validate("alerts"); err != nil {
		t.Fatal(err)
	}
	agg := window.New(window.Config{}, nil, nil, nil)
	g := &got{}
	return &coldStart{t0: time.Date(2026, 3, 2, 14, 0, 0, 0, time.UTC), agg: agg, e: NewEngine(cfg, agg, Options{Notifier: g, Events: g}), g: g,
		rng: rand.New(rand.NewPCG(3, 9))}
}

// minute adds minute m's n requests from mk, then evaluates twice.
func (c *coldStart) minute(m, n int, mk func(end time.Time, rng *rand.Rand) *record.Record) []Alert {
	start := c.t0.Add(time.Duration(m) * time.Minute)
	for i := range n {
		c.agg.Add(mk(start.Add(time.Duration(i)*time.Minute/time.Duration(n)), c.rng))
	}
	var out []Alert
	for _, at := range []time.Time{start.Add(30 * time.Second), start.Add(time.Minute)} {
		c.agg.Flush(context.Background(), at)
		out = append(out, c.e.Eval(context.Background(), at)...)
	}
	return out
}

// steadyReq is a healthy streamed request: TTFT about 0.3 s, 300 input
// tokens, 100 output, with noise.
func steadyReq(ttft time.Duration, input int64) func(end time.Time, rng *rand.Rand) *record.Record {
	return func(end time.Time, rng *rand.Rand) *record.Record {
		f := func(d time.Duration) time.Duration { return time.Duration(float64(d) * (0.8 + 0.4*rng.Float64())) }
		first := f(ttft)
		e2e := first + f(2*time.Second)
		r := &record.Record{Model: "m", BizLine: "b", Upstream: "u", TemplateID: "t", Arrival: end.Add(-e2e), Stream: true,
			Status: 200, UpstreamStatus: 200, FinishReason: "stop",
			Usage: record.Usage{InputTokens: input + rng.Int64N(input/5+1), OutputTokens: 80 + rng.Int64N(40), Source: record.SourceEngine}}
		r.Marks.UpstreamSent = time.Millisecond
		r.Marks.FirstUpstreamToken, r.Marks.FirstClientToken = first, first
		r.Marks.LastUpstreamToken, r.Marks.LastToken, r.Marks.End = e2e, e2e, e2e
		r.Finish()
		return r
	}
}

// TestYoungBaseline: a gateway started 10 minutes before TTFT grows ten
// times fires the TTFT baseline rule within five minutes, from a young
// baseline it says it used; the incident does not become its own
// baseline while it lasts; before YoungMin of history nothing judges.
func TestYoungBaseline(t *testing.T) {
	c := newColdStart(t)
	steady, slow := steadyReq(300*time.Millisecond, 300), steadyReq(3*time.Second, 300)
	for m := range 10 {
		if out := c.minute(m, 60, steady); len(out) > 0 {
			t.Fatalf("minute %d of steady traffic: %+v", m, out)
		}
	}
	onset := c.t0.Add(10 * time.Minute)
	var fired *Alert
	for m := 10; m < 40; m++ {
		for _, a := range c.minute(m, 60, slow) {
			if a.Rule == "ttft_p99_baseline" && a.State == Firing && fired == nil {
				fired = &a
			}
			if a.State == Resolved {
				t.Fatalf("minute %d, the incident going on: %s resolved (its baseline took the incident in?)", m, a.Rule)
			}
		}
	}
	if fired == nil {
		t.Fatalf("no ttft_p99_baseline alert in 28 minutes of TTFT ×10: %s", c.g.list())
	}
	if d := fired.To.Sub(onset); d > 5*time.Minute {
		t.Errorf("fired %v after the onset, want within 5 m", d)
	}
	t.Logf("ttft_p99_baseline fired %v after the onset: %s", fired.To.Sub(onset), fired.Summary)
	if !fired.YoungBaseline || !strings.Contains(fired.Summary, "young baseline") {
		t.Errorf("alert does not say its baseline is young: %+v", fired)
	}
	if fired.BaselineFrom.Before(c.t0) || fired.BaselineTo.After(onset) {
		t.Errorf("young baseline %v–%v reaches outside the history before the onset (%v–%v)", fired.BaselineFrom, fired.BaselineTo, c.t0, onset)
	}
	if fired.Severity != Warning {
		t.Errorf("severity %s: without the 1 h window's history a young baseline must not escalate", fired.Severity)
	}
	if fired.Value < 5*fired.Baseline {
		t.Errorf("value %.3g against baseline %.3g, want about ×10", fired.Value, fired.Baseline)
	}
}

// TestYoungBaselineWaitsForHistory: a spike four minutes after start
// has no baseline to judge from (its 5 m window and YoungMin before it
// need 10 minutes of history, and the spike would be in its baseline
// until then): no baseline rule judges.
func TestYoungBaselineWaitsForHistory(t *testing.T) {
	c := newColdStart(t)
	for m := range 4 {
		c.minute(m, 60, steadyReq(300*time.Millisecond, 300))
	}
	for m := 4; m < 9; m++ {
		for _, a := range c.minute(m, 60, steadyReq(3*time.Second, 300)) {
			if a.Baseline > 0 {
				t.Fatalf("minute %d: %s judged from a baseline of %v–%v, under %v of history", m, a.Rule, a.BaselineFrom, a.BaselineTo, YoungMin)
			}
		}
	}
}

// TestGuardRailsFromFirstMinute: the seeds' absolute rules need no
// history: a request over 8,000 tokens, a queue P95 over 500 ms and
// failing requests each fire in the gateway's first minutes.
func TestGuardRailsFromFirstMinute(t *testing.T) {
	c := newColdStart(t)
	fired := map[string]time.Duration{}
	for m := range 6 {
		out := c.minute(m, 60, func(end time.Time, rng *rand.Rand) *record.Record {
			r := steadyReq(1200*time.Millisecond, 300)(end, rng)
			if rng.IntN(10) == 0 {
				r.Status, r.ErrorType = 502, "upstream_error"
			}
			if end.Equal(c.t0) {
				r.Usage.InputTokens = 9000
			}
			// Every request waited 0.8 s in the engine's queue.
			r.EngineTiming = &record.EngineTiming{Signal: "vllm-span", Queue: 800 * time.Millisecond, TTFT: 900 * time.Millisecond, Prefill: 100 * time.Millisecond}
			r.Finish()
			return r
		})
		for _, a := range out {
			if _, ok := fired[a.Rule]; !ok && a.State == Firing {
				fired[a.Rule] = a.To.Sub(c.t0)
			}
		}
	}
	for _, rule := range []string{"large_request", "engine_queue_p95", "error_rate"} {
		d, ok := fired[rule]
		if !ok {
			t.Errorf("%s did not fire in the first 6 minutes: %s", rule, c.g.list())
			continue
		}
		if d > 4*time.Minute {
			t.Errorf("%s fired %v after start, want within 4 m", rule, d)
		}
		t.Logf("%s fired %v after start", rule, d)
	}
}

// TestRunawaySpend: a key spending 15 times its own usual rate warns;
// a new key warns only above the ceiling; a quiet key tripling does not.
func TestRunawaySpend(t *testing.T) {
	c := newColdStart(t)
	keyed := func(key string, input int64) func(end time.Time, rng *rand.Rand) *record.Record {
		return func(end time.Time, rng *rand.Rand) *record.Record {
			r := steadyReq(300*time.Millisecond, input)(end, rng)
			r.KeyID, r.UserID = key, "user-"+key
			return r
		}
	}
	for m := range 20 {
		c.minute(m, 20, keyed("steady", 1000)) // ~22,000 tokens a minute
		c.minute(m, 2, keyed("quiet", 100))
	}
	var fired []Alert
	for m := 20; m < 28; m++ {
		fired = append(fired, c.minute(m, 600, keyed("steady", 1000))...) // thirty times
		fired = append(fired, c.minute(m, 6, keyed("quiet", 100))...)     // three times, few tokens
		fired = append(fired, c.minute(m, 250, keyed("new", 1000))...)    // no history: over 1,000,000 per 5 m
	}
	got := map[string]Alert{}
	for _, a := range fired {
		if a.Rule == RunawayRule && a.State == Firing {
			got[a.Labels["key"]] = a
		}
	}
	if a, ok := got["steady"]; !ok || a.Baseline == 0 || a.Value < 5*a.Baseline || a.Labels["user"] != "user-steady" {
		t.Errorf("steady key at 30 times its rate: %+v", a)
	}
	if a, ok := got["new"]; !ok || a.Baseline != 0 || a.Threshold != 1e6 {
		t.Errorf("new key over the ceiling: %+v", a)
	}
	if _, ok := got["quiet"]; ok {
		t.Errorf("a quiet key tripling fired: %+v", got["quiet"])
	}
}
