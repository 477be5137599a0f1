package why_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/alert"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
	"github.com/tollgate-dev/tollgate/internal/why"
	"github.com/tollgate-dev/tollgate/internal/window"
)

// The incidents of issue 21 replayed on a gateway started 10 minutes
// before each: synthetic Records at chosen timestamps (Poisson arrivals,
// varied lengths, 1.5 % errors) go into a real SQLite ledger and the real
// windows; the built-in rules are evaluated every 30 s with the ledger
// explaining each alert, as serve wires them.

var t0 = time.Date(2026, 3, 2, 14, 0, 0, 0, time.UTC)

type caller struct{ key, user, biz string }

var callers = []caller{{"k-search-bot", "search-bot", "search"}, {"k-app", "app", "shop"}, {"k-support", "support", "support"}, {"k-batch", "batch", "ads"}}

var templates = []string{"chat-a", "chat-b", "search", "summarise"}

// world is the replayed traffic and the engine it reaches.
type world struct {
	rng  *rand.Rand
	rate float64 // requests per second
	// capacity is what the engine serves per second; load above it
	// queues (a fluid queue: backlog / capacity is the wait).
	capacity float64
	backlog  float64
	// system is each template's system-prompt tokens.
	system map[string]int64
	// runaway, when set, sends this key's requests at this many per second on top.
	runaway     string
	runawayRate float64
}

func newWorld(seed uint64) *world {
	return &world{rng: rand.New(rand.NewPCG(seed, 21)), rate: 4, capacity: 6,
		system: map[string]int64{"chat-a": 200, "chat-b": 350, "search": 150, "summarise": 400}}
}

func (w *world) poisson(mean float64) int {
	// Knuth's method is fine for the means here (< 1,000) in pieces.
	n := 0
	for mean > 0 {
		m := min(mean, 30)
		mean -= m
		l, p := math.Exp(-m), 1.0
		for {
			p *= w.rng.Float64()
			if p <= l {
				break
			}
			n++
		}
	}
	return n
}

// minute is the Records arriving in minute m (arrival times uniform).
func (w *world) minute(m int) []*record.Record {
	start := t0.Add(time.Duration(m) * time.Minute)
	load := w.rate
	if w.runaway != "" {
		load += w.runawayRate
	}
	w.backlog = max(0, w.backlog+(load-w.capacity)*60)
	wait := w.backlog / w.capacity // seconds
	var out []*record.Record
	add := func(c caller, tmpl string) {
		at := start.Add(time.Duration(w.rng.Float64() * float64(time.Minute)))
		out = append(out, w.request(at, c, tmpl, wait))
	}
	for range w.poisson(w.rate * 60) {
		add(callers[w.rng.IntN(len(callers))], templates[w.rng.IntN(len(templates))])
	}
	if w.runaway != "" {
		for range w.poisson(w.runawayRate * 60) {
			add(callers[3], "summarise")
		}
	}
	return out
}

func (w *world) request(at time.Time, c caller, tmpl string, wait float64) *record.Record {
	rng := w.rng
	input := w.system[tmpl] + int64(math.Exp(4.5+0.8*rng.NormFloat64())) // ≈ 90 tokens of question, long-tailed
	output := min(int64(math.Exp(4.8+0.6*rng.NormFloat64()))+1, 1024)
	k := float64(input) / 1000
	prefill := time.Duration((0.5*float64(input) + 800*k*k) * (0.9 + 0.2*rng.Float64()) * float64(time.Millisecond))
	decode := time.Duration(float64(output) * (18 + 4*rng.Float64()) * float64(time.Millisecond))
	queue := time.Duration((wait*(0.8+0.4*rng.Float64()) + 0.01*rng.Float64()) * float64(time.Second))
	sent := 2 * time.Millisecond
	first := sent + queue + prefill + 3*time.Millisecond
	last := first + decode
	r := &record.Record{RequestID: fmt.Sprintf("r-%d-%d", at.UnixNano(), rng.Uint32()), Model: "qwen", ServedModel: "qwen-8b", Upstream: "vllm-0",
		TemplateID: tmpl, KeyID: c.key, UserID: c.user, BizLine: c.biz, EndUser: fmt.Sprintf("shopper-%d", rng.IntN(50)),
		Endpoint: "chat", Arrival: at, Stream: rng.IntN(5) != 0, Status: 200, UpstreamStatus: 200, FinishReason: "stop",
		Usage:        record.Usage{InputTokens: input, OutputTokens: output, Source: record.SourceEngine},
		EngineTiming: &record.EngineTiming{Signal: "vllm-span", Queue: queue, Prefill: prefill, Decode: decode}}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s prompt of %d tokens", tmpl, w.system[tmpl]))
	r.SystemSHA256, r.SystemTokens = hex.EncodeToString(sum[:]), w.system[tmpl]
	if rng.Float64() < 0.015 {
		r.Status, r.UpstreamStatus, r.ErrorType = 502, 502, "upstream_error"
	} else if rng.Float64() < 0.03 {
		r.FinishReason = "length"
	}
	r.Marks.Admitted, r.Marks.UpstreamSent = time.Millisecond, sent
	r.Marks.FirstUpstreamToken, r.Marks.FirstClientToken = first, first+time.Millisecond
	r.Marks.LastUpstreamToken, r.Marks.LastToken, r.Marks.End = last, last+time.Millisecond, last+2*time.Millisecond
	r.Finish()
	return r
}

// gateway is a fresh tollgate's alerting: a new SQLite ledger, windows
// and the built-in rules explained from the ledger.
type gateway struct {
	events events
	watch  *why.Watch
	st     *sqlite.Store
	agg    *window.Aggregator
	e      *alert.Engine
	fired  []alert.Alert
	firing map[string]bool
}

func newGateway(t *testing.T) *gateway {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := alert.Config{}
	if err := cfg.Validate("alerts"); err != nil {
		t.Fatal(err)
	}
	agg := window.New(window.Config{}, st, nil, nil)
	g := &gateway{st: st, agg: agg, firing: map[string]bool{},
		e: alert.NewEngine(cfg, agg, alert.Options{Explain: why.Explainer(st, 10*time.Second)})}
	g.watch = why.NewWatch(&g.events)
	return g
}

// events keeps what the prompt watch sends.
type events []store.Event

func (e *events) Send(ev store.Event) { *e = append(*e, ev) }

// run replays minute m's requests and evaluates at its half and its end.
func (g *gateway) run(t *testing.T, m int, recs []*record.Record) []alert.Alert {
	t.Helper()
	ctx := context.Background()
	if err := g.st.Insert(ctx, store.Batch{Records: recs}); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		g.agg.Add(r)
		g.watch.Observe(r)
	}
	var out []alert.Alert
	start := t0.Add(time.Duration(m) * time.Minute)
	for _, at := range []time.Time{start.Add(30 * time.Second), start.Add(time.Minute)} {
		g.agg.Flush(ctx, at)
		for _, a := range g.e.Eval(ctx, at) {
			if a.State == alert.Firing {
				out = append(out, a)
				g.fired = append(g.fired, a)
			}
		}
	}
	return out
}

// replay runs 10 minutes of steady traffic, then the incident from
// minute 10, and returns the first alert (after the onset) that cond
// accepts, and when it fired after the onset.
func replay(t *testing.T, w *world, incident func(w *world), cond func(a alert.Alert) bool) (alert.Alert, time.Duration, *gateway) {
	t.Helper()
	g := newGateway(t)
	for m := range 10 {
		if out := g.run(t, m, w.minute(m)); len(out) > 0 {
			t.Fatalf("minute %d, before the incident: %s fired: %s", m, out[0].Rule, out[0].Summary)
		}
	}
	incident(w)
	onset := t0.Add(10 * time.Minute)
	for m := 10; m < 20; m++ {
		for _, a := range g.run(t, m, w.minute(m)) {
			if cond(a) {
				return a, a.To.Sub(onset), g
			}
		}
	}
	var seen []string
	for _, a := range g.fired {
		seen = append(seen, a.Rule+": "+a.Summary)
	}
	t.Fatalf("no alert naming the cause within 10 minutes of the onset; fired:\n%s", strings.Join(seen, "\n"))
	return alert.Alert{}, 0, nil
}

// (a) One template's system prompt grows from 200 to 3,000 tokens.
func TestIncidentPromptGrowth(t *testing.T) {
	a, d, g := replay(t, newWorld(1), func(w *world) { w.system["chat-a"] = 3000 }, func(a alert.Alert) bool {
		return strings.Contains(a.Why, "prefill") && strings.Contains(a.Why, "template chat-a")
	})
	t.Logf("detected %v after the onset by %s (%s): %s", d, a.Rule, a.Severity, a.Summary)
	if d > 5*time.Minute {
		t.Errorf("detected %v after the onset, want within 5 m", d)
	}
	if !strings.Contains(a.Why, "template chat-a: system prompt changed at 14:10 (200 → 3,000 tokens, fingerprint") {
		t.Errorf("what changed does not show the fingerprint change: %s", a.Why)
	}
	var prompt []store.Event
	for _, ev := range g.events {
		if ev.Kind == why.EventKind {
			prompt = append(prompt, ev)
		}
	}
	if len(prompt) != 1 || prompt[0].Subject != "template chat-a" || !strings.Contains(prompt[0].Message, "200 → 3,000 tokens") {
		t.Errorf("prompt-change events %+v, want one for chat-a", prompt)
	} else {
		t.Logf("event: %s: %s", prompt[0].Subject, prompt[0].Message)
	}
}

// (b) A concurrency surge past the engine's capacity.
func TestIncidentQueueSurge(t *testing.T) {
	a, d, _ := replay(t, newWorld(2), func(w *world) { w.rate = 9 }, func(a alert.Alert) bool {
		return strings.Contains(a.Why, "engine_queue carries") && strings.Contains(a.Why, "scale out")
	})
	t.Logf("detected %v after the onset by %s (%s): %s", d, a.Rule, a.Severity, a.Summary)
	if d > 5*time.Minute {
		t.Errorf("detected %v after the onset, want within 5 m", d)
	}
}

// (c) One key at 50 times its usual token rate.
func TestIncidentRunawayKey(t *testing.T) {
	w := newWorld(3)
	w.capacity = 1000 // the engine keeps up: this is about spend, not latency
	a, d, _ := replay(t, w, func(w *world) { w.runaway, w.runawayRate = "k-batch", 49 }, func(a alert.Alert) bool {
		return a.Rule == alert.RunawayRule && a.Labels["key"] == "k-batch"
	})
	t.Logf("detected %v after the onset by %s (%s): %s", d, a.Rule, a.Severity, a.Summary)
	if d > 5*time.Minute {
		t.Errorf("detected %v after the onset, want within 5 m", d)
	}
	if !strings.Contains(a.Why, "k-batch") {
		t.Errorf("what changed does not name the key: %s", a.Why)
	}
}

// False alarms: 30 minutes of steady traffic from a fresh gateway.
func TestSteadyTrafficNoAlert(t *testing.T) {
	w := newWorld(4)
	g := newGateway(t)
	for m := range 30 {
		if out := g.run(t, m, w.minute(m)); len(out) > 0 {
			t.Fatalf("minute %d of steady traffic: %s fired: %s", m, out[0].Rule, out[0].Summary)
		}
	}
	if len(g.events) > 0 {
		t.Errorf("events from steady traffic: %+v", g.events)
	}
	if act := g.e.Active(); len(act) > 0 {
		t.Errorf("pending after 30 steady minutes: %s %s", act[0].Rule, act[0].Summary)
	}
}
