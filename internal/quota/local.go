package quota

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Local is the in-process Limiter, the embedded default. Its counters live
// in this process only: with several replicas each enforces its own share,
// which is what the Redis limiter is for.
//
// Guarantees, per scope (key, user or biz_line):
//   - Atomicity: a request is reserved in all its scopes or in none. A
//     refusal by one scope leaves nothing behind in the others.
//   - Daily quotas count committed usage (plus the ledger's seed) and the
//     reservations of requests still in flight. A request is admitted only
//     if usage + in-flight reservations + its own reservation fit within the
//     quota, so the sum of reservations never exceeds it, however many
//     goroutines race. What can exceed it is actual usage reported by
//     Commit above the reservation (an input estimate that was low, or no
//     max_tokens): the excess is bounded by the sum of those under-estimates,
//     and once usage is at or over the quota nothing more is admitted that day.
//     If every request's actual usage is within its reservation (max_tokens
//     set, input counted exactly) the quota is never exceeded.
//   - Per-minute limits: at any instant at most limit requests (or tokens
//     reserved) are admitted from a full bucket; see bucket.go for bursts.
//     Commit refunds unused reserved tokens to the tokens bucket and charges
//     excess as debt, so tokens_per_minute tracks actual usage.
//   - Days are calendar days in Config.Timezone. A request counts towards
//     the day it was admitted on; its Commit after midnight only releases
//     its reservation and adjusts the per-minute bucket.
//   - Events: warning and exceeded at most once per scope × limit × day in
//     this process (a restart may repeat one, as usage is re-seeded).
//
// Memory: one small entry per scope in use; entries idle since a previous
// day are dropped at the first Admit of each new day.
type Local struct {
	now     func() time.Time
	epoch   time.Time // origin of bucket time; Sub uses the monotonic clock
	cal     calendar
	seed    SeedFunc
	onEvent func(Event)

	// named holds the listed subjects; a nil value is a subject listed with
	// no limits, which exempts it from Defaults.
	named [numKinds]map[string]*limits
	def   [numKinds]*limits

	mu       sync.RWMutex
	entries  map[Scope]*entry
	sweptDay atomic.Int64
}

// entry is one scope's state.
type entry struct {
	s     Scope
	label string // s.String(), built once for events and decisions
	lim   *limits

	mu        sync.Mutex
	dead      bool          // dropped from Local.entries: look it up again
	seeding   chan struct{} // non-nil while a seed runs; closed when it ends
	seededDay atomic.Int64  // day key of the last successful seed; written under mu, read without it on the fast path
	day       int64         // day key that tokens, cost and flags belong to
	tokens    daily
	cost      daily
	rpm, tpm  bucket
	inflight  int   // tickets not yet committed or cancelled
	flags     uint8 // events already raised today, see flag()
}

// daily is one daily quota's usage: used is seeded plus committed.
type daily struct{ used, reserved int64 }

// Limit indexes for flags and refusals.
const (
	limTokens = iota
	limCost
	limRPM
	limTPM
	limMaxInput
)

func limitName(i int) string {
	return [...]string{LimitDailyTokens, LimitDailyCost, LimitRequestsPerMinute, LimitTokensPerMinute, LimitMaxInputTokens}[i]
}

func exceededFlag(i int) uint8 { return 1 << i }
func warnedFlag(i int) uint8   { return 1 << (4 + i) }

// NewLocal builds the in-process limiter. cfg must have its Keys resolved
// to key ids (Config.ResolveKeys). now is the clock (time.Now in
// production); seed may be nil (usage starts at zero each day) and so may
// onEvent. onEvent receives every event exactly once, synchronously and
// outside any lock: it must hand events off rather than write them itself.
func NewLocal(cfg Config, now func() time.Time, seed SeedFunc, onEvent func(Event)) (*Local, error) {
	p, err := NewPolicy(cfg)
	if err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	l := &Local{now: now, epoch: now(), seed: seed, onEvent: onEvent, entries: map[Scope]*entry{}}
	l.cal.loc = p.cal.loc
	l.named, l.def = p.named, p.def
	return l, nil
}

// refusal is the limit that refused a request, chosen among all that did:
// one that can never be met first, else the longest wait.
type refusal struct {
	e         *entry
	limit     int
	permanent bool
	wait      time.Duration
	used      int64 // usage including reservations, at the refusal
	quota     int64
	requested int64
}

func (r *refusal) consider(c refusal) {
	if r.e == nil || (c.permanent && !r.permanent) || (c.permanent == r.permanent && c.wait > r.wait) {
		*r = c
	}
}

// Admit implements Limiter.
func (l *Local) Admit(ctx context.Context, r Request) (Decision, Ticket, error) {
	in := max(r.EstInputTokens, 0)
	n := in + max(r.EstOutputTokens, 0)
	c := max(r.EstCostNanos, 0)
	now := l.now()
	d := l.cal.at(now)
	l.sweep(d, now)

	var es [numKinds]*entry
	k := l.resolve(&es, r.Subject, now, d)
	if k == 0 {
		return Decision{Allowed: true}, nopTicket{}, nil
	}
	// Events are gathered on the stack and handed out after the locks are
	// released; an admitted request without events allocates none.
	var evbuf [12]Event
	evs := evbuf[:0]

	// Max input is a property of the request alone: no state, no lock.
	var ref refusal
	for _, e := range es[:k] {
		if m := e.lim.maxInput; m > 0 && in > m {
			evs = append(evs, Event{At: now, Scope: e.label, Limit: LimitMaxInputTokens, Used: in, Quota: m,
				Share: float64(in) / float64(m), Kind: EventMaxInput})
			if !e.lim.alertOnly {
				ref.consider(refusal{e: e, limit: limMaxInput, permanent: true, quota: m, requested: in})
			}
		}
	}
	if ref.e != nil {
		return l.refuse(ref, Rate{}, evs), nil, nil
	}

	for {
		if err := l.seedAll(ctx, es[:k], d); err != nil {
			l.emit(evs)
			return Decision{}, nil, err
		}
		for _, e := range es[:k] { // kind order: a global lock order, so no deadlock
			e.mu.Lock()
		}
		if !l.ready(es[:k], d) {
			// Swept, or a new day to seed: start over with a fresh view.
			unlockAll(es[:k])
			now = l.now()
			d = l.cal.at(now)
			l.sweep(d, now)
			k = l.resolve(&es, r.Subject, now, d)
			continue
		}
		break
	}

	µ := l.micros(now)
	untilTomorrow := d.end.Sub(now)
	for _, e := range es[:k] {
		lim := e.lim
		// An entry already on a later day (another goroutine read the clock
		// after us) is left there: the request counts for that day.
		if e.day < d.key {
			e.roll(d.key)
		}
		if lim.rpm > 0 {
			e.rpm.refill(lim.rpm, µ)
		}
		if lim.tpm > 0 {
			e.tpm.refill(lim.tpm, µ)
		}
	}

	if ref = check(es[:k], n, c, untilTomorrow); ref.e != nil {
		var rate Rate
		ref, rate, evs = refused(es[:k], ref, n, c, now, untilTomorrow, evs)
		unlockAll(es[:k])
		return l.refuse(ref, rate, evs), nil, nil
	}

	for _, e := range es[:k] {
		lim := e.lim
		if lim.dailyTokens > 0 {
			e.tokens.reserved += n
			evs = e.warn(evs, limTokens, e.tokens, lim.dailyTokens, now)
		}
		if lim.dailyCost > 0 {
			e.cost.reserved += c
			evs = e.warn(evs, limCost, e.cost, lim.dailyCost, now)
		}
		if lim.rpm > 0 {
			e.rpm.adjust(lim.rpm, 1)
		}
		if lim.tpm > 0 {
			e.tpm.adjust(lim.tpm, n)
		}
		e.inflight++
	}
	t := &ticket{l: l, es: es, k: k, tokens: n, cost: c}
	for i, e := range es[:k] {
		t.days[i] = e.day
	}
	rate := rateOf(es[:k])
	unlockAll(es[:k])

	dec := Decision{Allowed: true, Rate: rate}
	if len(evs) > 0 {
		dec.Warnings = slices.Clone(evs)
		l.emit(evs)
	}
	return dec, t, nil
}

// check finds the limit that refuses a request of n tokens and c cost
// nanos, if any, in entries whose buckets are refilled to now.
func check(es []*entry, n, c int64, untilTomorrow time.Duration) refusal {
	var ref refusal
	for _, e := range es {
		lim := e.lim
		if lim.dailyTokens > 0 {
			if rf, bad := checkDaily(e, limTokens, e.tokens, lim.dailyTokens, n, untilTomorrow); bad {
				ref.consider(rf)
			}
		}
		if lim.dailyCost > 0 {
			if rf, bad := checkDaily(e, limCost, e.cost, lim.dailyCost, c, untilTomorrow); bad {
				ref.consider(rf)
			}
		}
		if lim.rpm > 0 {
			if w := e.rpm.wait(lim.rpm, 1); w > 0 {
				ref.consider(refusal{e: e, limit: limRPM, wait: w, quota: lim.rpm,
					used: lim.rpm - max(e.rpm.level, 0)/windowMicros, requested: 1})
			}
		}
		if lim.tpm > 0 {
			if n > lim.tpm {
				ref.consider(refusal{e: e, limit: limTPM, permanent: true, quota: lim.tpm, requested: n})
			} else if w := e.tpm.wait(lim.tpm, n); w > 0 {
				ref.consider(refusal{e: e, limit: limTPM, wait: w, quota: lim.tpm,
					used: lim.tpm - max(e.tpm.level, 0)/windowMicros, requested: n})
			}
		}
	}
	return ref
}

// refused completes refusal ref found by check: it marks every limit
// that refuses (not only the one reported: each of them is genuinely over
// its limit), and returns the refusal with its Retry-After and the rate
// headers' figures.
func refused(es []*entry, ref refusal, n, c int64, now time.Time, untilTomorrow time.Duration, evs []Event) (refusal, Rate, []Event) {
	for _, e := range es {
		evs = e.markExceeded(evs, n, c, now, untilTomorrow)
	}
	rate := rateOf(es)
	if ref.limit == limRPM {
		rate.Requests = ref.e.rpm.window(ref.e.lim.rpm)
	} else if ref.limit == limTPM {
		rate.Tokens = ref.e.tpm.window(ref.e.lim.tpm)
	}
	if !ref.permanent {
		ref.wait = longestWait(es, n, c, untilTomorrow)
	}
	return ref, rate, evs
}

// ready reports whether the locked entries can be checked against day d.
func (l *Local) ready(es []*entry, d *day) bool {
	for _, e := range es {
		if e.dead || (l.seed != nil && e.lim.daily() && e.seededDay.Load() < d.key) {
			return false
		}
	}
	return true
}

// checkDaily refuses a reservation of n that would take usage plus
// in-flight reservations over the quota. At exactly the quota even a zero
// estimate is refused: cost estimates are often unknown (0), and usage
// that has reached the budget must stop requests all the same.
func checkDaily(e *entry, limit int, u daily, quota, n int64, untilTomorrow time.Duration) (refusal, bool) {
	cur := u.used + u.reserved
	switch {
	case n > quota:
		return refusal{e: e, limit: limit, permanent: true, used: cur, quota: quota, requested: n}, true
	case cur >= quota || cur+n > quota:
		return refusal{e: e, limit: limit, wait: untilTomorrow, used: cur, quota: quota, requested: n}, true
	}
	return refusal{}, false
}

// markExceeded raises an exceeded event, once per limit per day, for every
// limit of e that refuses the request for lack of room. A request larger
// than the limit itself says nothing about usage and raises none.
func (e *entry) markExceeded(evs []Event, n, c int64, now time.Time, untilTomorrow time.Duration) []Event {
	lim := e.lim
	for i := limTokens; i <= limTPM; i++ {
		var used, quota int64
		switch i {
		case limTokens, limCost:
			u, q, req := e.tokens, lim.dailyTokens, n
			if i == limCost {
				u, q, req = e.cost, lim.dailyCost, c
			}
			rf, bad := checkDaily(e, i, u, q, req, untilTomorrow)
			if q == 0 || !bad || rf.permanent {
				continue
			}
			used, quota = rf.used, q
		case limRPM:
			if lim.rpm == 0 || e.rpm.wait(lim.rpm, 1) == 0 {
				continue
			}
			used, quota = lim.rpm-max(e.rpm.level, 0)/windowMicros, lim.rpm
		case limTPM:
			if lim.tpm == 0 || n > lim.tpm || e.tpm.wait(lim.tpm, n) == 0 {
				continue
			}
			used, quota = lim.tpm-max(e.tpm.level, 0)/windowMicros, lim.tpm
		}
		if e.flags&exceededFlag(i) != 0 {
			continue
		}
		e.flags |= exceededFlag(i)
		evs = append(evs, Event{At: now, Scope: e.label, Limit: limitName(i), Used: used, Quota: quota,
			Share: float64(used) / float64(quota), Kind: EventExceeded})
	}
	return evs
}

// longestWait is the Retry-After of a refusal: after it, every limit that
// refused has room again (unless other requests take it first).
func longestWait(es []*entry, n, c int64, untilTomorrow time.Duration) time.Duration {
	var w time.Duration
	for _, e := range es {
		lim := e.lim
		if lim.dailyTokens > 0 {
			if _, bad := checkDaily(e, limTokens, e.tokens, lim.dailyTokens, n, untilTomorrow); bad {
				w = max(w, untilTomorrow)
			}
		}
		if lim.dailyCost > 0 {
			if _, bad := checkDaily(e, limCost, e.cost, lim.dailyCost, c, untilTomorrow); bad {
				w = max(w, untilTomorrow)
			}
		}
		if lim.rpm > 0 {
			w = max(w, e.rpm.wait(lim.rpm, 1))
		}
		if lim.tpm > 0 && n <= lim.tpm {
			w = max(w, e.tpm.wait(lim.tpm, n))
		}
	}
	return w
}

// warn raises the once-a-day warning when usage including reservations
// has reached WarnAt of the quota.
func (e *entry) warn(evs []Event, i int, u daily, quota int64, now time.Time) []Event {
	cur := u.used + u.reserved
	if e.flags&warnedFlag(i) != 0 || float64(cur) < e.lim.warnAt*float64(quota) {
		return evs
	}
	e.flags |= warnedFlag(i)
	return append(evs, Event{At: now, Scope: e.label, Limit: limitName(i), Used: cur, Quota: quota,
		Share: float64(cur) / float64(quota), Kind: EventWarning})
}

// roll starts a new quota day for e.
func (e *entry) roll(key int64) {
	e.day, e.tokens, e.cost, e.flags = key, daily{}, daily{}, 0
}

func rateOf(es []*entry) Rate {
	var r Rate
	for _, e := range es {
		if lim := e.lim.rpm; lim > 0 {
			if w := e.rpm.window(lim); r.Requests.Limit == 0 || w.Remaining < r.Requests.Remaining {
				r.Requests = w
			}
		}
		if lim := e.lim.tpm; lim > 0 {
			if w := e.tpm.window(lim); r.Tokens.Limit == 0 || w.Remaining < r.Tokens.Remaining {
				r.Tokens = w
			}
		}
	}
	return r
}

func unlockAll(es []*entry) {
	for _, e := range es {
		e.mu.Unlock()
	}
}

func (l *Local) micros(t time.Time) int64 { return int64(t.Sub(l.epoch) / time.Microsecond) }

func (l *Local) emit(evs []Event) {
	if l.onEvent == nil {
		return
	}
	for _, ev := range evs {
		l.onEvent(ev)
	}
}

// resolve finds the entries of the subject's scopes that have limits, in
// kind order.
func (l *Local) resolve(es *[numKinds]*entry, s Subject, now time.Time, d *day) int {
	var lims [numKinds]*limits
	var scopes [numKinds]Scope
	k, missing := 0, false
	l.mu.RLock() // once for all scopes: this is on every request
	for kind, name := range [numKinds]string{s.KeyID, s.UserID, s.BizLine} {
		if name == "" {
			continue
		}
		lim, listed := l.named[kind][name]
		if !listed {
			lim = l.def[kind]
		}
		if lim == nil {
			continue
		}
		lims[k], scopes[k] = lim, Scope{Kind: Kind(kind), Name: name}
		es[k] = l.entries[scopes[k]]
		missing = missing || es[k] == nil
		k++
	}
	l.mu.RUnlock()
	if !missing {
		return k
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range k {
		if es[i] = l.entries[scopes[i]]; es[i] == nil {
			es[i] = l.newEntry(scopes[i], lims[i], now, d)
			l.entries[scopes[i]] = es[i]
		}
	}
	return k
}

func (l *Local) newEntry(s Scope, lim *limits, now time.Time, d *day) *entry {
	µ := l.micros(now)
	e := &entry{s: s, label: s.String(), lim: lim, day: d.key}
	e.seededDay.Store(math.MinInt64)
	if lim.rpm > 0 {
		e.rpm = newBucket(lim.rpm, µ)
	}
	if lim.tpm > 0 {
		e.tpm = newBucket(lim.tpm, µ)
	}
	return e
}

// seedAll makes sure each scope with a daily limit has today's recorded
// usage loaded. It runs before the entries are locked together because a
// seed is I/O; one goroutine seeds a scope while the others wait for it.
func (l *Local) seedAll(ctx context.Context, es []*entry, d *day) error {
	if l.seed == nil {
		return nil
	}
	for _, e := range es {
		if !e.lim.daily() || e.seededDay.Load() >= d.key {
			continue // the common case: no lock taken
		}
		if err := l.seedOne(ctx, e, d); err != nil {
			return fmt.Errorf("load %s usage of %s: %w", e.label, d.start.Format(time.DateOnly), err)
		}
	}
	return nil
}

func (l *Local) seedOne(ctx context.Context, e *entry, d *day) error {
	for {
		e.mu.Lock()
		if e.seededDay.Load() >= d.key || e.dead {
			e.mu.Unlock()
			return nil
		}
		if ch := e.seeding; ch != nil {
			e.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		ch := make(chan struct{})
		e.seeding = ch
		e.mu.Unlock()

		tokens, cost, err := l.seed(ctx, e.s, d.start)

		e.mu.Lock()
		e.seeding = nil
		close(ch)
		// No request of day d can have been admitted before its seed, so
		// the day's counters are empty and the seed is the whole past.
		if err == nil && e.day <= d.key && e.seededDay.Load() < d.key {
			e.roll(d.key)
			e.seededDay.Store(d.key)
			e.tokens.used, e.cost.used = max(tokens, 0), max(cost, 0)
		}
		e.mu.Unlock()
		return err
	}
}

// sweep drops entries idle since a previous day, once per day: enough to
// bound memory by the scopes seen in about a day, without a goroutine.
func (l *Local) sweep(d *day, now time.Time) {
	last := l.sweptDay.Load()
	if last >= d.key || !l.sweptDay.CompareAndSwap(last, d.key) {
		return
	}
	µ := l.micros(now)
	l.mu.Lock()
	defer l.mu.Unlock()
	for s, e := range l.entries {
		e.mu.Lock()
		if e.day < d.key && e.inflight == 0 && e.seeding == nil && e.idle(µ) {
			e.dead = true // a goroutine holding e will see this and look again
			delete(l.entries, s)
		}
		e.mu.Unlock()
	}
}

func (e *entry) idle(µ int64) bool {
	if lim := e.lim.rpm; lim > 0 {
		if e.rpm.refill(lim, µ); !e.rpm.full(lim) {
			return false
		}
	}
	if lim := e.lim.tpm; lim > 0 {
		if e.tpm.refill(lim, µ); !e.tpm.full(lim) {
			return false
		}
	}
	return true
}

// ticket is an admitted request's reservation in Local.
type ticket struct {
	l      *Local
	es     [numKinds]*entry
	k      int
	days   [numKinds]int64 // each entry's day at admission
	tokens int64           // reserved
	cost   int64           // reserved
	done   atomic.Bool
}

func (t *ticket) Commit(tokens, cost int64) { t.settle(max(tokens, 0), max(cost, 0), false) }
func (t *ticket) Cancel()                   { t.settle(0, 0, true) }

// settle replaces the reservation with actual usage (none on Cancel). The
// scopes are settled one at a time: releasing never needs all-or-nothing.
func (t *ticket) settle(tokens, cost int64, cancel bool) {
	if !t.done.CompareAndSwap(false, true) {
		return
	}
	l := t.l
	now := l.now()
	µ := l.micros(now)
	var evbuf [8]Event
	evs := evbuf[:0]
	for i, e := range t.es[:t.k] {
		lim := e.lim
		e.mu.Lock()
		if lim.rpm > 0 && cancel {
			e.rpm.refill(lim.rpm, µ)
			e.rpm.adjust(lim.rpm, -1)
		}
		if lim.tpm > 0 {
			e.tpm.refill(lim.tpm, µ)
			e.tpm.adjust(lim.tpm, tokens-t.tokens)
		}
		if e.day == t.days[i] { // after midnight the reservation went with its day
			if lim.dailyTokens > 0 {
				e.tokens.reserved -= t.tokens
				e.tokens.used += tokens
				evs = e.afterCommit(evs, limTokens, e.tokens, lim.dailyTokens, now)
			}
			if lim.dailyCost > 0 {
				e.cost.reserved -= t.cost
				e.cost.used += cost
				evs = e.afterCommit(evs, limCost, e.cost, lim.dailyCost, now)
			}
		}
		e.inflight--
		e.mu.Unlock()
	}
	l.emit(evs)
}

// afterCommit raises the warning a commit may cross into and, when actual
// usage went past the quota itself, the day's exceeded event.
func (e *entry) afterCommit(evs []Event, i int, u daily, quota int64, now time.Time) []Event {
	evs = e.warn(evs, i, u, quota, now)
	if cur := u.used + u.reserved; cur > quota && e.flags&exceededFlag(i) == 0 {
		e.flags |= exceededFlag(i)
		evs = append(evs, Event{At: now, Scope: e.label, Limit: limitName(i), Used: cur, Quota: quota,
			Share: float64(cur) / float64(quota), Kind: EventExceeded})
	}
	return evs
}

// nopTicket is the ticket of a request no limit applies to.
type nopTicket struct{}

func (nopTicket) Commit(int64, int64) {}
func (nopTicket) Cancel()             {}

// refuse renders a refusal as the Decision the gateway answers with and
// hands out its events.
func (l *Local) refuse(ref refusal, rate Rate, evs []Event) Decision {
	d := render(ref, rate, evs)
	l.emit(evs)
	return d
}

// render builds a refusal's Decision, with evs as its Warnings.
func render(ref refusal, rate Rate, evs []Event) Decision {
	e := ref.e
	who := e.s.Kind.String() + " " + e.s.Name
	d := Decision{Status: http.StatusTooManyRequests, Type: "tokens", Code: "rate_limit_exceeded",
		Scope: e.label, Limit: limitName(ref.limit), RetryAfter: ref.wait, Rate: rate}
	if ref.permanent {
		d.RetryAfter = 0
	}
	const tooLarge = "The input or output tokens must be reduced in order to run successfully."
	switch ref.limit {
	case limMaxInput:
		d.Status, d.Type, d.Code = http.StatusBadRequest, "invalid_request_error", "max_input_tokens_exceeded"
		d.Message = fmt.Sprintf("Request too large for %s: %d input tokens is above the limit of %d input tokens per request. Shorten the input.",
			who, ref.requested, ref.quota)
	case limRPM:
		d.Type = "requests"
		d.Message = fmt.Sprintf("Rate limit reached for %s on requests per min (RPM): Limit %d, Used %d, Requested %d. Please try again in %s.",
			who, ref.quota, ref.used, ref.requested, FormatReset(d.RetryAfter))
	case limTPM, limTokens:
		unit := "tokens per min (TPM)"
		if ref.limit == limTokens {
			unit = "tokens per day (TPD)"
		}
		if ref.permanent {
			d.Message = fmt.Sprintf("Request too large for %s on %s: Limit %d, Requested %d. %s", who, unit, ref.quota, ref.requested, tooLarge)
		} else {
			d.Message = fmt.Sprintf("Rate limit reached for %s on %s: Limit %d, Used %d, Requested %d. Please try again in %s.",
				who, unit, ref.quota, ref.used, ref.requested, FormatReset(d.RetryAfter))
		}
	case limCost:
		d.Type, d.Code = "insufficient_quota", "insufficient_quota"
		if ref.permanent {
			d.Message = fmt.Sprintf("Request too expensive for %s: its estimated cost %s is above the daily cost budget of %s. %s",
				who, FormatCost(ref.requested), FormatCost(ref.quota), tooLarge)
		} else {
			d.Message = fmt.Sprintf("Daily cost budget exceeded for %s: Limit %s, Used %s, Requested %s. Please try again in %s.",
				who, FormatCost(ref.quota), FormatCost(ref.used), FormatCost(ref.requested), FormatReset(d.RetryAfter))
		}
	}
	d.Headers = d.headers()
	if len(evs) > 0 {
		d.Warnings = slices.Clone(evs)
	}
	return d
}
