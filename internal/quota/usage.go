package quota

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// ScopeUsage is one daily quota of one scope on the current quota day:
// what the budget-burn view and GET /api/v1/quotas show.
type ScopeUsage struct {
	Scope string `json:"scope"` // "user:alice"
	Kind  string `json:"kind"`  // key, user or biz_line
	Name  string `json:"name"`  // key id, user id or biz_line
	Limit string `json:"limit"` // daily_tokens or daily_cost
	// Used is today's committed usage (plus the ledger's seed), Reserved
	// the estimates of requests still in flight; tokens, or cost in nanos
	// for daily_cost.
	Used     int64 `json:"used"`
	Reserved int64 `json:"reserved"`
	Quota    int64 `json:"quota"`
	// Share is (Used+Reserved)/Quota, the figure admission and the warning
	// event compare with WarnAt.
	Share  float64 `json:"share"`
	WarnAt float64 `json:"warn_at"`
	// Default is true for a scope limited by quotas.default rather than
	// listed by name.
	Default bool `json:"default"`
	// DayStart and DayEnd bound the quota day in Config.Timezone.
	DayStart time.Time `json:"day_start"`
	DayEnd   time.Time `json:"day_end"`
}

// UsageReader is a limiter that can report today's daily-quota usage.
type UsageReader interface {
	Usage(now time.Time) []ScopeUsage
}

// Preloader is a limiter that loads today's recorded usage of every
// scope at start (Local and redisquota.Limiter). It is optional by
// design: a limiter that keeps no daily counters has nothing to load.
type Preloader interface {
	Preload(ctx context.Context, all DaySeedFunc) error
}

var _ Preloader = (*Local)(nil)

// Reader returns l's UsageReader, or nil when l is nil or cannot report.
func Reader(l Limiter) UsageReader {
	if r, ok := l.(UsageReader); ok {
		return r
	}
	return nil
}

// Usage reports, for every scope with a daily limit, the usage of the
// quota day containing now: every subject listed by name (zero when it
// has not been seen today) and every subject under a default limit that
// this process has seen or Preload found in the ledger. It is this
// process's view: usage is what the limiter counted (the ledger's seed
// included once the scope has been admitted today or preloaded); Usage
// itself does no I/O. Each scope's lock is taken
// briefly, one at a time, so the figures of different scopes may be a few
// requests apart. Sorted by kind, name, then limit.
func (l *Local) Usage(now time.Time) []ScopeUsage {
	d := l.cal.at(now)
	type item struct {
		s   Scope
		lim *limits
		e   *entry
		def bool
	}
	var items []item
	seen := map[Scope]bool{}
	l.mu.RLock()
	for kind := range Kind(numKinds) {
		for name, lim := range l.named[kind] {
			if lim == nil || !lim.daily() {
				continue
			}
			s := Scope{Kind: kind, Name: name}
			items = append(items, item{s: s, lim: lim, e: l.entries[s]})
			seen[s] = true
		}
	}
	for s, e := range l.entries {
		if !seen[s] && e.lim.daily() {
			items = append(items, item{s: s, lim: e.lim, e: e, def: true})
		}
	}
	l.mu.RUnlock()

	out := make([]ScopeUsage, 0, 2*len(items))
	for _, it := range items {
		var tokens, cost daily
		if e := it.e; e != nil {
			e.mu.Lock()
			if e.day == d.key && !e.dead {
				tokens, cost = e.tokens, e.cost
			}
			e.mu.Unlock()
		}
		add := func(limit string, u daily, quota int64) {
			out = append(out, ScopeUsage{Scope: it.s.String(), Kind: it.s.Kind.String(), Name: it.s.Name, Limit: limit,
				Used: u.used, Reserved: u.reserved, Quota: quota, Share: float64(u.used+u.reserved) / float64(quota),
				WarnAt: it.lim.warnAt, Default: it.def, DayStart: d.start, DayEnd: d.end})
		}
		if q := it.lim.dailyTokens; q > 0 {
			add(LimitDailyTokens, tokens, q)
		}
		if q := it.lim.dailyCost; q > 0 {
			add(LimitDailyCost, cost, q)
		}
	}
	SortUsage(out)
	return out
}

// SortUsage orders usage as the dashboard lists it: keys, users, then
// business lines; by name, then limit.
func SortUsage(us []ScopeUsage) {
	slices.SortFunc(us, func(a, b ScopeUsage) int {
		return cmp.Or(cmp.Compare(kindOrder(a.Kind), kindOrder(b.Kind)), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Limit, b.Limit))
	})
}

func kindOrder(k string) int {
	switch k {
	case "key":
		return 0
	case "user":
		return 1
	}
	return 2
}

// Used is one subject's usage recorded in the ledger on a quota day.
type Used struct{ Tokens, CostNanos int64 }

// DaySeedFunc loads the usage recorded on the quota day that starts at
// day by every subject of kind k that has any, by name: SeedFunc for all
// the subjects of a kind at once.
type DaySeedFunc func(ctx context.Context, k Kind, day time.Time) (map[string]Used, error)

// Preload loads today's recorded usage of every scope with a daily limit
// that has not been seeded yet: every subject listed by name, and every
// subject under a default daily limit that has usage in the ledger today.
// Without it a restart shows such a scope at zero in Usage until its first
// request of the day seeds it, although admission was never wrong (Admit
// seeds before it decides).
//
// It is meant to run in the background at start. It reads the ledger with
// one query per kind and holds no lock while it does; it then installs each
// scope's figure under that scope's lock, briefly, so requests never wait
// for its I/O. A scope a request seeded first keeps that seed, read no
// earlier than Preload's: no usage can be counted twice or lost, because no
// request of a scope is admitted before the scope is seeded one way or the
// other. Preload needs the limiter to have a SeedFunc (with none, requests
// are admitted from zero and a later preload would overwrite their usage).
func (l *Local) Preload(ctx context.Context, all DaySeedFunc) error {
	if l.seed == nil {
		return errors.New("quota preload: the limiter has no seed function")
	}
	now := l.now()
	d := l.cal.at(now)
	var errs []error
	for kind := range Kind(numKinds) {
		// named and def are fixed by NewLocal: no lock to read them.
		named, def := l.named[kind], l.def[kind]
		useDef := def != nil && def.daily()
		want := useDef
		for _, lim := range named {
			want = want || (lim != nil && lim.daily())
		}
		if !want {
			continue
		}
		used, err := all(ctx, kind, d.start)
		if err != nil {
			errs = append(errs, fmt.Errorf("load %s usage of %s: %w", kind, d.start.Format(time.DateOnly), err))
			continue
		}
		for name, lim := range named {
			if lim != nil && lim.daily() {
				l.install(Scope{Kind: kind, Name: name}, lim, now, d, used[name])
			}
		}
		if useDef {
			for name, u := range used {
				if _, listed := named[name]; !listed && name != "" {
					l.install(Scope{Kind: kind, Name: name}, def, now, d, u)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// install makes u the seed of scope s for day d, unless the scope was
// seeded already (or is being seeded) by a request, or has moved on to a
// later day.
func (l *Local) install(s Scope, lim *limits, now time.Time, d *day, u Used) {
	l.mu.Lock()
	e := l.entries[s]
	if e == nil {
		e = l.newEntry(s, lim, now, d)
		l.entries[s] = e
	}
	l.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead || e.seeding != nil || e.seededDay.Load() >= d.key || e.day > d.key {
		return
	}
	e.roll(d.key)
	e.seededDay.Store(d.key)
	e.tokens.used, e.cost.used = max(u.Tokens, 0), max(u.CostNanos, 0)
}

// RunPreload is serve's start-up job: it preloads l when l is a
// Preloader, so the budget-burn view is right after a restart before each
// scope's first request. Requests do not wait for it: one whose scope is
// not loaded yet seeds that scope itself. A failure is logged, not
// returned: each scope then loads at its first request.
func RunPreload(ctx context.Context, l Limiter, all DaySeedFunc, log *slog.Logger) error {
	p, ok := l.(Preloader)
	if !ok {
		return nil
	}
	if err := p.Preload(ctx, all); err != nil && ctx.Err() == nil {
		log.Warn("could not load today's quota usage at start; each scope loads it at its first request", "err", err)
	}
	return nil
}
