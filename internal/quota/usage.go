package quota

import (
	"cmp"
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
// this process has seen. It is this process's view: usage is what the
// limiter counted (the ledger's seed included once the scope has been
// admitted today); Usage itself does no I/O. Each scope's lock is taken
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
	slices.SortFunc(out, func(a, b ScopeUsage) int {
		return cmp.Or(cmp.Compare(kindOrder(a.Kind), kindOrder(b.Kind)), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Limit, b.Limit))
	})
	return out
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
