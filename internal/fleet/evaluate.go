package fleet

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/tollgate-dev/tollgate/internal/alert"
)

// Evaluator runs the alert engine of a fleet: on each tick, only while
// this replica holds the lease, it reads the fleet's windows and
// evaluates at now − Lag, when every replica has persisted the minutes
// the windows read.
type Evaluator struct {
	Lease   *Lease
	Windows *Windows
	// Eval is the engine's evaluation (alert.Engine.Eval).
	Eval func(ctx context.Context, now time.Time)
	// Lag is how far behind the clock the fleet is evaluated: at least
	// the aggregators' grace plus their flush period plus the time a
	// write to the store takes.
	Lag time.Duration
	Log *slog.Logger
	// State, when set, carries the engine's alerts from one leader to
	// the next: Engine is then the engine whose Snapshot is saved after
	// each evaluation and which Restores the saved state when this
	// replica's term begins.
	State  *State
	Engine interface {
		Snapshot() []alert.Tracked
		Restore([]alert.Tracked)
	}

	term string // the lease token whose state was restored
}

// Run evaluates every interval until ctx ends.
func (e *Evaluator) Run(ctx context.Context, interval time.Duration) error {
	alert.Every(ctx, interval, func(ctx context.Context, now time.Time) { e.Step(ctx, now) })
	return nil
}

// Step is one tick of Run: it reports whether it evaluated.
func (e *Evaluator) Step(ctx context.Context, now time.Time) bool {
	if !e.Lease.Held() {
		return false
	}
	if err := e.Windows.Refresh(ctx, now); err != nil {
		// Evaluating without the fleet's windows would resolve every
		// alert: skip this round, alerts stay as they are.
		if e.Log != nil {
			e.Log.Error("alerts not evaluated: could not read the fleet's windows", "err", err)
		}
		return false
	}
	if !e.Lease.Held() { // lost while reading: stop at once
		return false
	}
	token := e.Lease.Token()
	if e.State != nil && e.term != token {
		// A new term: carry on from the alerts the last leader saved.
		// Evaluating without them would fire again what fired, and
		// never resolve it.
		ts, err := e.State.Load(ctx)
		switch {
		case errors.Is(err, ErrBadState):
			// It will never decode: start from no alerts (what fired may
			// page again) rather than stop alerting until it expires.
			if e.Log != nil {
				e.Log.Error("the last leader's alert state does not decode; this leader starts from no alerts", "err", err)
			}
		case err != nil:
			if e.Log != nil {
				e.Log.Error("alerts not evaluated: could not read the last leader's alert state", "err", err)
			}
			return false
		}
		e.Engine.Restore(ts)
		e.term = token
		if e.Log != nil {
			e.Log.Info("took over the fleet's alerts", "alerts", len(ts), "token", token)
		}
	}
	e.Eval(ctx, now.Add(-e.Lag))
	if e.State != nil {
		if err := e.State.Save(ctx, token, e.Engine.Snapshot()); err != nil && e.Log != nil {
			e.Log.Warn("alert state not saved for the next leader", "err", err)
		}
	}
	return true
}
