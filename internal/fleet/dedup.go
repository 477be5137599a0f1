package fleet

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/alert"
)

// claimScript records what was last sent for an alert's fingerprint and
// answers 1 when this notification differs from it (send it), 0 when the
// same state and severity were sent already (drop it).
var claimScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
`)

// Dedup is an alert.Notifier in front of the real one that sends each
// (fingerprint, state, severity) once across the fleet: the first replica
// to claim it in Redis sends it, the others drop it. Two evaluators never
// both send a firing alert — a new leader re-finding an alert the old one
// sent, or every replica raising the same quota alert — while a state
// that changes (firing → resolved → firing again, warning → critical) is
// sent each time.
//
// A claim lasts the repeat interval less a tenth, so the engine's own
// repeat of a firing alert after Repeat goes through. When Redis does not
// answer, the notification is sent: a duplicate page is better than a
// lost one.
//
// Notify never waits for Redis: quota alerts are raised on the request
// path. It queues the alert for Run, which claims and hands over in
// order; with the queue full see Notify. After Redis failed to answer,
// claims pause for 30 s (sent unclaimed) so a dead Redis does not cost
// every queued alert its 2 s timeout in turn.
type Dedup struct {
	next   alert.Notifier
	rdb    *redis.Client
	prefix string
	ttl    time.Duration
	log    *slog.Logger

	// The queue Notify fills and Run empties: a slice under mu rather
	// than a channel, so Notify can look for an alert's queued state.
	mu       sync.Mutex
	queue    []alert.Alert
	max      int           // the queue's bound (1024)
	busy     bool          // Run is sending an alert…
	inflight string        // …with this fingerprint
	wake     chan struct{} // Run's signal that something was queued

	timeout     time.Duration // a claim's (2 s)
	breakFor    time.Duration // how long claims pause after Redis failed (30 s)
	drainFor    time.Duration // the shutdown drain's bound (5 s)
	now         func() time.Time
	brokenUntil time.Time // Run's only

	dropped prometheus.Counter
	errs    prometheus.Counter
}

// DedupOptions configure a Dedup.
type DedupOptions struct {
	Prefix string        // the fleet's Redis key prefix
	Repeat time.Duration // alerts.repeat (default 4 h)
	Log    *slog.Logger
	// Registerer, when set, gets the dedup's counters.
	Registerer prometheus.Registerer
}

// NewDedup returns next behind the fleet-wide deduplication in rdb.
func NewDedup(next alert.Notifier, rdb *redis.Client, o DedupOptions) *Dedup {
	if o.Repeat <= 0 {
		o.Repeat = 4 * time.Hour
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	d := &Dedup{next: next, rdb: rdb, prefix: o.Prefix + ":alert-sent:", ttl: o.Repeat - o.Repeat/10, log: o.Log,
		max: 1024, wake: make(chan struct{}, 1), timeout: 2 * time.Second, breakFor: 30 * time.Second, drainFor: 5 * time.Second, now: time.Now,
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_alert_notifications_deduplicated_total",
			Help: "Alert notifications not sent because another replica (or an earlier leader) sent the same state and severity.",
		}),
		errs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_alert_dedup_errors_total",
			Help: "Alert notifications sent without the fleet-wide deduplication (Redis did not answer, or failed less than 30 s ago; the shutdown drain ran out of time; the dedup queue was full), or replaced in the full queue by a newer state of the same alert.",
		}),
	}
	if o.Registerer != nil {
		o.Registerer.MustRegister(d.dropped, d.errs)
	}
	return d
}

// Notify queues a for Run, without blocking on Redis.
//
// With the queue full, a must not overtake an older notification of the
// same alert (a queued "firing" arriving after a later "resolved"), so:
// a newer state of an alert already queued takes that entry's place (the
// older, never sent, is superseded); an alert Run is sending right now
// queues behind it even so (one over the bound: only one alert is in
// flight); any other alert has nothing of its own queued and is handed
// over unclaimed. The hand-over is under the queue's lock, so it cannot
// cross a notification Run sends; next must not block (the dispatcher
// only queues).
func (d *Dedup) Notify(_ context.Context, a alert.Alert) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.queue) < d.max || (d.busy && d.inflight == a.Fingerprint && !d.queued(a.Fingerprint)) {
		d.queue = append(d.queue, a)
		select {
		case d.wake <- struct{}{}:
		default:
		}
		return
	}
	d.errs.Inc()
	for i := len(d.queue) - 1; i >= 0; i-- {
		if d.queue[i].Fingerprint == a.Fingerprint {
			d.log.Warn("alert deduplication queue full; a newer state replaces the queued one", "rule", a.Rule,
				"state", a.State, "replaced", d.queue[i].State, "fingerprint", a.Fingerprint)
			d.queue[i] = a
			return
		}
	}
	d.log.Warn("alert deduplication queue full; sending without it", "rule", a.Rule, "state", a.State)
	d.next.Notify(context.Background(), a)
}

// queued reports whether an alert with fingerprint fp waits in the queue.
// Under d.mu.
func (d *Dedup) queued(fp string) bool {
	for _, q := range d.queue {
		if q.Fingerprint == fp {
			return true
		}
	}
	return false
}

// pop takes the oldest queued alert and marks it in flight.
func (d *Dedup) pop() (alert.Alert, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.queue) == 0 {
		return alert.Alert{}, false
	}
	a := d.queue[0]
	d.queue[0] = alert.Alert{}
	d.queue = d.queue[1:]
	if len(d.queue) == 0 {
		d.queue = nil // let the backing array go
	}
	d.busy, d.inflight = true, a.Fingerprint
	return a, true
}

// done ends the flight pop began.
func (d *Dedup) done() {
	d.mu.Lock()
	d.busy, d.inflight = false, ""
	d.mu.Unlock()
}

// Run sends what Notify queued unless the fleet sent it already, until
// ctx ends; then it handles what is still queued and returns. The drain
// is bounded: claims go on for at most drainFor (5 s) after ctx ends, and
// what is left then is handed over unclaimed, so a Redis that answers
// slowly cannot hold up the shutdown.
func (d *Dedup) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		a, ok := d.pop()
		if !ok {
			select {
			case <-d.wake:
			case <-ctx.Done():
			}
			continue
		}
		d.send(context.Background(), a)
		d.done()
	}
	deadline := d.now().Add(d.drainFor)
	dctx, cancel := context.WithTimeout(context.Background(), d.drainFor)
	defer cancel()
	for {
		a, ok := d.pop()
		if !ok {
			return nil
		}
		if d.now().Before(deadline) {
			d.send(dctx, a)
		} else {
			d.errs.Inc()
			d.log.Warn("alert deduplication: shutting down; sending the rest without it", "rule", a.Rule, "state", a.State)
			d.next.Notify(context.Background(), a)
		}
		d.done()
	}
}

// send claims a and hands it over. Not under Run's context: what was
// queued before shutdown is still claimed (each claim bounded by its own
// timeout, the drain by its deadline) rather than sent unclaimed.
func (d *Dedup) send(ctx context.Context, a alert.Alert) {
	if d.claim(ctx, a) {
		d.next.Notify(context.Background(), a)
	}
}

// claim reports whether this replica should send a. After Redis failed
// to answer, claims are not tried for breakFor (30 s): each would wait its
// timeout in turn, and the alerts behind it with it. Those are sent
// unclaimed and counted; the first claim after the pause tries Redis
// again.
func (d *Dedup) claim(ctx context.Context, a alert.Alert) bool {
	if d.now().Before(d.brokenUntil) {
		d.errs.Inc()
		return true
	}
	cctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	n, err := claimScript.Run(cctx, d.rdb, []string{d.prefix + a.Fingerprint}, string(a.State)+"/"+string(a.Severity), d.ttl.Milliseconds()).Int64()
	if err != nil {
		d.errs.Inc()
		d.brokenUntil = d.now().Add(d.breakFor)
		d.log.Warn("alert deduplication: Redis did not answer; sending without it for a while", "rule", a.Rule, "state", a.State, "pause", d.breakFor, "err", err)
		return true
	}
	if n == 0 {
		d.dropped.Inc()
		d.log.Info("alert already sent by the fleet; not sent again", "rule", a.Rule, "state", a.State, "severity", a.Severity, "fingerprint", a.Fingerprint)
		return false
	}
	return true
}
