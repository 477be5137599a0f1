package quota

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// benchLocal has every kind of limit on every scope, set high enough that
// nothing is refused: the benchmark measures the admitted path, which is
// what every request pays.
func benchLocal(b *testing.B) *Local {
	big := Limits{DailyTokens: 1 << 60, DailyCost: "1000000000", RequestsPerMinute: maxRate, TokensPerMinute: maxRate, MaxInputTokens: 1 << 40}
	cfg := Config{Timezone: "Asia/Shanghai", Default: Defaults{Key: big, User: big, BizLine: big}}
	l, err := NewLocal(cfg, time.Now, func(context.Context, Scope, time.Time) (int64, int64, error) { return 0, 0, nil }, func(Event) {})
	if err != nil {
		b.Fatal(err)
	}
	return l
}

func benchRequest(user string) Request {
	return Request{Subject: Subject{KeyID: "k-" + user, UserID: user, BizLine: "search"},
		EstInputTokens: 1200, EstOutputTokens: 512, EstCostNanos: 3_000_000}
}

// BenchmarkAdmit is one request's admission and its commit, three scopes
// each with all five limits.
func BenchmarkAdmit(b *testing.B) {
	ctx := context.Background()
	b.Run("uncontended", func(b *testing.B) {
		l := benchLocal(b)
		r := benchRequest("alice")
		b.ReportAllocs()
		for b.Loop() {
			_, tk, _ := l.Admit(ctx, r)
			tk.Commit(1500, 2_000_000)
		}
	})
	// Every goroutine on the same key, user and biz_line: the worst case,
	// one set of locks for all.
	b.Run("parallel_one_key", func(b *testing.B) {
		l := benchLocal(b)
		r := benchRequest("alice")
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_, tk, _ := l.Admit(ctx, r)
				tk.Commit(1500, 2_000_000)
			}
		})
	})
	// Distinct keys and users sharing one biz_line, the usual shape.
	b.Run("parallel_users_one_biz_line", func(b *testing.B) {
		l := benchLocal(b)
		var next atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			r := benchRequest("u" + strconv.FormatInt(next.Add(1), 10))
			for pb.Next() {
				_, tk, _ := l.Admit(ctx, r)
				tk.Commit(1500, 2_000_000)
			}
		})
	})
	// The refused path builds headers and a message: dearer, but it is
	// also the path that spares an engine a request.
	b.Run("refused", func(b *testing.B) {
		l, err := NewLocal(Config{Users: map[string]Limits{"alice": {RequestsPerMinute: 1}}}, time.Now, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		r := benchRequest("alice")
		l.Admit(ctx, r)
		b.ReportAllocs()
		for b.Loop() {
			if d, _, _ := l.Admit(ctx, r); d.Allowed {
				b.Fatal("admitted")
			}
		}
	})
}
