package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/quota"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
)

// After a restart the budget-burn figures of every configured daily quota
// are today's ledger usage, also for a scope that has not sent a request
// since: the limiter serve builds over the same SQLite file preloads them.
func TestQuotaUsageAfterRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "q.db")
	yml := fmt.Sprintf(`store: {sqlite: {path: %s}}
upstreams:
  - {name: sim, url: "http://127.0.0.1:1", engine: vllm}
quotas:
  users:
    alice: {daily_tokens: 100000, daily_cost: "5.00"}
    bob: {daily_tokens: 5000}
  default:
    biz_line: {daily_tokens: 1000000}
`, path)
	cfgPath := filepath.Join(dir, "tollgate.yml")
	if err := os.WriteFile(cfgPath, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}

	// Before the restart: today's requests of alice and carol in the
	// ledger, and one of alice's yesterday that must not count.
	st, err := sqlite.Open(ctx, path, slog.New(slog.DiscardHandler), sqlite.WithLocation(cfg.Location()))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now().UTC()
	if now.Add(time.Minute).Day() != now.Day() {
		t.Skip("a minute before midnight UTC: today's rows would be yesterday's by the time the limiter reads them")
	}
	rec := func(id, user, biz string, at time.Time, in, out, nanos int64) *record.Record {
		return &record.Record{RequestID: id, UserID: user, BizLine: biz, Model: "m", Arrival: at, Status: 200,
			Usage: record.Usage{InputTokens: in, OutputTokens: out}, Cost: record.Cost{Nanos: nanos, Currency: "USD"}}
	}
	today := now
	recs := []*record.Record{
		rec("a1", "alice", "search", today, 300, 120, 7_000_000),
		rec("a2", "alice", "chat", today, 50, 30, 1_000_000),
		rec("c1", "carol", "search", today, 1000, 400, 20_000_000),
		rec("a0", "alice", "search", now.AddDate(0, 0, -1), 9000, 9000, 900_000_000),
	}
	if err := st.Insert(ctx, store.Batch{Records: recs}); err != nil {
		t.Fatal(err)
	}

	// The restart: a new limiter over the same file. Nobody sends a request.
	l, err := newLimiter(cfg, st, nil, nil, nil, nil)
	if err != nil || l == nil {
		t.Fatalf("limiter: %v %v", l, err)
	}
	r := quota.Reader(l)
	if u := usageOf(r.Usage(time.Now()), "user:alice", quota.LimitDailyTokens); u.Used != 0 {
		t.Fatalf("alice before the preload: %+v; the test expects the lazy seed to leave it at 0", u)
	}
	_ = quota.RunPreload(ctx, l, quotaDaySeed(st), slog.New(slog.DiscardHandler))
	us := r.Usage(time.Now())
	for _, c := range []struct {
		scope, limit string
		want         int64
	}{
		{"user:alice", quota.LimitDailyTokens, 300 + 120 + 50 + 30},
		{"user:alice", quota.LimitDailyCost, 8_000_000},
		{"user:bob", quota.LimitDailyTokens, 0},
		{"biz_line:search", quota.LimitDailyTokens, 300 + 120 + 1000 + 400},
		{"biz_line:chat", quota.LimitDailyTokens, 50 + 30},
	} {
		if u := usageOf(us, c.scope, c.limit); u.Used != c.want || u.Quota == 0 {
			t.Errorf("%s %s after the restart: %+v, want used %d", c.scope, c.limit, u, c.want)
		}
	}
	if u := usageOf(us, "user:carol", quota.LimitDailyTokens); u.Quota != 0 {
		t.Errorf("carol has no daily quota, yet is shown: %+v", u)
	}
}

func usageOf(us []quota.ScopeUsage, scope, limit string) quota.ScopeUsage {
	for _, u := range us {
		if u.Scope == scope && u.Limit == limit {
			return u
		}
	}
	return quota.ScopeUsage{}
}
