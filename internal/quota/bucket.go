package quota

import (
	"sync/atomic"
	"time"
)

// Per-minute limits are token buckets: each holds one minute's allowance
// and refills continuously at limit per minute.
//
// Why a bucket rather than a fixed or sliding window:
//   - O(1) state (two integers), the same shape as GCRA in a Redis Lua
//     script, so the Redis limiter keeps the semantics exactly;
//   - continuous refill: no window edge at which every throttled client
//     retries at once;
//   - the reset OpenAI reports in x-ratelimit-reset-* is "time until the
//     limit is back to its initial state", i.e. until the bucket is full,
//     which a bucket answers directly.
//
// Burst behaviour: a subject idle for a minute may spend its whole minute's
// allowance at once. In any 60 s span at most 2 × limit can pass (a full
// bucket plus a minute of refill); over longer spans the rate converges to
// the limit. At a single instant no more than limit is ever admitted, which
// is what the concurrency tests pin down.
//
// Arithmetic is exact integers: the level is kept in unit·µs, one unit
// (request or token) costing windowMicros, so refill is limit per µs.
const (
	window       = time.Minute
	windowMicros = int64(window / time.Microsecond)
)

type bucket struct {
	// level is the allowance left, in unit·µs. It goes negative (down to
	// minus one minute's worth) when a Commit reports more tokens than were
	// reserved: the debt delays later requests instead of being forgiven.
	level int64
	at    int64 // µs since Local's epoch of the last refill
}

func newBucket(limit, now int64) bucket { return bucket{level: limit * windowMicros, at: now} }

func (b *bucket) refill(limit, now int64) {
	el := now - b.at
	if el <= 0 {
		return // a clock that stepped back refills nothing rather than going negative
	}
	b.at = now
	capacity := limit * windowMicros
	if b.level >= capacity {
		return
	}
	// From the lowest level (-capacity) a full refill takes two windows;
	// capping el there keeps el*limit within int64 (maxRate bounds limit).
	if el >= 2*windowMicros {
		b.level = capacity
		return
	}
	b.level = min(capacity, b.level+el*limit)
}

// wait is how long until n units are available; 0 if they are now. The
// caller has refilled and checked n <= limit.
func (b *bucket) wait(limit, n int64) time.Duration {
	need := n*windowMicros - b.level
	if need <= 0 {
		return 0
	}
	return time.Duration((need+limit-1)/limit) * time.Microsecond
}

// adjust takes n units (negative n gives them back), keeping the level
// within [-capacity, capacity].
func (b *bucket) adjust(limit, n int64) {
	capacity := limit * windowMicros
	switch {
	case n >= 2*limit:
		b.level = -capacity
	case n <= -2*limit:
		b.level = capacity
	default:
		b.level = max(-capacity, min(capacity, b.level-n*windowMicros))
	}
}

func (b *bucket) window(limit int64) Window {
	capacity := limit * windowMicros
	w := Window{Limit: limit, Remaining: max(b.level, 0) / windowMicros}
	if b.level < capacity {
		w.Reset = time.Duration((capacity-b.level+limit-1)/limit) * time.Microsecond
	}
	return w
}

func (b *bucket) full(limit int64) bool { return b.level >= limit*windowMicros }

// day is one quota day: [start, end) in the configured zone. end−start is
// 23 or 25 hours across a daylight-saving change.
type day struct {
	start, end time.Time
	key        int64 // start.Unix(), the day's identity
}

// calendar maps instants to quota days, caching the current one so that
// Admit does not do zone arithmetic on every request.
type calendar struct {
	loc *time.Location
	cur atomic.Pointer[day]
}

func (c *calendar) at(t time.Time) *day {
	cur := c.cur.Load()
	if cur != nil && !t.Before(cur.start) && t.Before(cur.end) {
		return cur
	}
	y, m, dd := t.In(c.loc).Date()
	start := time.Date(y, m, dd, 0, 0, 0, 0, c.loc)
	d := &day{start: start, end: time.Date(y, m, dd+1, 0, 0, 0, 0, c.loc), key: start.Unix()}
	// Only move the cache forward: goroutines racing across midnight with
	// slightly older clocks must not flip it back and forth.
	for cur == nil || d.key > cur.key {
		if c.cur.CompareAndSwap(cur, d) {
			break
		}
		cur = c.cur.Load()
	}
	return d
}
