package redisquota

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/quota"
	"github.com/tollgate-dev/tollgate/internal/quota/redisquota/redistest"
)

// BenchmarkAdmitCommit is one request's quota work against a real Redis:
// the admission script over three scopes and the settlement script. Run
// it to see the cost on a given machine; no test asserts a speed.
func BenchmarkAdmitCommit(b *testing.B) {
	srv := redistest.Start(b, false)
	cfg := quota.Config{
		Keys:     map[string]quota.Limits{"k": {RequestsPerMinute: maxBench}},
		Users:    map[string]quota.Limits{"alice": {DailyTokens: 1 << 50, TokensPerMinute: maxBench}},
		BizLines: map[string]quota.Limits{"search": {DailyCost: "1000000"}},
		Redis:    quota.Redis{URL: "redis://" + srv.Addr, KeyPrefix: srv.Prefix(b), Timeout: time.Second},
	}
	l, err := New(cfg, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	req := quota.Request{Subject: quota.Subject{KeyID: "k", UserID: "alice", BizLine: "search"},
		EstInputTokens: 100, EstOutputTokens: 100, EstCostNanos: 1000}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			d, tk, err := l.Admit(context.Background(), req)
			if err != nil || !d.Allowed {
				b.Fatalf("%+v %v", d, err)
			}
			tk.Commit(150, 900)
		}
	})
}

// maxBench is a per-minute limit no benchmark reaches.
const maxBench = quota.MaxRedisRate
