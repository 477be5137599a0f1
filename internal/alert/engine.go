package alert

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/window"
)

// Windows is what rules read: the aggregator's recent minutes and closed
// hours from the store.
type Windows interface {
	Window(from, to time.Time, sel window.Selector, by []string, q window.Quantity) map[string]*window.Group
	Hour(ctx context.Context, h time.Time, sel window.Selector, by []string, q window.Quantity) (map[string]*window.Group, error)
}

// Historian is Windows that know how far back their history goes
// (window.Aggregator, fleet.Windows): baseline rules then judge from a
// young baseline while the full one is not there yet. Windows without it
// judge from the full baseline only.
type Historian interface {
	Oldest() (time.Time, bool)
}

// YoungMin is the least history a young baseline rests on by default
// (Config.YoungMin): a baseline rule judges a gateway started less than
// its full baseline ago once its shortest window (5 m) and this much
// before it are there, the first minute left out — from 11 minutes of
// history on — and the rule's min_requests are in both.
const YoungMin = 5 * time.Minute

// Events is where the alert history goes (the store's event log).
type Events interface {
	Send(ev store.Event)
}

// EventKind is the store event kind of alert transitions.
const EventKind = "alert"

// Engine evaluates rules and keeps the alerts' lifecycle.
type Engine struct {
	rmu     sync.Mutex // guards rules: Reconfigure replaces them between evaluations
	rules   []Rule
	w       Windows
	notify  Notifier // may be nil
	events  Events   // may be nil
	explain ExplainFunc
	runaway Runaway
	young   time.Duration // Config.YoungMin
	log     *slog.Logger
	repeat  time.Duration
	// memory is how far back Window holds minutes; older parts of a
	// window are read as whole hours through Hour.
	memory time.Duration

	mu     sync.Mutex
	active map[string]*tracked // by fingerprint

	firing *prometheus.GaugeVec
	evals  prometheus.Counter
}

type tracked struct {
	a          Alert
	notifiedAt time.Time // zero until it fired
	// notifiedSev is the severity last notified: a firing alert is sent
	// again when it grows severer than that, not on every change.
	notifiedSev Severity
	// until is when a raised alert (not a rule's) resolves by itself.
	until time.Time
}

// Options wire an Engine.
type Options struct {
	Notifier Notifier
	Events   Events
	Log      *slog.Logger
	Registry prometheus.Registerer
	// Memory is how much history Windows.Window holds (the aggregator's
	// Keep; default 2 h).
	Memory time.Duration
	// Explain, if set, says what changed behind each latency or tokens
	// alert when it fires (or grows severer): the text joins its summary.
	Explain ExplainFunc
}

// NewEngine returns an engine for the effective rules of cfg, which must
// have been validated.
func NewEngine(cfg Config, w Windows, o Options) *Engine {
	e := &Engine{
		rules: cfg.Effective(), w: w, notify: o.Notifier, events: o.Events, log: o.Log, explain: o.Explain,
		repeat: cfg.Repeat, memory: o.Memory, active: map[string]*tracked{}, runaway: cfg.Runaway.withDefaults(), young: cmp.Or(cfg.YoungMin, YoungMin),
		firing: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tollgate_alerts", Help: "Alerts now pending or firing, by rule, severity and state.",
		}, []string{"rule", "severity", "state"}),
		evals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_alert_evaluations_total", Help: "Rule evaluations run.",
		}),
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.repeat <= 0 {
		e.repeat = 4 * time.Hour
	}
	if e.memory <= 0 {
		e.memory = 2 * time.Hour
	}
	if o.Registry != nil {
		o.Registry.MustRegister(e.firing, e.evals)
	}
	return e
}

// Rules are the rules the engine runs.
func (e *Engine) Rules() []Rule {
	e.rmu.Lock()
	defer e.rmu.Unlock()
	return slices.Clone(e.rules)
}

// Reconfigure replaces the rules (a config reload; cfg validated): the
// next evaluation runs the new ones. An alert of a rule that is gone
// resolves at that evaluation like any alert whose breach ended; one
// whose rule is kept under the same name carries on.
func (e *Engine) Reconfigure(cfg Config) {
	rules := cfg.Effective()
	e.rmu.Lock()
	e.rules = rules
	e.rmu.Unlock()
}

// Run evaluates every interval until ctx ends.
func (e *Engine) Run(ctx context.Context, interval time.Duration) error {
	Every(ctx, interval, func(ctx context.Context, now time.Time) { e.Eval(ctx, now) })
	return nil
}

// Every calls eval at each tick of interval (30 s when not positive)
// until ctx ends.
func Every(ctx context.Context, interval time.Duration, eval func(ctx context.Context, now time.Time)) {
	if interval <= 0 {
		interval = 30 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			eval(ctx, now)
		}
	}
}

// Active lists the alerts now pending or firing, most severe first.
func (e *Engine) Active() []Alert {
	return ActiveOf(e.Snapshot())
}

// ActiveOf lists the alerts of ts, most severe first, as Active does.
func ActiveOf(ts []Tracked) []Alert {
	out := make([]Alert, 0, len(ts))
	for _, t := range ts {
		out = append(out, t.Alert)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Severity != out[j].Severity {
			return out[i].Severity == Critical
		}
		return out[i].Fingerprint < out[j].Fingerprint
	})
	return out
}

// Tracked is one alert's lifecycle as the engine keeps it: what a fleet's
// leader hands on to the next (internal/fleet State), so that an alert
// fired under one leader is resolved — and its repeats timed — by the
// next, rather than forgotten.
type Tracked struct {
	Alert Alert `json:"alert"`
	// NotifiedAt and NotifiedSeverity: when the alert was last sent, and
	// at which severity (zero while pending).
	NotifiedAt       time.Time `json:"notified_at,omitzero"`
	NotifiedSeverity Severity  `json:"notified_severity,omitempty"`
	// Until is when a raised alert (Raise, not a rule's) resolves; zero
	// for a rule's.
	Until time.Time `json:"until,omitzero"`
}

// Snapshot returns the alerts the engine tracks now, pending or firing.
func (e *Engine) Snapshot() []Tracked {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]Tracked, 0, len(e.active))
	for _, t := range e.active {
		out = append(out, Tracked{Alert: t.a, NotifiedAt: t.notifiedAt, NotifiedSeverity: t.notifiedSev, Until: t.until})
	}
	return out
}

// Restore takes over the alerts ts tracked (a new leader, from the last
// one's Snapshot): the rules' alerts are replaced by those of ts, which
// the next Eval carries on — resolving what no longer breaches, firing
// what has pended long enough, repeating on time. Alerts raised here
// (Raise) stay, and raised ones of ts this engine lacks are added.
func (e *Engine) Restore(ts []Tracked) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for fp, t := range e.active {
		if t.until.IsZero() {
			delete(e.active, fp)
		}
	}
	for _, t := range ts {
		if _, ok := e.active[t.Alert.Fingerprint]; ok {
			continue // raised here too: this engine's own state wins
		}
		e.active[t.Alert.Fingerprint] = &tracked{a: t.Alert, notifiedAt: t.NotifiedAt, notifiedSev: t.NotifiedSeverity, until: t.Until}
	}
}

// breach is one group's verdict for a rule at one evaluation.
type breach struct {
	sev                   Severity
	value, limit, base    float64
	labels                map[string]string
	from, to              time.Time
	shortFrom, shortUntil time.Time
	// baseFrom, baseTo: the baseline's period; young when it is shorter
	// than the rule's (a gateway with less history).
	baseFrom, baseTo time.Time
	young            bool
}

// Eval evaluates every rule at now and moves alerts through their
// lifecycle; it returns the transitions it made (fired, escalated,
// resolved), which were also notified and stored.
//
// A firing alert is notified again when it grows severer than it was last
// notified, or after the repeat interval. A drop back to warning shows in
// Active and in the repeat and resolution, with no notification of its
// own: a P99 hovering at the critical level would otherwise page at every
// evaluation, warning and critical in turn.
func (e *Engine) Eval(ctx context.Context, now time.Time) []Alert {
	e.evals.Inc()
	seen := map[string]breach{}
	ruleOf := map[string]Rule{}
	failed := map[string]bool{} // rules that could not read their windows
	for _, r := range e.Rules() {
		breaches, err := e.evalRule(ctx, r, now)
		if err != nil {
			e.log.Error("alert rule not evaluated; its alerts stay as they were", "rule", r.Name, "err", err)
			failed[r.Name] = true
			continue
		}
		for gk, b := range breaches {
			fp := fingerprint(r.Name, gk)
			seen[fp] = b
			ruleOf[fp] = r
		}
	}
	if sp, ok := e.w.(Spender); ok && !e.runaway.Disabled {
		rr := e.runawayRule()
		for gk, b := range e.evalRunaway(sp, now) {
			fp := fingerprint(rr.Name, gk)
			seen[fp] = b
			ruleOf[fp] = rr
		}
	}
	var out []Alert
	e.mu.Lock()
	// Breaching groups: new ones pend, pending ones fire after For,
	// firing ones escalate or repeat.
	for fp, b := range seen {
		r := ruleOf[fp]
		t := e.active[fp]
		if t == nil {
			t = &tracked{a: Alert{Rule: r.Name, Signal: r.Signal, Labels: b.labels, StartsAt: now, Fingerprint: fp, State: Pending, Unit: unitOf(r)}}
			e.active[fp] = t
		}
		t.a.Severity, t.a.Value, t.a.Threshold, t.a.Baseline = b.sev, b.value, b.limit, b.base
		t.a.From, t.a.To = b.shortFrom, b.shortUntil
		t.a.BaselineFrom, t.a.BaselineTo, t.a.YoungBaseline = b.baseFrom, b.baseTo, b.young
		t.a.Summary = summary(r, b)
		if t.a.Why != "" {
			t.a.Summary += " What changed: " + t.a.Why
		}
		t.a.Link = link(r, b)
		switch {
		case t.a.State == Pending && now.Sub(t.a.StartsAt) >= r.For:
			t.a.State = Firing
			t.notifiedAt, t.notifiedSev = now, b.sev
			out = append(out, t.a)
		case t.a.State == Firing && (severer(b.sev, t.notifiedSev) || now.Sub(t.notifiedAt) >= e.repeat):
			t.notifiedAt, t.notifiedSev = now, b.sev
			out = append(out, t.a)
		}
	}
	// Groups no longer breaching: a firing alert resolves, a pending one
	// is forgotten. Raised alerts resolve when their time is up.
	for fp, t := range e.active {
		if _, ok := seen[fp]; ok || failed[t.a.Rule] {
			continue
		}
		if !t.until.IsZero() && now.Before(t.until) {
			continue
		}
		delete(e.active, fp)
		if t.a.State == Firing {
			t.a.State, t.a.EndsAt = Resolved, now
			out = append(out, t.a)
		}
	}
	e.firing.Reset()
	for _, t := range e.active {
		e.firing.WithLabelValues(t.a.Rule, string(t.a.Severity), string(t.a.State)).Inc()
	}
	e.mu.Unlock()

	e.explainAll(ctx, out, ruleOf)
	e.emit(ctx, now, out)
	return out
}

// explainAll adds what changed to the latency and tokens alerts that
// fired or escalated, outside the lock (it reads the ledger), and keeps
// it on the tracked alert until the next explanation.
func (e *Engine) explainAll(ctx context.Context, out []Alert, ruleOf map[string]Rule) {
	if e.explain == nil {
		return
	}
	for i := range out {
		a := &out[i]
		r, ok := ruleOf[a.Fingerprint]
		if !ok || a.State != Firing || !Explains(r.Signal) {
			continue
		}
		why := e.explain(ctx, *a)
		if why == "" {
			continue
		}
		a.Why = why
		a.Summary += " What changed: " + why
		e.mu.Lock()
		if t := e.active[a.Fingerprint]; t != nil {
			t.a.Why, t.a.Summary = a.Why, a.Summary
		}
		e.mu.Unlock()
	}
}

// Raise fires an alert that no rule computes — a quota nearly used up, a
// request refused for its size — at once. It lasts until until (then it
// resolves at the next evaluation); raising it again while it lasts only
// extends it, and notifies again only when its severity rises or after
// the repeat interval.
func (e *Engine) Raise(ctx context.Context, a Alert, now, until time.Time) {
	a.Fingerprint = fingerprint(a.Rule, labelString(a.Labels))
	a.State = Firing
	e.mu.Lock()
	t := e.active[a.Fingerprint]
	send := t == nil || severer(a.Severity, t.a.Severity) || now.Sub(t.notifiedAt) >= e.repeat
	if t == nil {
		a.StartsAt = now
		t = &tracked{}
		e.active[a.Fingerprint] = t
	} else {
		a.StartsAt = t.a.StartsAt
		if !severer(a.Severity, t.a.Severity) {
			a.Severity = t.a.Severity
		}
	}
	t.a, t.until = a, until
	if send {
		t.notifiedAt, t.notifiedSev = now, a.Severity
	}
	e.mu.Unlock()
	if send {
		e.emit(ctx, now, []Alert{a})
	}
}

func severer(a, b Severity) bool { return a == Critical && b != Critical }

// emit logs, stores and notifies transitions.
func (e *Engine) emit(ctx context.Context, now time.Time, out []Alert) {
	for _, a := range out {
		e.log.Warn("alert", "rule", a.Rule, "state", a.State, "severity", a.Severity, "labels", a.Labels, "value", a.Value, "threshold", a.Threshold)
		if e.events != nil {
			data, _ := json.Marshal(a)
			e.events.Send(store.Event{At: now, Kind: EventKind, Subject: a.Rule + " " + labelString(a.Labels), Message: string(a.State) + ": " + a.Summary, Data: string(data)})
		}
		if e.notify != nil {
			e.notify.Notify(ctx, a)
		}
	}
}

// evalRule returns the breaching groups of one rule, by group key.
func (e *Engine) evalRule(ctx context.Context, r Rule, now time.Time) (map[string]breach, error) {
	sig, _ := SignalNamed(r.Signal)
	sel := window.Selector(r.Where)
	// One baseline for every window: the period before the longest
	// window began, so a lasting incident never becomes its own baseline
	// for the short window.
	var base map[string]*window.Group
	var bdur time.Duration
	var bfrom, bto time.Time
	windows := r.Windows
	var young *youngPlan
	if r.Baseline != nil {
		young, windows = e.youngPlan(r, now)
		if len(windows) == 0 {
			return nil, nil // not yet YoungMin of history: the rule cannot judge
		}
		var err error
		if young != nil {
			bfrom, bto = young.from, young.to
			base, bdur, err = e.window(ctx, now, bfrom, bto, sel, r.By, sig.quantity)
		} else {
			base, bdur, err = e.baseline(ctx, r, now, slices.Max(r.Windows), sel, sig.quantity)
			if b := r.Baseline; b.Previous > 0 {
				bto = now.Add(-slices.Max(r.Windows))
				bfrom = bto.Add(-b.Previous)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("baseline: %w", err)
		}
	}
	var verdict map[string]breach
	for i, w := range windows {
		from := now.Add(-w)
		cur, cdur, err := e.window(ctx, now, from, now, sel, r.By, sig.quantity)
		if err != nil {
			return nil, fmt.Errorf("window: %w", err)
		}
		next := map[string]breach{}
		for gk, g := range cur {
			if g.Key.Upstream == "" && slices.Contains(r.By, "upstream") {
				// A rule by upstream judges upstreams. Requests that
				// reached none were refused by the gateway itself (a
				// key, a quota, an invalid request): they are not an
				// upstream's failures, and quotas raise their own alert.
				continue
			}
			if i > 0 {
				if _, ok := verdict[gk]; !ok {
					continue // every window must breach
				}
			}
			v, n := sig.value(&g.Stats, cdur, r.Currency)
			if n < r.MinRequests || math.IsNaN(v) {
				continue
			}
			b := breach{value: v, labels: labels(g.Key, r.By), from: from, to: now, shortFrom: from, shortUntil: now}
			levels := r.Threshold
			if r.Baseline != nil {
				bg, gdur, gfrom, gto := base[gk], bdur, bfrom, bto
				if young != nil {
					// A group already breaching keeps the baseline it had
					// when the breach began: a young baseline ends only
					// minutes ago, and would otherwise take the incident in.
					if pf, pt, ok := e.pinned(r, gk, young); ok {
						pg, pd, err := e.window(ctx, now, pf, pt, sel, r.By, sig.quantity)
						if err != nil {
							return nil, fmt.Errorf("baseline: %w", err)
						}
						bg, gdur, gfrom, gto = pg[gk], pd, pf, pt
					}
				}
				if bg == nil {
					continue
				}
				bv, bn := sig.value(&bg.Stats, gdur, r.Currency)
				if sig.sum {
					bv *= cdur.Seconds() / gdur.Seconds() // a sum over as long as the window
				}
				if bn < r.MinRequests || math.IsNaN(bv) || bv <= 0 {
					continue
				}
				b.base, b.baseFrom, b.baseTo, b.young = bv, gfrom, gto, young != nil
				levels = &Levels{Warning: bv * r.Baseline.Warning, Critical: bv * r.Baseline.Critical}
				switch {
				case young != nil && gto.Sub(gfrom) < r.Baseline.Previous/2:
					// A baseline under half the rule's own is a usual
					// level read from a few minutes, its P99 from few
					// requests: it warns only at the rule's critical
					// factor, and never escalates.
					levels.Warning, levels.Critical = levels.Critical, 0
				case young != nil && young.capped:
					// The seeds escalate only when the long window breaches
					// too; without the history for it, a warning at most.
					levels.Critical = 0
				}
			}
			b.sev, b.limit = judge(v, levels, r.Below)
			if b.sev == "" {
				continue
			}
			if i > 0 {
				// Escalate only as far as every window goes; report the
				// first (shortest) window's figures.
				prev := verdict[gk]
				if prev.sev == Critical && b.sev == Warning {
					prev.sev, prev.limit = Warning, warningLimit(r, prev)
				}
				prev.from = from
				b = prev
			}
			next[gk] = b
		}
		verdict = next
	}
	return verdict, nil
}

// Spender is Windows that tally each API key's tokens
// (window.Aggregator): the runaway-spend rule reads them.
type Spender interface {
	Spend(from, to time.Time) map[string]window.KeyUsage
}

func (e *Engine) runawayRule() Rule {
	return Rule{Name: RunawayRule, Signal: "tokens", For: time.Minute,
		Summary: "{{group}} is spending tokens far above its usual rate: a loop without an exit condition? Check the caller, or stop the key before its daily quota."}
}

// evalRunaway judges each key's tokens in the last window against its
// own usual rate (its tokens per window over Usual before), or against
// the ceiling when it has less than YoungMin of history.
func (e *Engine) evalRunaway(sp Spender, now time.Time) map[string]breach {
	r := e.runaway
	from := now.Add(-r.Window)
	cur := sp.Spend(from, now)
	base := sp.Spend(from.Add(-r.Usual), from)
	out := map[string]breach{}
	for id, u := range cur {
		if id == window.OtherKey {
			continue
		}
		labels := map[string]string{"key": id}
		if u.User != "" {
			labels["user"] = u.User
		}
		b := breach{value: float64(u.Tokens), labels: labels, from: from, to: now, shortFrom: from, shortUntil: now}
		bu, ok := base[id]
		bfrom := from.Add(-r.Usual)
		if first := bu.First.Add(time.Minute); first.After(bfrom) {
			bfrom = first // its first minute is partial, as a gateway's (youngPlan)
		}
		if !ok || from.Sub(bfrom) < e.young || bu.Tokens == 0 {
			// No history of its own: only the ceiling.
			if u.Tokens > r.Ceiling {
				b.sev, b.limit = Warning, float64(r.Ceiling)
				out[labelString(labels)] = b
			}
			continue
		}
		if u.Tokens < r.MinTokens {
			continue
		}
		usual := float64(bu.Tokens) * r.Window.Seconds() / from.Sub(bfrom).Seconds()
		b.base, b.baseFrom, b.baseTo, b.young = usual, bfrom, from, from.Sub(bfrom) < r.Usual
		b.sev, b.limit = judge(b.value, &Levels{Warning: usual * r.Warning, Critical: usual * r.Critical}, false)
		if b.sev != "" {
			out[labelString(labels)] = b
		}
	}
	return out
}

// youngPlan is how a baseline rule judges a gateway younger than its
// full baseline: from the history there is.
type youngPlan struct {
	oldest   time.Time
	from, to time.Time
	// wmax and wmin are the longest and shortest windows judged; capped
	// when the rule's longest window did not fit (no escalation).
	wmax, wmin time.Duration
	capped     bool
}

// youngPlan returns nil and the rule's windows when the history reaches
// back over the rule's full baseline (or its windows cannot tell; or the
// rule compares with the same hour of earlier days, which no young
// history has). Else it plans a young baseline: the windows that leave
// at least YoungMin of history before them, and as baseline the history
// before the longest of those, up to the rule's Previous long. No window
// fits: none is returned, and the rule does not judge yet.
func (e *Engine) youngPlan(r Rule, now time.Time) (*youngPlan, []time.Duration) {
	h, ok := e.w.(Historian)
	b := r.Baseline
	if !ok || b.Previous <= 0 {
		return nil, r.Windows
	}
	oldest, ok := h.Oldest()
	longest := slices.Max(r.Windows)
	// History as old as memory goes may go further back in the store.
	if !ok || !oldest.After(now.Add(-longest-b.Previous)) || !oldest.After(now.Add(-e.memory+time.Minute)) {
		return nil, r.Windows
	}
	// The first minute of history is left out: a gateway starts in the
	// middle of it, and it holds only the requests short enough to finish
	// in it — a baseline biased fast.
	oldest = window.Minute(oldest).Add(time.Minute)
	var fit []time.Duration
	for _, w := range r.Windows {
		if !window.Minute(now.Add(-w)).Before(oldest.Add(e.young)) {
			fit = append(fit, w)
		}
	}
	if len(fit) == 0 {
		return nil, nil
	}
	p := &youngPlan{oldest: oldest, wmax: slices.Max(fit), wmin: slices.Min(fit), capped: len(fit) < len(r.Windows) && len(r.Windows) > 1}
	p.to = now.Add(-p.wmax)
	p.from = p.to.Add(-b.Previous)
	if p.from.Before(oldest) {
		p.from = oldest
	}
	return p, fit
}

// pinned is the young baseline of a group whose alert is pending or
// firing: the history before the breach began, not before now.
func (e *Engine) pinned(r Rule, gk string, p *youngPlan) (from, to time.Time, ok bool) {
	e.mu.Lock()
	t := e.active[fingerprint(r.Name, gk)]
	e.mu.Unlock()
	if t == nil {
		return time.Time{}, time.Time{}, false
	}
	to = t.a.StartsAt.Add(-p.wmin)
	if !to.Before(p.to) {
		return time.Time{}, time.Time{}, false
	}
	from = to.Add(-r.Baseline.Previous)
	if from.Before(p.oldest) {
		from = p.oldest
	}
	if window.Minute(to).Sub(window.Minute(from)) < e.young {
		to = from.Add(e.young) // the least history it judged from
	}
	return from, to, true
}

// warningLimit is the warning level of a breach that was judged critical
// on a shorter window.
func warningLimit(r Rule, b breach) float64 {
	if r.Baseline != nil {
		return b.base * r.Baseline.Warning
	}
	return r.Threshold.Warning
}

func judge(v float64, l *Levels, below bool) (Severity, float64) {
	over := func(limit float64) bool {
		if limit == 0 {
			return false
		}
		if below {
			return v < limit
		}
		return v > limit
	}
	switch {
	case over(l.Critical):
		return Critical, l.Critical
	case over(l.Warning):
		return Warning, l.Warning
	}
	return "", 0
}

// window reads [from, to) as evaluated at now: the minutes memory still
// holds, and before them whole stored hours (from then rounds down to
// the hour). It returns how long a period it covered, by which sums such
// as cost per hour are divided.
func (e *Engine) window(ctx context.Context, now, from, to time.Time, sel window.Selector, by []string, q window.Quantity) (map[string]*window.Group, time.Duration, error) {
	// Memory holds [now − memory, now); hours are read up to the first
	// whole hour inside it.
	memStart := now.Add(-e.memory).Truncate(time.Hour).Add(time.Hour)
	if !from.Before(memStart) {
		return e.w.Window(from, to, sel, by, q), window.Minute(to).Sub(window.Minute(from)), nil
	}
	out := map[string]*window.Group{}
	if to.After(memStart) {
		out = e.w.Window(memStart, to, sel, by, q)
	}
	start := from.Truncate(time.Hour)
	for h := start; h.Before(memStart) && h.Before(to); h = h.Add(time.Hour) {
		hg, err := e.w.Hour(ctx, h, sel, by, q)
		if err != nil {
			return nil, 0, err
		}
		mergeGroups(out, hg)
	}
	end := window.Minute(to)
	if !to.After(memStart) {
		end = to.Truncate(time.Hour)
		if end.Before(to) {
			end = end.Add(time.Hour) // the hour holding to was read whole
		}
	}
	return out, end.Sub(start), nil
}

// mergeGroups adds the groups of from into into, by group key.
func mergeGroups(into, from map[string]*window.Group) {
	for gk, g := range from {
		if o := into[gk]; o != nil {
			o.Stats.Merge(&g.Stats)
		} else {
			into[gk] = g
		}
	}
}

// baseline reads the earlier window a baseline rule compares with — the
// one before a window of length w ending now — and how long a period it
// covered.
func (e *Engine) baseline(ctx context.Context, r Rule, now time.Time, w time.Duration, sel window.Selector, q window.Quantity) (map[string]*window.Group, time.Duration, error) {
	b := r.Baseline
	if b.Previous > 0 {
		to := now.Add(-w)
		return e.window(ctx, now, to.Add(-b.Previous), to, sel, r.By, q)
	}
	// The same hour on each of the last days, merged: a P99 over 14 hours
	// of traffic like this one. The stored hour nearest the window's
	// start: 17:05–18:05 compares with 17:00–18:00 of earlier days.
	out := map[string]*window.Group{}
	start := now.Add(-w).Add(30 * time.Minute).Truncate(time.Hour)
	for d := 1; d <= b.SameHourDays; d++ {
		hg, err := e.w.Hour(ctx, start.Add(-time.Duration(d)*24*time.Hour), sel, r.By, q)
		if err != nil {
			return nil, 0, err
		}
		mergeGroups(out, hg)
	}
	return out, time.Duration(b.SameHourDays) * time.Hour, nil
}

func labels(k window.Key, by []string) map[string]string {
	if len(by) == 0 {
		return nil
	}
	m := make(map[string]string, len(by))
	for _, l := range by {
		m[l] = k.Label(l)
	}
	return m
}

func labelString(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		v := m[k]
		if v == "" {
			v = "(none)"
		}
		parts[i] = k + "=" + v
	}
	return strings.Join(parts, ",")
}

func fingerprint(rule, group string) string {
	h := sha256.Sum256([]byte(rule + "\x00" + group))
	return hex.EncodeToString(h[:8])
}

func unitOf(r Rule) string {
	s, _ := SignalNamed(r.Signal)
	if s.Unit == "per hour" {
		return r.Currency + "/h"
	}
	return s.Unit
}

func summary(r Rule, b breach) string {
	g := labelString(b.labels)
	if g == "" {
		g = "all traffic"
	}
	s := strings.ReplaceAll(r.Summary, "{{group}}", g)
	if s == "" {
		s = fmt.Sprintf("%s of %s breached", r.Signal, g)
	}
	if b.base > 0 && b.young {
		return fmt.Sprintf("%s (%s %.4g vs young baseline %.4g of the %.0f min since %s, ×%.1f)", s, r.Signal, b.value, b.base,
			b.baseTo.Sub(b.baseFrom).Minutes(), b.baseFrom.UTC().Format("15:04"), b.value/b.base)
	}
	if b.base > 0 {
		return fmt.Sprintf("%s (%s %.4g vs baseline %.4g, ×%.1f)", s, r.Signal, b.value, b.base, b.value/b.base)
	}
	return fmt.Sprintf("%s (%s %.4g, limit %.4g)", s, r.Signal, b.value, b.limit)
}

// link is the API query listing the requests behind an alert.
func link(r Rule, b breach) string {
	q := url.Values{}
	for l, v := range b.labels {
		switch l {
		case "model", "biz_line", "template", "user":
			q.Set(l, v)
		}
	}
	for l, v := range r.Where {
		switch l {
		case "model", "biz_line", "template":
			q.Set(l, v)
		}
	}
	if r.Signal == "error_rate" {
		q.Set("errors", "1")
	}
	q.Set("since", b.from.UTC().Format(time.RFC3339))
	q.Set("until", b.to.UTC().Format(time.RFC3339))
	return "/api/v1/requests?" + q.Encode()
}
