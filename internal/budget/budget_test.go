package budget

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/quota"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
)

// raised collects the crossings a tracker raises.
type raised struct {
	mu sync.Mutex
	a  []Alert
}

func (r *raised) add(a Alert) {
	r.mu.Lock()
	r.a = append(r.a, a)
	r.mu.Unlock()
}

func (r *raised) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, a := range r.a {
		out = append(out, fmt.Sprintf("%s@%g", a.Status.Name, a.Threshold*100))
	}
	return out
}

func openStore(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), path, slog.New(slog.DiscardHandler), sqlite.WithLocation(time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func rec(id, key, user, biz string, at time.Time, tokens, nanos int64) *record.Record {
	return &record.Record{RequestID: id, KeyID: key, UserID: user, BizLine: biz, Model: "m", Arrival: at, Status: 200,
		Usage: record.Usage{InputTokens: tokens / 2, OutputTokens: tokens - tokens/2}, Cost: record.Cost{Nanos: nanos, Currency: "USD"}}
}

// TestBudgetsOverSQLite runs monthly, daily and rolling budgets for a
// team, a user, a key and a business line over a real SQLite ledger:
// usage is this period's only, each threshold alerts once per period
// (also across a restart, through the event log), and an enforced budget
// refuses its subjects' requests once used up while others pass.
func TestBudgetsOverSQLite(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "b.db")
	st := openStore(t, path)
	defer st.Close()
	now := time.Date(2026, 12, 20, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }

	// Team platform is keys k-a and k-b; k-c is another team's.
	recs := []*record.Record{
		rec("1", "k-a", "alice", "search", time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC), 300, 2_000_000_000),
		rec("2", "k-b", "bob", "search", time.Date(2026, 12, 19, 9, 0, 0, 0, time.UTC), 250, 1_000_000_000),
		rec("3", "k-c", "carol", "chat", time.Date(2026, 12, 20, 11, 0, 0, 0, time.UTC), 10_000, 9_000_000_000),
		rec("4", "k-a", "alice", "search", time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC), 99_999, 99_000_000_000), // last month
	}
	if err := st.Insert(ctx, store.Batch{Records: recs}); err != nil {
		t.Fatal(err)
	}
	budgets := []Config{
		{Name: "platform-month", Scope: ScopeTeam, Subject: "platform", Period: PeriodMonth, Tokens: 1000, Enforce: true},              // 550 = 55 %
		{Name: "alice-month-cost", Scope: ScopeUser, Subject: "alice", Period: PeriodMonth, Cost: "2.50", Thresholds: []float64{0.8}},  // 2.00 = 80 %
		{Name: "carol-key-day", Scope: ScopeKey, Subject: "carol-key", Period: PeriodDay, Tokens: 5000, Enforce: true},                 // 10000 = 200 %
		{Name: "search-week", Scope: ScopeBizLine, Subject: "search", Period: PeriodRolling, Window: 7 * 24 * time.Hour, Tokens: 1000}, // 250 = 25 %
	}
	if err := Validate("budgets", budgets, map[string]bool{"carol-key": true}, map[string]bool{"platform": true}); err != nil {
		t.Fatal(err)
	}
	opts := func(r *raised) Options {
		return Options{Reports: st, Events: st, Raise: r.add, Now: clock,
			KeyIDs: map[string]string{"carol-key": "k-c"}, TeamKeys: map[string][]string{"platform": {"k-a", "k-b"}}}
	}
	var got raised
	tr := New(budgets, opts(&got))
	if err := tr.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[string][2]int64{"platform-month": {550, 3_000_000_000}, "alice-month-cost": {300, 2_000_000_000},
		"carol-key-day": {10_000, 9_000_000_000}, "search-week": {250, 1_000_000_000}}
	for _, s := range tr.Statuses() {
		if w := want[s.Name]; s.Tokens != w[0] || s.Cost != w[1] {
			t.Errorf("%s: %d tokens, %d nanos; want %v", s.Name, s.Tokens, s.Cost, w)
		}
	}
	if l := strings.Join(got.list(), " "); l != "platform-month@50 alice-month-cost@80 carol-key-day@100" {
		t.Errorf("crossings %q", l)
	}

	// Refreshing again raises nothing new; a restart over the same store
	// neither.
	if err := tr.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	var again raised
	if err := New(budgets, opts(&again)).Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(got.list()) + len(again.list()); n != 3 {
		t.Errorf("crossings after a refresh and a restart: %q then %q; want each once", got.list(), again.list())
	}

	// Enforcement: carol's key is over its day budget; the platform team
	// is not over its month yet.
	l := &Limiter{Tracker: tr, Now: clock}
	d, tk, err := l.Admit(ctx, quota.Request{Subject: quota.Subject{KeyID: "k-c", UserID: "carol"}})
	if err != nil || d.Allowed || tk != nil || d.Status != 429 || d.Code != "insufficient_quota" || d.RetryAfter != 12*time.Hour {
		t.Errorf("carol over her key's day budget: %+v %v", d, err)
	}
	if d, _, _ := l.Admit(ctx, quota.Request{Subject: quota.Subject{KeyID: "k-a", UserID: "alice"}}); !d.Allowed {
		t.Errorf("alice refused under her team's budget: %+v", d)
	}

	// The team's month fills up: 80 % and 100 % alert (the highest once),
	// and its keys are refused.
	if err := st.Insert(ctx, store.Batch{Records: []*record.Record{rec("5", "k-b", "bob", "search", now.Add(-time.Minute), 500, 0)}}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	// bob's 500 tokens also take the search line's week to 75 %.
	if l := strings.Join(got.list()[3:], " "); l != "platform-month@100 search-week@50" {
		t.Errorf("crossings after the team's month filled: %q", got.list())
	}
	if d, _, _ := l.Admit(ctx, quota.Request{Subject: quota.Subject{KeyID: "k-a", UserID: "alice"}}); d.Allowed {
		t.Error("a platform key admitted over the team's enforced budget")
	}

	// Next month: a new period, under budget again.
	now = time.Date(2027, 1, 1, 0, 30, 0, 0, time.UTC)
	if err := tr.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if d, _, _ := l.Admit(ctx, quota.Request{Subject: quota.Subject{KeyID: "k-a"}}); !d.Allowed {
		t.Errorf("refused in a new month: %+v", d)
	}
}

// TestValidate names the field of every bad budget.
func TestValidate(t *testing.T) {
	for _, c := range []struct {
		b    Config
		want string
	}{
		{Config{Name: "a", Scope: "org", Subject: "x", Period: PeriodMonth, Tokens: 1}, "budgets[0].scope: must be one of user, key, biz_line, team"},
		{Config{Name: "a", Scope: ScopeTeam, Subject: "nobody", Period: PeriodMonth, Tokens: 1}, `budgets[0].subject: no auth.keys[].team is "nobody"`},
		{Config{Name: "a", Scope: ScopeUser, Subject: "u", Period: "week", Tokens: 1}, "budgets[0].period: must be one of day, month, rolling"},
		{Config{Name: "a", Scope: ScopeUser, Subject: "u", Period: PeriodRolling, Tokens: 1}, "budgets[0].window: must be between 1h and 366 days"},
		{Config{Name: "a", Scope: ScopeUser, Subject: "u", Period: PeriodMonth}, "budgets[0].tokens: a budget needs tokens, cost or both"},
		{Config{Name: "a", Scope: ScopeUser, Subject: "u", Period: PeriodMonth, Cost: "lots"}, "budgets[0].cost:"},
		{Config{Name: "a", Scope: ScopeUser, Subject: "u", Period: PeriodMonth, Tokens: 1, Thresholds: []float64{-1}}, "budgets[0].thresholds[0]: must be a share"},
	} {
		err := Validate("budgets", []Config{c.b}, nil, map[string]bool{"platform": true})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.b, err, c.want)
		}
	}
}
