package redisquota

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/internal/quota"
	"github.com/tollgate-dev/tollgate/internal/quota/redisquota/redistest"
)

// replica is one tollgate replica's limiter: its own client (own
// connection pool) over the shared Redis, its own metrics.
func replica(t *testing.T, cfg quota.Config, now func() time.Time, seed quota.SeedFunc) (*Limiter, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	l, err := New(cfg, Options{Seed: seed, Now: now, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, reg
}

func redisCfg(t *testing.T, srv *redistest.Server, c quota.Config) quota.Config {
	c.Redis.URL = "redis://" + srv.Addr
	if c.Redis.KeyPrefix == "" {
		c.Redis.KeyPrefix = srv.Prefix(t)
	}
	if c.Redis.Timeout == 0 {
		// Generous: the race detector and a shared 2-core machine must not
		// turn a slow call into a fail-open decision in the exactness tests.
		c.Redis.Timeout = 5 * time.Second
	}
	return c
}

// Two replicas, many goroutines each, racing at the boundary of one
// daily quota and one per-minute limit: exactly the quota is admitted in
// total, never more, and what is refused is refused by the right limit.
func TestReplicasShareLimitsExactly(t *testing.T) {
	srv := startRedis(t, false)
	fixed := start() // a still clock: no refill while the race runs
	now := func() time.Time { return fixed }
	for _, tc := range []struct {
		name  string
		lim   quota.Limits
		req   quota.Request
		total int64
		limit string
		// commit: each admitted request settles at once with exactly its
		// estimate, racing the admissions
		commit bool
	}{
		{"daily_tokens", quota.Limits{DailyTokens: 1000}, quota.Request{EstInputTokens: 3, EstOutputTokens: 7}, 100, quota.LimitDailyTokens, false},
		{"daily_tokens_settled", quota.Limits{DailyTokens: 1000}, quota.Request{EstInputTokens: 3, EstOutputTokens: 7}, 100, quota.LimitDailyTokens, true},
		{"daily_cost", quota.Limits{DailyCost: "0.000000250"}, quota.Request{EstInputTokens: 1, EstCostNanos: 5}, 50, quota.LimitDailyCost, false},
		{"daily_cost_settled", quota.Limits{DailyCost: "0.000000250"}, quota.Request{EstInputTokens: 1, EstCostNanos: 5}, 50, quota.LimitDailyCost, true},
		{"requests_per_minute", quota.Limits{RequestsPerMinute: 77}, quota.Request{EstInputTokens: 1}, 77, quota.LimitRequestsPerMinute, false},
		{"tokens_per_minute", quota.Limits{TokensPerMinute: 600}, quota.Request{EstInputTokens: 2, EstOutputTokens: 4}, 100, quota.LimitTokensPerMinute, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := redisCfg(t, srv, quota.Config{Users: map[string]quota.Limits{"alice": tc.lim}})
			a, _ := replica(t, cfg, now, nil)
			b, _ := replica(t, cfg, now, nil)
			req := tc.req
			req.UserID = "alice"

			var admitted, refused atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			const perGoroutine = 8
			for g := range 48 { // 2 × 24 goroutines, 384 attempts for a quota of ≤ 100
				l := a
				if g%2 == 1 {
					l = b
				}
				wg.Go(func() {
					for range perGoroutine {
						d, tk, err := l.Admit(context.Background(), req)
						if err != nil {
							errs <- err
							return
						}
						if d.Allowed {
							admitted.Add(1)
							if tc.commit {
								tk.Commit(req.EstInputTokens+req.EstOutputTokens, req.EstCostNanos)
							}
							continue
						}
						refused.Add(1)
						if d.Limit != tc.limit || tk != nil {
							t.Errorf("refused by %q (%s), ticket %v; want %s", d.Limit, d.Message, tk, tc.limit)
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if got := admitted.Load(); got != tc.total {
				t.Errorf("admitted %d in total over two replicas, want exactly %d (%d refused)", got, tc.total, refused.Load())
			}
			for _, l := range []*Limiter{a, b} {
				for _, op := range []string{"admit", "commit"} {
					if n := testutil.ToFloat64(l.m.errors.WithLabelValues(op)); n != 0 {
						t.Errorf("%v failed Redis calls (%s): decisions may have failed open", n, op)
					}
				}
			}
			if tc.commit { // all settled: usage is the quota, nothing left reserved
				us := a.Usage(fixed)
				if len(us) != 1 || us[0].Used != us[0].Quota || us[0].Reserved != 0 {
					t.Errorf("usage after the race: %+v", us)
				}
			}
		})
	}
}

// A replica that restarts (a new limiter, new connections) carries on
// from the counters in Redis; the day key expires a day after the quota
// day ends and the bucket key two minutes after its last use.
func TestRestartKeepsCountersAndKeysExpire(t *testing.T) {
	srv := startRedis(t, false)
	cfg := redisCfg(t, srv, quota.Config{Users: map[string]quota.Limits{"alice": {DailyTokens: 100, RequestsPerMinute: 1000}}})
	a, _ := replica(t, cfg, time.Now, nil)
	req := quota.Request{Subject: quota.Subject{UserID: "alice"}, EstInputTokens: 10, EstOutputTokens: 30}
	d, tk, err := a.Admit(context.Background(), req)
	if err != nil || !d.Allowed {
		t.Fatalf("first admit: %+v %v", d, err)
	}
	tk.Commit(70, 0)
	a.Close()

	b, _ := replica(t, cfg, time.Now, nil)
	if d, _, err := b.Admit(context.Background(), req); err != nil || d.Allowed || d.Limit != quota.LimitDailyTokens {
		t.Fatalf("after restart 70 + 40 must exceed 100: %+v %v", d, err)
	}
	us := b.Usage(time.Now())
	if len(us) != 1 || us[0].Used != 70 || us[0].Reserved != 0 {
		t.Errorf("usage after restart: %+v", us)
	}

	c := srv.Client(t)
	dayStart, dayEnd := b.policy.Load().Day(time.Now())
	ttl, err := c.TTL(context.Background(), b.dayKey(quota.Scope{Kind: quota.KindUser, Name: "alice"}, dayStart)).Result()
	if err != nil {
		t.Fatal(err)
	}
	want := time.Until(dayEnd.Add(24 * time.Hour))
	if ttl <= 0 || ttl > want+5*time.Second || ttl < want-time.Minute {
		t.Errorf("day key TTL %s, want about %s (a day after the quota day ends)", ttl, want)
	}
	bttl, err := c.PTTL(context.Background(), b.bucketKey(quota.Scope{Kind: quota.KindUser, Name: "alice"})).Result()
	if err != nil || bttl <= 0 || bttl > 121*time.Second {
		t.Errorf("bucket key TTL %s %v, want at most 121s", bttl, err)
	}
}

// Two replicas that both find the day's key missing seed it from the
// ledger once between them, not once each.
func TestSeedOnceAcrossReplicas(t *testing.T) {
	srv := startRedis(t, false)
	cfg := redisCfg(t, srv, quota.Config{Users: map[string]quota.Limits{"alice": {DailyTokens: 1000}}})
	var calls atomic.Int64
	release := make(chan struct{})
	seed := func(ctx context.Context, s quota.Scope, day time.Time) (int64, int64, error) {
		calls.Add(1)
		<-release // both replicas are inside their seed before either installs it
		return 900, 0, nil
	}
	a, _ := replica(t, cfg, time.Now, seed)
	b, _ := replica(t, cfg, time.Now, seed)
	req := quota.Request{Subject: quota.Subject{UserID: "alice"}, EstInputTokens: 40}
	type res struct {
		d   quota.Decision
		err error
	}
	out := make(chan res, 2)
	for _, l := range []*Limiter{a, b} {
		go func() {
			d, _, err := l.Admit(context.Background(), req)
			out <- res{d, err}
		}()
	}
	waitFor(t, "both replicas seeding", 10*time.Second, func() bool { return calls.Load() == 2 })
	close(release)
	for range 2 {
		if r := <-out; r.err != nil || !r.d.Allowed {
			t.Fatalf("%+v %v", r.d, r.err)
		}
	}
	// 900 + 40 + 40 = 980: one more of 40 is refused, which it would not
	// be had the seed counted twice (1880) … and would be if it counted.
	us := a.Usage(time.Now())
	if len(us) != 1 || us[0].Used != 900 || us[0].Reserved != 80 {
		t.Fatalf("usage %+v, want used 900 (seeded once) reserved 80", us)
	}
	if d, _, _ := b.Admit(context.Background(), req); d.Allowed {
		t.Errorf("980 + 40 > 1000 admitted")
	}
}

// Redis killed mid-test: each limit behaves as configured — fail open
// admits and counts, fail closed refuses with a clean 503 — and the
// limiter recovers by itself when Redis is back. The server restarts
// empty: the seed restores the day's usage from the ledger.
func TestRedisKilledFailOpenAndClosed(t *testing.T) {
	srv := startRedis(t, true)
	cfg := redisCfg(t, srv, quota.Config{
		Users: map[string]quota.Limits{"open": {DailyTokens: 1000}, "closed": {DailyCost: "1"}, "both": {DailyTokens: 1000, DailyCost: "1"}},
		Keys:  map[string]quota.Limits{"k": {RequestsPerMinute: 1000}},
	})
	cfg.Redis.Timeout = 200 * time.Millisecond
	cfg.Redis.Backoff = 50 * time.Millisecond
	cfg.Redis.OnError = map[string]string{quota.LimitDailyCost: quota.FailClosed, quota.LimitDailyTokens: quota.FailOpen}
	ledger := map[string]int64{"user:open": 100} // what the ledger would answer after the restart
	var mu sync.Mutex
	seed := func(ctx context.Context, s quota.Scope, day time.Time) (int64, int64, error) {
		mu.Lock()
		defer mu.Unlock()
		return ledger[s.String()], 0, nil
	}
	l, _ := replica(t, cfg, time.Now, seed)
	ask := func(user, key string) quota.Decision {
		t.Helper()
		d, tk, err := l.Admit(context.Background(), quota.Request{Subject: quota.Subject{UserID: user, KeyID: key}, EstInputTokens: 10})
		if err != nil {
			t.Fatal(err)
		}
		if tk != nil {
			tk.Commit(10, 0)
		}
		return d
	}
	if d := ask("open", ""); !d.Allowed {
		t.Fatalf("before the kill: %+v", d)
	}

	srv.Kill(t)
	if d := ask("open", "k"); !d.Allowed {
		t.Errorf("fail open: refused %+v", d)
	}
	d := ask("closed", "")
	if d.Allowed || d.Status != http.StatusServiceUnavailable || d.Code != "quota_unavailable" || d.Limit != quota.LimitDailyCost ||
		d.Headers.Get("Retry-After") == "" {
		t.Errorf("fail closed: %+v", d)
	}
	if d := ask("both", ""); d.Allowed || d.Limit != quota.LimitDailyCost {
		t.Errorf("a request under an open and a closed limit must be refused: %+v", d)
	}
	if n := testutil.ToFloat64(l.m.failOpen.WithLabelValues(quota.LimitDailyTokens)); n != 1 {
		t.Errorf("fail_open{daily_tokens} = %v, want 1", n)
	}
	if n := testutil.ToFloat64(l.m.failOpen.WithLabelValues(quota.LimitRequestsPerMinute)); n != 1 {
		t.Errorf("fail_open{requests_per_minute} = %v, want 1", n)
	}
	if n := testutil.ToFloat64(l.m.failClosed.WithLabelValues(quota.LimitDailyCost)); n != 2 {
		t.Errorf("fail_closed{daily_cost} = %v, want 2", n)
	}
	if n := testutil.ToFloat64(l.m.errors.WithLabelValues("admit")); n < 1 {
		t.Errorf("backend errors{admit} = %v, want ≥ 1", n)
	}
	if testutil.ToFloat64(l.m.up) != 0 {
		t.Error("backend_up should be 0 while Redis is down")
	}

	mu.Lock()
	ledger["user:open"] = 950
	mu.Unlock()
	srv.Restart(t)
	// Back by itself once the backoff has passed: the first request after
	// it reaches Redis (up = 1) and is counted against the re-seeded day.
	waitFor(t, "recovery after Redis restarts", 10*time.Second, func() bool {
		d := ask("closed", "")
		return d.Allowed && testutil.ToFloat64(l.m.up) == 1
	})
	if d := ask("open", ""); !d.Allowed {
		t.Fatalf("950 + 10 of 1000 refused: %+v", d)
	}
	// 950 seeded + 10 committed = 960; 50 more would be 1010.
	if d, _, _ := l.Admit(context.Background(), quota.Request{Subject: quota.Subject{UserID: "open"}, EstInputTokens: 50}); d.Allowed {
		t.Errorf("the re-seeded usage was not counted: 960 + 50 admitted")
	}
}

// A frozen Redis (SIGSTOP: the connection is open, nothing answers) is
// the case that would hang the proxy without a deadline: each call gives
// up after quotas.redis.timeout and the policy applies.
func TestRedisFrozenTimesOut(t *testing.T) {
	srv := startRedis(t, true)
	cfg := redisCfg(t, srv, quota.Config{Users: map[string]quota.Limits{"alice": {DailyTokens: 1000}}})
	cfg.Redis.Timeout = 50 * time.Millisecond
	cfg.Redis.Backoff = 20 * time.Millisecond
	l, _ := replica(t, cfg, time.Now, nil)
	req := quota.Request{Subject: quota.Subject{UserID: "alice"}, EstInputTokens: 10}
	if d, _, err := l.Admit(context.Background(), req); err != nil || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	// Counted from here: on a loaded machine the call above may itself
	// have outlived the 50 ms timeout and failed open.
	errors0 := testutil.ToFloat64(l.m.errors.WithLabelValues("admit"))
	failOpen0 := testutil.ToFloat64(l.m.failOpen.WithLabelValues(quota.LimitDailyTokens))
	srv.Signal(t, syscall.SIGSTOP)
	done := make(chan quota.Decision, 1)
	go func() {
		d, _, _ := l.Admit(context.Background(), req)
		done <- d
	}()
	select {
	case d := <-done:
		if !d.Allowed {
			t.Errorf("fail open on timeout: %+v", d)
		}
	case <-time.After(30 * time.Second): // a hang, not a speed check
		srv.Signal(t, syscall.SIGCONT)
		t.Fatal("Admit did not return while Redis was frozen: no deadline")
	}
	if n := testutil.ToFloat64(l.m.errors.WithLabelValues("admit")) - errors0; n != 1 {
		t.Errorf("errors{admit} rose by %v while Redis was frozen, want 1", n)
	}
	if n := testutil.ToFloat64(l.m.failOpen.WithLabelValues(quota.LimitDailyTokens)) - failOpen0; n != 1 {
		t.Errorf("fail_open rose by %v while Redis was frozen, want 1", n)
	}
	srv.Signal(t, syscall.SIGCONT)
	waitFor(t, "recovery after SIGCONT", 10*time.Second, func() bool {
		d, tk, _ := l.Admit(context.Background(), req)
		if tk != nil {
			tk.Cancel()
		}
		return d.Allowed && testutil.ToFloat64(l.m.up) == 1
	})
}

// One failed call decides only its own request by the policy; three in a
// row stop the asking for the backoff (calls are not even tried: no new
// errors, the policy at once), and the first call after it reaches Redis.
func TestBackoffTripsAfterConsecutiveFailures(t *testing.T) {
	srv := startRedis(t, true)
	clk := &clock{t: start()}
	cfg := redisCfg(t, srv, quota.Config{Users: map[string]quota.Limits{"alice": {DailyTokens: 1000}}})
	cfg.Redis.Timeout = 50 * time.Millisecond
	cfg.Redis.Backoff = time.Hour // on the hand-driven clock
	l, _ := replica(t, cfg, clk.Now, nil)
	req := quota.Request{Subject: quota.Subject{UserID: "alice"}, EstInputTokens: 10}
	admit := func() quota.Decision {
		t.Helper()
		d, _, err := l.Admit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	errs := func() float64 { return testutil.ToFloat64(l.m.errors.WithLabelValues("admit")) }
	opens := func() float64 { return testutil.ToFloat64(l.m.failOpen.WithLabelValues(quota.LimitDailyTokens)) }

	srv.Signal(t, syscall.SIGSTOP)
	admit()
	srv.Signal(t, syscall.SIGCONT)
	if d := admit(); !d.Allowed || errs() != 1 || testutil.ToFloat64(l.m.up) != 1 {
		t.Fatalf("after one hiccup Redis must be asked again: %+v errors=%v", d, errs())
	}

	srv.Signal(t, syscall.SIGSTOP)
	for range tripAfter {
		admit()
	}
	if errs() != 1+tripAfter || opens() != 1+tripAfter {
		t.Fatalf("errors=%v fail_open=%v, want %d each", errs(), opens(), 1+tripAfter)
	}
	srv.Signal(t, syscall.SIGCONT)
	for range 5 { // tripped: the policy at once, Redis not asked
		if d := admit(); !d.Allowed {
			t.Fatalf("fail open: %+v", d)
		}
	}
	if errs() != 1+tripAfter || opens() != 6+tripAfter {
		t.Fatalf("during the backoff: errors=%v (want %d: no call) fail_open=%v (want %d)", errs(), 1+tripAfter, opens(), 6+tripAfter)
	}
	clk.Add(time.Hour + time.Second)
	admit()
	if testutil.ToFloat64(l.m.up) != 1 || opens() != 6+tripAfter {
		t.Errorf("after the backoff the next request must reach Redis: up=%v fail_open=%v", testutil.ToFloat64(l.m.up), opens())
	}
}

// Preload installs the ledger's usage of today for the named scopes and
// the default-limited ones with usage, once: a second preload (another
// replica starting) and a request's own seed change nothing.
func TestPreload(t *testing.T) {
	srv := startRedis(t, false)
	cfg := redisCfg(t, srv, quota.Config{Users: map[string]quota.Limits{"alice": {DailyTokens: 1000}, "carol": {DailyCost: "1"}},
		Default: quota.Defaults{User: quota.Limits{DailyTokens: 500}}})
	ledger := map[string]quota.Used{"alice": {Tokens: 300}, "bob": {Tokens: 50}, "dave": {Tokens: 7, CostNanos: 9}}
	all := func(ctx context.Context, k quota.Kind, day time.Time) (map[string]quota.Used, error) {
		if k != quota.KindUser {
			t.Errorf("preload read kind %s, which has no daily limit", k)
		}
		return ledger, nil
	}
	seeds := 0
	seed := func(ctx context.Context, s quota.Scope, day time.Time) (int64, int64, error) {
		seeds++
		return 999, 0, nil // never used: every scope of the test is preloaded
	}
	a, _ := replica(t, cfg, time.Now, seed)
	if err := a.Preload(context.Background(), all); err != nil {
		t.Fatal(err)
	}
	ledger["alice"] = quota.Used{Tokens: 5000} // a second replica reading later must not add it
	b, _ := replica(t, cfg, time.Now, seed)
	if err := b.Preload(context.Background(), all); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, u := range a.Usage(time.Now()) {
		got[u.Scope+" "+u.Limit] = u.Used
	}
	want := map[string]int64{"user:alice daily_tokens": 300, "user:bob daily_tokens": 50, "user:carol daily_cost": 0, "user:dave daily_tokens": 7}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("usage after preload (-want +got):\n%s", diff)
	}
	d, tk, err := b.Admit(context.Background(), quota.Request{Subject: quota.Subject{UserID: "alice"}, EstInputTokens: 700})
	if err != nil || !d.Allowed {
		t.Fatalf("300 + 700 of 1000: %+v %v", d, err)
	}
	tk.Cancel()
	if seeds != 0 {
		t.Errorf("%d request seeds after a preload", seeds)
	}
}
