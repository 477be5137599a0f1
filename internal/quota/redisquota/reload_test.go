package redisquota

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/quota"
)

// TestReconfigureKeepsCounters: a reload that lowers alice's daily quota
// on the Redis limiter counts what she already used against the new one
// (the counters are in Redis, the policy is swapped), and raising it
// admits her again.
func TestReconfigureKeepsCounters(t *testing.T) {
	srv := startRedis(t, false)
	now := func() time.Time { return time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC) }
	cfg := redisCfg(t, srv, quota.Config{Users: map[string]quota.Limits{"alice": {DailyTokens: 10_000}}})
	l, _ := replica(t, cfg, now, nil)
	ctx := context.Background()
	alice := quota.Request{Subject: quota.Subject{UserID: "alice"}, EstInputTokens: 3000}
	d, tk, err := l.Admit(ctx, alice)
	if err != nil || !d.Allowed {
		t.Fatalf("first request: %+v %v", d, err)
	}
	tk.Commit(6000, 0)

	lower := cfg
	lower.Users = map[string]quota.Limits{"alice": {DailyTokens: 5_000}}
	if err := l.Reconfigure(lower); err != nil {
		t.Fatal(err)
	}
	if d, _, err := l.Admit(ctx, alice); err != nil || d.Allowed || d.Limit != quota.LimitDailyTokens {
		t.Errorf("alice over her lowered quota: %+v %v", d, err)
	}
	higher := cfg
	higher.Users = map[string]quota.Limits{"alice": {DailyTokens: 20_000}}
	if err := l.Reconfigure(higher); err != nil {
		t.Fatal(err)
	}
	d, tk, err = l.Admit(ctx, alice)
	if err != nil || !d.Allowed {
		t.Fatalf("alice under her raised quota: %+v %v", d, err)
	}
	tk.Cancel()
	bad := cfg
	bad.Users = map[string]quota.Limits{"alice": {DailyCost: "x"}}
	if err := l.Reconfigure(bad); err == nil {
		t.Error("a bad daily_cost was accepted")
	}
}
