package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/internal/alert"
	"github.com/tollgate-dev/tollgate/internal/budget"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/lifecycle"
	"github.com/tollgate-dev/tollgate/internal/quota"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// budgetInterval is how often the budgets' usage is read from the store:
// also how far past a budget an enforced subject can go.
const budgetInterval = time.Minute

// startBudgets runs the budgets' tracker in the background stage and
// returns it (nil when none is configured) with the limiter admission
// uses: the budgets that enforce in front of the quotas.
func startBudgets(stage *lifecycle.Stage, cfg *config.Config, st store.Backend, alerts *alert.Engine, limiter quota.Limiter, reg prometheus.Registerer, log *slog.Logger) (*budget.Tracker, quota.Limiter) {
	if len(cfg.Budgets) == 0 {
		return nil, limiter
	}
	byName, byTeam := cfg.BudgetKeys()
	t := budget.New(cfg.Budgets, budget.Options{Reports: st, Events: st, KeyIDs: byName, TeamKeys: byTeam, Location: cfg.Location(), Log: log,
		Raise: func(a budget.Alert) {
			if alerts != nil {
				alerts.Raise(context.Background(), budgetAlert(a), a.At, a.Until)
			}
		}})
	reg.MustRegister(budget.NewCollector(t))
	stage.Go("budgets", func(ctx context.Context) error { return t.Run(ctx, budgetInterval) })
	for _, b := range cfg.Budgets {
		if b.Enforce {
			return t, &budget.Limiter{Next: limiter, Tracker: t}
		}
	}
	return t, limiter
}

// budgetAlert is the alert of a budget's threshold crossing: rule
// "budget", one alert per threshold (so 80 % notifies after 50 % did),
// critical at 100 %, warning below.
func budgetAlert(a budget.Alert) alert.Alert {
	s := a.Status
	sev := alert.Warning
	if a.Threshold >= 1 {
		sev = alert.Critical
	}
	summary := budget.Summary(a)
	if s.Enforce && a.Threshold >= 1 {
		summary += ": requests are being refused (429)"
	}
	return alert.Alert{Rule: "budget", Severity: sev, Value: s.Share, Threshold: a.Threshold, Unit: "ratio", Summary: summary,
		Labels: map[string]string{"budget": s.Name, "scope": s.Scope + ":" + s.Subject, "period": s.Period, "threshold": fmt.Sprintf("%g", a.Threshold)}}
}
