package window

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/internal/label"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// Persister is where closed minutes go and come back from: the store.
type Persister interface {
	AddWindowMinutes(ctx context.Context, ms []store.WindowMinute) error
	WindowMinutes(ctx context.Context, from, to time.Time) ([]store.WindowMinute, error)
	AddWindowHours(ctx context.Context, hs []store.WindowHour) error
	WindowHours(ctx context.Context, from, to time.Time) ([]store.WindowHour, error)
}

// Config tunes an Aggregator.
type Config struct {
	// Keep is how much recent history stays in memory (default 2 h): the
	// longest sliding window plus the longest "previous window" baseline.
	Keep time.Duration
	// Grace is how long a minute stays open for requests that finished in
	// it but arrive late (default 1 m); later ones count in the newest
	// open minute.
	Grace time.Duration
	// Queue is how many finished requests may wait for the aggregator
	// (default 8192); beyond it they are dropped from the windows (never
	// from the ledger) and counted.
	Queue int
	// From is when this aggregator started seeing every finished request
	// (default: its first Load or Flush). Only hours starting at or after
	// it are persisted merged as well: of an earlier hour this process
	// holds part only.
	From time.Time
	// Labels bounds the keys' client-influenced parts (model, business
	// line, template) as the metrics do, so a client inventing values
	// cannot grow the windows without end. Nil: keys as recorded.
	Labels *label.Bounds
}

// Aggregator sums finished requests into per-minute Stats.
type Aggregator struct {
	cfg  Config
	p    Persister // nil: memory only
	log  *slog.Logger
	in   chan *record.Record
	drop prometheus.Counter

	mu      sync.Mutex
	minutes map[int64]map[Key]*Stats // UTC minute (Unix s) → series → sums
	flushed map[int64]bool           // minutes persisted (or loaded from the store)
	from    int64                    // Unix s: Config.From, or the first Load or Flush
	hourly  map[int64]bool           // hours persisted merged
	first   int64                    // Unix s: the oldest minute ever held, 0 before any
	// spend is each key's tokens per minute (memory only, Keep long):
	// what runaway-spend alerts read (Spend).
	spend map[int64]map[string]*KeyUsage

	stored *Reader // closed hours read back from the store, kept
}

// New returns an Aggregator; p may be nil.
func New(cfg Config, p Persister, log *slog.Logger, reg prometheus.Registerer) *Aggregator {
	if cfg.Keep <= 0 {
		cfg.Keep = 2 * time.Hour
	}
	if cfg.Grace <= 0 {
		cfg.Grace = time.Minute
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 8192
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Aggregator{
		cfg: cfg, p: p, log: log, in: make(chan *record.Record, cfg.Queue),
		drop: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_window_dropped_total",
			Help: "Finished requests left out of the alerting windows because the aggregator's queue was full (the ledger still has them).",
		}),
		minutes: map[int64]map[Key]*Stats{},
		spend:   map[int64]map[string]*KeyUsage{},
		flushed: map[int64]bool{},
		hourly:  map[int64]bool{},
	}
	var st HourReader
	if p != nil {
		st = p
	}
	a.stored = NewReader(st, ReaderOptions{Cache: 400, Log: log})
	if !cfg.From.IsZero() {
		a.from = cfg.From.Unix()
	}
	if reg != nil {
		reg.MustRegister(a.drop)
	}
	return a
}

// Observe hands a finished request to the aggregator without blocking.
func (a *Aggregator) Observe(r *record.Record) {
	select {
	case a.in <- r:
	default:
		a.drop.Inc()
	}
}

// Add adds a finished request now, in the calling goroutine. Requests
// count in the minute they finished in.
func (a *Aggregator) Add(r *record.Record) {
	end := r.Arrival.Add(r.Derived.E2E)
	m := Minute(end).Unix()
	k := Key{Model: r.Model, BizLine: r.BizLine, Upstream: r.Upstream, Template: r.TemplateID}
	if lb := a.cfg.Labels; lb != nil {
		// The metrics counted the model's and biz line's folds already.
		// A business line or template is learned from any request the
		// gateway sent upstream — a failing one too, or error-rate rules
		// by business line would never see it — never from one it
		// refused itself (an invented value on a bad request).
		sent := r.Marks.UpstreamSent > 0
		k.Model = lb.Model.Again(k.Model, label.LearnModel(sent, r.UpstreamStatus))
		k.BizLine = lb.BizLine.Again(k.BizLine, sent)
		k.Template = lb.Template.Value(k.Template, sent)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.flushed[m] {
		// Too late for its minute: the newest minute still open takes it.
		for a.flushed[m] {
			m += 60
		}
	}
	a.seen(m)
	series := a.minutes[m]
	if series == nil {
		series = map[Key]*Stats{}
		a.minutes[m] = series
	}
	s := series[k]
	if s == nil {
		s = &Stats{}
		series[k] = s
	}
	s.Add(r)
	a.addSpend(m, r)
}

// KeyUsage is one API key's tokens over some minutes.
type KeyUsage struct {
	User     string
	Requests int64
	Tokens   int64 // input + output
	// First is the key's first minute held: how much of its own history
	// there is.
	First time.Time
}

// maxSpendKeys bounds the keys tallied apart in one minute; the rest
// count under OtherKey.
const maxSpendKeys = 10000

// OtherKey tallies the keys of a minute beyond maxSpendKeys.
const OtherKey = "(other)"

func (a *Aggregator) addSpend(m int64, r *record.Record) {
	id := r.KeyID
	if id == "" {
		if r.UserID == "" {
			return // no caller to name
		}
		id = "user:" + r.UserID
	}
	keys := a.spend[m]
	if keys == nil {
		keys = map[string]*KeyUsage{}
		a.spend[m] = keys
	}
	u := keys[id]
	if u == nil {
		if len(keys) >= maxSpendKeys {
			id = OtherKey
			u = keys[id]
		}
		if u == nil {
			u = &KeyUsage{User: r.UserID}
			keys[id] = u
		}
	}
	t := store.TotalsOf(r)
	u.Requests += t.Requests
	u.Tokens += t.Input + t.Output
}

// Spend sums each key's usage over the minutes of [from, to) held in
// memory (Keep long; not persisted, so a restart starts every key
// afresh), with each key's first minute held.
func (a *Aggregator) Spend(from, to time.Time) map[string]KeyUsage {
	f, t := Minute(from).Unix(), Minute(to).Unix()
	out := map[string]KeyUsage{}
	a.mu.Lock()
	defer a.mu.Unlock()
	for m, keys := range a.spend {
		if m >= t {
			continue
		}
		for id, u := range keys {
			o, seen := out[id]
			if !seen || time.Unix(m, 0).Before(o.First) {
				o.First = time.Unix(m, 0).UTC()
			}
			if m >= f {
				o.Requests += u.Requests
				o.Tokens += u.Tokens
				o.User = u.User
			}
			out[id] = o
		}
	}
	for id, o := range out {
		if o.Requests == 0 && o.Tokens == 0 {
			delete(out, id) // only older minutes: not in the period
		}
	}
	return out
}

// Load reads the last Keep of minutes back from the store, after a
// restart. Minutes loaded are not persisted again.
func (a *Aggregator) Load(ctx context.Context, now time.Time) error {
	if a.p == nil {
		return nil
	}
	rows, err := a.p.WindowMinutes(ctx, now.Add(-a.cfg.Keep), now.Add(time.Minute))
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.from == 0 {
		a.from = now.Unix()
	}
	for _, r := range rows {
		var s Stats
		if err := s.UnmarshalBinary(r.Data); err != nil {
			a.log.Warn("skipping an unreadable window minute", "minute", r.Minute, "err", err)
			continue
		}
		m := r.Minute.Unix()
		a.seen(m)
		series := a.minutes[m]
		if series == nil {
			series = map[Key]*Stats{}
			a.minutes[m] = series
		}
		k := Key{Model: r.Model, BizLine: r.BizLine, Upstream: r.Upstream, Template: r.Template}
		if old := series[k]; old != nil {
			old.Merge(&s)
		} else {
			series[k] = &s
		}
		a.flushed[m] = true
	}
	return nil
}

// Run consumes observed requests, and every few seconds persists the
// minutes that closed more than Grace ago and forgets those older than
// Keep. It returns when ctx ends, after persisting what it can.
func (a *Aggregator) Run(ctx context.Context) error {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case r := <-a.in:
			a.Add(r)
		case now := <-t.C:
			a.Flush(ctx, now)
		case <-ctx.Done():
			for {
				select {
				case r := <-a.in:
					a.Add(r)
					continue
				default:
				}
				break
			}
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			a.Flush(fctx, time.Now().Add(a.cfg.Grace+time.Minute))
			cancel()
			return nil
		}
	}
}

// Flush persists the minutes closed for longer than Grace at now and
// forgets minutes older than Keep. Once every minute of an hour this
// aggregator saw whole (see Config.From) is persisted, the hour is
// persisted merged too, one row per series: a request arriving later
// counts in a later minute, so the hour no longer changes.
func (a *Aggregator) Flush(ctx context.Context, now time.Time) {
	cut := Minute(now.Add(-a.cfg.Grace)).Unix() - 60 // the last minute that is closed
	old := now.Add(-a.cfg.Keep).Unix()
	var rows []store.WindowMinute
	var hrows []store.WindowHour
	var done, hours []int64
	a.mu.Lock()
	if a.from == 0 {
		a.from = now.Unix()
	}
	for m, series := range a.minutes {
		if m < old || m > cut || a.flushed[m] {
			continue // too old to persist (as before), open, or persisted
		}
		for k, s := range series {
			b, _ := s.MarshalBinary()
			rows = append(rows, store.WindowMinute{Minute: time.Unix(m, 0).UTC(), Model: k.Model, BizLine: k.BizLine,
				Upstream: k.Upstream, Template: k.Template, Data: b})
		}
		done = append(done, m)
	}
	for _, m := range done {
		a.flushed[m] = true // closed: a late request now counts in a later minute
	}
	// Hours closed whole: from the first hour seen whole and still in
	// memory, up to the last one whose minutes are all closed.
	first := max(ceilHour(a.from), ceilHour(old))
	for h := first; h+3600-60 <= cut; h += 3600 {
		if a.hourly[h] {
			continue
		}
		merged := map[Key]*Stats{}
		for m := h; m < h+3600; m += 60 {
			for k, s := range a.minutes[m] {
				if t := merged[k]; t != nil {
					t.Merge(s)
				} else {
					c := &Stats{}
					c.Merge(s)
					merged[k] = c
				}
			}
		}
		for k, s := range merged {
			b, _ := s.MarshalBinary()
			hrows = append(hrows, store.WindowHour{Hour: time.Unix(h, 0).UTC(), Model: k.Model, BizLine: k.BizLine,
				Upstream: k.Upstream, Template: k.Template, Data: b})
		}
		a.hourly[h] = true
		hours = append(hours, h)
	}
	for m := range a.minutes {
		if m < old {
			delete(a.minutes, m)
			delete(a.flushed, m)
		}
	}
	for m := range a.spend {
		if m < old {
			delete(a.spend, m)
		}
	}
	for h := range a.hourly {
		if h+3600 < old {
			delete(a.hourly, h)
		}
	}
	a.mu.Unlock()
	if a.p == nil {
		return
	}
	if len(rows) > 0 {
		if err := a.p.AddWindowMinutes(ctx, rows); err != nil {
			// The windows in memory stay right; the next Flush writes these
			// minutes again (requests arriving meanwhile went to open ones).
			a.log.Error("could not persist window minutes; will retry", "minutes", len(done), "err", err)
			a.unmark(done, hours)
			return // no hour without its minutes
		}
	}
	if len(hrows) > 0 {
		if err := a.p.AddWindowHours(ctx, hrows); err != nil {
			// Readers fall back to the hour's minutes until a retry works.
			a.log.Error("could not persist window hours; will retry", "rows", len(hrows), "err", err)
			a.unmark(nil, hours)
		}
	}
}

// unmark makes minutes and hours whose write failed due again.
func (a *Aggregator) unmark(minutes, hours []int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, m := range minutes {
		if _, ok := a.minutes[m]; ok {
			a.flushed[m] = false
		}
	}
	for _, h := range hours {
		delete(a.hourly, h)
	}
}

// ceilHour is the first UTC hour (Unix s) starting at or after t.
func ceilHour(t int64) int64 {
	return (t + 3599) / 3600 * 3600
}

// Selector picks series by label values; empty matches all.
type Selector map[string]string

func (sel Selector) match(k Key) bool {
	for l, v := range sel {
		if k.Label(l) != v {
			return false
		}
	}
	return true
}

// Window merges the minutes of [from, to) (rounded to minutes) held in
// memory, grouped by the labels in by; series not matching sel are left
// out. Counts are always summed; of the sketches only q's (AllQuantity:
// every one, NoQuantity: none). The result maps GroupKey to the group's
// Stats and one Key carrying its labels.
func (a *Aggregator) Window(from, to time.Time, sel Selector, by []string, q Quantity) map[string]*Group {
	out := map[string]*Group{}
	f, t := Minute(from).Unix(), Minute(to).Unix()
	a.mu.Lock()
	defer a.mu.Unlock()
	for m, series := range a.minutes {
		if m < f || m >= t {
			continue
		}
		for k, s := range series {
			if !sel.match(k) {
				continue
			}
			addTo(out, k, by, s, q)
		}
	}
	return out
}

// Oldest is the first minute with any request the aggregator has held
// (loaded from the store or seen since start; it stays when the minute
// is forgotten), and false before any: how much history young baselines
// can use (internal/alert).
func (a *Aggregator) Oldest() (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.first == 0 {
		return time.Time{}, false
	}
	return time.Unix(a.first, 0).UTC(), true
}

func (a *Aggregator) seen(m int64) {
	if a.first == 0 || m < a.first {
		a.first = m
	}
}

// OldestOf is the smallest minute of ms, for minutes held elsewhere
// (internal/fleet): Oldest's answer there.
func OldestOf[V any](ms map[int64]V) (time.Time, bool) {
	first, ok := int64(0), false
	for m := range ms {
		if !ok || m < first {
			first, ok = m, true
		}
	}
	if !ok {
		return time.Time{}, false
	}
	return time.Unix(first, 0).UTC(), true
}

// Group is one group of a window.
type Group struct {
	Key   Key // only the labels grouped by are set
	Stats Stats
}

func addTo(out map[string]*Group, k Key, by []string, s *Stats, q Quantity) {
	GroupIn(out, k, by).Stats.merge(s, q)
}

// GroupIn is the group of k in out (keyed by GroupKey), made on first use
// with only the labels of by set in its Key.
func GroupIn(out map[string]*Group, k Key, by []string) *Group {
	gk := GroupKey(k, by)
	g := out[gk]
	if g == nil {
		g = &Group{}
		for _, l := range by {
			switch l {
			case "model":
				g.Key.Model = k.Model
			case "biz_line":
				g.Key.BizLine = k.BizLine
			case "upstream":
				g.Key.Upstream = k.Upstream
			case "template":
				g.Key.Template = k.Template
			}
		}
		out[gk] = g
	}
	return g
}

// Hour merges one closed UTC hour [h, h+1h) from the store, for baselines
// that reach back days. Closed hours do not change, so each is read once
// and kept (up to 400 hours). Only ask for hours that closed more than
// Grace ago.
func (a *Aggregator) Hour(ctx context.Context, h time.Time, sel Selector, by []string, q Quantity) (map[string]*Group, error) {
	return a.stored.Hour(ctx, h, sel, by, q)
}

// HourReader is what stored windows are read from: the store.
type HourReader interface {
	WindowMinutes(ctx context.Context, from, to time.Time) ([]store.WindowMinute, error)
	WindowHours(ctx context.Context, from, to time.Time) ([]store.WindowHour, error)
}

// eachHourRow hands f every stored row of the closed UTC hour [h, h+1h),
// encoded: its hour rows when it has any, else its minutes (an hour no
// writer saw whole, or written before hours were).
func eachHourRow(ctx context.Context, st HourReader, h time.Time, f func(k Key, data []byte)) error {
	hrs, err := st.WindowHours(ctx, h, h.Add(time.Hour))
	if err != nil {
		return err
	}
	if len(hrs) > 0 {
		for _, r := range hrs {
			f(Key{Model: r.Model, BizLine: r.BizLine, Upstream: r.Upstream, Template: r.Template}, r.Data)
		}
		return nil
	}
	_, err = eachMinuteRow(ctx, st, h, f)
	return err
}

func eachMinuteRow(ctx context.Context, st HourReader, h time.Time, f func(k Key, data []byte)) (int, error) {
	rows, err := st.WindowMinutes(ctx, h, h.Add(time.Hour))
	if err != nil {
		return 0, err
	}
	for _, r := range rows {
		f(Key{Model: r.Model, BizLine: r.BizLine, Upstream: r.Upstream, Template: r.Template}, r.Data)
	}
	return len(rows), nil
}
