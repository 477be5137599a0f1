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
type Dedup struct {
	next   alert.Notifier
	rdb    *redis.Client
	prefix string
	ttl    time.Duration
	log    *slog.Logger

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
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_alert_notifications_deduplicated_total",
			Help: "Alert notifications not sent because another replica (or an earlier leader) sent the same state and severity.",
		}),
		errs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_alert_dedup_errors_total",
			Help: "Alert notifications sent without the fleet-wide deduplication because Redis did not answer.",
		}),
	}
	if o.Registerer != nil {
		o.Registerer.MustRegister(d.dropped, d.errs)
	}
	return d
}

// Notify sends a unless the fleet sent the same already.
func (d *Dedup) Notify(ctx context.Context, a alert.Alert) {
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
