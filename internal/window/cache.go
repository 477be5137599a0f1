package window

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"
)

// periodCache keeps closed stored periods (UTC hours, local days) merged
// per group, by grouping and filter: a dashboard asks for the same
// periods again and again, and its pages ask for several quantities at
// once. An entry holds the sketches of the quantities asked for and of
// the hot ones, read in one pass, and is widened when asked for more; concurrent callers of a period being
// read wait for that read rather than repeating it. With max 0 nothing
// is kept: each get reads.
type periodCache struct {
	max int
	hot []Quantity

	mu sync.Mutex
	m  map[string]*periodEntry
}

type periodEntry struct {
	mask    uint32        // the quantities whose sketches are merged
	groups  []periodGroup // valid once loading is nil
	loading chan struct{} // closed when the read ends
}

// periodGroup is one group of a stored period, merged.
type periodGroup struct {
	key   Key
	stats *Stats
}

// maskOf is the bit set of qs; NoQuantity adds none.
func maskOf(qs []Quantity) uint32 {
	var m uint32
	for _, q := range qs {
		if q >= 0 && q < numQuantities {
			m |= 1 << q
		}
	}
	return m
}

// get is the period of kind starting at at, grouped and filtered as q,
// with the sketches of q's quantities (and more), from the cache or from
// load; nil when load finds no period (not kept: it may come).
func (c *periodCache) get(ctx context.Context, kind string, at time.Time, q *Query, load rowLoader) ([]periodGroup, error) {
	qs := q.Quantities
	all := len(qs) == 0
	want := maskOf(qs)
	if all {
		want = 1<<numQuantities - 1
	}
	read := slices.Concat(qs, c.hot)
	mask := want | maskOf(c.hot)
	if all {
		read, mask = nil, want // every quantity
	}
	if c.max <= 0 {
		return loadPeriod(q, read, load)
	}
	key := cacheKey(kind, at, q)
	var e *periodEntry
	for {
		c.mu.Lock()
		e = c.m[key]
		if e == nil || e.loading == nil && e.mask&want != want {
			break // c.mu held: this caller reads the period
		}
		if e.loading == nil {
			c.mu.Unlock()
			return e.groups, nil
		}
		ch := e.loading
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if e != nil && !all {
		// Widened, not replaced: the quantities read before are read again.
		mask |= e.mask
		read = read[:0]
		for q := range numQuantities {
			if mask&(1<<q) != 0 {
				read = append(read, q)
			}
		}
	}
	mine := &periodEntry{mask: mask, loading: make(chan struct{})}
	if c.m == nil || len(c.m) >= c.max {
		c.m = map[string]*periodEntry{} // emptied when full
	}
	c.m[key] = mine
	c.mu.Unlock()

	groups, err := loadPeriod(q, read, load)
	c.mu.Lock()
	if groups == nil && c.m[key] == mine {
		delete(c.m, key)
	}
	mine.groups = groups
	close(mine.loading)
	mine.loading = nil
	c.mu.Unlock()
	return groups, err
}

// loadPeriod merges the rows load hands out, filtered and grouped as q,
// with the sketches of read (nil: every one); nil when load finds no
// period or fails.
func loadPeriod(q *Query, read []Quantity, load rowLoader) ([]periodGroup, error) {
	groups := map[Key]*Stats{}
	found, err := load(func(k Key, data []byte) {
		if len(data) == 0 || !q.Sel.match(k) {
			return // a day's marker row, or not asked for
		}
		gk := project(k, q.By)
		s := groups[gk]
		if s == nil {
			s = &Stats{}
			groups[gk] = s
		}
		_ = s.MergeBinary(data, read...) // an unreadable row is skipped
	})
	if err != nil || !found {
		return nil, err
	}
	out := make([]periodGroup, 0, len(groups))
	for k, s := range groups {
		out = append(out, periodGroup{k, s})
	}
	return out, nil
}

// cacheKey names a period of kind at, grouped and filtered as q.
func cacheKey(kind string, at time.Time, q *Query) string {
	b := make([]byte, 0, 64)
	b = append(b, kind...)
	b = append(b, '|')
	b = strconv.AppendInt(b, at.Unix(), 10)
	for _, l := range q.By {
		b = append(b, '|')
		b = append(b, l...)
	}
	if len(q.Sel) > 0 {
		for _, l := range slices.Sorted(maps.Keys(q.Sel)) {
			b = append(b, '|')
			b = append(b, l...)
			b = append(b, '=')
			b = strconv.AppendQuote(b, q.Sel[l])
		}
	}
	return string(b)
}
