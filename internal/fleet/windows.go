package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/window"
)

// Source is where every replica's closed window minutes and hours are:
// the shared store.
type Source interface {
	WindowMinutes(ctx context.Context, from, to time.Time) ([]store.WindowMinute, error)
	WindowHours(ctx context.Context, from, to time.Time) ([]store.WindowHour, error)
}

// Windows are the alerting windows of the whole fleet, for the leader's
// engine (an alert.Windows): the window_minute rows every replica
// persisted to the shared store, merged per series, instead of one
// replica's memory. A replica persists a minute once it has been closed
// for its aggregator's grace, so the newest minutes are incomplete until
// every replica has written them: the leader evaluates at now − Lag (see
// serve), when they are all in.
//
// Refresh reads the store; Window and Hour answer from what it read.
// Minutes are kept for Keep; each Refresh reads the last Reread of them
// again, so a replica's minute written late (its store was down) still
// counts if it comes within Reread.
type Windows struct {
	src       Source
	keep      time.Duration
	reread    time.Duration
	minuteRet time.Duration
	log       *slog.Logger
	now       func() time.Time

	mu      sync.Mutex
	minutes map[int64][]row // UTC minute (Unix s) → every replica's rows
	read    time.Time       // the last Refresh's now; zero: never

	stored *window.Reader // closed hours, kept
}

type row struct {
	k    window.Key
	data []byte
}

// WindowsOptions tune Windows.
type WindowsOptions struct {
	// Keep is how much history is held (default 2 h 15 m: the engine's
	// memory of 2 h, counted from the lagged clock, plus room for the lag).
	Keep time.Duration
	// Reread is how far back each Refresh reads again (default 10 m).
	Reread time.Duration
	// MinuteRetention is how long the store keeps window minutes
	// (store.retention.minute; 0: for ever). Hours inside it are read
	// from every replica's minutes (see Hour).
	MinuteRetention time.Duration
	Log             *slog.Logger
}

// NewWindows returns fleet windows reading src; nothing is read before
// the first Refresh.
func NewWindows(src Source, o WindowsOptions) *Windows {
	if o.Keep <= 0 {
		o.Keep = 2*time.Hour + 15*time.Minute
	}
	if o.Reread <= 0 {
		o.Reread = 10 * time.Minute
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	w := &Windows{src: src, keep: o.Keep, reread: o.Reread, minuteRet: o.MinuteRetention, log: o.Log, now: time.Now,
		minutes: map[int64][]row{}}
	w.stored = window.NewReader(src, window.ReaderOptions{MinutesFirst: w.minutesFirst, Cache: 400, Log: o.Log})
	return w
}

// Refresh reads the minutes stored since the last Refresh (less Reread),
// or the whole of Keep when the last one is older than Reread (the first
// one, or a replica that just became the leader).
func (w *Windows) Refresh(ctx context.Context, now time.Time) error {
	w.mu.Lock()
	last := w.read
	w.mu.Unlock()
	from := now.Add(-w.keep)
	full := last.IsZero() || now.Sub(last) > w.reread || now.Before(last)
	if !full {
		from = last.Add(-w.reread)
	}
	from = window.Minute(from)
	rows, err := w.src.WindowMinutes(ctx, from, now.Add(time.Minute))
	if err != nil {
		return fmt.Errorf("fleet windows: %w", err)
	}
	fresh := map[int64][]row{}
	for _, r := range rows {
		m := r.Minute.Unix()
		fresh[m] = append(fresh[m], row{k: window.Key{Model: r.Model, BizLine: r.BizLine, Upstream: r.Upstream, Template: r.Template}, data: r.Data})
	}
	old := now.Add(-w.keep).Unix()
	w.mu.Lock()
	defer w.mu.Unlock()
	if full {
		w.minutes = fresh
	} else {
		for m := range w.minutes {
			if m >= from.Unix() {
				delete(w.minutes, m) // read again whole
			}
		}
		for m, rs := range fresh {
			w.minutes[m] = rs
		}
	}
	for m := range w.minutes {
		if m < old {
			delete(w.minutes, m)
		}
	}
	w.read = now
	return nil
}

// Window merges the fleet's minutes of [from, to) (rounded to minutes),
// grouped by the labels in by, as window.Aggregator.Window does for one
// replica's.
func (w *Windows) Window(from, to time.Time, sel window.Selector, by []string, q window.Quantity) map[string]*window.Group {
	f, t := window.Minute(from).Unix(), window.Minute(to).Unix()
	var qs []window.Quantity // every sketch
	if q != window.AllQuantity {
		qs = []window.Quantity{q} // NoQuantity matches none: counts only
	}
	out := map[string]*window.Group{}
	w.mu.Lock()
	defer w.mu.Unlock()
	for m, rs := range w.minutes {
		if m < f || m >= t {
			continue
		}
		for _, r := range rs {
			if !match(sel, r.k) {
				continue
			}
			g := window.GroupIn(out, r.k, by)
			if err := g.Stats.MergeBinary(r.data, qs...); err != nil {
				w.log.Warn("skipping an unreadable window minute", "minute", time.Unix(m, 0).UTC(), "err", err)
			}
		}
	}
	return out
}

// Oldest is the fleet's first minute held, as Aggregator.Oldest.
func (w *Windows) Oldest() (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return window.OldestOf(w.minutes)
}

// Hour merges one closed UTC hour from the store (every replica's rows);
// closed hours do not change, so each is read once and kept (up to 400).
func (w *Windows) Hour(ctx context.Context, h time.Time, sel window.Selector, by []string, q window.Quantity) (map[string]*window.Group, error) {
	return w.stored.Hour(ctx, h, sel, by, q)
}

// minutesFirst says whether a closed hour is read from every replica's
// minutes. A replica writes an hour row only for an hour it saw whole,
// so in an hour in which one started (a rolling deploy) the hour rows
// lack its requests; every replica's minutes do not. While the store
// keeps minutes (retention.minute, with an hour to spare for the pruning
// pass), the hour is merged from them: sixty times the rows, read once
// per hour and kept. Older hours come from the hour rows.
func (w *Windows) minutesFirst(h time.Time) bool {
	return w.minuteRet <= 0 || h.After(w.now().Add(-w.minuteRet+time.Hour))
}

func match(sel window.Selector, k window.Key) bool {
	for l, v := range sel {
		if k.Label(l) != v {
			return false
		}
	}
	return true
}
