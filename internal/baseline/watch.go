package baseline

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/alert"
)

// RuleDrift is the rule name of the alerts Watch raises.
const RuleDrift = "baseline_drift"

// Check runs the suite once and compares it with the baseline.
type Check func(ctx context.Context) (*Report, error)

// Watch runs check at once and then every interval, until ctx ends or,
// when runs > 0, after that many runs. Drift raises an alert through
// notify — warning, or critical when it looks like the model changed —
// and its end resolves it; an unchanged state is not notified again, a
// changed severity is. Each run's report (or error) goes to report. A
// failed or inconclusive run (some of its requests failed) neither raises
// nor resolves.
func Watch(ctx context.Context, name string, every time.Duration, runs int, check Check, notify func(alert.Alert), report func(*Report, error)) error {
	if every <= 0 && runs != 1 {
		return fmt.Errorf("schedule.every (or --every): an interval is needed to run more than once")
	}
	var firing *alert.Alert
	t := time.NewTimer(0)
	defer t.Stop()
	for n := 0; runs <= 0 || n < runs; n++ {
		if n > 0 {
			t.Reset(every)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		start := time.Now()
		r, err := check(ctx)
		report(r, err)
		if err != nil || r.Inconclusive {
			continue
		}
		now := time.Now()
		switch {
		case r.Drift:
			a := DriftAlert(name, r, start, now)
			if firing != nil {
				a.StartsAt = firing.StartsAt
			}
			if firing == nil || firing.Severity != a.Severity {
				notify(a)
			}
			firing = &a
		case firing != nil:
			a := *firing
			a.State, a.EndsAt, a.From, a.To = alert.Resolved, now, start, now
			a.Summary = fmt.Sprintf("baseline %q: no drift any more", name)
			notify(a)
			firing = nil
		}
	}
	return nil
}

// DriftAlert is the alert for a drifting run that went from start to end.
func DriftAlert(name string, r *Report, start, end time.Time) alert.Alert {
	sev := alert.Warning
	reasons := append(append([]string(nil), r.Reasons...), r.ModelReasons...)
	summary := fmt.Sprintf("baseline %q drifted: %s", name, strings.Join(reasons, "; "))
	if r.ModelChanged {
		sev = alert.Critical
		summary = fmt.Sprintf("baseline %q: it looks like the model or its version changed (%s)", name, strings.Join(reasons, "; "))
	}
	return alert.Alert{
		Rule: RuleDrift, Severity: sev, State: alert.Firing,
		Labels:  map[string]string{"baseline": name},
		Summary: summary, Value: float64(len(r.Changed)), Unit: "changed outputs",
		StartsAt: end, From: start, To: end,
		Fingerprint: RuleDrift + ":" + name,
	}
}
