// Package redisquota is the quota.Limiter whose counters live in Redis, so
// that every tollgate replica behind a load balancer enforces the same
// quotas, budgets and rate limits: N requests allowed in total, not N per
// replica.
//
// It decides exactly as quota.Local does (the same table of cases runs
// against both): one atomic Lua script per admission checks every scope of
// the request and reserves its estimate in all of them or none, a second
// one per request end replaces the reservation with the actual usage
// (scripts.go). A replica keeps nothing but its configuration, so a
// restarted replica carries on from the counters in Redis; day keys expire
// a day after their quota day ends, bucket keys two minutes after their
// last use.
//
// The proxy path never waits long for Redis: each call has a deadline
// (quotas.redis.timeout, default 50 ms) and no retry. A call that fails or
// times out applies each limit's configured policy (quotas.redis.on_error):
// "open" admits the request uncounted, "closed" refuses it with 503 and
// Retry-After. After three failed calls in a row Redis is not asked again
// for quotas.redis.backoff (default 1 s), so during an outage requests get
// the policy at once instead of each waiting for the deadline; the first
// request after the backoff tries again, so service resumes by itself.
// A request's settlement (Ticket.Commit) runs with the same deadline.
//
// There is no local token cache or batching: batching would let replicas
// admit from their own shares and overshoot at the boundary, which is
// exactly what this package exists to prevent, and one script call per
// request (well under a millisecond on a nearby Redis) is cheap next to an
// LLM request.
package redisquota

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/quota"
)

// Options are the limiter's collaborators; all may be zero.
type Options struct {
	// Seed loads a scope's usage already in the ledger for a quota day
	// whose Redis key does not exist (first use ever, or Redis lost its
	// data): the first replica to need it seeds it, once.
	Seed quota.SeedFunc
	// OnEvent receives every event once for the whole fleet (the flags
	// live in Redis), synchronously: it must hand events off.
	OnEvent func(quota.Event)
	// Registerer takes the metrics; nil registers none.
	Registerer prometheus.Registerer
	Log        *slog.Logger
	// Now is the clock (time.Now).
	Now func() time.Time
}

// Limiter is the Redis-backed quota.Limiter.
type Limiter struct {
	policy  atomic.Pointer[quota.Policy] // replaced by Reconfigure
	cfg     quota.Redis
	rdb     *redis.Client
	prefix  string
	timeout time.Duration
	backoff time.Duration
	seed    quota.SeedFunc
	onEvent func(quota.Event)
	now     func() time.Time
	log     *slog.Logger
	m       *metrics
	seen    seen

	failures  atomic.Int64 // consecutive failed calls
	downUntil atomic.Int64 // unix ns until which Redis is not asked; 0 when not tripped
}

// tripAfter consecutive failed calls start the backoff: one slow call (a
// hiccup) only decides its own request by the policy; an outage, which
// fails every call, stops the asking after a few.
const tripAfter = 3

// New connects to cfg.Redis.URL (lazily: New does no I/O, a Redis that is
// down at start is handled as any outage). cfg's Keys must be resolved to
// key ids.
func New(cfg quota.Config, o Options) (*Limiter, error) {
	p, err := quota.NewPolicy(cfg)
	if err != nil {
		return nil, err
	}
	rc := cfg.Redis
	if rc.URL == "" {
		return nil, errors.New("quotas.redis.url: required for the Redis limiter")
	}
	opt, err := redis.ParseURL(rc.URL)
	if err != nil {
		return nil, fmt.Errorf("quotas.redis.url: %w", err)
	}
	to := rc.TimeoutOrDefault()
	// The deadline is the request's context; these bound each step too.
	// No retries: a retry would exceed the deadline the proxy relies on.
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout = to, to, to, to
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = -1
	opt.DisableIdentity = true // no CLIENT SETINFO round trip on each new connection
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	l := &Limiter{cfg: rc, rdb: redis.NewClient(opt), prefix: rc.PrefixOrDefault() + ":{q}:",
		timeout: to, backoff: rc.BackoffOrDefault(), seed: o.Seed, onEvent: o.OnEvent, now: o.Now, log: o.Log,
		m: newMetrics(o.Registerer)}
	l.policy.Store(p)
	return l, nil
}

// Reconfigure puts new limits in force (a config reload): the counters
// live in Redis, so nothing is lost; requests in flight settle with the
// policy they were admitted under. cfg.Redis itself (URL, prefix,
// timeouts) is not reloaded: serve says a restart is needed.
func (l *Limiter) Reconfigure(cfg quota.Config) error {
	p, err := quota.NewPolicy(cfg)
	if err != nil {
		return err
	}
	l.policy.Store(p)
	return nil
}

// Close closes the connections to Redis.
func (l *Limiter) Close() error { return l.rdb.Close() }

// Ping checks that Redis answers, for a readiness message at start.
func (l *Limiter) Ping(ctx context.Context) error {
	if err := l.rdb.Ping(ctx).Err(); err != nil {
		l.m.up.Set(0)
		return err
	}
	l.m.up.Set(1)
	return nil
}

func (l *Limiter) dayKey(s quota.Scope, day time.Time) string {
	return l.prefix + "d:" + s.Kind.String() + ":" + s.Name + ":" + strconv.FormatInt(day.Unix(), 10)
}

func (l *Limiter) bucketKey(s quota.Scope) string {
	return l.prefix + "b:" + s.Kind.String() + ":" + s.Name
}

// dayExpiry is when a day key goes: a day after the quota day ends, so
// that requests still running at midnight settle into it.
func dayExpiry(end time.Time) int64 { return end.Add(24 * time.Hour).Unix() }

func scopeArgs(args []any, sc []quota.Scoped) []any {
	for i := range sc {
		s := &sc[i]
		args = append(args, s.DailyTokens, s.DailyCost, s.RequestsPerMinute, s.TokensPerMinute, s.WarnTokens, s.WarnCost)
	}
	return args
}

// Admit implements quota.Limiter. An error is returned only when the
// ledger seed fails (as Local) or ctx ends; Redis being unavailable is
// answered by the on_error policy instead.
func (l *Limiter) Admit(ctx context.Context, r quota.Request) (quota.Decision, quota.Ticket, error) {
	in := max(r.EstInputTokens, 0)
	n := in + max(r.EstOutputTokens, 0)
	c := max(r.EstCostNanos, 0)
	p := l.policy.Load() // one policy for the whole decision
	sc := p.Scopes(r.Subject)
	if len(sc) == 0 {
		return quota.Decision{Allowed: true}, nop{}, nil
	}
	now := l.now()
	dayStart, dayEnd := p.Day(now)
	l.seen.add(sc, dayStart.Unix())
	// max_input_tokens needs no counter: it holds with Redis down too.
	d, refused, evs := p.MaxInput(sc, in, now)
	if refused {
		l.emit(evs)
		return d, nil, nil
	}
	if l.isDown(now) {
		l.emit(evs)
		return l.unavailable(sc, evs)
	}
	keys := make([]string, 0, 2*len(sc))
	for i := range sc {
		keys = append(keys, l.dayKey(sc[i].Scope, dayStart), l.bucketKey(sc[i].Scope))
	}
	args := []any{now.UnixMicro(), n, c, dayExpiry(dayEnd), boolArg(l.seed != nil), len(sc)}
	args = scopeArgs(args, sc)
	var res []int64
	for attempt := 0; ; attempt++ {
		var err error
		res, err = l.run(ctx, admitScript, keys, args)
		if err == nil && len(res) != 2+7*len(sc) && (len(res) != 2 || res[0] != -1) {
			err = fmt.Errorf("admit script returned %d values for %d scopes", len(res), len(sc))
		}
		if err != nil {
			if ctx.Err() != nil {
				l.emit(evs)
				return quota.Decision{}, nil, ctx.Err()
			}
			l.failed("admit", err)
			l.emit(evs)
			return l.unavailable(sc, evs)
		}
		if res[0] != -1 {
			break
		}
		if attempt == 2 { // seeded twice and still unseeded: the key keeps vanishing
			l.failed("admit", errors.New("day key lost right after its seed"))
			l.emit(evs)
			return l.unavailable(sc, evs)
		}
		j := int(res[1]) - 1
		if err := l.seedScope(ctx, sc[j].Scope, keys[2*j], dayStart, dayEnd); err != nil {
			l.emit(evs)
			if errors.Is(err, errRedis) {
				return l.unavailable(sc, evs)
			}
			return quota.Decision{}, nil, err
		}
	}
	l.up()
	st := snapshots(res[2:], len(sc), 7)
	if res[0] == 0 {
		d, ok := p.Refused(sc, st, n, c, now, dayEnd)
		if !ok {
			// Cannot happen unless the script and quota disagree: refuse
			// (the script reserved nothing) and say so in the log.
			l.log.Error("quota: Redis refused a request that the policy admits; refusing it", "scopes", len(sc))
			return quota.Unavailable(sc[0], "quota", l.backoff), nil, nil
		}
		d.Warnings = append(evs, d.Warnings...)
		l.emit(d.Warnings)
		return d, nil, nil
	}
	d = p.Admitted(sc, st, now)
	d.Warnings = append(evs, d.Warnings...)
	if len(d.Warnings) == 0 {
		d.Warnings = nil
	}
	l.emit(d.Warnings)
	return d, &ticket{l: l, sc: sc, keys: keys, dayStart: dayStart, tokens: n, cost: c, reserved: true}, nil
}

var errRedis = errors.New("redis unavailable")

// seedScope loads the scope's recorded usage of the day from the ledger
// and installs it unless another replica did first.
func (l *Limiter) seedScope(ctx context.Context, s quota.Scope, key string, dayStart, dayEnd time.Time) error {
	tokens, cost, err := l.seed(ctx, s, dayStart)
	if err != nil {
		return fmt.Errorf("load %s usage of %s: %w", s, dayStart.Format(time.DateOnly), err)
	}
	if _, err := l.run(ctx, seedScript, []string{key}, []any{max(tokens, 0), max(cost, 0), dayExpiry(dayEnd)}); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		l.failed("seed", err)
		return fmt.Errorf("%w: %v", errRedis, err)
	}
	return nil
}

// run runs a script with the per-call deadline.
func (l *Limiter) run(ctx context.Context, s *redis.Script, keys []string, args []any) ([]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	v, err := s.Run(ctx, l.rdb, keys, args...).Int64Slice()
	if err == redis.Nil {
		err = errors.New("script returned nothing")
	}
	return v, err
}

func snapshots(v []int64, k, width int) []quota.Snapshot {
	st := make([]quota.Snapshot, k)
	for j := range k {
		x := v[j*width:]
		st[j] = quota.Snapshot{TokensUsed: x[0], TokensReserved: x[1], CostUsed: x[2], CostReserved: x[3]}
		if width == 7 {
			st[j].RPMLevel, st[j].TPMLevel, st[j].NewFlags = x[4], x[5], uint8(x[6])
		} else {
			st[j].NewFlags = uint8(x[4])
		}
	}
	return st
}

func boolArg(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (l *Limiter) isDown(now time.Time) bool { return now.UnixNano() < l.downUntil.Load() }

// failed records a failed call and, after tripAfter in a row, starts the
// backoff.
func (l *Limiter) failed(op string, err error) {
	l.m.errors.WithLabelValues(op).Inc()
	l.m.up.Set(0)
	if l.failures.Add(1) < tripAfter {
		return
	}
	now := l.now()
	if prev := l.downUntil.Swap(now.Add(l.backoff).UnixNano()); prev == 0 {
		l.log.Warn("quota: Redis unavailable; quotas.redis.on_error applies", "op", op, "err", err, "retry_every", l.backoff)
	}
}

// up records a successful call.
func (l *Limiter) up() {
	l.m.up.Set(1)
	l.failures.Store(0)
	if l.downUntil.Load() != 0 && l.downUntil.Swap(0) != 0 {
		l.log.Info("quota: Redis answers again")
	}
}

// unavailable decides without Redis: refused if any stateful limit of
// the request fails closed, else admitted uncounted.
func (l *Limiter) unavailable(sc []quota.Scoped, evs []quota.Event) (quota.Decision, quota.Ticket, error) {
	for i := range sc {
		for _, lim := range sc[i].Limits() {
			if l.cfg.FailClosed(lim) {
				l.m.failClosed.WithLabelValues(lim).Inc()
				d := quota.Unavailable(sc[i], lim, l.backoff)
				if len(evs) > 0 {
					d.Warnings = evs
				}
				return d, nil, nil
			}
		}
	}
	var seen [4]bool
	counted := false
	for i := range sc {
		for _, lim := range sc[i].Limits() {
			k := limitIndex(lim)
			if !seen[k] {
				seen[k] = true
				counted = true
				l.m.failOpen.WithLabelValues(lim).Inc()
			}
		}
	}
	if !counted { // only max_input_tokens applies: nothing was skipped
		return quota.Decision{Allowed: true, Warnings: evs}, nop{}, nil
	}
	// The usage is still recorded at Commit if Redis is back by then.
	return quota.Decision{Allowed: true, Warnings: evs}, &ticket{l: l, sc: sc, dayStart: time.Time{}}, nil
}

func limitIndex(lim string) int {
	switch lim {
	case quota.LimitDailyTokens:
		return 0
	case quota.LimitDailyCost:
		return 1
	case quota.LimitRequestsPerMinute:
		return 2
	}
	return 3
}

func (l *Limiter) emit(evs []quota.Event) {
	if l.onEvent == nil {
		return
	}
	for _, e := range evs {
		l.onEvent(e)
	}
}

// ticket is an admitted request's reservation in Redis. A ticket of a
// request admitted while Redis was unavailable reserved nothing
// (reserved false): its Commit still adds the usage, its Cancel does
// nothing.
type ticket struct {
	l        *Limiter
	sc       []quota.Scoped
	keys     []string // the admission day's keys; nil for an unreserved ticket
	dayStart time.Time
	tokens   int64
	cost     int64
	reserved bool
	done     atomic.Bool
}

func (t *ticket) Commit(tokens, cost int64) { t.settle(max(tokens, 0), max(cost, 0), false) }
func (t *ticket) Cancel()                   { t.settle(0, 0, true) }

// settle runs the commit script with its own deadline: the request is
// over, so its context may be gone. A settle that fails leaves the
// reservation counted until the day key expires — stricter, never looser
// — and is counted in tollgate_quota_backend_errors_total{op="commit"}.
func (t *ticket) settle(tokens, cost int64, cancel bool) {
	if !t.done.CompareAndSwap(false, true) || (cancel && !t.reserved) {
		return
	}
	l := t.l
	now := l.now()
	dayStart, _ := l.policy.Load().Day(now)
	keys := t.keys
	if keys == nil { // admitted uncounted: record the usage on today
		t.dayStart = dayStart
		for i := range t.sc {
			keys = append(keys, l.dayKey(t.sc[i].Scope, dayStart), l.bucketKey(t.sc[i].Scope))
		}
	}
	if l.isDown(now) {
		l.m.errors.WithLabelValues("commit").Inc()
		return
	}
	today := t.dayStart.Equal(dayStart)
	args := []any{now.UnixMicro(), t.tokens, t.cost, tokens, cost, boolArg(cancel && t.reserved), boolArg(today), len(t.sc)}
	args = scopeArgs(args, t.sc)
	res, err := l.run(context.Background(), commitScript, keys, args)
	if err == nil && len(res) != 5*len(t.sc) {
		err = fmt.Errorf("commit script returned %d values for %d scopes", len(res), len(t.sc))
	}
	if err != nil {
		l.failed("commit", err)
		return
	}
	l.up()
	if today {
		l.emit(l.policy.Load().Committed(t.sc, snapshots(res, len(t.sc), 5), now))
	}
}

// nop is the ticket of a request no stateful limit applies to.
type nop struct{}

func (nop) Commit(int64, int64) {}
func (nop) Cancel()             {}

// metrics are the limiter's own series (docs/metrics.md).
type metrics struct {
	errors     *prometheus.CounterVec
	failOpen   *prometheus.CounterVec
	failClosed *prometheus.CounterVec
	up         prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "tollgate_quota_backend_errors_total",
			Help:        "Calls to the shared quota store that failed or timed out, by operation (admit, commit, seed, usage); commit also counts settlements skipped during the backoff.",
			ConstLabels: prometheus.Labels{"backend": "redis"},
		}, []string{"op"}),
		failOpen: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_quota_fail_open_total",
			Help: "Requests admitted without checking a limit because the shared quota store was unavailable, by limit.",
		}, []string{"limit"}),
		failClosed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_quota_fail_closed_total",
			Help: "Requests refused (503) because the shared quota store was unavailable and a limit fails closed, by limit.",
		}, []string{"limit"}),
		up: prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "tollgate_quota_backend_up",
			Help:        "1 when the last call to the shared quota store (or the ping at start) succeeded, 0 after a failure.",
			ConstLabels: prometheus.Labels{"backend": "redis"},
		}),
	}
	for _, op := range []string{"admit", "commit", "seed", "usage"} {
		m.errors.WithLabelValues(op)
	}
	for _, lim := range []string{quota.LimitDailyTokens, quota.LimitDailyCost, quota.LimitRequestsPerMinute, quota.LimitTokensPerMinute} {
		m.failOpen.WithLabelValues(lim)
		m.failClosed.WithLabelValues(lim)
	}
	if reg != nil {
		reg.MustRegister(m.errors, m.failOpen, m.failClosed, m.up)
	}
	return m
}

// seen remembers the scopes under a default daily limit that this
// replica has met today, for Usage (named ones are always listed).
type seen struct {
	mu  sync.Mutex
	day int64                 // the latest quota day met (unix s)
	m   map[quota.Scope]int64 // scope → start of the last quota day it was met
}

func (s *seen) add(sc []quota.Scoped, day int64) {
	for i := range sc {
		if !sc[i].Default || !sc[i].Daily() {
			continue
		}
		s.mu.Lock()
		if s.m == nil || day > s.day {
			// A new day forgets the last one's: memory stays bounded by
			// the scopes met in a day, Usage called or not.
			s.m, s.day = map[quota.Scope]int64{}, day
		}
		s.m[sc[i].Scope] = day
		s.mu.Unlock()
	}
}

// today returns the scopes met on day and forgets the others.
func (s *seen) today(day int64) []quota.Scope {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []quota.Scope
	for sc, d := range s.m {
		if d == day {
			out = append(out, sc)
		} else {
			delete(s.m, sc)
		}
	}
	return out
}

// Usage implements quota.UsageReader for the dashboard: every scope listed
// by name with a daily limit, and every scope under a default daily limit
// that this replica has met today, with the fleet's figures from Redis
// (one pipelined read). Nil when Redis cannot be read.
func (l *Limiter) Usage(now time.Time) []quota.ScopeUsage {
	dayStart, dayEnd := l.policy.Load().Day(now)
	sc := l.policy.Load().Named()
	for _, s := range l.seen.today(dayStart.Unix()) {
		if got := l.policy.Load().Scopes(subjectOf(s)); len(got) == 1 && got[0].Default {
			sc = append(sc, got[0])
		}
	}
	if len(sc) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	cmds := make([]*redis.SliceCmd, len(sc))
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range sc {
			cmds[i] = p.HMGet(ctx, l.dayKey(sc[i].Scope, dayStart), "u", "r", "cu", "cr")
		}
		return nil
	})
	if err != nil {
		l.m.errors.WithLabelValues("usage").Inc()
		return nil
	}
	out := make([]quota.ScopeUsage, 0, 2*len(sc))
	for i := range sc {
		var v [4]int64
		for j, x := range cmds[i].Val() {
			if s, ok := x.(string); ok {
				v[j], _ = strconv.ParseInt(s, 10, 64)
			}
		}
		s := &sc[i]
		add := func(limit string, used, reserved, q int64, warnAt float64) {
			out = append(out, quota.ScopeUsage{Scope: s.Label, Kind: s.Scope.Kind.String(), Name: s.Scope.Name, Limit: limit,
				Used: used, Reserved: reserved, Quota: q, Share: float64(used+reserved) / float64(q),
				WarnAt: warnAt, Default: s.Default, DayStart: dayStart, DayEnd: dayEnd})
		}
		if s.DailyTokens > 0 {
			add(quota.LimitDailyTokens, v[0], v[1], s.DailyTokens, s.WarnAt)
		}
		if s.DailyCost > 0 {
			add(quota.LimitDailyCost, v[2], v[3], s.DailyCost, s.WarnAt)
		}
	}
	quota.SortUsage(out)
	return out
}

func subjectOf(s quota.Scope) quota.Subject {
	switch s.Kind {
	case quota.KindKey:
		return quota.Subject{KeyID: s.Name}
	case quota.KindUser:
		return quota.Subject{UserID: s.Name}
	}
	return quota.Subject{BizLine: s.Name}
}

// Preload installs today's usage recorded in the ledger for every scope
// with a daily limit whose day key does not exist yet — every subject
// listed by name, and every subject under a default daily limit with usage
// today — so that the budget-burn view is right before each scope's first
// request (after Redis lost its data, or on the fleet's first start). It
// reads the ledger with one query per kind. It cannot count anything
// twice: a day key with usage already has its seed mark, and the seed
// script only writes a key without one (as a request's seed does).
func (l *Limiter) Preload(ctx context.Context, all quota.DaySeedFunc) error {
	now := l.now()
	dayStart, dayEnd := l.policy.Load().Day(now)
	named := l.policy.Load().Named()
	var errs []error
	for kind := range quota.Kind(3) {
		var mine []quota.Scoped
		for _, s := range named {
			if s.Scope.Kind == kind {
				mine = append(mine, s)
			}
		}
		useDef := l.policy.Load().DefaultDaily(kind)
		if len(mine) == 0 && !useDef {
			continue
		}
		used, err := all(ctx, kind, dayStart)
		if err != nil {
			errs = append(errs, fmt.Errorf("load %s usage of %s: %w", kind, dayStart.Format(time.DateOnly), err))
			continue
		}
		install := func(s quota.Scoped, u quota.Used) error {
			_, err := l.run(ctx, seedScript, []string{l.dayKey(s.Scope, dayStart)}, []any{max(u.Tokens, 0), max(u.CostNanos, 0), dayExpiry(dayEnd)})
			return err
		}
		for _, s := range mine {
			if err := install(s, used[s.Scope.Name]); err != nil {
				return errors.Join(append(errs, fmt.Errorf("quota preload: %w", err))...)
			}
		}
		if !useDef {
			continue
		}
		for name, u := range used {
			sc := l.policy.Load().Scopes(subjectOf(quota.Scope{Kind: kind, Name: name}))
			if name == "" || len(sc) != 1 || !sc[0].Default || !sc[0].Daily() {
				continue
			}
			if err := install(sc[0], u); err != nil {
				return errors.Join(append(errs, fmt.Errorf("quota preload: %w", err))...)
			}
			l.seen.add(sc, dayStart.Unix())
		}
	}
	return errors.Join(errs...)
}
