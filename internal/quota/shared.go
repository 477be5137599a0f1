package quota

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"time"
)

// This file is what a Limiter that keeps its counters in a shared store
// (internal/quota/redisquota) needs from this package so that it decides,
// words its refusals and raises its events exactly as Local does: the
// compiled configuration (Policy), and the rendering of a decision from
// the counters the store returns (Snapshot). The store's atomic script
// does the checking and reserving; these functions only read its answer.

// Policy is a Config compiled for admission: which limits apply to which
// subject, and the quota-day calendar.
type Policy struct {
	named [numKinds]map[string]*limits
	def   [numKinds]*limits
	cal   calendar
}

// NewPolicy validates and compiles cfg; its Keys must be resolved to key
// ids (Config.ResolveKeys).
func NewPolicy(cfg Config) (*Policy, error) {
	if err := cfg.Validate("quotas"); err != nil {
		return nil, err
	}
	tz := cfg.Timezone
	if tz == "" {
		tz = "UTC"
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Errorf("quotas.timezone: %w", err)
	}
	p := &Policy{}
	p.cal.loc = loc
	for kind, m := range [numKinds]map[string]Limits{cfg.Keys, cfg.Users, cfg.BizLines} {
		p.named[kind] = make(map[string]*limits, len(m))
		for name, lim := range m {
			if p.named[kind][name], err = compile(lim); err != nil {
				return nil, err
			}
		}
	}
	for kind, lim := range [numKinds]Limits{cfg.Default.Key, cfg.Default.User, cfg.Default.BizLine} {
		if p.def[kind], err = compile(lim); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Scoped is one scope of a request with the limits that apply to it.
type Scoped struct {
	Scope Scope
	Label string // Scope.String()
	// The limits; zero is none. DailyCost is in nanos.
	DailyTokens, DailyCost             int64
	RequestsPerMinute, TokensPerMinute int64
	// WarnTokens and WarnCost are the usage, reservations included, at
	// which the daily warning is raised: the least integer at or above
	// warn_at × the quota (0 without the quota).
	WarnTokens, WarnCost int64
	WarnAt               float64 // the share of a daily quota that warns
	// Default is true for a subject limited by quotas.default.
	Default bool
	lim     *limits
}

// Daily reports whether the scope has a daily quota (and so needs its
// day's usage seeded from the ledger).
func (s *Scoped) Daily() bool { return s.lim.daily() }

// Scopes returns, in kind order (key, user, biz_line), the scopes of s
// that have limits; nil when none does.
func (p *Policy) Scopes(s Subject) []Scoped {
	var out []Scoped
	for kind, name := range [numKinds]string{s.KeyID, s.UserID, s.BizLine} {
		if name == "" {
			continue
		}
		lim, listed := p.named[kind][name]
		if !listed {
			lim = p.def[kind]
		}
		if lim == nil {
			continue
		}
		sc := Scope{Kind: Kind(kind), Name: name}
		out = append(out, p.scoped(sc, lim, !listed))
	}
	return out
}

func (p *Policy) scoped(sc Scope, lim *limits, def bool) Scoped {
	warn := func(q int64) int64 {
		if q == 0 {
			return 0
		}
		return int64(math.Ceil(lim.warnAt * float64(q)))
	}
	return Scoped{Scope: sc, Label: sc.String(), DailyTokens: lim.dailyTokens, DailyCost: lim.dailyCost,
		RequestsPerMinute: lim.rpm, TokensPerMinute: lim.tpm,
		WarnTokens: warn(lim.dailyTokens), WarnCost: warn(lim.dailyCost), WarnAt: lim.warnAt, Default: def, lim: lim}
}

// Named returns every scope listed by name that has a daily quota, for a
// usage report.
func (p *Policy) Named() []Scoped {
	var out []Scoped
	for kind := range Kind(numKinds) {
		for name, lim := range p.named[kind] {
			if lim != nil && lim.daily() {
				out = append(out, p.scoped(Scope{Kind: kind, Name: name}, lim, false))
			}
		}
	}
	return out
}

// DefaultDaily reports whether the default limits of kind k have a daily
// quota.
func (p *Policy) DefaultDaily(k Kind) bool { return p.def[k] != nil && p.def[k].daily() }

// Day returns the quota day containing t: [start, end) in the configured
// zone.
func (p *Policy) Day(t time.Time) (start, end time.Time) {
	d := p.cal.at(t)
	return d.start, d.end
}

// MaxInput applies max_input_tokens, which needs no state, to a request
// with in input tokens: the refusal, if any, and the events either way
// (a max_input event for every scope over its limit, refusing or not).
// The caller hands the events out.
func (p *Policy) MaxInput(sc []Scoped, in int64, now time.Time) (Decision, bool, []Event) {
	var evs []Event
	var ref refusal
	for i := range sc {
		lim := sc[i].lim
		if m := lim.maxInput; m > 0 && in > m {
			evs = append(evs, Event{At: now, Scope: sc[i].Label, Limit: LimitMaxInputTokens, Used: in, Quota: m,
				Share: float64(in) / float64(m), Kind: EventMaxInput})
			if !lim.alertOnly {
				ref.consider(refusal{e: &entry{s: sc[i].Scope, label: sc[i].Label, lim: lim}, limit: limMaxInput,
					permanent: true, quota: m, requested: in})
			}
		}
	}
	if ref.e == nil {
		return Decision{}, false, evs
	}
	return render(ref, Rate{}, evs), true, evs
}

// BucketUnit is what one request or token weighs in a per-minute bucket's
// level: the level of a bucket with limit L is L × BucketUnit when full,
// and refills by L per microsecond (see bucket.go).
const BucketUnit = windowMicros

// Snapshot is one scope's counters as the shared store holds them after
// its script ran: usage and in-flight reservations of the day, the bucket
// levels refilled to the request's time, and the event flags this call
// set. Flag bits: 1, 2, 4, 8 exceeded daily_tokens, daily_cost,
// requests_per_minute, tokens_per_minute; 16, 32 warned daily_tokens,
// daily_cost. A store sets a flag once per scope and day, atomically, so
// each event is raised once a day by the whole fleet.
type Snapshot struct {
	TokensUsed, TokensReserved int64
	CostUsed, CostReserved     int64
	RPMLevel, TPMLevel         int64
	NewFlags                   uint8
}

// entries turns snapshots into Local's entries, so that the decision is
// rendered by the very code Local runs. flags are set to everything but
// the snapshot's new flags: the functions that raise an event only when
// its flag is unset then raise exactly those the store set.
func entries(sc []Scoped, st []Snapshot) []*entry {
	es := make([]*entry, len(sc))
	for i := range sc {
		es[i] = &entry{s: sc[i].Scope, label: sc[i].Label, lim: sc[i].lim,
			tokens: daily{used: st[i].TokensUsed, reserved: st[i].TokensReserved},
			cost:   daily{used: st[i].CostUsed, reserved: st[i].CostReserved},
			rpm:    bucket{level: st[i].RPMLevel}, tpm: bucket{level: st[i].TPMLevel},
			flags: ^st[i].NewFlags}
	}
	return es
}

// Refused renders the refusal of a request of n tokens and c cost nanos
// that the store refused, from the scopes' snapshots as the script saw
// them (buckets refilled, nothing reserved), at now on the quota day
// ending at dayEnd. ok is false if the snapshots refuse nothing, which
// means the script and this package disagree.
func (p *Policy) Refused(sc []Scoped, st []Snapshot, n, c int64, now, dayEnd time.Time) (d Decision, ok bool) {
	es := entries(sc, st)
	until := dayEnd.Sub(now)
	ref := check(es, n, c, until)
	if ref.e == nil {
		return Decision{}, false
	}
	ref, rate, evs := refused(es, ref, n, c, now, until, nil)
	return render(ref, rate, evs), true
}

// Admitted renders the admission of a request from the scopes' snapshots
// after its reservation: the rate headers' figures and the warnings the
// store flagged.
func (p *Policy) Admitted(sc []Scoped, st []Snapshot, now time.Time) Decision {
	es := entries(sc, st)
	var evs []Event
	for _, e := range es {
		if e.lim.dailyTokens > 0 {
			evs = e.warn(evs, limTokens, e.tokens, e.lim.dailyTokens, now)
		}
		if e.lim.dailyCost > 0 {
			evs = e.warn(evs, limCost, e.cost, e.lim.dailyCost, now)
		}
	}
	return Decision{Allowed: true, Rate: rateOf(es), Warnings: evs}
}

// Committed returns the events of a commit on the day it was admitted:
// the warning it crossed into and, when actual usage went past a quota,
// the day's exceeded event, as the store flagged them.
func (p *Policy) Committed(sc []Scoped, st []Snapshot, now time.Time) []Event {
	es := entries(sc, st)
	var evs []Event
	for _, e := range es {
		if e.lim.dailyTokens > 0 {
			evs = e.afterCommit(evs, limTokens, e.tokens, e.lim.dailyTokens, now)
		}
		if e.lim.dailyCost > 0 {
			evs = e.afterCommit(evs, limCost, e.cost, e.lim.dailyCost, now)
		}
	}
	return evs
}

// Unavailable is the refusal of a request by a limit whose store could
// not be asked and that fails closed: 503, with Retry-After.
func Unavailable(s Scoped, limit string, retryAfter time.Duration) Decision {
	d := Decision{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "quota_unavailable",
		Scope: s.Label, Limit: limit, RetryAfter: retryAfter,
		Message: fmt.Sprintf("The %s limit of %s %s cannot be checked right now (its counter store is unavailable) and is configured to refuse requests meanwhile. Please try again in %s.",
			limit, s.Scope.Kind, s.Scope.Name, FormatReset(retryAfter))}
	d.Headers = d.headers()
	return d
}

// Limits returns the names of the stateful limits s has (daily_tokens,
// daily_cost, requests_per_minute, tokens_per_minute), in that order.
func (s *Scoped) Limits() []string {
	var out []string
	for i, v := range []int64{s.DailyTokens, s.DailyCost, s.RequestsPerMinute, s.TokensPerMinute} {
		if v > 0 {
			out = append(out, limitName(i))
		}
	}
	return slices.Clip(out)
}
