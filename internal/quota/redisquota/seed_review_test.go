package redisquota

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/quota"
)

// TestDailyLimitAddedLaterIsSeeded: a scope admitted today under a
// per-minute limit only does not mark its day seeded, so a daily quota
// added later (a config change and a restart) loads today's usage from
// the ledger and refuses what would pass it.
func TestDailyLimitAddedLaterIsSeeded(t *testing.T) {
	srv := startRedis(t, false)
	fixed := start()
	now := func() time.Time { return fixed }
	seedCalls := 0
	seed := func(ctx context.Context, s quota.Scope, day time.Time) (int64, int64, error) {
		seedCalls++
		return 900, 0, nil // the ledger: 900 tokens used today already
	}
	base := redisCfg(t, srv, quota.Config{Keys: map[string]quota.Limits{"k1": {RequestsPerMinute: 100}}})
	a, _ := replica(t, base, now, seed)
	d, tk, err := a.Admit(context.Background(), quota.Request{Subject: quota.Subject{KeyID: "k1"}, EstInputTokens: 10, EstOutputTokens: 10})
	if err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	tk.Commit(20, 0)
	later := base
	later.Keys = map[string]quota.Limits{"k1": {RequestsPerMinute: 100, DailyTokens: 1000}}
	b, _ := replica(t, later, now, seed)
	d, _, err = b.Admit(context.Background(), quota.Request{Subject: quota.Subject{KeyID: "k1"}, EstInputTokens: 200, EstOutputTokens: 200})
	if err != nil {
		t.Fatal(err)
	}
	if seedCalls == 0 || d.Allowed {
		t.Errorf("a 400-token request with 900 of 1000 tokens used today: seeded %d times, allowed %v; want seeded and refused", seedCalls, d.Allowed)
	}
}
