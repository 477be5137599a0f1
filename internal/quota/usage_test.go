package quota

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func findUsage(us []ScopeUsage, scope, limit string) (ScopeUsage, bool) {
	for _, u := range us {
		if u.Scope == scope && u.Limit == limit {
			return u, true
		}
	}
	return ScopeUsage{}, false
}

func TestUsage(t *testing.T) {
	clk := newClock(t0)
	cfg := Config{
		Users: map[string]Limits{
			"alice": {DailyTokens: 10_000, DailyCost: "1.00", WarnAt: 0.5},
			"bob":   {DailyTokens: 5_000},
			"carol": {RequestsPerMinute: 10}, // no daily limit: not reported
			"dave":  {},                      // exempt
		},
		Default: Defaults{BizLine: Limits{DailyTokens: 100_000}},
	}
	l, _ := newLocal(t, cfg, clk, nil)

	us := l.Usage(clk.Now())
	if len(us) != 3 {
		t.Fatalf("before any request: %+v, want alice×2 and bob (nothing seen under defaults)", us)
	}
	a, _ := findUsage(us, "user:alice", LimitDailyTokens)
	if a.Used != 0 || a.Quota != 10_000 || a.Share != 0 || a.WarnAt != 0.5 || a.Default ||
		!a.DayStart.Equal(time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)) || !a.DayEnd.Equal(time.Date(2026, 3, 11, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("alice before any request: %+v", a)
	}

	r := alice(1000, 1000)
	r.EstCostNanos = 100_000_000
	_, tk := admit(t, l, r)
	us = l.Usage(clk.Now())
	a, _ = findUsage(us, "user:alice", LimitDailyTokens)
	if a.Used != 0 || a.Reserved != 2000 || a.Share != 0.2 {
		t.Errorf("alice in flight: %+v", a)
	}
	tk.Commit(1500, 250_000_000)
	us = l.Usage(clk.Now())
	a, _ = findUsage(us, "user:alice", LimitDailyTokens)
	c, _ := findUsage(us, "user:alice", LimitDailyCost)
	biz, ok := findUsage(us, "biz_line:search", LimitDailyTokens)
	if a.Used != 1500 || a.Reserved != 0 || a.Share != 0.15 {
		t.Errorf("alice tokens after commit: %+v", a)
	}
	if c.Used != 250_000_000 || c.Quota != 1_000_000_000 || c.Share != 0.25 {
		t.Errorf("alice cost after commit: %+v", c)
	}
	if !ok || !biz.Default || biz.Used != 1500 || biz.Quota != 100_000 || biz.WarnAt != DefaultWarnAt {
		t.Errorf("biz_line search under the default: %+v (found %v)", biz, ok)
	}
	var order []string
	for _, u := range us {
		order = append(order, u.Scope+" "+u.Limit)
	}
	want := []string{"user:alice daily_cost", "user:alice daily_tokens", "user:bob daily_tokens", "biz_line:search daily_tokens"}
	if len(order) != len(want) {
		t.Fatalf("order %q, want %q", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("order %q, want %q", order, want)
		}
	}
}

// At midnight in the quota zone the figures start again from zero, even
// before any request of the new day rolls the scope over, and the day's
// bounds move with it.
func TestUsageDayRollover(t *testing.T) {
	sh, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	clk := newClock(time.Date(2026, 3, 10, 23, 59, 0, 0, sh))
	l, _ := newLocal(t, Config{Timezone: "Asia/Shanghai", Users: map[string]Limits{"alice": {DailyTokens: 1000}}}, clk, nil)
	_, tk := admit(t, l, alice(100, 100))
	tk.Commit(300, 0)
	u, _ := findUsage(l.Usage(clk.Now()), "user:alice", LimitDailyTokens)
	if u.Used != 300 || !u.DayStart.Equal(time.Date(2026, 3, 10, 0, 0, 0, 0, sh)) {
		t.Fatalf("before midnight: %+v", u)
	}
	_, late := admit(t, l, alice(50, 50)) // admitted on the 10th, committed on the 11th

	clk.Add(2 * time.Minute) // 00:01 on the 11th in Shanghai, 16:01 UTC on the 10th
	u, _ = findUsage(l.Usage(clk.Now()), "user:alice", LimitDailyTokens)
	if u.Used != 0 || u.Reserved != 0 || u.Share != 0 ||
		!u.DayStart.Equal(time.Date(2026, 3, 11, 0, 0, 0, 0, sh)) || !u.DayEnd.Equal(time.Date(2026, 3, 12, 0, 0, 0, 0, sh)) {
		t.Fatalf("after midnight, before any request: %+v", u)
	}
	late.Commit(100, 0) // goes with the 10th
	_, tk = admit(t, l, alice(20, 20))
	tk.Commit(40, 0)
	u, _ = findUsage(l.Usage(clk.Now()), "user:alice", LimitDailyTokens)
	if u.Used != 40 || u.Reserved != 0 {
		t.Fatalf("the 11th's usage: %+v", u)
	}
}

// Usage against Admit, Commit and Cancel on many goroutines: race-free
// (under -race), and no reading is ever above what was admitted.
func TestUsageConcurrentWithAdmit(t *testing.T) {
	clk := newClock(t0)
	l, _ := newLocal(t, Config{Users: map[string]Limits{"alice": {DailyTokens: 1_000_000}},
		Default: Defaults{User: Limits{DailyTokens: 1_000_000}}}, clk, nil)
	var admitted atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, u := range l.Usage(clk.Now()) {
				if u.Used+u.Reserved > admitted.Load()*100 && u.Scope == "user:alice" {
					t.Errorf("usage %+v above %d admitted", u, admitted.Load())
					return
				}
			}
		}
	})
	hammer(8, 200, func(w int) {
		r := Request{Subject: Subject{UserID: []string{"alice", "bob", "u" + string(rune('a'+w))}[w%3]}, EstInputTokens: 50, EstOutputTokens: 50}
		admitted.Add(1)
		d, tk, err := l.Admit(context.Background(), r)
		if err != nil || !d.Allowed {
			t.Errorf("admit: %+v %v", d, err)
			return
		}
		if w%2 == 0 {
			tk.Commit(80, 0)
		} else {
			tk.Cancel()
		}
	})
	close(stop)
	wg.Wait()
	var total int64
	for _, u := range l.Usage(clk.Now()) {
		if u.Reserved != 0 {
			t.Errorf("%s still has %d reserved", u.Scope, u.Reserved)
		}
		total += u.Used
	}
	if want := int64(4*200) * 80; total != want {
		t.Errorf("committed %d tokens over all scopes, want %d", total, want)
	}
}

// Preload gives every configured daily quota today's recorded usage before
// the scope's first request: listed subjects, and subjects under a default
// limit that have usage in the ledger. A scope a request has seeded keeps
// that seed, and requests after a preload do not read the ledger again.
func TestPreload(t *testing.T) {
	clk := newClock(t0)
	cfg := Config{
		Users: map[string]Limits{
			"alice": {DailyTokens: 10_000, DailyCost: "1.00"},
			"bob":   {DailyTokens: 5_000},
			"erin":  {DailyTokens: 5_000},
			"dave":  {}, // exempt: never loaded
		},
		Default: Defaults{BizLine: Limits{DailyTokens: 100_000}},
	}
	var seeds atomic.Int64
	seed := func(_ context.Context, s Scope, day time.Time) (int64, int64, error) {
		seeds.Add(1)
		if s == (Scope{Kind: KindUser, Name: "erin"}) {
			return 40, 0, nil
		}
		return 0, 0, nil
	}
	l, _ := newLocal(t, cfg, clk, seed)

	// erin sends a request before the preload has read anything: her seed
	// (40) stands, the preload's figure for her (999) is not used.
	_, tk := admit(t, l, Request{Subject: Subject{UserID: "erin"}, EstInputTokens: 5, EstOutputTokens: 5})
	tk.Commit(10, 0)

	var asked []string
	all := func(_ context.Context, k Kind, day time.Time) (map[string]Used, error) {
		if !day.Equal(time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)) {
			t.Errorf("preload asked for the day starting %s", day)
		}
		asked = append(asked, k.String())
		switch k {
		case KindUser:
			return map[string]Used{"alice": {Tokens: 700, CostNanos: 300_000_000}, "erin": {Tokens: 999}, "dave": {Tokens: 5}, "zed": {Tokens: 1}}, nil
		case KindBizLine:
			return map[string]Used{"search": {Tokens: 1200}, "chat": {Tokens: 80}}, nil
		}
		return nil, errors.New("keys were not asked for")
	}
	if err := l.Preload(context.Background(), all); err != nil {
		t.Fatal(err)
	}
	if len(asked) != 2 || asked[0] != "user" || asked[1] != "biz_line" {
		t.Errorf("preload read kinds %q, want user and biz_line (no key has a daily limit)", asked)
	}
	us := l.Usage(clk.Now())
	want := map[string]int64{
		"user:alice daily_tokens": 700, "user:alice daily_cost": 300_000_000, "user:bob daily_tokens": 0, "user:erin daily_tokens": 50,
		"biz_line:search daily_tokens": 1200, "biz_line:chat daily_tokens": 80,
	}
	if len(us) != len(want) {
		t.Errorf("usage after preload: %+v, want %d entries (zed has no limit of his own and users have no default)", us, len(want))
	}
	for _, u := range us {
		w, ok := want[u.Scope+" "+u.Limit]
		if !ok || u.Used != w {
			t.Errorf("%s %s: used %d, want %d (listed %v)", u.Scope, u.Limit, u.Used, w, ok)
		}
		if u.Kind == "biz_line" && !u.Default {
			t.Errorf("%s is under the default limit: %+v", u.Scope, u)
		}
	}

	// A request after the preload counts on top of it, without a seed.
	before := seeds.Load()
	_, tk = admit(t, l, Request{Subject: Subject{UserID: "alice", BizLine: "search"}, EstInputTokens: 50, EstOutputTokens: 50})
	tk.Commit(100, 0)
	if n := seeds.Load() - before; n != 0 {
		t.Errorf("a request after the preload seeded %d scopes again", n)
	}
	us = l.Usage(clk.Now())
	if a, _ := findUsage(us, "user:alice", LimitDailyTokens); a.Used != 800 {
		t.Errorf("alice after a request: %+v, want 700+100", a)
	}
	if b, _ := findUsage(us, "biz_line:search", LimitDailyTokens); b.Used != 1300 {
		t.Errorf("search after a request: %+v, want 1200+100", b)
	}

	// A preload on a limiter that does not seed is refused: it would
	// overwrite what requests admitted from zero have counted.
	l2, _ := newLocal(t, cfg, clk, nil)
	if err := l2.Preload(context.Background(), all); err == nil {
		t.Error("preload without a seed function: no error")
	}
	// A failed read is reported; the kinds read load all the same.
	l3, _ := newLocal(t, cfg, clk, seed)
	err := l3.Preload(context.Background(), func(ctx context.Context, k Kind, day time.Time) (map[string]Used, error) {
		if k == KindUser {
			return nil, errors.New("disk on fire")
		}
		return all(ctx, k, day)
	})
	if err == nil || !strings.Contains(err.Error(), "load user usage of 2026-03-10: disk on fire") {
		t.Errorf("preload with a failing read: %v", err)
	}
	if b, _ := findUsage(l3.Usage(clk.Now()), "biz_line:search", LimitDailyTokens); b.Used != 1200 {
		t.Errorf("search after a partly failed preload: %+v", b)
	}
}

// A preload racing with requests never counts the ledger twice nor loses
// a commit: whichever of the preload and the first request seeds a scope,
// usage ends at the ledger's figure plus what the requests committed.
func TestPreloadRacesRequests(t *testing.T) {
	const ledger, workers, each = 5000, 16, 10
	cfg := Config{Users: map[string]Limits{"alice": {DailyTokens: 1_000_000}}, Default: Defaults{BizLine: Limits{DailyTokens: 1_000_000}}}
	seed := func(context.Context, Scope, time.Time) (int64, int64, error) { return ledger, 0, nil }
	all := func(_ context.Context, k Kind, _ time.Time) (map[string]Used, error) {
		if k == KindUser {
			return map[string]Used{"alice": {Tokens: ledger}}, nil
		}
		return map[string]Used{"search": {Tokens: ledger}}, nil
	}
	for range 20 {
		clk := newClock(t0)
		l, _ := newLocal(t, cfg, clk, seed)
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			<-start
			if err := l.Preload(context.Background(), all); err != nil {
				t.Error(err)
			}
		})
		for range workers {
			wg.Go(func() {
				<-start
				for range each {
					d, tk, err := l.Admit(context.Background(), Request{Subject: Subject{UserID: "alice", BizLine: "search"}, EstInputTokens: 1, EstOutputTokens: 1})
					if err != nil || !d.Allowed {
						t.Errorf("admit: %+v %v", d, err)
						return
					}
					tk.Commit(3, 0)
				}
			})
		}
		close(start)
		wg.Wait()
		us := l.Usage(clk.Now())
		for _, scope := range []string{"user:alice", "biz_line:search"} {
			if u, _ := findUsage(us, scope, LimitDailyTokens); u.Used != ledger+3*workers*each || u.Reserved != 0 {
				t.Fatalf("%s: %+v, want used %d", scope, u, ledger+3*workers*each)
			}
		}
	}
}
