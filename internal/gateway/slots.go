package gateway

import (
	"container/heap"
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/record"
)

// Upstream admission: an upstream's concurrency slots, the queue of
// requests waiting for one, and the long-input lane.
//
// Each bounded upstream has one slots value guarded by one mutex, held
// only to count and to move waiters, never across I/O. A request that
// finds a free slot takes it without allocating; one that does not
// becomes a waiter in the queue of its lane, a heap ordered by priority
// (higher first) and then by arrival (a per-upstream sequence number), and
// sleeps on its own channel until release hands it a slot, its
// queue_timeout passes or its client leaves — the last two remove it from
// the heap at once, so nothing is left behind.
//
// The long-input lane (long_input_tokens, long_max_concurrency) is one
// shared pool with a sub-limit, not a separate pool: a long request holds
// a slot of max_concurrency and, in addition, one of long_max_concurrency
// (which config validation keeps below max_concurrency). So the engine
// never sees more than max_concurrency requests — the figure it was sized
// for — whatever the mix, and short requests always have at least
// max_concurrency − long_max_concurrency slots that long ones cannot
// take. Separate pools would let the sum exceed what the engine was sized
// for, and would leave short slots idle while long requests queue, or the
// reverse. Long requests wait in their own queue, so a long request
// blocked by its lane never holds up a short one behind it.
//
// When a slot frees, the waiter served next is the best (priority, then
// arrival) among the head of the short queue and, if the long lane has
// room, the head of the long queue.

type lane uint8

const (
	laneDefault lane = iota // requests not over long_input_tokens (all of them without a lane)
	laneLong                // requests over long_input_tokens
	numLanes
)

var laneNames = [numLanes]string{"default", "long"}

// Errors of a wait that ran out: the upstream was at max_concurrency
// (503), or the request's own lane was full (429).
var (
	errQueueTimeout = errors.New("waited too long for a free upstream slot")
	errLaneTimeout  = errors.New("waited too long for a free slot of the long-input lane")
)

// defaultQueueTimeout applies to an upstream that sets no queue_timeout.
const defaultQueueTimeout = 30 * time.Second

type waiter struct {
	prio    int
	seq     uint64
	lane    lane
	index   int           // position in its queue's heap; -1 once out of it
	granted bool          // a slot was handed over (under slots.mu)
	ready   chan struct{} // closed when granted
}

// waitQueue is a heap: higher priority first, then earlier arrival.
type waitQueue []*waiter

func (q waitQueue) Len() int { return len(q) }
func (q waitQueue) Less(i, j int) bool {
	return before(q[i], q[j])
}
func (q waitQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *waitQueue) Push(x any) {
	w := x.(*waiter)
	w.index = len(*q)
	*q = append(*q, w)
}
func (q *waitQueue) Pop() any {
	old := *q
	n := len(old) - 1
	w := old[n]
	old[n] = nil
	w.index = -1
	*q = old[:n]
	return w
}

func before(a, b *waiter) bool {
	if a.prio != b.prio {
		return a.prio > b.prio
	}
	return a.seq < b.seq
}

// slots is one upstream's admission state; nil when the upstream has
// neither max_concurrency nor a long-input lane.
type slots struct {
	max       int   // 0: no bound on the total
	longMax   int   // 0: no long-input lane
	longInput int64 // estimated input tokens above which a request is long
	timeout   time.Duration

	mu       sync.Mutex
	used     int // slots held, long ones included
	longUsed int
	queues   [numLanes]waitQueue
	seq      uint64

	waitObs [numLanes]prometheus.Observer // tollgate_gateway_queue_wait_seconds
}

func newSlots(c config.Upstream, wait *prometheus.HistogramVec) *slots {
	if c.MaxConcurrency <= 0 && c.LongMaxConcurrency <= 0 {
		return nil
	}
	s := &slots{max: max(c.MaxConcurrency, 0), timeout: c.QueueTimeout}
	if c.LongInputTokens > 0 && c.LongMaxConcurrency > 0 {
		s.longMax, s.longInput = c.LongMaxConcurrency, c.LongInputTokens
	}
	if s.timeout <= 0 {
		s.timeout = defaultQueueTimeout
	}
	for l := range numLanes {
		s.waitObs[l] = wait.WithLabelValues(c.Name, laneNames[l])
	}
	return s
}

// laneOf is the lane of a request with the given input estimate.
func (s *slots) laneOf(inTokens int64) lane {
	if s != nil && s.longMax > 0 && inTokens > s.longInput {
		return laneLong
	}
	return laneDefault
}

// slot is a held slot; the zero slot holds nothing.
type slot struct {
	s    *slots
	lane lane
}

// release gives the slot back and hands it to the best waiter, if any.
func (sl slot) release() {
	s := sl.s
	if s == nil {
		return
	}
	s.mu.Lock()
	s.used--
	if sl.lane == laneLong {
		s.longUsed--
	}
	s.dispatchLocked()
	s.mu.Unlock()
}

// freeLocked says whether a request of lane l may take a slot now. When
// it may, no waiter that could use the same slot is queued: every change
// that frees capacity dispatches, so a newcomer never overtakes.
func (s *slots) freeLocked(l lane) bool {
	return (s.max == 0 || s.used < s.max) && (l != laneLong || s.longUsed < s.longMax)
}

func (s *slots) takeLocked(l lane) {
	s.used++
	if l == laneLong {
		s.longUsed++
	}
}

// dispatchLocked hands free slots to waiters, best first.
func (s *slots) dispatchLocked() {
	for s.max == 0 || s.used < s.max {
		var w *waiter
		if q := s.queues[laneDefault]; len(q) > 0 {
			w = q[0]
		}
		if q := s.queues[laneLong]; len(q) > 0 && s.longUsed < s.longMax && (w == nil || before(q[0], w)) {
			w = q[0]
		}
		if w == nil {
			return
		}
		heap.Pop(&s.queues[w.lane])
		s.takeLocked(w.lane)
		w.granted = true
		close(w.ready)
	}
}

// acquire takes a slot in lane l for a request of priority prio, waiting
// for one up to the queue timeout. It fails with errQueueTimeout or
// errLaneTimeout when the wait runs out, and with ctx's error as soon as
// ctx is done (the client left).
func (s *slots) acquire(ctx context.Context, prio int, l lane) (slot, error) {
	if s == nil {
		return slot{}, nil
	}
	s.mu.Lock()
	if s.freeLocked(l) {
		s.takeLocked(l)
		s.mu.Unlock()
		return slot{s, l}, nil
	}
	s.seq++
	w := &waiter{prio: prio, seq: s.seq, lane: l, ready: make(chan struct{})}
	heap.Push(&s.queues[l], w)
	s.mu.Unlock()

	t := time.NewTimer(s.timeout)
	defer t.Stop()
	var cause error
	select {
	case <-w.ready:
		return slot{s, l}, nil
	case <-t.C:
	case <-ctx.Done():
		cause = ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.granted {
		if cause == nil {
			return slot{s, l}, nil // handed over just as the timer fired: use it
		}
		// The client left as the slot arrived: pass it on.
		s.used--
		if l == laneLong {
			s.longUsed--
		}
		s.dispatchLocked()
		return slot{}, cause
	}
	heap.Remove(&s.queues[l], w.index)
	if cause != nil {
		return slot{}, cause
	}
	if l == laneLong && s.longUsed >= s.longMax {
		return slot{}, errLaneTimeout
	}
	return slot{}, errQueueTimeout
}

// queued is the number of requests waiting in lane l.
func (s *slots) queued(l lane) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queues[l])
}

// inUse is the number of slots held by lane l.
func (s *slots) inUse(l lane) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l == laneLong {
		return s.longUsed
	}
	return s.used - s.longUsed
}

// queueRefusal is the answer to a request whose wait for a slot ran out,
// or nil when err is another error. A full long-input lane is the client's
// own traffic class at its limit while the upstream may still serve
// others: 429, as for a rate limit. A full upstream is a capacity
// problem of the service: 503. Both carry Retry-After; the record's error
// type is queue_timeout either way.
func queueRefusal(u *upstream, err error) *apiError {
	switch {
	case errors.Is(err, errLaneTimeout):
		return &apiError{Kind: record.ErrQueueTimeout, Status: http.StatusTooManyRequests, Type: "requests", Code: record.ErrQueueTimeout,
			Message: "Too many long requests: the long-input lane of upstream " + u.cfg.Name + " (over " +
				strconv.FormatInt(u.slots.longInput, 10) + " input tokens) stayed at its limit of " +
				strconv.Itoa(u.slots.longMax) + " for " + u.slots.timeout.String() + "; retry later."}
	case errors.Is(err, errQueueTimeout):
		return &apiError{Kind: record.ErrQueueTimeout, Status: http.StatusServiceUnavailable, Type: "server_error", Code: record.ErrQueueTimeout,
			Message: "upstream " + u.cfg.Name + " is at its concurrency limit; retry"}
	}
	return nil
}

// priorities give each request its place in the queues (config.Admission).
type priorities struct {
	def   int
	byKey map[string]int // by key id
	byBiz map[string]int
}

func newPriorities(c *config.Config) *priorities {
	return &priorities{def: c.Admission.DefaultPriority, byKey: c.KeyPriorities(), byBiz: c.Admission.Priorities.BizLines}
}

// of is the highest priority that applies to a key and business line,
// the default when none does.
func (p *priorities) of(keyID, biz string) int {
	if len(p.byKey) == 0 && len(p.byBiz) == 0 {
		return p.def
	}
	kp, kok := p.byKey[keyID]
	bp, bok := p.byBiz[biz]
	switch {
	case kok && bok:
		return max(kp, bp)
	case kok:
		return kp
	case bok:
		return bp
	}
	return p.def
}

// admissionCollector exposes the queues and slots of every bounded
// upstream, read at scrape time so the request path pays nothing for
// them, and the histogram of waits the request path observes.
type admissionCollector struct {
	rt     func() *router // the routes in force (they change on reload)
	wait   *prometheus.HistogramVec
	queue  *prometheus.Desc
	slotsD *prometheus.Desc
}

func newAdmissionCollector(rt func() *router) *admissionCollector {
	return &admissionCollector{
		rt:   rt,
		wait: rt().wait,
		queue: prometheus.NewDesc("tollgate_gateway_queue_length",
			"Requests waiting in the gateway for a slot of an upstream (max_concurrency), by lane (default, or long: over long_input_tokens).",
			[]string{"upstream", "lane"}, nil),
		slotsD: prometheus.NewDesc("tollgate_gateway_slots_in_use",
			"Upstream slots held by requests in flight, by lane; the lanes sum to the upstream's concurrency.",
			[]string{"upstream", "lane"}, nil),
	}
}

func (c *admissionCollector) Describe(ch chan<- *prometheus.Desc) {
	c.wait.Describe(ch)
	ch <- c.queue
	ch <- c.slotsD
}

func (c *admissionCollector) Collect(ch chan<- prometheus.Metric) {
	c.wait.Collect(ch)
	for _, u := range c.rt().all {
		s := u.slots
		if s == nil {
			continue
		}
		s.mu.Lock()
		q := [numLanes]int{len(s.queues[laneDefault]), len(s.queues[laneLong])}
		in := [numLanes]int{s.used - s.longUsed, s.longUsed}
		s.mu.Unlock()
		for l := range numLanes {
			if l == laneLong && s.longMax == 0 {
				continue
			}
			ch <- prometheus.MustNewConstMetric(c.queue, prometheus.GaugeValue, float64(q[l]), u.cfg.Name, laneNames[l])
			ch <- prometheus.MustNewConstMetric(c.slotsD, prometheus.GaugeValue, float64(in[l]), u.cfg.Name, laneNames[l])
		}
	}
}

func newWaitHistogram() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "tollgate_gateway_queue_wait_seconds",
		Help: "Time a request waited in the gateway for an upstream slot (0 when one was free), on upstreams with max_concurrency or a long-input lane, by lane; waits that timed out or were abandoned included.",
		// From "no wait" to past the default queue_timeout (30s).
		Buckets: []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40},
	}, []string{"upstream", "lane"})
}
