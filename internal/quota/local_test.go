package quota

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"
	_ "time/tzdata" // the day-rollover tests need Asia/Shanghai wherever they run

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var _ Limiter = (*Local)(nil)

// clock is a hand-driven time source: tests move it, nothing sleeps.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }

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

// events records what onEvent receives.
type events struct {
	mu  sync.Mutex
	got []Event
}

func (e *events) add(ev Event) {
	e.mu.Lock()
	e.got = append(e.got, ev)
	e.mu.Unlock()
}

func (e *events) kinds() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.got {
		out = append(out, ev.Kind+" "+ev.Scope+" "+ev.Limit)
	}
	return out
}

var t0 = time.Date(2026, 3, 10, 9, 0, 0, 0, time.UTC)

func newLocal(t *testing.T, cfg Config, clk *clock, seed SeedFunc) (*Local, *events) {
	t.Helper()
	ev := &events{}
	l, err := NewLocal(cfg, clk.Now, seed, ev.add)
	if err != nil {
		t.Fatal(err)
	}
	return l, ev
}

func admit(t *testing.T, l *Local, r Request) (Decision, Ticket) {
	t.Helper()
	d, tk, err := l.Admit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed != (tk != nil) {
		t.Fatalf("Allowed=%v but ticket=%v", d.Allowed, tk)
	}
	return d, tk
}

func alice(in, out int64) Request {
	return Request{Subject: Subject{KeyID: "k1", UserID: "alice", BizLine: "search"}, EstInputTokens: in, EstOutputTokens: out}
}

func users(m map[string]Limits) Config { return Config{Users: m} }

func (l *Local) state(k Kind, name string) *entry {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.entries[Scope{k, name}]
}

func TestRequestsPerMinuteRefill(t *testing.T) {
	clk := newClock(t0)
	l, _ := newLocal(t, users(map[string]Limits{"alice": {RequestsPerMinute: 60}}), clk, nil)
	for i := range 60 {
		if d, _ := admit(t, l, alice(10, 10)); !d.Allowed {
			t.Fatalf("request %d refused: %s", i, d.Message)
		}
	}
	d, _ := admit(t, l, alice(10, 10))
	if d.Allowed {
		t.Fatal("61st request in the same instant admitted")
	}
	want := Decision{
		Status: 429, Type: "requests", Code: "rate_limit_exceeded", Scope: "user:alice", Limit: "requests_per_minute",
		Message:    "Rate limit reached for user alice on requests per min (RPM): Limit 60, Used 60, Requested 1. Please try again in 1s.",
		RetryAfter: time.Second,
		Headers: http.Header{
			"Retry-After": {"1"}, "Retry-After-Ms": {"1000"},
			"X-Ratelimit-Limit-Requests": {"60"}, "X-Ratelimit-Remaining-Requests": {"0"}, "X-Ratelimit-Reset-Requests": {"1m0s"},
		},
		Rate:     Rate{Requests: Window{Limit: 60, Remaining: 0, Reset: time.Minute}},
		Warnings: []Event{{At: t0, Scope: "user:alice", Limit: "requests_per_minute", Used: 60, Quota: 60, Share: 1, Kind: "exceeded"}},
	}
	if diff := cmp.Diff(want, d); diff != "" {
		t.Errorf("refusal (-want +got):\n%s", diff)
	}

	// Refill is continuous: one request a second, no window edge.
	clk.Add(999 * time.Millisecond)
	if d, _ := admit(t, l, alice(1, 1)); d.Allowed || d.RetryAfter != time.Millisecond {
		t.Fatalf("after 999ms: allowed=%v retry=%v; want refused, 1ms", d.Allowed, d.RetryAfter)
	}
	clk.Add(time.Millisecond)
	if d, _ := admit(t, l, alice(1, 1)); !d.Allowed {
		t.Fatalf("after 1s refused: %s", d.Message)
	}
	// A minute idle fills the bucket again: the whole allowance at once.
	clk.Add(time.Minute)
	for i := range 60 {
		if d, _ := admit(t, l, alice(1, 1)); !d.Allowed {
			t.Fatalf("after refill request %d refused", i)
		}
	}
	if d, _ := admit(t, l, alice(1, 1)); d.Allowed {
		t.Fatal("burst above a full bucket admitted")
	}
}

func TestTokensPerMinute(t *testing.T) {
	clk := newClock(t0)
	l, _ := newLocal(t, users(map[string]Limits{"alice": {TokensPerMinute: 6000}}), clk, nil)
	d, tk := admit(t, l, alice(1000, 3000))
	if !d.Allowed {
		t.Fatal(d.Message)
	}
	if got, want := d.Rate.Tokens, (Window{Limit: 6000, Remaining: 2000, Reset: 40 * time.Second}); got != want {
		t.Errorf("rate after 4000 of 6000: %+v; want %+v", got, want)
	}
	d, _ = admit(t, l, alice(1000, 2000))
	if d.Allowed || d.Type != "tokens" || d.RetryAfter != 10*time.Second {
		t.Fatalf("3000 with 2000 left: allowed=%v type=%q retry=%v", d.Allowed, d.Type, d.RetryAfter)
	}
	if want := "Rate limit reached for user alice on tokens per min (TPM): Limit 6000, Used 4000, Requested 3000. Please try again in 10s."; d.Message != want {
		t.Errorf("message:\n got %q\nwant %q", d.Message, want)
	}
	// The answer used 1000 tokens, not 4000: the unused 3000 come back.
	tk.Commit(1000, 0)
	if d, tk := admit(t, l, alice(1000, 2000)); !d.Allowed {
		t.Fatalf("after commit refund refused: %s", d.Message)
	} else {
		tk.Cancel()
	}
	// Usage above the reservation is debt that delays what follows.
	_, tk = admit(t, l, alice(100, 100))
	tk.Commit(20_000, 0) // far above the reservation: the debt is capped at one minute's allowance
	if e := l.state(KindUser, "alice"); e.tpm.level != -6000*windowMicros {
		t.Errorf("level after overrun = %d; want %d", e.tpm.level, -6000*windowMicros)
	}
	if d, _ := admit(t, l, alice(1, 0)); d.Allowed || d.RetryAfter != 60*time.Second+10*time.Millisecond {
		t.Errorf("in debt: allowed=%v retry=%v; want refused for 60.01s", d.Allowed, d.RetryAfter)
	}

	// Larger than the limit itself: permanent, no Retry-After.
	d, _ = admit(t, l, alice(5000, 2000))
	if d.Allowed || d.RetryAfter != 0 || d.Headers.Get("Retry-After") != "" {
		t.Fatalf("too large: allowed=%v retry=%v headers=%v", d.Allowed, d.RetryAfter, d.Headers)
	}
	if want := "Request too large for user alice on tokens per min (TPM): Limit 6000, Requested 7000. The input or output tokens must be reduced in order to run successfully."; d.Message != want {
		t.Errorf("message:\n got %q\nwant %q", d.Message, want)
	}
}

func TestDailyTokensCommitAndCancel(t *testing.T) {
	clk := newClock(t0)
	l, _ := newLocal(t, users(map[string]Limits{"alice": {DailyTokens: 10_000}}), clk, nil)
	e := func() daily { return l.state(KindUser, "alice").tokens }

	_, a := admit(t, l, alice(1000, 3000))
	_, b := admit(t, l, alice(1000, 3000))
	if got := e(); got != (daily{used: 0, reserved: 8000}) {
		t.Fatalf("after two reservations %+v", got)
	}
	if d, _ := admit(t, l, alice(1000, 3000)); d.Allowed {
		t.Fatal("reservation above the quota admitted")
	} else if d.RetryAfter != 15*time.Hour || d.Type != "tokens" || d.Limit != "daily_tokens" {
		t.Errorf("daily refusal: retry=%v type=%q limit=%q; want until midnight UTC", d.RetryAfter, d.Type, d.Limit)
	}
	a.Commit(500, 0) // down: frees 3500
	if got := e(); got != (daily{used: 500, reserved: 4000}) {
		t.Fatalf("after commit down %+v", got)
	}
	b.Commit(6000, 0) // up: the estimate was low
	if got := e(); got != (daily{used: 6500, reserved: 0}) {
		t.Fatalf("after commit up %+v", got)
	}
	b.Commit(1, 0) // a second settle is a no-op
	b.Cancel()
	_, c := admit(t, l, alice(1000, 2000))
	c.Cancel()
	if got := e(); got != (daily{used: 6500, reserved: 0}) {
		t.Fatalf("after cancel %+v", got)
	}
	// At exactly the quota even a zero estimate is refused.
	_, c = admit(t, l, alice(3500, 0))
	c.Commit(3500, 0)
	if d, _ := admit(t, l, alice(0, 0)); d.Allowed {
		t.Error("zero-token request admitted at a spent quota")
	}
}

func TestDailyCost(t *testing.T) {
	clk := newClock(t0)
	l, _ := newLocal(t, users(map[string]Limits{"alice": {DailyCost: "1.00"}}), clk, nil)
	r := alice(10, 10)
	r.EstCostNanos = 600_000_000
	_, tk := admit(t, l, r)
	d, _ := admit(t, l, r)
	if d.Allowed || d.Type != "insufficient_quota" || d.Code != "insufficient_quota" {
		t.Fatalf("over budget: %+v", d)
	}
	if want := "Daily cost budget exceeded for user alice: Limit 1.00, Used 0.60, Requested 0.60. Please try again in 15h0m0s."; d.Message != want {
		t.Errorf("message:\n got %q\nwant %q", d.Message, want)
	}
	tk.Commit(0, 250_000_000)
	if d, tk := admit(t, l, r); !d.Allowed {
		t.Errorf("after cheaper commit refused: %s", d.Message)
	} else {
		tk.Cancel()
	}
	// Unknown cost estimates (0) still stop once committed cost reaches the budget.
	_, tk = admit(t, l, alice(1, 1))
	tk.Commit(0, 750_000_000)
	if d, _ := admit(t, l, alice(1, 1)); d.Allowed {
		t.Error("admitted with the budget spent")
	}
}

func TestAllOrNothing(t *testing.T) {
	clk := newClock(t0)
	cfg := Config{
		Users:    map[string]Limits{"alice": {DailyTokens: 100_000, RequestsPerMinute: 100, TokensPerMinute: 100_000}},
		BizLines: map[string]Limits{"search": {DailyTokens: 5000}},
		Keys:     map[string]Limits{"k1": {RequestsPerMinute: 1000}},
	}
	l, _ := newLocal(t, cfg, clk, nil)
	_, tk := admit(t, l, alice(1000, 3000))
	d, _ := admit(t, l, alice(1000, 3000))
	if d.Allowed || d.Scope != "biz_line:search" {
		t.Fatalf("want refusal by biz_line:search; got allowed=%v scope=%q", d.Allowed, d.Scope)
	}
	u, k := l.state(KindUser, "alice"), l.state(KindKey, "k1")
	if u.tokens.reserved != 4000 || u.rpm.level != 99*windowMicros || u.tpm.level != 96_000*windowMicros || k.rpm.level != 999*windowMicros {
		t.Errorf("refusal left a partial reservation: user %+v rpm %d tpm %d; key rpm %d", u.tokens, u.rpm.level, u.tpm.level, k.rpm.level)
	}
	if d.Rate.Requests.Limit != 100 || d.Rate.Tokens.Limit != 100_000 {
		t.Errorf("headers should show the tightest per-minute limits: %+v", d.Rate)
	}
	tk.Cancel()
	if u.tokens.reserved != 0 || u.rpm.level != 100*windowMicros || k.rpm.level != 1000*windowMicros {
		t.Errorf("cancel left usage: %+v rpm %d key rpm %d", u.tokens, u.rpm.level, k.rpm.level)
	}
}

func TestRetryAfterIsTheLongestWait(t *testing.T) {
	clk := newClock(t0)
	cfg := Config{
		Keys:  map[string]Limits{"k1": {RequestsPerMinute: 1}},
		Users: map[string]Limits{"alice": {RequestsPerMinute: 2}},
	}
	l, _ := newLocal(t, cfg, clk, nil)
	admit(t, l, alice(1, 1)) // key k1 empty, user has one left
	viaK2 := alice(1, 1)
	viaK2.KeyID = "k2"
	admit(t, l, viaK2) // user empty
	// Both refuse: the key for 60s, the user for 30s. Waiting 30s would
	// only meet the next refusal, so Retry-After is the longer.
	d, _ := admit(t, l, alice(1, 1))
	if d.Allowed || d.Scope != "key:k1" || d.RetryAfter != time.Minute || d.Headers.Get("Retry-After") != "60" {
		t.Errorf("got allowed=%v scope=%q retry=%v headers=%v; want key:k1 for 60s", d.Allowed, d.Scope, d.RetryAfter, d.Headers)
	}
	// The headers show the refusing scope's window.
	if d.Rate.Requests != (Window{Limit: 1, Remaining: 0, Reset: time.Minute}) {
		t.Errorf("rate %+v", d.Rate.Requests)
	}
	clk.Add(30 * time.Second)
	if d, _ := admit(t, l, alice(1, 1)); d.Allowed || d.Scope != "key:k1" || d.RetryAfter != 30*time.Second {
		t.Errorf("after 30s: allowed=%v scope=%q retry=%v; want key:k1 for 30s", d.Allowed, d.Scope, d.RetryAfter)
	}
}

func TestMaxInput(t *testing.T) {
	clk := newClock(t0)
	cfg := Config{
		Users:    map[string]Limits{"alice": {MaxInputTokens: 8000}},
		BizLines: map[string]Limits{"search": {MaxInputTokens: 4000, OverMaxInput: "alert"}},
	}
	l, ev := newLocal(t, cfg, clk, nil)
	d, _ := admit(t, l, alice(6000, 100))
	if !d.Allowed || len(d.Warnings) != 1 || d.Warnings[0] != (Event{At: t0, Scope: "biz_line:search", Limit: "max_input_tokens", Used: 6000, Quota: 4000, Share: 1.5, Kind: "max_input"}) {
		t.Fatalf("alert: allowed=%v warnings=%+v", d.Allowed, d.Warnings)
	}
	d, _ = admit(t, l, alice(9000, 100))
	if d.Allowed || d.Status != 400 || d.Code != "max_input_tokens_exceeded" || d.Scope != "user:alice" || d.RetryAfter != 0 {
		t.Fatalf("reject: %+v", d)
	}
	if want := "Request too large for user alice: 9000 input tokens is above the limit of 8000 input tokens per request. Shorten the input."; d.Message != want {
		t.Errorf("message:\n got %q\nwant %q", d.Message, want)
	}
	// Every occurrence is an event: each names a different request.
	want := []string{"max_input biz_line:search max_input_tokens", "max_input user:alice max_input_tokens", "max_input biz_line:search max_input_tokens"}
	if diff := cmp.Diff(want, ev.kinds()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestWarningAndExceededOncePerDay(t *testing.T) {
	clk := newClock(t0)
	l, ev := newLocal(t, users(map[string]Limits{"alice": {DailyTokens: 1000, WarnAt: 0.5}}), clk, nil)
	step := func(n int64) Decision {
		d, tk := admit(t, l, alice(n, 0))
		if tk != nil {
			tk.Commit(n, 0)
		}
		return d
	}
	step(400)
	if d := step(200); len(d.Warnings) != 1 || d.Warnings[0].Kind != "warning" || d.Warnings[0].Used != 600 || d.Warnings[0].Share != 0.6 {
		t.Errorf("crossing 50%%: %+v", d.Warnings)
	}
	step(100)
	step(500) // refused: exceeded
	step(500) // refused again: no second event
	_, tk := admit(t, l, alice(300, 0))
	tk.Commit(400, 0) // over the quota through a low estimate: already exceeded today
	want := []string{"warning user:alice daily_tokens", "exceeded user:alice daily_tokens"}
	if diff := cmp.Diff(want, ev.kinds()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	// A new day raises them afresh.
	clk.Add(24 * time.Hour)
	step(600)
	step(600)
	want = append(want, "warning user:alice daily_tokens", "exceeded user:alice daily_tokens")
	if diff := cmp.Diff(want, ev.kinds()); diff != "" {
		t.Errorf("events next day (-want +got):\n%s", diff)
	}
}

func TestExceededByCommit(t *testing.T) {
	clk := newClock(t0)
	l, ev := newLocal(t, users(map[string]Limits{"alice": {DailyTokens: 1000, WarnAt: 1}}), clk, nil)
	_, tk := admit(t, l, alice(100, 100))
	tk.Commit(1500, 0)
	want := []string{"warning user:alice daily_tokens", "exceeded user:alice daily_tokens"}
	if diff := cmp.Diff(want, ev.kinds()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestDayRolloverInShanghai(t *testing.T) {
	sh, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	// 23:59 in Shanghai is 15:59 UTC: the UTC day is far from over.
	clk := newClock(time.Date(2026, 3, 10, 23, 59, 0, 0, sh))
	var mu sync.Mutex
	var seeded []string
	seed := func(_ context.Context, s Scope, day time.Time) (int64, int64, error) {
		mu.Lock()
		defer mu.Unlock()
		seeded = append(seeded, s.String()+" "+day.Format(time.RFC3339))
		return 900, 0, nil
	}
	l, _ := newLocal(t, Config{Timezone: "Asia/Shanghai", Users: map[string]Limits{"alice": {DailyTokens: 1000}}}, clk, seed)
	_, yesterday := admit(t, l, alice(50, 50))
	d, _ := admit(t, l, alice(50, 50))
	if d.Allowed || d.RetryAfter != time.Minute {
		t.Fatalf("at 23:59: allowed=%v retry=%v; want refused until local midnight (1m)", d.Allowed, d.RetryAfter)
	}
	clk.Add(time.Minute)
	d, tk := admit(t, l, alice(50, 50))
	if !d.Allowed {
		t.Fatalf("after local midnight refused: %s", d.Message)
	}
	// Yesterday's request ends today: its usage stays with yesterday.
	yesterday.Commit(5000, 0)
	if got := l.state(KindUser, "alice").tokens; got != (daily{used: 900, reserved: 100}) {
		t.Errorf("today after yesterday's commit %+v", got)
	}
	tk.Cancel()
	want := []string{"user:alice 2026-03-10T00:00:00+08:00", "user:alice 2026-03-11T00:00:00+08:00"}
	if diff := cmp.Diff(want, seeded); diff != "" {
		t.Errorf("seeds (-want +got):\n%s", diff)
	}
}

func TestSeedOncePerScopePerDay(t *testing.T) {
	clk := newClock(t0)
	var mu sync.Mutex
	calls := map[string]int{}
	release := make(chan struct{})
	seed := func(ctx context.Context, s Scope, day time.Time) (int64, int64, error) {
		<-release // hold every caller so that the others pile up behind it
		mu.Lock()
		defer mu.Unlock()
		calls[s.String()]++
		return 100, 5, nil
	}
	cfg := Config{
		Users:    map[string]Limits{"alice": {DailyTokens: 1 << 40}},
		BizLines: map[string]Limits{"search": {DailyCost: "100"}},
		Keys:     map[string]Limits{"k1": {RequestsPerMinute: 1000}}, // no daily limit: never seeded
	}
	l, _ := newLocal(t, cfg, clk, seed)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			d, tk, err := l.Admit(context.Background(), alice(1, 1))
			if err != nil || !d.Allowed {
				t.Errorf("admit: %v %s", err, d.Message)
				return
			}
			tk.Commit(2, 0)
		})
	}
	close(release)
	wg.Wait()
	if diff := cmp.Diff(map[string]int{"user:alice": 1, "biz_line:search": 1}, calls); diff != "" {
		t.Errorf("seed calls (-want +got):\n%s", diff)
	}
	if got := l.state(KindUser, "alice").tokens.used; got != 100+32*2 {
		t.Errorf("used = %d; want seed 100 + 64 committed", got)
	}
	if got := l.state(KindBizLine, "search").cost.used; got != 5 {
		t.Errorf("cost used = %d; want the seeded 5", got)
	}
	clk.Add(24 * time.Hour)
	admit(t, l, alice(1, 1))
	if calls["user:alice"] != 2 {
		t.Errorf("next day seed calls = %d; want 2", calls["user:alice"])
	}
}

func TestSeedErrorIsRetried(t *testing.T) {
	clk := newClock(t0)
	fail := true
	seed := func(context.Context, Scope, time.Time) (int64, int64, error) {
		if fail {
			return 0, 0, errors.New("ledger down")
		}
		return 10, 0, nil
	}
	l, _ := newLocal(t, users(map[string]Limits{"alice": {DailyTokens: 100}}), clk, seed)
	d, tk, err := l.Admit(context.Background(), alice(1, 1))
	if err == nil || tk != nil || d.Allowed {
		t.Fatalf("want an error; got %v %+v", err, d)
	}
	if want := "load user:alice usage of 2026-03-10: ledger down"; err.Error() != want {
		t.Errorf("error %q; want %q", err, want)
	}
	fail = false
	if _, tk := admit(t, l, alice(1, 1)); tk == nil {
		t.Fatal("refused after the ledger came back")
	}
	if got := l.state(KindUser, "alice").tokens; got != (daily{used: 10, reserved: 2}) {
		t.Errorf("after a late seed %+v", got)
	}
}

func TestDefaultsAndExemptions(t *testing.T) {
	clk := newClock(t0)
	cfg := Config{
		Users:   map[string]Limits{"root": {}}, // listed with no limits: exempt from the default
		Default: Defaults{User: Limits{RequestsPerMinute: 1}},
	}
	l, _ := newLocal(t, cfg, clk, nil)
	for _, u := range []string{"bob", "carol"} {
		r := Request{Subject: Subject{UserID: u}}
		admit(t, l, r)
		if d, _ := admit(t, l, r); d.Allowed || d.Scope != "user:"+u {
			t.Errorf("%s: second request allowed=%v scope=%q", u, d.Allowed, d.Scope)
		}
	}
	for range 5 {
		if d, tk := admit(t, l, Request{Subject: Subject{UserID: "root"}}); !d.Allowed {
			t.Fatal("exempt user refused")
		} else {
			tk.Commit(1, 1) // the no-limit ticket accepts calls
		}
	}
	if e := l.state(KindUser, "root"); e != nil {
		t.Error("an unlimited scope got state")
	}
}

func TestSweepDropsIdleScopes(t *testing.T) {
	clk := newClock(t0)
	l, _ := newLocal(t, Config{Default: Defaults{User: Limits{RequestsPerMinute: 10, DailyTokens: 100}}}, clk, nil)
	_, held := admit(t, l, Request{Subject: Subject{UserID: "held"}, EstInputTokens: 1})
	_, tk := admit(t, l, Request{Subject: Subject{UserID: "idle"}, EstInputTokens: 1})
	tk.Commit(1, 0)
	clk.Add(24 * time.Hour)
	admit(t, l, Request{Subject: Subject{UserID: "new"}, EstInputTokens: 1})
	if l.state(KindUser, "idle") != nil {
		t.Error("idle scope from yesterday kept")
	}
	if l.state(KindUser, "held") == nil {
		t.Error("scope with a request in flight dropped")
	}
	held.Commit(1, 0) // settles against the kept entry without harm
	if l.state(KindUser, "held").inflight != 0 {
		t.Error("in-flight count not released")
	}
}

func TestHeadersFormat(t *testing.T) {
	h := http.Header{}
	Rate{
		Requests: Window{Limit: 5000, Remaining: 4999, Reset: 12 * time.Millisecond},
		Tokens:   Window{Limit: 160000, Remaining: -3, Reset: 6 * time.Minute},
	}.Write(h)
	want := http.Header{
		"X-Ratelimit-Limit-Requests": {"5000"}, "X-Ratelimit-Remaining-Requests": {"4999"}, "X-Ratelimit-Reset-Requests": {"12ms"},
		"X-Ratelimit-Limit-Tokens": {"160000"}, "X-Ratelimit-Remaining-Tokens": {"0"}, "X-Ratelimit-Reset-Tokens": {"6m0s"},
	}
	if diff := cmp.Diff(want, h); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
	if got := h.Get("x-ratelimit-reset-tokens"); got != "6m0s" {
		t.Errorf("lookup by OpenAI's lower-case name: %q", got)
	}
	for d, want := range map[time.Duration]string{
		0: "0s", time.Nanosecond: "1ms", 643100 * time.Microsecond: "644ms", 9816 * time.Millisecond: "9.816s",
		time.Second: "1s", 6*time.Minute + 100*time.Millisecond: "6m1s", 15 * time.Hour: "15h0m0s",
	} {
		if got := FormatReset(d); got != want {
			t.Errorf("FormatReset(%v) = %q; want %q", d, got, want)
		}
	}
	dec := Decision{RetryAfter: 1500 * time.Millisecond}
	if h := dec.headers(); h.Get("Retry-After") != "2" || h.Get("Retry-After-Ms") != "1500" {
		t.Errorf("retry headers %v", h)
	}
}

func TestNoSubjectNoLimits(t *testing.T) {
	clk := newClock(t0)
	l, _ := newLocal(t, Config{}, clk, nil)
	d, tk := admit(t, l, alice(1<<40, 1<<40))
	if !d.Allowed || d.Headers != nil || d.Rate != (Rate{}) {
		t.Errorf("no limits configured: %+v", d)
	}
	tk.Cancel()
}
