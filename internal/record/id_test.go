package record_test

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/tollgate-dev/tollgate/internal/record"
)

func TestNewRequestID(t *testing.T) {
	for _, c := range []struct {
		at   time.Time
		rnd  uint64
		want string
	}{
		{time.UnixMilli(0x0123456789ab), 0xfedcba9876543210, "req_0123456789abfedcba9876543210"},
		{time.UnixMilli(1), 0, "req_0000000000010000000000000000"},
		// 2026-12-02T16:00:00.123Z: 1,796,227,200,123 ms.
		{time.Date(2026, 12, 2, 16, 0, 0, 123456789, time.UTC), 1, "req_01a2377bf47b0000000000000001"},
	} {
		got := NewRequestID(c.at, c.rnd)
		if got != c.want || len(got) != RequestIDLen {
			t.Errorf("NewRequestID(%v, %#x) = %q (%d chars), want %q (%d)", c.at, c.rnd, got, len(got), c.want, RequestIDLen)
		}
	}
}

// TestRequestIDsSortByTime: ids made at increasing times sort in that order
// as strings, across hex-digit carries and whatever the random part.
func TestRequestIDsSortByTime(t *testing.T) {
	base := time.Date(2026, 12, 2, 16, 0, 0, 0, time.UTC)
	steps := []time.Duration{time.Millisecond, 15 * time.Millisecond, 16 * time.Millisecond, 255 * time.Millisecond,
		4096 * time.Millisecond, time.Hour, 24 * time.Hour, 365 * 24 * time.Hour}
	rng := rand.New(rand.NewPCG(1, 2))
	var ids []string
	at := base
	for range 10000 {
		at = at.Add(steps[rng.IntN(len(steps))])
		ids = append(ids, NewRequestID(at, rng.Uint64()))
	}
	if !slices.IsSorted(ids) {
		for i := 1; i < len(ids); i++ {
			if ids[i] < ids[i-1] {
				t.Fatalf("id %d %q sorts before id %d %q, made earlier", i, ids[i], i-1, ids[i-1])
			}
		}
	}
}

func TestNewTraceID(t *testing.T) {
	at := time.Date(2026, 12, 2, 16, 0, 0, 999999999, time.UTC) // 1,796,227,200 s
	got := NewTraceID(at, 0x01234567, 0x89abcdef01234567)
	if want := "6b104080" + "01234567" + "89abcdef01234567"; got != want {
		t.Errorf("NewTraceID = %q, want %q", got, want)
	}
	// Zero random bits still give a valid W3C id: the time prefix is not zero.
	if z := NewTraceID(time.Unix(1, 0), 0, 0); z != "00000001"+strings.Repeat("0", 24) {
		t.Errorf("NewTraceID(1 s, 0, 0) = %q", z)
	}
	if a, b := NewTraceID(at, ^uint32(0), ^uint64(0)), NewTraceID(at.Add(time.Second), 0, 0); a >= b {
		t.Errorf("trace id of a later second %q sorts before %q", b, a)
	}
}

func BenchmarkNewRequestID(b *testing.B) {
	at := time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_ = NewRequestID(at, uint64(i))
	}
}
