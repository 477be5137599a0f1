package otlp

import (
	"container/list"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// Defaults for NewJoiner. vLLM exports a batch every 5 s at most, so two
// minutes covers a slow exporter; 100 000 entries of either kind hold a
// few minutes of a busy gateway in a few tens of MB.
const (
	DefaultJoinTTL     = 2 * time.Minute
	DefaultJoinEntries = 100_000
)

// Join outcomes, the values of tollgate_otlp_joins_total's result label.
const (
	joinMatched       = "matched"        // span and expectation met
	joinSpanExpired   = "span_expired"   // a span nobody expected within the TTL
	joinExpectExpired = "expect_expired" // an expectation no span met within the TTL
	joinSpanEvicted   = "span_evicted"   // dropped for room before its TTL
	joinExpectEvicted = "expect_evicted" // dropped for room before its TTL
	joinSpanDuplicate = "span_duplicate" // a second span for a key still waiting
)

// Joiner pairs engine spans with finished requests. A request is keyed by
// its trace id and the span id the gateway sent upstream as the parent
// (the Record's SpanID), which the engine's span names as ParentSpanID.
// Spans and expectations that find no partner wait up to the TTL; each
// kind is also bounded in number, the oldest going first. Expiry is lazy:
// every call first drops what has expired, so there is no goroutine to
// stop. Safe for concurrent use.
type Joiner struct {
	ttl     time.Duration
	max     int
	results *prometheus.CounterVec

	mu    sync.Mutex
	spans queue // of record.EngineTiming
	waits queue // of func(record.EngineTiming)
}

// NewJoiner returns a joiner keeping unmatched entries for ttl, at most
// maxEntries of each kind; zero or negative values mean the defaults. Its
// metrics are registered with reg when it is not nil.
func NewJoiner(ttl time.Duration, maxEntries int, reg prometheus.Registerer) *Joiner {
	if ttl <= 0 {
		ttl = DefaultJoinTTL
	}
	if maxEntries <= 0 {
		maxEntries = DefaultJoinEntries
	}
	results := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_otlp_joins_total",
		Help: "Engine spans and finished requests paired, or given up on, by the span joiner.",
	}, []string{"result"})
	results = register(reg, results, slog.New(slog.DiscardHandler))
	for _, r := range []string{joinMatched, joinSpanExpired, joinExpectExpired, joinSpanEvicted, joinExpectEvicted, joinSpanDuplicate} {
		results.WithLabelValues(r)
	}
	return &Joiner{
		ttl: ttl, max: maxEntries, results: results,
		spans: newQueue(), waits: newQueue(),
	}
}

type joinKey struct{ trace, span string }

// key normalises ids: W3C ids are lowercase hex, but a client may have
// sent uppercase and an exporter will not echo it.
func key(traceID, spanID string) joinKey {
	return joinKey{strings.ToLower(traceID), strings.ToLower(spanID)}
}

// Offer gives the joiner an engine span. If the request it belongs to has
// finished, that request's fn is called now, on this goroutine; otherwise
// the span waits for Expect. A span for a key that already holds one is
// dropped: the first sequence of a request speaks for it.
func (j *Joiner) Offer(s Span) {
	if s.TraceID == "" {
		return
	}
	k := key(s.TraceID, s.ParentSpanID)
	now := time.Now()
	j.mu.Lock()
	j.expire(now)
	if fn, ok := j.waits.take(k); ok {
		j.mu.Unlock()
		j.results.WithLabelValues(joinMatched).Inc()
		fn.(func(record.EngineTiming))(s.Timing)
		return
	}
	if j.spans.has(k) {
		j.mu.Unlock()
		j.results.WithLabelValues(joinSpanDuplicate).Inc()
		return
	}
	evicted := j.spans.len() >= j.max
	if evicted {
		j.spans.dropOldest()
	}
	j.spans.push(k, now.Add(j.ttl), s.Timing)
	j.mu.Unlock()
	if evicted {
		j.results.WithLabelValues(joinSpanEvicted).Inc()
	}
}

// Expect registers a finished request: fn is called exactly once with the
// engine's timing, now if its span has arrived, else when it does — on the
// goroutine of that Offer — unless the TTL passes first, and then never.
// fn must not block. Expecting the same key twice replaces the first fn.
func (j *Joiner) Expect(traceID, spanID string, fn func(record.EngineTiming)) {
	if traceID == "" || fn == nil {
		return
	}
	k := key(traceID, spanID)
	now := time.Now()
	j.mu.Lock()
	j.expire(now)
	if t, ok := j.spans.take(k); ok {
		j.mu.Unlock()
		j.results.WithLabelValues(joinMatched).Inc()
		fn(t.(record.EngineTiming))
		return
	}
	evicted := false
	if _, ok := j.waits.take(k); !ok && j.waits.len() >= j.max {
		j.waits.dropOldest()
		evicted = true
	}
	j.waits.push(k, now.Add(j.ttl), fn)
	j.mu.Unlock()
	if evicted {
		j.results.WithLabelValues(joinExpectEvicted).Inc()
	}
}

// Window is how long an expectation waits for its span (the TTL):
// otlp.join_window.
func (j *Joiner) Window() time.Duration { return j.ttl }

// Len returns how many spans and expectations are waiting, after dropping
// the expired ones.
func (j *Joiner) Len() (spans, expects int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.expire(time.Now())
	return j.spans.len(), j.waits.len()
}

// expire drops entries whose TTL has passed. Entries are queued in
// insertion order and share one TTL, so the expired ones are at the front.
// Called with mu held.
func (j *Joiner) expire(now time.Time) {
	if n := j.spans.expire(now); n > 0 {
		j.results.WithLabelValues(joinSpanExpired).Add(float64(n))
	}
	if n := j.waits.expire(now); n > 0 {
		j.results.WithLabelValues(joinExpectExpired).Add(float64(n))
	}
}

// queue is a map from key to entry that also remembers insertion order.
type queue struct {
	order *list.List // of *entry, oldest first
	byKey map[joinKey]*list.Element
}

type entry struct {
	key      joinKey
	deadline time.Time
	value    any
}

func newQueue() queue {
	return queue{order: list.New(), byKey: make(map[joinKey]*list.Element)}
}

func (q queue) len() int               { return len(q.byKey) }
func (q queue) has(k joinKey) bool     { _, ok := q.byKey[k]; return ok }
func (q queue) remove(e *list.Element) { delete(q.byKey, q.order.Remove(e).(*entry).key) }

func (q queue) push(k joinKey, deadline time.Time, v any) {
	q.byKey[k] = q.order.PushBack(&entry{key: k, deadline: deadline, value: v})
}

func (q queue) take(k joinKey) (any, bool) {
	e, ok := q.byKey[k]
	if !ok {
		return nil, false
	}
	v := e.Value.(*entry).value
	q.remove(e)
	return v, true
}

func (q queue) dropOldest() {
	if e := q.order.Front(); e != nil {
		q.remove(e)
	}
}

func (q queue) expire(now time.Time) int {
	n := 0
	for e := q.order.Front(); e != nil && !now.Before(e.Value.(*entry).deadline); e = q.order.Front() {
		q.remove(e)
		n++
	}
	return n
}
