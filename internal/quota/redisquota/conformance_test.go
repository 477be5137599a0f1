package redisquota

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
	_ "time/tzdata" // Asia/Shanghai days wherever the test runs

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/internal/quota"
)

// The conformance test runs one table of cases against quota.Local and
// the Redis limiter side by side, on one hand-driven clock: every
// Decision (status, message, Retry-After, rate headers, warnings) and
// every event must be identical, and each step must match what the case
// expects. Redis is the real server.

var (
	_ quota.Limiter     = (*Limiter)(nil)
	_ quota.UsageReader = (*Limiter)(nil)
)

// clock is a hand-driven time source in whole microseconds (both
// limiters count bucket time in µs).
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// start is noon of the next UTC day: in the future (so keys' EXPIREAT
// lies ahead of the server's clock) and far from midnight.
func start() time.Time {
	return time.Now().UTC().Truncate(24 * time.Hour).Add(36 * time.Hour)
}

type recorder struct {
	mu  sync.Mutex
	got []quota.Event
}

func (r *recorder) add(e quota.Event) {
	r.mu.Lock()
	r.got = append(r.got, e)
	r.mu.Unlock()
}

func (r *recorder) take() []quota.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.got
	r.got = nil
	return g
}

// step is one operation of a case.
type step struct {
	op string // admit, commit, cancel, wait, midnight
	// admit
	req quota.Request
	// commit, cancel: the ticket of step n (from 1), an admit
	of           int
	tokens, cost int64
	// wait
	d time.Duration
	// admit: "" admitted, else the refusing limit
	want string
}

func admitS(user, key, biz string, in, out, cost int64, want string) step {
	return step{op: "admit", req: quota.Request{Subject: quota.Subject{KeyID: key, UserID: user, BizLine: biz},
		EstInputTokens: in, EstOutputTokens: out, EstCostNanos: cost}, want: want}
}

func commitS(of int, tokens, cost int64) step {
	return step{op: "commit", of: of, tokens: tokens, cost: cost}
}
func cancelS(of int) step        { return step{op: "cancel", of: of} }
func waitS(d time.Duration) step { return step{op: "wait", d: d} }

var conformance = []struct {
	name  string
	cfg   quota.Config
	seed  map[string][2]int64 // scope label → tokens, cost already in the ledger today
	steps []step
}{
	{
		name: "daily tokens: reservations, commit below and above, warning, next day",
		cfg:  quota.Config{Users: map[string]quota.Limits{"alice": {DailyTokens: 100}}},
		steps: []step{
			admitS("alice", "", "", 10, 50, 0, ""),
			admitS("alice", "", "", 10, 40, 0, quota.LimitDailyTokens),
			commitS(1, 30, 0),
			admitS("alice", "", "", 10, 40, 0, ""), // 30 + 50 = 80: warning at 0.8
			admitS("alice", "", "", 10, 20, 0, quota.LimitDailyTokens),
			admitS("alice", "", "", 1, 200, 0, quota.LimitDailyTokens), // larger than the quota itself
			commitS(4, 90, 0),                                          // 120 > 100: exceeded after commit
			admitS("alice", "", "", 0, 0, 0, quota.LimitDailyTokens),
			{op: "midnight"},
			admitS("alice", "", "", 50, 50, 0, ""),
			admitS("alice", "", "", 0, 1, 0, quota.LimitDailyTokens),
			cancelS(10),
			admitS("alice", "", "", 0, 1, 0, ""),
		},
	},
	{
		name: "daily cost budget with unknown estimates",
		cfg:  quota.Config{BizLines: map[string]quota.Limits{"search": {DailyCost: "0.000001", WarnAt: 0.5}}},
		steps: []step{
			admitS("", "", "search", 10, 10, 600, ""),
			commitS(1, 20, 900),
			admitS("", "", "search", 10, 10, 0, ""),
			commitS(3, 20, 200),
			admitS("", "", "search", 10, 10, 0, quota.LimitDailyCost),
			admitS("", "", "search", 10, 10, 5000, quota.LimitDailyCost),
		},
	},
	{
		name: "requests per minute: bucket, refill, cancel returns the slot",
		cfg:  quota.Config{Keys: map[string]quota.Limits{"k1": {RequestsPerMinute: 3}}},
		steps: []step{
			admitS("", "k1", "", 1, 1, 0, ""),
			admitS("", "k1", "", 1, 1, 0, ""),
			admitS("", "k1", "", 1, 1, 0, ""),
			admitS("", "k1", "", 1, 1, 0, quota.LimitRequestsPerMinute),
			waitS(7 * time.Second),
			admitS("", "k1", "", 1, 1, 0, quota.LimitRequestsPerMinute),
			waitS(13*time.Second + 1),
			admitS("", "k1", "", 1, 1, 0, ""),
			cancelS(8),
			admitS("", "k1", "", 1, 1, 0, ""),
			admitS("", "k1", "", 1, 1, 0, quota.LimitRequestsPerMinute),
			commitS(1, 5, 0),
			waitS(3 * time.Minute),
			admitS("", "k1", "", 1, 1, 0, ""),
		},
	},
	{
		name: "tokens per minute: refund, debt, too large",
		cfg:  quota.Config{Users: map[string]quota.Limits{"bob": {TokensPerMinute: 1000}}},
		steps: []step{
			admitS("bob", "", "", 100, 500, 0, ""),
			admitS("bob", "", "", 100, 500, 0, quota.LimitTokensPerMinute),
			commitS(1, 100, 0), // 500 back
			admitS("bob", "", "", 100, 500, 0, ""),
			commitS(4, 1800, 0), // 1200 of debt
			admitS("bob", "", "", 1, 1, 0, quota.LimitTokensPerMinute),
			admitS("bob", "", "", 1000, 1, 0, quota.LimitTokensPerMinute),
			waitS(50 * time.Second),
			admitS("bob", "", "", 10, 10, 0, quota.LimitTokensPerMinute),
			waitS(70 * time.Second),
			admitS("bob", "", "", 10, 10, 0, ""),
		},
	},
	{
		name: "all scopes or none: a refusal by one leaves nothing in the others",
		cfg: quota.Config{
			Keys:     map[string]quota.Limits{"k1": {RequestsPerMinute: 10, TokensPerMinute: 10000}},
			Users:    map[string]quota.Limits{"carol": {DailyTokens: 1000}},
			BizLines: map[string]quota.Limits{"chat": {DailyTokens: 150}},
		},
		steps: []step{
			admitS("carol", "k1", "chat", 50, 50, 0, ""),
			admitS("carol", "k1", "chat", 50, 50, 0, quota.LimitDailyTokens), // chat is full
			admitS("carol", "k1", "", 400, 400, 0, ""),                       // carol: 100 + 800 = 900 of 1000
			admitS("carol", "k1", "", 50, 51, 0, quota.LimitDailyTokens),
			commitS(1, 10, 0),
			admitS("carol", "k1", "chat", 40, 50, 0, ""),
			admitS("dave", "k1", "chat", 1, 1, 0, ""),
		},
	},
	{
		name: "defaults, exemption, max input",
		cfg: quota.Config{
			Users: map[string]quota.Limits{"vip": {}, "eve": {MaxInputTokens: 10, OverMaxInput: quota.OverMaxAlert, DailyTokens: 500}},
			Default: quota.Defaults{User: quota.Limits{DailyTokens: 100, MaxInputTokens: 50},
				Key: quota.Limits{RequestsPerMinute: 2}},
		},
		steps: []step{
			admitS("frank", "", "", 60, 0, 0, quota.LimitMaxInputTokens),
			admitS("frank", "", "", 40, 40, 0, ""),
			admitS("frank", "", "", 10, 20, 0, quota.LimitDailyTokens),
			admitS("vip", "", "", 1000, 1000, 0, ""),
			admitS("eve", "", "", 20, 0, 0, ""), // alert only
			admitS("eve", "kx", "", 20, 0, 0, ""),
			admitS("eve", "kx", "", 20, 0, 0, ""),
			admitS("eve", "kx", "", 20, 0, 0, quota.LimitRequestsPerMinute),
		},
	},
	{
		name: "several limits refuse at once: the longest wait, every one marked",
		cfg: quota.Config{
			Keys:  map[string]quota.Limits{"k2": {RequestsPerMinute: 2, DailyCost: "0.000000100"}},
			Users: map[string]quota.Limits{"hal": {TokensPerMinute: 100, DailyTokens: 150}},
		},
		steps: []step{
			admitS("hal", "k2", "", 30, 30, 60, ""),
			admitS("hal", "k2", "", 10, 10, 30, ""),
			admitS("hal", "k2", "", 20, 20, 20, quota.LimitDailyCost), // rpm, tpm and cost all refuse
			waitS(30 * time.Second),
			admitS("hal", "k2", "", 5, 5, 5, ""),
			commitS(1, 200, 90), // tokens over the day's quota, cost over its budget
			commitS(2, 0, 0),
			admitS("hal", "k2", "", 0, 0, 0, quota.LimitDailyTokens), // cost 90 + 5 in flight: room left
			admitS("", "k2", "", 0, 0, 6, quota.LimitDailyCost),
			cancelS(5),
			waitS(2 * time.Minute),
			admitS("", "k2", "", 0, 0, 6, ""),
			admitS("hal", "", "", 0, 0, 0, quota.LimitDailyTokens),
			{op: "midnight"},
			admitS("hal", "k2", "", 50, 50, 50, ""),
		},
	},
	{
		name: "seeded from the ledger",
		cfg:  quota.Config{Timezone: "Asia/Shanghai", Users: map[string]quota.Limits{"gina": {DailyTokens: 1000, DailyCost: "1"}}},
		seed: map[string][2]int64{"user:gina": {950, 2e8}},
		steps: []step{
			admitS("gina", "", "", 20, 20, 0, ""),
			admitS("gina", "", "", 20, 20, 0, quota.LimitDailyTokens),
			{op: "midnight"},
			admitS("gina", "", "", 20, 20, 0, ""),
		},
	},
}

func TestConformance(t *testing.T) {
	srv := startRedis(t, false)
	for _, tc := range conformance {
		t.Run(tc.name, func(t *testing.T) {
			clk := &clock{t: start()}
			var seed quota.SeedFunc
			if tc.seed != nil {
				// The ledger's figure for the first day; later days start empty.
				first := clk.Now()
				seed = func(_ context.Context, s quota.Scope, day time.Time) (int64, int64, error) {
					if day.After(first) {
						return 0, 0, nil
					}
					v := tc.seed[s.String()]
					return v[0], v[1], nil
				}
			}
			lev, rev := &recorder{}, &recorder{}
			loc, err := quota.NewLocal(tc.cfg, clk.Now, seed, lev.add)
			if err != nil {
				t.Fatal(err)
			}
			rcfg := tc.cfg
			rcfg.Redis = quota.Redis{URL: "redis://" + srv.Addr, KeyPrefix: srv.Prefix(t), Timeout: 2 * time.Second}
			red, err := New(rcfg, Options{Seed: seed, OnEvent: rev.add, Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			defer red.Close()

			ltk, rtk := make([]quota.Ticket, len(tc.steps)), make([]quota.Ticket, len(tc.steps))
			for i, s := range tc.steps {
				where := fmt.Sprintf("step %d (%s)", i+1, s.op)
				switch s.op {
				case "admit":
					ld, lt, err := loc.Admit(context.Background(), s.req)
					if err != nil {
						t.Fatalf("%s: local: %v", where, err)
					}
					rd, rt, err := red.Admit(context.Background(), s.req)
					if err != nil {
						t.Fatalf("%s: redis: %v", where, err)
					}
					if diff := cmp.Diff(ld, rd, cmpopts.EquateEmpty()); diff != "" {
						t.Fatalf("%s: decisions differ (-local +redis):\n%s", where, diff)
					}
					if got := rd.Limit; rd.Allowed != (s.want == "") || (!rd.Allowed && got != s.want) {
						t.Fatalf("%s: allowed=%v limit=%q (%s), want refusal by %q", where, rd.Allowed, got, rd.Message, s.want)
					}
					if (lt == nil) != (rt == nil) || rd.Allowed != (rt != nil) {
						t.Fatalf("%s: tickets local %v redis %v", where, lt, rt)
					}
					ltk[i], rtk[i] = lt, rt
				case "commit":
					ltk[s.of-1].Commit(s.tokens, s.cost)
					rtk[s.of-1].Commit(s.tokens, s.cost)
				case "cancel":
					ltk[s.of-1].Cancel()
					rtk[s.of-1].Cancel()
				case "wait":
					clk.Add(s.d)
				case "midnight":
					_, end := red.policy.Load().Day(clk.Now())
					clk.Add(end.Sub(clk.Now()) + time.Hour)
				}
				if diff := cmp.Diff(lev.take(), rev.take(), cmpopts.EquateEmpty()); diff != "" {
					t.Fatalf("%s: events differ (-local +redis):\n%s", where, diff)
				}
			}
			// Usage reads the same figures.
			if diff := cmp.Diff(loc.Usage(clk.Now()), red.Usage(clk.Now()), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("usage differs (-local +redis):\n%s", diff)
			}
			// Redis answered every call: no decision above came from the
			// unavailable path.
			for _, op := range []string{"admit", "commit", "seed", "usage"} {
				if n := testutil.ToFloat64(red.m.errors.WithLabelValues(op)); n != 0 {
					t.Errorf("%v failed Redis calls (%s)", n, op)
				}
			}
		})
	}
}
