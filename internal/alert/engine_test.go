package alert

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
	"github.com/tollgate-dev/tollgate/internal/window"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// finished is a request that finished now, with the given TTFT.
func finished(model string, ttft time.Duration, failed bool) *record.Record {
	e2e := ttft + 500*time.Millisecond
	r := &record.Record{
		Model: model, BizLine: "b", Upstream: "u", TemplateID: "t", Arrival: time.Now().Add(-e2e), Stream: true,
		Status: 200, UpstreamStatus: 200, FinishReason: "stop",
		Usage: record.Usage{InputTokens: 100, OutputTokens: 20, Source: record.SourceEngine},
	}
	if failed {
		r.Status, r.ErrorType = 502, "upstream_error"
	}
	r.Marks.UpstreamSent = time.Millisecond
	r.Marks.FirstUpstreamToken, r.Marks.FirstClientToken, r.Marks.LastToken, r.Marks.End = ttft, ttft, e2e, e2e
	r.Finish()
	return r
}

// got is a Notifier and Events that records what it was given, with the
// (bubble's) time.
type got struct {
	mu     sync.Mutex
	alerts []Alert
	at     []time.Time
	events []store.Event
}

func (g *got) Notify(_ context.Context, a Alert) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.alerts = append(g.alerts, a)
	g.at = append(g.at, time.Now())
}

func (g *got) Send(ev store.Event) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.events = append(g.events, ev)
}

func (g *got) snapshot() ([]Alert, []time.Time, []store.Event) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.alerts), slices.Clone(g.at), slices.Clone(g.events)
}

func (g *got) list() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var b strings.Builder
	for i, a := range g.alerts {
		fmt.Fprintf(&b, "%s %s %s %s; ", g.at[i].Format("15:04:05"), a.Rule, a.State, a.Severity)
	}
	return b.String()
}

// traffic adds one request a second for d, each from gen.
func traffic(a *window.Aggregator, d time.Duration, gen func(i int) *record.Record) {
	for i := range int(d / time.Second) {
		a.Add(gen(i))
		time.Sleep(time.Second)
	}
}

// run starts the engine on a 30 s ticker inside the bubble and returns a
// stop function that waits for it.
func run(e *Engine) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx, 30*time.Second); close(done) }()
	return func() { cancel(); <-done }
}

// TestLifecycle: a breach pends, fires once after `for`, is not sent again
// while it lasts, and resolves when it ends; history has both.
func TestLifecycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		agg := window.New(window.Config{}, nil, nil, nil)
		g := &got{}
		cfg := Config{Defaults: new(bool), Rules: []Rule{{Name: "errors", Signal: "error_rate", By: []string{"model"},
			Windows: []time.Duration{time.Minute}, Threshold: &Levels{Warning: 0.1, Critical: 0.6}, MinRequests: 10, For: 2 * time.Minute}}}
		if err := cfg.Validate("alerts"); err != nil {
			t.Fatal(err)
		}
		e := NewEngine(cfg, agg, Options{Notifier: g, Events: g})
		stop := run(e)
		defer stop()

		traffic(agg, 5*time.Minute, func(int) *record.Record { return finished("m", 100*time.Millisecond, false) })
		if s := g.list(); s != "" {
			t.Fatalf("healthy traffic alerted: %s", s)
		}
		// One request in four fails: warning level.
		traffic(agg, 90*time.Second, func(i int) *record.Record { return finished("m", 100*time.Millisecond, i%4 == 0) })
		if act := e.Active(); len(act) != 1 || act[0].State != Pending || act[0].Severity != Warning {
			t.Fatalf("after 90 s of errors: active = %+v, want one pending warning", act)
		}
		traffic(agg, 5*time.Minute, func(i int) *record.Record { return finished("m", 100*time.Millisecond, i%4 == 0) })
		traffic(agg, 3*time.Minute, func(int) *record.Record { return finished("m", 100*time.Millisecond, false) })

		alerts, at, events := g.snapshot()
		if len(alerts) != 2 || alerts[0].State != Firing || alerts[1].State != Resolved {
			t.Fatalf("notifications: %s; want one firing then one resolved", g.list())
		}
		f := alerts[0]
		if f.Severity != Warning || f.Labels["model"] != "m" || f.Value < 0.2 || f.Value > 0.3 || f.Threshold != 0.1 {
			t.Errorf("firing alert = %+v", f)
		}
		// Errors began at 5 m; the 1 m window (whole minutes) sees them from
		// the first evaluation after 6 m; `for: 2m` fires 2 m later.
		if d := at[0].Sub(start); d < 8*time.Minute || d > 9*time.Minute {
			t.Errorf("fired %v after the start, want between 8 and 9 m", d)
		}
		if d := at[1].Sub(start); d < 11*time.Minute+30*time.Second || d > 13*time.Minute {
			t.Errorf("resolved %v after the start, want soon after the errors stopped at 11.5 m", d)
		}
		if !strings.Contains(f.Link, "errors=1") || !strings.Contains(f.Link, "model=m") {
			t.Errorf("link %q does not list the model's failed requests", f.Link)
		}
		if len(events) != 2 || events[0].Kind != EventKind || !strings.HasPrefix(events[1].Message, "resolved") {
			t.Errorf("history = %+v", events)
		}
	})
}

// TestEscalationNeedsBothWindows: a short TTFT spike breaches the 5 m
// window only and does not fire; a lasting one breaches the 1 h window too
// and fires, critical.
func TestEscalationNeedsBothWindows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		agg := window.New(window.Config{}, nil, nil, nil)
		g := &got{}
		cfg := Config{Defaults: new(bool), Rules: []Rule{{Name: "ttft", Signal: "ttft_p50", By: []string{"model"},
			Windows: []time.Duration{5 * time.Minute, time.Hour}, Baseline: &Baseline{Previous: 30 * time.Minute}, MinRequests: 50, For: time.Minute}}}
		if err := cfg.Validate("alerts"); err != nil {
			t.Fatal(err)
		}
		e := NewEngine(cfg, agg, Options{Notifier: g})
		stop := run(e)
		defer stop()
		fast := func(int) *record.Record { return finished("m", 100*time.Millisecond, false) }
		slow := func(int) *record.Record { return finished("m", time.Second, false) }

		traffic(agg, 100*time.Minute, fast)
		traffic(agg, 4*time.Minute, slow) // the 5 m window's median is slow, the hour's is not
		traffic(agg, 10*time.Minute, fast)
		if s := g.list(); s != "" {
			t.Fatalf("a 4-minute spike fired: %s", s)
		}
		traffic(agg, 40*time.Minute, slow) // now most of the hour is slow too
		alerts, _, _ := g.snapshot()
		if len(alerts) == 0 || alerts[0].State != Firing || alerts[0].Severity != Critical {
			t.Fatalf("after 40 slow minutes: %s; want a critical firing alert", g.list())
		}
		if a := alerts[0]; a.Baseline < 0.09 || a.Baseline > 0.11 || a.Value < 0.95 {
			t.Errorf("alert = %+v, want value ≈ 1 s against a baseline ≈ 0.1 s", a)
		}
	})
}

// TestMinRequests: every request failing does not page while traffic is
// below the rule's minimum.
func TestMinRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		agg := window.New(window.Config{}, nil, nil, nil)
		g := &got{}
		cfg := Config{Defaults: new(bool), Rules: []Rule{{Name: "errors", Signal: "error_rate",
			Windows: []time.Duration{5 * time.Minute}, Threshold: &Levels{Warning: 0.1}, MinRequests: 20}}}
		e := NewEngine(cfg, agg, Options{Notifier: g})
		stop := run(e)
		defer stop()
		// Three failing requests a minute: 15 per 5 minutes, under 20.
		for range 30 {
			for range 3 {
				agg.Add(finished("m", 100*time.Millisecond, true))
			}
			time.Sleep(time.Minute)
		}
		if s := g.list(); s != "" {
			t.Fatalf("quiet traffic paged: %s", s)
		}
		// Five a minute: 25 per 5 minutes, and it fires.
		for range 10 {
			for range 5 {
				agg.Add(finished("m", 100*time.Millisecond, true))
			}
			time.Sleep(time.Minute)
		}
		if s := g.list(); !strings.Contains(s, "errors firing") {
			t.Fatalf("busier failing traffic: %q, want it to fire", s)
		}
	})
}

func TestValidateNamesPaths(t *testing.T) {
	cfg := Config{Disable: []string{"nope"}, Rules: []Rule{
		{Name: "a", Signal: "ttft_p42", Threshold: &Levels{Warning: 1}},
		{Name: "a", Signal: "error_rate", By: []string{"colour"}, Threshold: &Levels{Warning: 0.5, Critical: 0.1}},
		{Name: "b", Signal: "ttft_p99", Baseline: &Baseline{}, Windows: []time.Duration{30 * time.Second}},
		{Name: "c", Signal: "tokens"},
		{Name: "d", Signal: "requests", Below: true, Baseline: &Baseline{Previous: time.Hour}},
		{Name: "e", Signal: "requests", Baseline: &Baseline{Previous: time.Hour, Levels: Levels{Warning: 3, Critical: 1.2}}},
	}}
	err := cfg.Validate("alerts")
	if err == nil {
		t.Fatal("bad rules accepted")
	}
	for _, want := range []string{
		`alerts.disable: no built-in rule "nope"`,
		`alerts.rules[0].signal: unknown signal "ttft_p42"`,
		`alerts.rules[1].name: "a" used twice`,
		`alerts.rules[1].by: unknown label "colour"`,
		`alerts.rules[1].threshold.critical: 0.1 is less severe than warning 0.5`,
		`alerts.rules[2].windows[0]: 30s: want whole minutes`,
		`alerts.rules[2].baseline: set exactly one of previous and same_hour_days`,
		`alerts.rules[3].threshold: set exactly one of threshold and baseline`,
		`alerts.rules[4].baseline: a below rule needs its factors`,
		`alerts.rules[5].baseline.critical: 1.2 is less severe than warning 3`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
	if err := (&Config{}).Validate("alerts"); err != nil {
		t.Errorf("empty config: %v", err)
	}
	for _, r := range DefaultRules {
		if err := r.validate("default"); err != nil {
			t.Errorf("built-in rule %s: %v", r.Name, err)
		}
	}
}

// TestRaise: a raised alert fires at once, is not repeated while it lasts
// unless it grows severer, and resolves once its time is up.
func TestRaise(t *testing.T) {
	agg := window.New(window.Config{}, nil, nil, nil)
	g := &got{}
	e := NewEngine(Config{Defaults: new(bool)}, agg, Options{Notifier: g, Events: g})
	ctx := context.Background()
	now := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	quota := Alert{Rule: "quota", Severity: Warning, Labels: map[string]string{"scope": "user:bob", "limit": "daily_tokens"}, Summary: "80 %"}
	e.Raise(ctx, quota, now, now.Add(time.Hour))
	e.Raise(ctx, quota, now.Add(time.Minute), now.Add(time.Hour))
	crit := quota
	crit.Severity = Critical
	e.Raise(ctx, crit, now.Add(2*time.Minute), now.Add(time.Hour))
	e.Raise(ctx, quota, now.Add(3*time.Minute), now.Add(time.Hour)) // stays critical
	if act := e.Active(); len(act) != 1 || act[0].Severity != Critical {
		t.Errorf("active = %+v, want one critical", act)
	}
	e.Eval(ctx, now.Add(30*time.Minute))
	e.Eval(ctx, now.Add(61*time.Minute))
	alerts, _, events := g.snapshot()
	var states []string
	for _, a := range alerts {
		states = append(states, string(a.State)+" "+string(a.Severity))
	}
	if got := strings.Join(states, ", "); got != "firing warning, firing critical, resolved critical" {
		t.Errorf("notifications: %s", got)
	}
	if len(events) != 3 || len(e.Active()) != 0 {
		t.Errorf("%d events, %d still active", len(events), len(e.Active()))
	}
}

// TestReadErrorKeepsAlerts: when a rule cannot read its windows (the
// store is gone), its firing alerts stay firing rather than resolving.
func TestReadErrorKeepsAlerts(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "w.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	agg := window.New(window.Config{}, st, nil, nil)
	g := &got{}
	cfg := Config{Defaults: new(bool), Rules: []Rule{{Name: "errs", Signal: "error_rate", Windows: []time.Duration{3 * time.Hour},
		Threshold: &Levels{Warning: 0.1}, MinRequests: 10}}}
	e := NewEngine(cfg, agg, Options{Notifier: g})
	start := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	for m := range 240 {
		at := start.Add(time.Duration(m) * time.Minute)
		for i := range 4 {
			r := finished("m", 100*time.Millisecond, i == 0)
			r.Arrival = at.Add(time.Duration(i) * 10 * time.Second)
			agg.Add(r)
		}
		agg.Flush(ctx, at)
	}
	now := start.Add(240 * time.Minute)
	e.Eval(ctx, now)
	if act := e.Active(); len(act) != 1 || act[0].State != Firing {
		t.Fatalf("active = %+v, want one firing alert", act)
	}
	st.Close() // the 3 h window now needs hours the store cannot give
	e.Eval(ctx, now.Add(time.Minute))
	if act := e.Active(); len(act) != 1 || act[0].State != Firing {
		t.Errorf("after a read error: active = %+v, want the alert still firing", act)
	}
	if alerts, _, _ := g.snapshot(); len(alerts) != 1 {
		t.Errorf("notifications: %+v, want only the firing one", alerts)
	}
}

// TestRestoreCarriesAlerts: an engine that Restores another's Snapshot (a
// new leader) carries its alerts on: a firing alert is not sent again,
// and when the breach ends it is resolved — by the new engine, with the
// old start. An engine that starts empty would page again and never send
// the resolve of the first. Alerts raised on the new engine stay.
func TestRestoreCarriesAlerts(t *testing.T) {
	ctx := context.Background()
	agg := window.New(window.Config{}, nil, nil, nil)
	cfg := Config{Defaults: new(bool), Rules: []Rule{{Name: "errs", Signal: "error_rate", Windows: []time.Duration{10 * time.Minute},
		Threshold: &Levels{Warning: 0.1}, MinRequests: 10}}}
	if err := cfg.Validate("alerts"); err != nil {
		t.Fatal(err)
	}
	start := time.Now().Truncate(time.Minute).Add(-time.Hour)
	add := func(from time.Time, minutes int, failing bool) {
		for m := range minutes {
			for i := range 4 {
				r := finished("m", 100*time.Millisecond, failing && i == 0)
				r.Arrival = from.Add(time.Duration(m)*time.Minute + time.Duration(i)*10*time.Second)
				agg.Add(r)
			}
		}
	}
	add(start, 20, true)
	now := start.Add(20 * time.Minute)
	ga, gb, gc := &got{}, &got{}, &got{}
	a := NewEngine(cfg, agg, Options{Notifier: ga})
	a.Eval(ctx, now)
	if act := a.Active(); len(act) != 1 || act[0].State != Firing {
		t.Fatalf("the first leader: active = %+v, want one firing alert", act)
	}

	b := NewEngine(cfg, agg, Options{Notifier: gb})
	b.Raise(ctx, Alert{Rule: "quota", Severity: Warning, Labels: map[string]string{"user": "u"}}, now, now.Add(time.Hour))
	b.Restore(a.Snapshot())
	c := NewEngine(cfg, agg, Options{Notifier: gc}) // no Restore
	b.Eval(ctx, now.Add(time.Minute))
	c.Eval(ctx, now.Add(time.Minute))
	if alerts, _, _ := gb.snapshot(); len(alerts) != 1 || alerts[0].Rule != "quota" {
		t.Errorf("the new leader sent %s; want only its own quota alert (the rule's was sent already)", gb.list())
	}
	if alerts, _, _ := gc.snapshot(); len(alerts) != 1 || alerts[0].Rule != "errs" {
		t.Errorf("an engine without the state sent %s; want the rule's alert again (what Restore prevents)", gc.list())
	}
	if act := b.Active(); len(act) != 2 {
		t.Errorf("the new leader's active = %+v; want the rule's alert and its own quota alert", act)
	}

	add(now, 30, false) // healthy: the 10 m window clears
	b.Eval(ctx, now.Add(30*time.Minute))
	alerts, _, _ := gb.snapshot()
	if len(alerts) != 2 || alerts[1].Rule != "errs" || alerts[1].State != Resolved {
		t.Fatalf("after the breach: the new leader sent %s; want the rule's alert resolved", gb.list())
	}
	if first := a.Snapshot()[0].Alert; !alerts[1].StartsAt.Equal(first.StartsAt) || alerts[1].Fingerprint != first.Fingerprint {
		t.Errorf("resolved %+v; want the first leader's alert (start %v)", alerts[1], first.StartsAt)
	}
}
