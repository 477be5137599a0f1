package window

import (
	"context"
	"log/slog"
	"time"

	"github.com/tollgate-dev/tollgate/internal/store"
)

// DayStore is what the day compactor reads hours from and writes days to:
// the store.
type DayStore interface {
	HourReader
	AddWindowDay(ctx context.Context, start, end time.Time, rows []store.WindowDay) (bool, error)
	WindowDays(ctx context.Context, from, to time.Time) ([]store.WindowDay, error)
}

// Compactor merges each closed local day of the stored windows into one
// row per series (store.WindowDay), so that percentiles over weeks and
// months read tens of rows a day instead of hundreds an hour. Days are
// local to the report time zone, like the dashboard's 1-day steps and the
// ledger's day rollups. A day is compacted once it ended Settle ago, from
// its hour rows (its minutes where an hour has none); compacting is
// idempotent, and of several replicas one wins.
type Compactor struct {
	st  DayStore
	loc *time.Location
	log *slog.Logger
	// Horizon is how far back the first pass looks (default 40 days).
	Horizon time.Duration
	// Settle is how long after its end a day is compacted (default 1 h):
	// longer than any replica takes to persist its last hour.
	Settle time.Duration
	next   time.Time // the first day not known to be compacted
}

// NewCompactor compacts st's days in loc (nil: UTC).
func NewCompactor(st DayStore, loc *time.Location, log *slog.Logger) *Compactor {
	if loc == nil {
		loc = time.UTC
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Compactor{st: st, loc: loc, log: log, Horizon: 40 * 24 * time.Hour, Settle: time.Hour}
}

// Compact writes every closed day since the last pass (the first pass:
// since Horizon) that has no day rows yet, and reports how many it wrote.
func (c *Compactor) Compact(ctx context.Context, now time.Time) (int, error) {
	d := c.next
	if d.IsZero() {
		d = store.FloorDay(now.Add(-c.Horizon), c.loc)
	}
	n := 0
	for {
		end := store.NextDay(d, c.loc)
		if end.Add(c.Settle).After(now) {
			return n, nil
		}
		done, err := c.st.WindowDays(ctx, d, d.Add(time.Second))
		if err != nil {
			return n, err
		}
		if len(done) == 0 {
			series, err := ReadRange(ctx, c.st, d, end)
			if err != nil {
				return n, err
			}
			rows := make([]store.WindowDay, 0, len(series))
			for k, s := range series {
				b, _ := s.MarshalBinary()
				rows = append(rows, store.WindowDay{Start: d, End: end, Model: k.Model, BizLine: k.BizLine,
					Upstream: k.Upstream, Template: k.Template, Data: b})
			}
			wrote, err := c.st.AddWindowDay(ctx, d, end, rows)
			if err != nil {
				return n, err
			}
			if wrote {
				n++
			}
		}
		c.next = end
		d = end
	}
}

// Run compacts now and then every interval until ctx ends; errors are
// logged and tried again at the next pass.
func (c *Compactor) Run(ctx context.Context, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if n, err := c.Compact(ctx, time.Now()); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			c.log.Warn("could not compact the alerting windows' days; readers use their hours", "err", err)
		} else if n > 0 {
			c.log.Debug("compacted the alerting windows' days", "days", n)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// ReadRange merges the stored series of [from, to), one Stats per
// series: a Query over one step by every label, whole UTC hours from
// their hour rows (their minutes where they have none), the parts of
// hours at either end (zones with half-hour offsets) from their minutes.
func ReadRange(ctx context.Context, st HourReader, from, to time.Time) (map[Key]*Stats, error) {
	res, err := NewReader(st, ReaderOptions{}).Read(ctx, Query{From: from, To: to, By: Labels})
	if err != nil {
		return nil, err
	}
	series := make(map[Key]*Stats, len(res))
	for k, s := range res {
		series[k] = s.Steps[0]
	}
	return series, nil
}
