package quota

import (
	"math"
	"reflect"
)

// Reconfigure puts new limits in force (a config reload) without losing
// today's usage: cfg must have its Keys resolved, like NewLocal's. Every
// scope whose limits changed gets a new entry carrying the old one's day,
// its usage with the reservations of requests still in flight counted as
// used (they settle on the retired entry, so the day errs on the side of
// the budget by at most their estimates' excess over what they use), its
// events already raised (unless its daily quotas changed) and its
// per-minute buckets. The retired entry is
// marked dead, so an Admit holding it looks the scope up again. A scope no
// longer limited is dropped. Admit never waits on anything but the
// in-memory locks Reconfigure holds briefly.
func (l *Local) Reconfigure(cfg Config) error {
	p, err := NewPolicy(cfg)
	if err != nil {
		return err
	}
	now := l.now()
	µ := l.micros(now)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.named, l.def = p.named, p.def
	for s, e := range l.entries {
		lim, listed := l.named[s.Kind][s.Name]
		if !listed {
			lim = l.def[s.Kind]
		}
		e.mu.Lock()
		if lim != nil && reflect.DeepEqual(*lim, *e.lim) {
			e.mu.Unlock() // the same limits: the entry goes on as it is
			continue
		}
		e.dead = true
		delete(l.entries, s)
		if lim != nil {
			n := &entry{s: s, label: e.label, lim: lim, day: e.day, flags: e.flags}
			n.seededDay.Store(e.seededDay.Load())
			if e.seeding != nil {
				n.seededDay.Store(math.MinInt64) // the seed in flight lands on the retired entry: seed again
			}
			if lim.dailyTokens != e.lim.dailyTokens || lim.dailyCost != e.lim.dailyCost || lim.warnAt != e.lim.warnAt {
				n.flags = 0 // new thresholds: their warnings are raised anew
			}
			n.tokens.used = e.tokens.used + e.tokens.reserved
			n.cost.used = e.cost.used + e.cost.reserved
			n.rpm, n.tpm = e.rpm, e.tpm
			if lim.rpm > 0 && e.lim.rpm == 0 {
				n.rpm = newBucket(lim.rpm, µ)
			}
			if lim.tpm > 0 && e.lim.tpm == 0 {
				n.tpm = newBucket(lim.tpm, µ)
			}
			l.entries[s] = n
		}
		e.mu.Unlock()
	}
	return nil
}
