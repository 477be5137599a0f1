package otlp

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// Expiry is tested inside synctest bubbles: time.Sleep moves the fake
// clock, so "just before" and "just after" the TTL are exact.

const joinTTL = 2 * time.Minute

func timing(ms int) record.EngineTiming {
	return record.EngineTiming{Signal: SignalVLLMSpan, TTFT: time.Duration(ms) * time.Millisecond}
}

func span(trace, parent string, ms int) Span {
	return Span{TraceID: trace, ParentSpanID: parent, Name: VLLMSpanName, Timing: timing(ms)}
}

// calls records what a hook received.
type calls struct {
	mu  sync.Mutex
	got []record.EngineTiming
}

func (c *calls) fn(t record.EngineTiming) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, t)
}

func (c *calls) n() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.got)
}

func wantCalls(t *testing.T, c *calls, want ...record.EngineTiming) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.got) != len(want) {
		t.Fatalf("fn called %d times with %v, want %d", len(c.got), c.got, len(want))
	}
	for i := range want {
		if c.got[i] != want[i] {
			t.Errorf("call %d got %+v, want %+v", i, c.got[i], want[i])
		}
	}
}

func wantLen(t *testing.T, j *Joiner, spans, expects int) {
	t.Helper()
	if s, e := j.Len(); s != spans || e != expects {
		t.Errorf("Len() = %d spans, %d expects; want %d, %d", s, e, spans, expects)
	}
}

func wantResult(t *testing.T, j *Joiner, result string, want float64) {
	t.Helper()
	if got := testutil.ToFloat64(j.results.WithLabelValues(result)); got != want {
		t.Errorf("joins{result=%q} = %v, want %v", result, got, want)
	}
}

func TestJoinSpanFirst(t *testing.T) {
	j := NewJoiner(joinTTL, 10, nil)
	j.Offer(span("aa", "01", 5))
	var c calls
	j.Expect("aa", "01", c.fn)
	wantCalls(t, &c, timing(5))
	j.Offer(span("aa", "01", 6)) // a second sequence of the same request
	wantCalls(t, &c, timing(5))
	wantResult(t, j, joinMatched, 1)
}

func TestJoinExpectFirst(t *testing.T) {
	j := NewJoiner(joinTTL, 10, nil)
	var c calls
	j.Expect("bb", "02", c.fn)
	wantCalls(t, &c)
	j.Offer(span("bb", "03", 1)) // same trace, another attempt
	wantCalls(t, &c)
	j.Offer(span("bb", "02", 7))
	j.Offer(span("bb", "02", 8))
	wantCalls(t, &c, timing(7))
	wantLen(t, j, 2, 0) // the other attempt's span and the late duplicate
}

// Ids compare case-insensitively: a client's uppercase traceparent comes
// back lowercase from the engine's exporter.
func TestJoinIDCase(t *testing.T) {
	j := NewJoiner(joinTTL, 10, nil)
	var c calls
	j.Expect("4BF92F3577B34DA6A3CE929D0E0E4736", "00F067AA0BA902B7", c.fn)
	j.Offer(span("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 3))
	wantCalls(t, &c, timing(3))
}

func TestJoinIgnoresEmpty(t *testing.T) {
	j := NewJoiner(joinTTL, 10, nil)
	j.Offer(span("", "01", 1))
	j.Expect("", "01", func(record.EngineTiming) { t.Error("called for an empty trace id") })
	j.Expect("cc", "01", nil)
	wantLen(t, j, 0, 0)
}

func TestJoinReplaceExpect(t *testing.T) {
	j := NewJoiner(joinTTL, 10, nil)
	var first, second calls
	j.Expect("dd", "01", first.fn)
	j.Expect("dd", "01", second.fn)
	j.Offer(span("dd", "01", 4))
	wantCalls(t, &first)
	wantCalls(t, &second, timing(4))
}

func TestJoinSpanExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := NewJoiner(joinTTL, 10, nil)
		j.Offer(span("aa", "01", 1))
		j.Offer(span("bb", "01", 2))
		time.Sleep(joinTTL - time.Nanosecond)
		var kept calls
		j.Expect("bb", "01", kept.fn) // just in time
		wantCalls(t, &kept, timing(2))

		time.Sleep(time.Nanosecond)
		var late calls
		j.Expect("aa", "01", late.fn) // the span has gone
		wantCalls(t, &late)
		wantLen(t, j, 0, 1)
		wantResult(t, j, joinSpanExpired, 1)

		j.Offer(span("aa", "01", 9)) // a fresh span still finds the new wait
		wantCalls(t, &late, timing(9))
	})
}

func TestJoinExpectExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := NewJoiner(joinTTL, 10, nil)
		var c calls
		j.Expect("aa", "01", c.fn)
		time.Sleep(joinTTL)
		wantLen(t, j, 0, 0)
		j.Offer(span("aa", "01", 1))
		wantCalls(t, &c)
		wantLen(t, j, 1, 0)
		wantResult(t, j, joinExpectExpired, 1)
		time.Sleep(joinTTL)
		wantLen(t, j, 0, 0)
		wantResult(t, j, joinSpanExpired, 1)
	})
}

// Entries expire in the order they came, each TTL after its own arrival.
func TestJoinExpiryOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := NewJoiner(joinTTL, 10, nil)
		for i := range 4 {
			j.Offer(span(fmt.Sprintf("t%d", i), "01", i))
			time.Sleep(30 * time.Second)
		}
		// t0 arrived 120 s ago, t1 90 s ago…
		wantLen(t, j, 3, 0)
		time.Sleep(30 * time.Second)
		wantLen(t, j, 2, 0)
		var c calls
		j.Expect("t2", "01", c.fn)
		wantCalls(t, &c, timing(2))
	})
}

func TestJoinBounded(t *testing.T) {
	j := NewJoiner(joinTTL, 2, nil)
	for i := range 3 {
		j.Offer(span(fmt.Sprintf("s%d", i), "01", i))
	}
	wantLen(t, j, 2, 0)
	wantResult(t, j, joinSpanEvicted, 1)
	var oldest, newest calls
	j.Expect("s0", "01", oldest.fn)
	wantCalls(t, &oldest)
	j.Expect("s2", "01", newest.fn)
	wantCalls(t, &newest, timing(2))

	var w [3]calls
	for i := range w {
		j.Expect(fmt.Sprintf("w%d", i), "01", w[i].fn)
	}
	// s0 was already waiting: with s0 and w0..w2 the oldest two went.
	wantResult(t, j, joinExpectEvicted, 2)
	j.Offer(span("w0", "01", 1))
	j.Offer(span("w2", "01", 2))
	wantCalls(t, &w[0])
	wantCalls(t, &w[2], timing(2))
}

// Many requests end while their spans arrive, in any order and from many
// goroutines: every hook runs exactly once. Run with -race.
func TestJoinConcurrent(t *testing.T) {
	const n = 2000
	j := NewJoiner(joinTTL, n, nil)
	var counts [n]atomic.Int32
	var wrong atomic.Int32
	var wg sync.WaitGroup
	for i := range n {
		trace := fmt.Sprintf("%032x", i)
		offer := func() {
			j.Offer(span(trace, "01", i))
			j.Offer(span(trace, "01", -1)) // a duplicate must not fire twice
		}
		expect := func() {
			j.Expect(trace, "01", func(et record.EngineTiming) {
				if et != timing(i) {
					wrong.Add(1)
				}
				counts[i].Add(1)
			})
		}
		first, second := offer, expect
		if rand.IntN(2) == 0 {
			first, second = expect, offer
		}
		wg.Go(first)
		wg.Go(second)
	}
	wg.Wait()
	for i := range counts {
		if c := counts[i].Load(); c != 1 {
			t.Errorf("request %d: hook ran %d times", i, c)
		}
	}
	if w := wrong.Load(); w != 0 {
		t.Errorf("%d hooks got another request's timing", w)
	}
	wantResult(t, j, joinMatched, n)
}
