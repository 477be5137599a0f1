package alert

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/window"
)

// TestSeverityFlapNotifiedOnce: an error rate hovering at the critical
// level, critical one minute and warning the next, notifies the warning,
// the escalation once, and the resolution — not every change. Active
// still shows the severity of the moment.
func TestSeverityFlapNotifiedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		agg := window.New(window.Config{}, nil, nil, nil)
		g := &got{}
		cfg := Config{Defaults: new(bool), Rules: []Rule{{Name: "errors", Signal: "error_rate", By: []string{"model"},
			Windows: []time.Duration{time.Minute}, Threshold: &Levels{Warning: 0.1, Critical: 0.3}, MinRequests: 10}}}
		e := NewEngine(cfg, agg, Options{Notifier: g})
		stop := run(e)
		defer stop()
		// failing(n) fails n requests in ten.
		failing := func(n int) func(int) *record.Record {
			return func(i int) *record.Record { return finished("m", 100*time.Millisecond, i%10 < n) }
		}
		traffic(agg, 3*time.Minute, failing(2)) // warning
		sawWarning := false
		for range 5 {
			traffic(agg, time.Minute, failing(4)) // critical
			traffic(agg, time.Minute, failing(2)) // warning again
			synctest.Wait()                       // the evaluation due now has run
			if act := e.Active(); len(act) == 1 && act[0].Severity == Warning {
				sawWarning = true
			}
		}
		traffic(agg, 3*time.Minute, failing(0))
		alerts, _, _ := g.snapshot()
		var states []string
		for _, a := range alerts {
			states = append(states, string(a.State)+" "+string(a.Severity))
		}
		if got, want := strings.Join(states, ", "), "firing warning, firing critical, resolved warning"; got != want {
			t.Errorf("notifications: %s; want %s (%s)", got, want, g.list())
		}
		if !sawWarning {
			t.Error("Active never showed the drop back to warning")
		}
	})
}

// TestUpstreamRulesSkipRefused: requests the gateway refused itself
// (here a quota's 429s) reached no upstream; a rule by upstream does not
// judge them, while the same failures at an upstream fire.
func TestUpstreamRulesSkipRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		agg := window.New(window.Config{}, nil, nil, nil)
		g := &got{}
		var cfg Config
		for _, r := range DefaultRules {
			if r.Name != "error_rate" {
				cfg.Disable = append(cfg.Disable, r.Name)
			}
		}
		e := NewEngine(cfg, agg, Options{Notifier: g})
		stop := run(e)
		defer stop()
		refused := func(int) *record.Record {
			r := finished("m", 0, true)
			r.Upstream, r.UpstreamStatus, r.Status, r.ErrorType = "", 0, 429, record.ErrRateLimited
			r.Marks.UpstreamSent, r.Marks.FirstUpstreamToken, r.Marks.FirstClientToken, r.Marks.LastToken = 0, 0, 0, 0
			r.Finish()
			return r
		}
		traffic(agg, 10*time.Minute, refused)
		if s := g.list(); s != "" {
			t.Fatalf("refusals fired: %s", s)
		}
		traffic(agg, 10*time.Minute, func(i int) *record.Record { return finished("m", 100*time.Millisecond, true) })
		alerts, _, _ := g.snapshot()
		if len(alerts) == 0 || alerts[0].Rule != "error_rate" || alerts[0].Labels["upstream"] != "u" {
			t.Fatalf("failures at upstream u: %s; want error_rate firing for it", g.list())
		}
	})
}
