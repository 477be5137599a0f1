package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/internal/alert"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/cost"
	"github.com/tollgate-dev/tollgate/internal/gateway"
	"github.com/tollgate-dev/tollgate/internal/notify"
	"github.com/tollgate-dev/tollgate/internal/quota"
)

// reloader is serve's live reload (SIGHUP, POST /api/v1/admin/reload):
// it reads the config file again and, only when all of it is valid, puts
// in force the keys, upstreams, priorities, prices, quotas, alert rules
// and notifiers (config.Reloadable). Each part is swapped atomically by
// the package that owns it; no request waits for a reload and none is
// cut by one. A file that does not load keeps the running configuration,
// is logged with the key at fault and counted. Keys that changed but are
// read only at start (listen, store, …) are logged "needs restart".
type reloader struct {
	load    func() (*config.Config, error) // the file with serve's flags applied
	started *config.Config                 // what the non-reloadable keys are until a restart
	log     *slog.Logger

	gw        *gateway.Gateway
	limiter   quota.Limiter // nil when serve started with no quota
	engine    *alert.Engine
	notifiers *notifierSwitch
	newDisp   func(notify.Config) (*notify.Dispatcher, error)

	mu    sync.Mutex // one reload at a time
	total *prometheus.CounterVec
	last  prometheus.Gauge
}

// reconfigurer is a limiter whose limits can change in place.
type reconfigurer interface {
	Reconfigure(quota.Config) error
}

func newReloadMetrics(reg prometheus.Registerer) (*prometheus.CounterVec, prometheus.Gauge) {
	total := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_config_reload_total",
		Help: "Configuration reloads (SIGHUP or POST /api/v1/admin/reload) by result: ok, or error (the file did not load or validate; the running configuration was kept)."},
		[]string{"result"})
	last := prometheus.NewGauge(prometheus.GaugeOpts{Name: "tollgate_config_last_reload_success_timestamp_seconds",
		Help: "When the configuration was last loaded successfully (start or reload), Unix seconds."})
	reg.MustRegister(total, last)
	total.WithLabelValues("ok")
	total.WithLabelValues("error")
	last.SetToCurrentTime()
	return total, last
}

// Reload re-reads the config and applies it; it returns the changed keys
// that need a restart. On error nothing was changed.
func (r *reloader) Reload() (needsRestart []string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	defer func() {
		if err != nil {
			r.total.WithLabelValues("error").Inc()
			r.log.Error("config reload failed; the running configuration is kept", "err", err)
		}
	}()
	if r.load == nil {
		return nil, errors.New("serve was started without a config file: nothing to reload")
	}
	next, err := r.load()
	if err != nil {
		return nil, err
	}
	// Build everything that can fail before changing anything.
	prices, err := cost.NewTable(next.CostConfig())
	if err != nil {
		return nil, err
	}
	qc, err := next.QuotaConfig()
	if err != nil {
		return nil, err
	}
	if _, err := quota.NewPolicy(qc); err != nil {
		return nil, fmt.Errorf("quotas: %w", err)
	}
	restart := config.NeedsRestart(r.started, next)
	rq, canQuota := r.limiter.(reconfigurer)
	if !canQuota && quotaConfigured(qc) {
		restart = append(restart, "quotas (none were configured at start)")
	}
	var disp *notify.Dispatcher
	if !equalNotifiers(r.notifiers.config(), next.Notifiers) {
		if disp, err = r.newDisp(next.Notifiers); err != nil {
			return nil, err
		}
	}

	// Apply: each swap is atomic on its own; requests in flight finish
	// on what they started with.
	r.gw.Reload(next, prices)
	if canQuota {
		if err := rq.Reconfigure(qc); err != nil { // validated above: cannot fail
			r.log.Error("quotas not reloaded", "err", err)
		}
	}
	r.engine.Reconfigure(next.Alerts)
	if disp != nil {
		r.notifiers.swap(disp, next.Notifiers)
	}
	r.total.WithLabelValues("ok").Inc()
	r.last.SetToCurrentTime()
	for _, k := range restart {
		r.log.Warn("needs restart: field "+k+" changed; the running value is kept until tollgate restarts", "field", k)
	}
	r.log.Info("configuration reloaded", "keys", len(next.Auth.Keys), "upstreams", len(next.Upstreams), "prices", len(next.Prices),
		"alert_rules", len(next.Alerts.Effective()), "notifiers", len(next.Notifiers))
	return restart, nil
}

func quotaConfigured(q quota.Config) bool {
	return len(q.Keys)+len(q.Users)+len(q.BizLines) > 0 || q.Default != (quota.Defaults{})
}

func equalNotifiers(a, b notify.Config) bool { return reflect.DeepEqual(a, b) }

// notifierSwitch is the alert.Notifier serve wires: the dispatcher in
// force, replaced on reload. The old one drains what it queued and closes
// in the background; Notify holds the read lock only to enqueue, so the
// swap never loses an alert to a dispatcher already closing.
type notifierSwitch struct {
	mu  sync.RWMutex
	d   *notify.Dispatcher
	cfg notify.Config
	wg  sync.WaitGroup // old dispatchers still draining
}

func (s *notifierSwitch) Notify(ctx context.Context, a alert.Alert) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	s.d.Notify(ctx, a)
}

func (s *notifierSwitch) Status() []notify.Status {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.d.Status()
}

func (s *notifierSwitch) config() notify.Config {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cfg
}

func (s *notifierSwitch) swap(d *notify.Dispatcher, cfg notify.Config) {
	s.mu.Lock()
	old := s.d
	s.d, s.cfg = d, cfg
	s.mu.Unlock()
	s.wg.Go(func() { _ = old.Close() })
}

// Close closes the dispatcher in force after the replaced ones drained.
func (s *notifierSwitch) Close() error {
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.d.Close()
}
