package window

import (
	"context"
	"log/slog"
	"math"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/tollgate-dev/tollgate/internal/store"
)

// Query is one question to the windows of a period: the series matching
// Sel over [From, To), grouped by the labels of By, cut into steps, with
// the counts summed and the sketches of Quantities merged. It is what
// the dashboard's percentiles and overview, the alert baselines' stored
// hours (one replica's or the fleet's) and the day compactor all ask; a
// Reader answers it.
type Query struct {
	From, To time.Time
	// Steps are the steps' starts, ascending, the first at From; each
	// step ends where the next starts, the last at To. None: one step.
	Steps []time.Time
	Sel   Selector
	By    []string
	// Quantities are the sketches merged beside the counts: none, every
	// one; NoQuantity alone, none (counts only).
	Quantities []Quantity
}

// Series is one group of a query's answer: its Stats per step, nil in a
// step without any of its requests.
type Series struct {
	Key   Key // only the labels grouped by are set
	Steps []*Stats
}

// DayReader reads the compacted local days (Compactor): the store.
type DayReader interface {
	WindowDays(ctx context.Context, from, to time.Time) ([]store.WindowDay, error)
}

// Memory answers for the minutes not yet stored: *Aggregator.
type Memory interface {
	Window(from, to time.Time, sel Selector, by []string, q Quantity) map[string]*Group
}

// ReaderOptions say which resolutions a Reader may read, and what it
// keeps.
type ReaderOptions struct {
	// Days, when set, answers whole local days of Loc lying in one step
	// from their compacted rows where the compactor wrote them.
	Days DayReader
	Loc  *time.Location // nil: UTC
	// Memory answers the minutes from Recent before Now (rounded down to
	// its minute) on; the store the minutes before. The aggregator keeps
	// more than Recent and stores a minute a minute or two after it
	// closes, so the split counts every minute once.
	Memory Memory
	Recent time.Duration
	Now    func() time.Time // nil: time.Now
	// MinutesFirst, when set and true of a UTC hour, reads that stored
	// hour from every writer's minutes, its hour rows only when it has
	// none (see fleet.Windows: a writer that saw part of an hour wrote no
	// hour row for it). Otherwise hour rows come first.
	MinutesFirst func(h time.Time) bool
	// Cache is how many merged closed periods (a stored hour or day, by
	// grouping and filter) are kept, read once for concurrent callers;
	// 0 keeps none. Stored periods do not change, and reading and decoding
	// their rows is most of the cost of a query over days.
	Cache int
	// Hot are quantities whose sketches are read, and kept, with any
	// other's: what callers ask for side by side (the dashboard's
	// latencies), so one read serves them all.
	Hot []Quantity
	Log *slog.Logger
}

// Reader answers Queries from the store, the memory of recent minutes
// and its cache.
type Reader struct {
	st    HourReader
	o     ReaderOptions
	cache periodCache
}

// NewReader reads st (nil: nothing is stored).
func NewReader(st HourReader, o ReaderOptions) *Reader {
	if o.Loc == nil {
		o.Loc = time.UTC
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &Reader{st: st, o: o, cache: periodCache{max: o.Cache, hot: o.Hot}}
}

// resolution is how a piece of a query's period is read.
type resolution int

const (
	resDay    resolution = iota // a compacted local day's rows
	resHour                     // a UTC hour's rows (or its minutes)
	resMinute                   // minute rows, each in its own step
	resMemory                   // the aggregator's minutes in memory
)

func (r resolution) String() string { return [...]string{"day", "hour", "minute", "memory"}[r] }

// piece is a stretch of a query's period read at one resolution; a day,
// an hour and a stretch of memory lie in one step, minutes each in
// theirs (step -1).
type piece struct {
	res      resolution
	from, to time.Time
	step     int
}

// normalized is q with its one step made explicit.
func (q Query) normalized() Query {
	if len(q.Steps) == 0 {
		q.Steps = []time.Time{q.From}
	}
	return q
}

// index is the step t falls in, or -1 outside [From, To).
func (q *Query) index(t time.Time) int {
	if t.Before(q.From) || !t.Before(q.To) {
		return -1
	}
	return sort.Search(len(q.Steps), func(i int) bool { return q.Steps[i].After(t) }) - 1
}

// stepEnd is where step i ends.
func (q *Query) stepEnd(i int) time.Time {
	if i+1 < len(q.Steps) {
		return q.Steps[i+1]
	}
	return q.To
}

// within says whether [from, to) lies in [From, end) and in one step.
func (q *Query) within(from, to, end time.Time) bool {
	i := q.index(from)
	return i >= 0 && !to.After(end) && q.index(to.Add(-time.Minute)) == i
}

// candidateDays are the local days of loc lying whole in [From, end) and
// in one step: those a compacted day row can answer.
func (q *Query) candidateDays(end time.Time, loc *time.Location) []time.Time {
	var out []time.Time
	for d := store.FloorDay(q.From, loc); d.Before(end); d = store.NextDay(d, loc) {
		if q.within(d, store.NextDay(d, loc), end) {
			out = append(out, d)
		}
	}
	return out
}

// plan cuts [From, To) into pieces: the days compacted (days: start →
// end, Unix s) where they lie, whole UTC hours of one step, minutes at
// the edges (and where an hour spans two steps, or a day starts on the
// half hour), all before storeEnd; from cut on, when cut is not zero,
// each step's part in memory.
func (q *Query) plan(storeEnd, cut time.Time, days map[int64]int64) []piece {
	var out []piece
	nextDay := func(t time.Time) time.Time {
		next := int64(math.MaxInt64)
		for s := range days {
			if s > t.Unix() && s < next {
				next = s
			}
		}
		if next == math.MaxInt64 {
			return time.Unix(1<<40, 0)
		}
		return time.Unix(next, 0)
	}
	for t := q.From; t.Before(storeEnd); {
		if e, ok := days[t.Unix()]; ok {
			end := time.Unix(e, 0)
			out = append(out, piece{resDay, t, end, q.index(t)})
			t = end
			continue
		}
		h := t.UTC().Truncate(time.Hour)
		hi := earlier(h.Add(time.Hour), earlier(storeEnd, nextDay(t)))
		switch {
		case q.index(t) < 0:
		case t.Equal(h) && hi.Equal(h.Add(time.Hour)) && q.within(h, hi, storeEnd):
			out = append(out, piece{resHour, h, hi, q.index(h)})
		default:
			out = append(out, piece{resMinute, t, hi, -1})
		}
		t = hi
	}
	if cut.IsZero() || !q.To.After(cut) {
		return out
	}
	for i, start := range q.Steps {
		if end := q.stepEnd(i); end.After(cut) {
			out = append(out, piece{resMemory, later(start, cut), end, i})
		}
	}
	return out
}

// Read answers q. Its Stats are its own: a cached period's are merged
// into a fresh one, never handed out, because even reading a sketch's
// quantile sorts its buffer in place (two readers of a shared Stats would
// race, and corrupt the cache).
func (r *Reader) Read(ctx context.Context, q Query) (map[Key]*Series, error) {
	q = q.normalized()
	out := answer{q: &q, groups: map[Key]*Series{}}
	own := r.o.Cache <= 0 // periods read are fresh, not kept
	storeEnd, cut := q.To, time.Time{}
	if r.o.Memory != nil {
		cut = Minute(r.o.Now()).Add(-r.o.Recent)
		storeEnd = earlier(q.To, cut)
	}
	days := map[int64]int64{}
	dayGroups := map[int64][]periodGroup{}
	if r.o.Days != nil && r.st != nil {
		var mu sync.Mutex
		parallel(ctx, q.candidateDays(storeEnd, r.o.Loc), func(d time.Time) {
			g, err := r.cache.get(ctx, "d", d, &q, r.dayLoader(ctx, d))
			if err != nil {
				r.o.Log.Warn("could not read a compacted window day; reading its hours", "day", d, "err", err)
				return
			}
			if g != nil { // nil: not compacted (yet), read by the hour
				mu.Lock()
				days[d.Unix()] = store.NextDay(d, r.o.Loc).Unix()
				dayGroups[d.Unix()] = g
				mu.Unlock()
			}
		})
	}
	plan := q.plan(storeEnd, cut, days)
	if r.st != nil && r.o.Cache > 0 {
		// Decoding sketches is CPU-bound, and a range of days has
		// hundreds of hours to decode on its first call: a few at a time
		// into the cache, then merged below from it.
		var hours []time.Time
		for _, p := range plan {
			if p.res == resHour {
				hours = append(hours, p.from)
			}
		}
		parallel(ctx, hours, func(h time.Time) {
			// Errors are met again, and returned, by the read below.
			_, _ = r.cache.get(ctx, "h", h, &q, r.hourLoader(ctx, h))
		})
	}
	for _, p := range plan {
		switch p.res {
		case resDay:
			out.addGroups(dayGroups[p.from.Unix()], p.step, own)
		case resHour:
			if r.st == nil {
				continue
			}
			g, err := r.cache.get(ctx, "h", p.from, &q, r.hourLoader(ctx, p.from))
			if err != nil {
				return nil, err
			}
			out.addGroups(g, p.step, own)
		case resMinute:
			if r.st == nil {
				continue
			}
			rows, err := r.st.WindowMinutes(ctx, p.from, p.to)
			if err != nil {
				return nil, err
			}
			qs := q.Quantities
			for _, row := range rows {
				k := Key{Model: row.Model, BizLine: row.BizLine, Upstream: row.Upstream, Template: row.Template}
				i := q.index(row.Minute)
				if i < 0 || !q.Sel.match(k) {
					continue
				}
				if err := out.slot(k, i).MergeBinary(row.Data, qs...); err != nil {
					r.o.Log.Warn("skipping an unreadable window minute", "minute", row.Minute, "err", err)
				}
			}
		case resMemory:
			memQ := AllQuantity
			if len(q.Quantities) == 1 {
				memQ = q.Quantities[0]
			}
			for _, g := range r.o.Memory.Window(p.from, p.to, q.Sel, q.By, memQ) {
				out.slot(g.Key, p.step).Merge(&g.Stats)
			}
		}
	}
	return out.groups, nil
}

// Hour merges the stored closed UTC hour [h, h+1h) as the alert
// engine's baselines ask for it (an alert.Windows' Hour): its series
// read once, every one apart, then selected and grouped per call, with
// the sketch of q only. Of the many rules asking for the same hours,
// each shape of selector and grouping reads nothing again.
func (r *Reader) Hour(ctx context.Context, h time.Time, sel Selector, by []string, q Quantity) (map[string]*Group, error) {
	h = h.UTC().Truncate(time.Hour)
	out := map[string]*Group{}
	if r.st == nil {
		return out, nil
	}
	all := Query{From: h, To: h.Add(time.Hour), By: Labels}
	series, err := r.cache.get(ctx, "h", h, &all, r.hourLoader(ctx, h))
	if err != nil {
		return nil, err
	}
	for _, s := range series {
		if sel.match(s.key) {
			addTo(out, s.key, by, s.stats, q)
		}
	}
	return out, nil
}

// answer is a query's groups as they are merged.
type answer struct {
	q      *Query
	groups map[Key]*Series
}

// series is k's group, made on first use.
func (a *answer) series(k Key) *Series {
	gk := project(k, a.q.By)
	g := a.groups[gk]
	if g == nil {
		g = &Series{Key: gk, Steps: make([]*Stats, len(a.q.Steps))}
		a.groups[gk] = g
	}
	return g
}

// slot is the Stats of k's group in step i, made on first use, to merge
// into.
func (a *answer) slot(k Key, i int) *Stats {
	g := a.series(k)
	s := g.Steps[i]
	if s == nil {
		s = &Stats{}
		g.Steps[i] = s
	}
	return s
}

// addGroups merges a stored period's groups into step i; own says they
// are this answer's to keep (read for it alone, not cached): those are
// taken as they are when the step holds nothing yet, cached ones are
// always copied.
func (a *answer) addGroups(gs []periodGroup, i int, own bool) {
	for _, pg := range gs {
		if g := a.series(pg.key); own && g.Steps[i] == nil {
			g.Steps[i] = pg.stats
			continue
		}
		a.slot(pg.key, i).Merge(pg.stats)
	}
}

// project is k with only the labels of by set.
func project(k Key, by []string) Key {
	var p Key
	for _, l := range by {
		switch l {
		case "model":
			p.Model = k.Model
		case "biz_line":
			p.BizLine = k.BizLine
		case "upstream":
			p.Upstream = k.Upstream
		case "template":
			p.Template = k.Template
		}
	}
	return p
}

// rowLoader hands every stored row of a period to emit, and says whether
// the period is there at all (a day not yet compacted is not).
type rowLoader func(emit func(k Key, data []byte)) (bool, error)

// hourLoader reads the stored UTC hour h: its hour rows, its minutes
// where it has none; minutes first where MinutesFirst says so.
func (r *Reader) hourLoader(ctx context.Context, h time.Time) rowLoader {
	return func(emit func(Key, []byte)) (bool, error) {
		if r.o.MinutesFirst != nil && r.o.MinutesFirst(h) {
			n, err := eachMinuteRow(ctx, r.st, h, emit)
			if err != nil || n > 0 {
				return true, err
			}
		}
		return true, eachHourRow(ctx, r.st, h, emit)
	}
}

// dayLoader reads the compacted local day starting at d; there is none
// until the compactor wrote it.
func (r *Reader) dayLoader(ctx context.Context, d time.Time) rowLoader {
	return func(emit func(Key, []byte)) (bool, error) {
		rows, err := r.o.Days.WindowDays(ctx, d, d.Add(time.Second))
		for _, row := range rows {
			emit(Key{Model: row.Model, BizLine: row.BizLine, Upstream: row.Upstream, Template: row.Template}, row.Data)
		}
		return len(rows) > 0, err
	}
}

// parallel calls f for every item on a few goroutines (one per CPU, up to
// 4), until ctx ends.
func parallel[T any](ctx context.Context, items []T, f func(T)) {
	workers := min(runtime.GOMAXPROCS(0), 4, len(items))
	if workers <= 1 {
		for _, it := range items {
			if ctx.Err() != nil {
				return
			}
			f(it)
		}
		return
	}
	ch := make(chan T)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for it := range ch {
				f(it)
			}
		})
	}
	for _, it := range items {
		if ctx.Err() != nil {
			break
		}
		ch <- it
	}
	close(ch)
	wg.Wait()
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
