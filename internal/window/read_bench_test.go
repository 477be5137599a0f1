package window

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
)

// benchStore is a SQLite store holding six hours of stored windows, 40
// series (10 models × 4 business lines) with a request every 5 seconds
// each: minutes and hour rows, as an aggregator that saw them writes.
func benchStore(b *testing.B) (*sqlite.Store, *Aggregator) {
	b.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "w.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	a := New(Config{From: t0, Keep: 8 * time.Hour}, st, nil, nil)
	for s := range 6 * 3600 / 5 {
		at := t0.Add(time.Duration(s) * 5 * time.Second)
		for m := range 10 {
			for bl := range 4 {
				r := req(fmt.Sprint("model-", m), at, time.Duration(50+(s*7+m)%900)*time.Millisecond, time.Duration(1+s%7)*time.Second, int64(10+s%3000), int64(1+s%500))
				r.BizLine = fmt.Sprint("biz-", bl)
				a.Add(r)
			}
		}
	}
	a.Flush(ctx, t0.Add(7*time.Hour))
	return st, a
}

// BenchmarkAggregatorHour: an alert baseline's stored hours, grouped by
// model, as the engine asks for them again and again (kept after the
// first read).
func BenchmarkAggregatorHour(b *testing.B) {
	st, _ := benchStore(b)
	ctx := context.Background()
	a := New(Config{}, st, nil, nil)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		g, err := a.Hour(ctx, t0.Add(time.Duration(i%6)*time.Hour), Selector{"biz_line": "biz-1"}, []string{"model"}, E2E)
		if err != nil || len(g) != 10 {
			b.Fatalf("%d groups, %v", len(g), err)
		}
		i++
	}
}

// BenchmarkReadRange: what the day compactor reads, six stored hours
// and the minutes of two half hours, every series apart.
func BenchmarkReadRange(b *testing.B) {
	st, _ := benchStore(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		s, err := ReadRange(ctx, st, t0.Add(30*time.Minute), t0.Add(5*time.Hour+30*time.Minute))
		if err != nil || len(s) != 40 {
			b.Fatalf("%d series, %v", len(s), err)
		}
	}
}
