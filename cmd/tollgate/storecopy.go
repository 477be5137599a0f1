package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/tollgate-dev/tollgate/internal/store"
)

// What "store copy" moves beyond the ledger, and why:
//
//   - events (quota warnings, alerts, tokenizer mismatches): the dashboard's
//     Alerts page and GET /api/v1/alerts list them;
//   - the alerting windows' minutes, hours and days: the dashboard's
//     percentiles over time and the alert baselines ("the same hour of the
//     last 14 days") are read from them, and they cannot be rebuilt from
//     the ledger once its retention (35 days by default) has dropped rows;
//   - engine samples (engines' /metrics as time series): the Diagnostics
//     page's queue and KV-cache history.
//
// Minutes, hours, events and samples are appended, never merged (several
// replicas each write their own), so a second copy must not append them
// again: each span is read on both sides and only what the destination
// lacks is added (a multiset difference: a row the source holds twice is
// added until the destination holds it twice). Days are written at most
// once per day by the store itself (AddWindowDay). SQLite's cost rollups
// are not copied: ClickHouse builds its own rollups from the ledger rows
// it is given (each Insert marks its pieces for the next roll-up pass),
// so periods the SQLite ledger no longer holds (past retention.ledger,
// kept only in SQLite's day rollups) are not in ClickHouse's reports.

// copied counts what copyAnalytics added.
type copied struct{ events, minutes, hours, days, samples int }

// copySpan is the stretch of time read at once: a day of minutes is
// at most 1440 rows per series.
const copySpan = 24 * time.Hour

func copyAnalytics(ctx context.Context, src, dst store.Backend, from, to time.Time) (copied, error) {
	var c copied
	var err error
	if c.events, err = copyEvents(ctx, src, dst, from); err != nil {
		return c, fmt.Errorf("events: %w", err)
	}
	for lo := from; lo.Before(to); lo = lo.Add(copySpan) {
		hi := lo.Add(copySpan)
		if hi.After(to) {
			hi = to
		}
		n, err := copyAppended(ctx, lo, hi, src.WindowMinutes, dst.WindowMinutes, dst.AddWindowMinutes, func(m store.WindowMinute) string {
			return fmt.Sprintf("%d|%q|%q|%q|%q|%x", m.Minute.UnixNano(), m.Model, m.BizLine, m.Upstream, m.Template, m.Data)
		})
		if err != nil {
			return c, fmt.Errorf("window minutes of %s: %w", lo.Format(time.DateOnly), err)
		}
		c.minutes += n
		if n, err = copyAppended(ctx, lo, hi, src.WindowHours, dst.WindowHours, dst.AddWindowHours, func(h store.WindowHour) string {
			return fmt.Sprintf("%d|%q|%q|%q|%q|%x", h.Hour.UnixNano(), h.Model, h.BizLine, h.Upstream, h.Template, h.Data)
		}); err != nil {
			return c, fmt.Errorf("window hours of %s: %w", lo.Format(time.DateOnly), err)
		}
		c.hours += n
		samples := func(ctx context.Context, from, to time.Time) ([]store.EngineSample, error) {
			return src.EngineSamples(ctx, from, to, "")
		}
		have := func(ctx context.Context, from, to time.Time) ([]store.EngineSample, error) {
			return dst.EngineSamples(ctx, from, to, "")
		}
		if n, err = copyAppended(ctx, lo, hi, samples, have, dst.AddEngineSamples, func(s store.EngineSample) string {
			return fmt.Sprintf("%d|%q|%q|%v|%v|%v|%v|%v|%v|%v|%v|%v|%v", s.At.UnixNano(), s.Upstream, s.Model, s.Up, s.Running, s.Waiting,
				s.KVCacheUsage, s.PrefixCacheHitRate, s.TTFTP50, s.TTFTP95, s.TTFTP99, s.PromptTokensPerS, s.GenerationTokensPerS)
		}); err != nil {
			return c, fmt.Errorf("engine samples of %s: %w", lo.Format(time.DateOnly), err)
		}
		c.samples += n
		if n, err = copyDays(ctx, src, dst, lo, hi); err != nil {
			return c, fmt.Errorf("window days of %s: %w", lo.Format(time.DateOnly), err)
		}
		c.days += n
	}
	return c, nil
}

// copyAppended adds to the destination the rows of [from, to) that it
// lacks, and returns how many.
func copyAppended[T any](ctx context.Context, from, to time.Time,
	read, readDst func(context.Context, time.Time, time.Time) ([]T, error),
	add func(context.Context, []T) error, key func(T) string) (int, error) {
	rows, err := read(ctx, from, to)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	there, err := readDst(ctx, from, to)
	if err != nil {
		return 0, err
	}
	need := missing(rows, there, key)
	if len(need) == 0 {
		return 0, nil
	}
	return len(need), add(ctx, need)
}

// missing is src less dst, as multisets by key.
func missing[T any](src, dst []T, key func(T) string) []T {
	have := make(map[string]int, len(dst))
	for _, d := range dst {
		have[key(d)]++
	}
	var out []T
	for _, s := range src {
		if k := key(s); have[k] > 0 {
			have[k]--
			continue
		}
		out = append(out, s)
	}
	return out
}

// copyDays writes each closed day starting in [from, to) that the
// destination does not have; AddWindowDay itself refuses a day twice.
func copyDays(ctx context.Context, src, dst store.WindowLog, from, to time.Time) (int, error) {
	rows, err := src.WindowDays(ctx, from, to)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	type day struct{ start, end time.Time }
	var order []day
	byDay := map[day][]store.WindowDay{}
	for _, r := range rows {
		d := day{r.Start.UTC(), r.End.UTC()}
		if _, ok := byDay[d]; !ok {
			order = append(order, d)
		}
		byDay[d] = append(byDay[d], r)
	}
	n := 0
	for _, d := range order {
		ok, err := dst.AddWindowDay(ctx, d.start, d.end, byDay[d])
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}

// copyEvents adds the events since from that the destination lacks.
// Events are few (notices, not requests), so they are read whole.
func copyEvents(ctx context.Context, src, dst store.EventLog, from time.Time) (int, error) {
	evs, err := src.Events(ctx, from, "", math.MaxInt32)
	if err != nil || len(evs) == 0 {
		return 0, err
	}
	oldest := evs[len(evs)-1].At
	there, err := dst.Events(ctx, oldest, "", math.MaxInt32)
	if err != nil {
		return 0, err
	}
	need := missing(evs, there, func(e store.Event) string {
		return fmt.Sprintf("%d|%q|%q|%q|%q", e.At.UnixNano(), e.Kind, e.Subject, e.Message, e.Data)
	})
	if len(need) == 0 {
		return 0, nil
	}
	slices.Reverse(need) // oldest first, as they were written
	return len(need), dst.AddEvents(ctx, need)
}
