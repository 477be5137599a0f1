package store

import (
	"context"
	"log/slog"
	"time"

	"github.com/tollgate-dev/tollgate/internal/lifecycle"
)

// The store's background jobs, run by serve beside the ledger: each
// returns when ctx ends, having finished or abandoned its pass, so that
// serve closes the store only after it.

// RunRetention enforces r hourly, first after first (serve gives a
// minute, so the pass never competes with a burst of start-up traffic).
func RunRetention(ctx context.Context, p Pruner, r Retention, first time.Duration, log *slog.Logger) error {
	return lifecycle.Repeat(ctx, first, func(ctx context.Context) time.Duration {
		n, err := p.Prune(ctx, time.Now(), r)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("retention pass failed", "err", err)
		case n > 0:
			log.Info("retention pass", "deleted_rows", n)
		}
		return time.Hour
	})
}

// RunCaptureRetention deletes captures older than keep, on both backends
// (the retention pass skips ClickHouse), every quarter of keep — at least
// a minute, at most an hour apart — so a capture outlives its retention
// by at most that. serve runs it whenever a retention is set, so captures
// taken before capture was turned off still go.
func RunCaptureRetention(ctx context.Context, c Captures, keep, first time.Duration, log *slog.Logger) error {
	every := min(max(keep/4, time.Minute), time.Hour)
	return lifecycle.Repeat(ctx, first, func(ctx context.Context) time.Duration {
		n, err := c.PruneCaptures(ctx, time.Now().Add(-keep))
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("capture retention pass failed", "err", err)
		case n > 0:
			log.Info("capture retention pass", "deleted", n)
		}
		return every
	})
}

// RunRollUps runs the roll-up pass a minute after the previous one ended
// (Report runs one first; running it every minute keeps it short).
func RunRollUps(ctx context.Context, r RollUpper, first time.Duration, log *slog.Logger) error {
	return lifecycle.Repeat(ctx, first, func(ctx context.Context) time.Duration {
		if err := r.RollUp(ctx); err != nil && ctx.Err() == nil {
			log.Warn("roll-up pass failed", "err", err)
		}
		return time.Minute
	})
}
