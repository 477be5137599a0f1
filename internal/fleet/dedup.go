package fleet

import (
	"context"
	"log/slog"
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
// order; with the queue full the alert is handed over unclaimed.
type Dedup struct {
	next   alert.Notifier
	rdb    *redis.Client
	prefix string
	ttl    time.Duration
	log    *slog.Logger
	queue  chan alert.Alert

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
	d := &Dedup{next: next, rdb: rdb, prefix: o.Prefix + ":alert-sent:", ttl: o.Repeat - o.Repeat/10, log: o.Log, queue: make(chan alert.Alert, 1024),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_alert_notifications_deduplicated_total",
			Help: "Alert notifications not sent because another replica (or an earlier leader) sent the same state and severity.",
		}),
		errs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_alert_dedup_errors_total",
			Help: "Alert notifications sent without the fleet-wide deduplication because Redis did not answer or the dedup queue was full.",
		}),
	}
	if o.Registerer != nil {
		o.Registerer.MustRegister(d.dropped, d.errs)
	}
	return d
}

// Notify queues a for Run, without blocking.
func (d *Dedup) Notify(_ context.Context, a alert.Alert) {
	select {
	case d.queue <- a:
	default:
		d.errs.Inc()
		d.log.Warn("alert deduplication queue full; sending without it", "rule", a.Rule, "state", a.State)
		d.next.Notify(context.Background(), a)
	}
}

// Run sends what Notify queued unless the fleet sent it already, until
// ctx ends; then it handles what is still queued (each claim bounded by
// a short timeout) and returns.
func (d *Dedup) Run(ctx context.Context) {
	for {
		select {
		case a := <-d.queue:
			d.send(a)
		case <-ctx.Done():
			for {
				select {
				case a := <-d.queue:
					d.send(a)
				default:
					return
				}
			}
		}
	}
}

// send claims a and hands it over. Not under Run's context: what was
// queued before shutdown is still claimed (each claim bounded by its own
// timeout) rather than sent unclaimed.
func (d *Dedup) send(a alert.Alert) {
	ctx := context.Background()
	if d.claim(ctx, a) {
		d.next.Notify(ctx, a)
	}
}

// claim reports whether this replica should send a.
func (d *Dedup) claim(ctx context.Context, a alert.Alert) bool {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	n, err := claimScript.Run(cctx, d.rdb, []string{d.prefix + a.Fingerprint}, string(a.State)+"/"+string(a.Severity), d.ttl.Milliseconds()).Int64()
	if err != nil {
		d.errs.Inc()
		d.log.Warn("alert deduplication: Redis did not answer; sending anyway", "rule", a.Rule, "state", a.State, "err", err)
		return true
	}
	if n == 0 {
		d.dropped.Inc()
		d.log.Info("alert already sent by the fleet; not sent again", "rule", a.Rule, "state", a.State, "severity", a.Severity, "fingerprint", a.Fingerprint)
		return false
	}
	return true
}
