package quota

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// hammer runs workers goroutines that each call try attempts times, all
// released at once so that they really contend.
func hammer(workers, attempts int, try func(worker int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range workers {
		wg.Go(func() {
			<-start
			for range attempts {
				try(w)
			}
		})
	}
	close(start)
	wg.Wait()
}

// With the clock frozen no bucket refills, so the number admitted must be
// exactly what one minute's allowance or the quota holds: not one more.
func TestConcurrentOneKeyExact(t *testing.T) {
	key := Request{Subject: Subject{KeyID: "k1"}, EstInputTokens: 500, EstOutputTokens: 200} // 700 tokens
	for _, tc := range []struct {
		name string
		lim  Limits
		want int64
	}{
		{"requests_per_minute", Limits{RequestsPerMinute: 100}, 100},
		{"tokens_per_minute", Limits{TokensPerMinute: 50_000}, 50_000 / 700},
		{"daily_tokens", Limits{DailyTokens: 100_000}, 100_000 / 700},
		{"all", Limits{RequestsPerMinute: 120, TokensPerMinute: 1_000_000, DailyTokens: 70_000}, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := newLocal(t, Config{Keys: map[string]Limits{"k1": tc.lim}}, newClock(t0), nil)
			var admitted atomic.Int64
			hammer(64, 20, func(int) {
				d, _, err := l.Admit(context.Background(), key)
				if err != nil {
					t.Error(err)
				}
				if d.Allowed {
					admitted.Add(1)
				}
			})
			if got := admitted.Load(); got != tc.want {
				t.Errorf("admitted %d; want exactly %d", got, tc.want)
			}
		})
	}
}

// Requests commit while others are admitted. Reservations never pass the
// quota; actual usage passes it only by what Commit reported above the
// reservations, and not at all when every request stayed within its own.
func TestConcurrentDailyQuotaWithCommits(t *testing.T) {
	const quota = 200_000
	for _, tc := range []struct {
		name string
		over int64 // the most a request's actual usage exceeds its reservation
	}{{"within_estimates", 0}, {"above_estimates", 300}} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock(t0)
			l, _ := newLocal(t, Config{Keys: map[string]Limits{"k1": {DailyTokens: quota}}}, clk, nil)
			var actual, overshoot atomic.Int64
			var mu sync.Mutex
			var peak int64 // the most ever reserved and committed at once
			e := func() *entry { return l.state(KindKey, "k1") }
			rngs := make([]*rand.Rand, 64) // one per worker: rand.Rand is not safe to share
			for w := range rngs {
				rngs[w] = rand.New(rand.NewPCG(uint64(w), 1))
			}
			hammer(64, 200, func(w int) {
				rng := rngs[w]
				est := 1 + rng.Int64N(2000)
				d, tk, err := l.Admit(context.Background(), Request{Subject: Subject{KeyID: "k1"}, EstInputTokens: est})
				if err != nil || !d.Allowed {
					return
				}
				ent := e()
				ent.mu.Lock()
				mu.Lock()
				peak = max(peak, ent.tokens.used+ent.tokens.reserved)
				mu.Unlock()
				ent.mu.Unlock()
				use := est/2 + rng.Int64N(est/2+tc.over+1) // from half the estimate to tc.over above it
				actual.Add(use)
				overshoot.Add(max(0, use-est))
				tk.Commit(use, 0)
			})
			u := e().tokens
			if u.reserved != 0 {
				t.Errorf("reservations left after every commit: %d", u.reserved)
			}
			if u.used != actual.Load() {
				t.Errorf("used %d; the commits add up to %d", u.used, actual.Load())
			}
			if bound := quota + overshoot.Load(); u.used > bound || peak > bound {
				t.Errorf("used %d (peak %d) > quota + overshoot %d", u.used, peak, bound)
			}
			if tc.over == 0 && (u.used > quota || peak > quota) {
				t.Errorf("within estimates used %d (peak %d) > quota %d", u.used, peak, quota)
			}
			if u.used < quota/2 {
				t.Errorf("used %d: the load should have nearly filled the quota", u.used)
			}
		})
	}
}

// Users with their own quotas share one biz_line quota. The biz_line binds
// first; every reservation is in both scopes or in neither.
func TestConcurrentUsersSharingBizLine(t *testing.T) {
	const users, per = 8, 500
	cfg := Config{
		BizLines: map[string]Limits{"search": {DailyTokens: 100_000, RequestsPerMinute: 1000}},
		Default:  Defaults{User: Limits{DailyTokens: 20_000}, Key: Limits{RequestsPerMinute: 10_000}},
	}
	l, _ := newLocal(t, cfg, newClock(t0), nil)
	var mu sync.Mutex
	var tickets []Ticket
	perUser := make([]atomic.Int64, users)
	hammer(4*users, 30, func(w int) {
		u := w % users
		r := Request{Subject: Subject{KeyID: "key" + strconv.Itoa(w), UserID: "u" + strconv.Itoa(u), BizLine: "search"}, EstInputTokens: per}
		d, tk, err := l.Admit(context.Background(), r)
		if err != nil || !d.Allowed {
			return
		}
		perUser[u].Add(1)
		mu.Lock()
		tickets = append(tickets, tk)
		mu.Unlock()
	})
	if got, want := len(tickets), 100_000/per; got != want {
		t.Errorf("admitted %d; want exactly %d (the biz_line quota)", got, want)
	}
	check := func(when string) {
		var sum int64
		for u := range users {
			e := l.state(KindUser, "u"+strconv.Itoa(u))
			if e.tokens.reserved > 20_000 {
				t.Errorf("%s: user u%d reserved %d > 20000", when, u, e.tokens.reserved)
			}
			sum += e.tokens.reserved
		}
		if biz := l.state(KindBizLine, "search").tokens.reserved; biz != sum {
			t.Errorf("%s: biz_line reserved %d, users reserved %d: a partial reservation", when, biz, sum)
		}
	}
	check("admitted")
	for u := range users {
		if n := perUser[u].Load(); n*per > 20_000 {
			t.Errorf("user u%d admitted %d tokens > 20000", u, n*per)
		}
	}
	var wg sync.WaitGroup
	for _, tk := range tickets[:len(tickets)/2] {
		wg.Go(tk.Cancel)
	}
	wg.Wait()
	check("half cancelled")
	for _, tk := range tickets[len(tickets)/2:] {
		wg.Go(tk.Cancel)
	}
	wg.Wait()
	check("all cancelled")
	if biz := l.state(KindBizLine, "search"); biz.tokens.reserved != 0 || biz.inflight != 0 || !biz.rpm.full(1000) {
		t.Errorf("after every cancel the biz_line still holds %+v, %d in flight", biz.tokens, biz.inflight)
	}
}

// Midnight passes while requests race: nothing is lost or double counted,
// and each scope is seeded once per day.
func TestConcurrentAcrossMidnight(t *testing.T) {
	clk := newClock(time.Date(2026, 3, 10, 23, 59, 59, 0, time.UTC))
	var seeds atomic.Int64
	seed := func(context.Context, Scope, time.Time) (int64, int64, error) { seeds.Add(1); return 0, 0, nil }
	l, _ := newLocal(t, Config{Users: map[string]Limits{"alice": {DailyTokens: 1 << 40}}}, clk, seed)
	hammer(16, 200, func(w int) {
		if w == 0 {
			clk.Add(10 * time.Millisecond) // crosses midnight part-way through
		}
		_, tk, err := l.Admit(context.Background(), alice(1, 0))
		if err != nil {
			t.Error(err)
			return
		}
		tk.Commit(1, 0)
	})
	e := l.state(KindUser, "alice")
	if e.tokens.reserved != 0 || e.inflight != 0 {
		t.Errorf("left %+v, %d in flight", e.tokens, e.inflight)
	}
	if got := seeds.Load(); got != 2 {
		t.Errorf("seeded %d times across two days; want 2", got)
	}
}
