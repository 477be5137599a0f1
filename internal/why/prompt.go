package why

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// PromptChange is a template whose system prompt changed: its
// fingerprint (a hash of the system prompt alone, never its text) and
// token length before and after, when the new one was first seen, and
// who sent it.
type PromptChange struct {
	Template          string    `json:"template"`
	At                time.Time `json:"at"`
	TokensBefore      int64     `json:"tokens_before"`
	TokensAfter       int64     `json:"tokens_after"`
	FingerprintBefore string    `json:"fingerprint_before"`
	FingerprintAfter  string    `json:"fingerprint_after"`
	Key               string    `json:"key,omitempty"`
	User              string    `json:"user,omitempty"`
	Requests          int       `json:"requests"` // with the new prompt, in the period
}

// Text says it in one sentence, as the events do (their subject names
// the template).
func (c PromptChange) Text() string {
	return fmt.Sprintf("system prompt changed at %s (%s → %s tokens, fingerprint %s… → %s…), sent by key %s.",
		c.At.UTC().Format("15:04"), num(float64(c.TokensBefore)), num(float64(c.TokensAfter)),
		short(c.FingerprintBefore), short(c.FingerprintAfter), orNone(cmp.Or(c.User, c.Key)))
}

func short(fp string) string { return fp[:min(4, len(fp))] }

// minPromptShare is the share of a template's requests in the period a
// new system prompt must have to count as a change (not one odd request).
const minPromptShare = 0.2

// minPromptBase is the least requests of a template in the baseline for
// its system prompt to be known.
const minPromptBase = 10

// PromptChanges finds the templates whose usual system prompt in base
// (their most frequent fingerprint) gave way in cur to one base never
// had, sent by at least minPromptShare of the template's requests.
func PromptChanges(base, cur Period) []PromptChange {
	type fp struct {
		n      int
		tokens int64
		first  *record.Record
		keys   map[string]int
	}
	count := func(p Period) map[string]map[string]*fp {
		out := map[string]map[string]*fp{}
		for _, r := range p.Records {
			if r.SystemSHA256 == "" {
				continue
			}
			t := out[r.TemplateID]
			if t == nil {
				if len(out) >= maxSlices {
					continue
				}
				t = map[string]*fp{}
				out[r.TemplateID] = t
			}
			f := t[r.SystemSHA256]
			if f == nil {
				if len(t) >= maxSlices {
					continue
				}
				f = &fp{tokens: r.SystemTokens, first: r, keys: map[string]int{}}
				t[r.SystemSHA256] = f
			}
			f.n++
			if r.Arrival.Before(f.first.Arrival) {
				f.first = r
			}
			if len(f.keys) < maxSlices {
				f.keys[cmp.Or(r.KeyID, r.UserID)]++
			}
		}
		return out
	}
	before, now := count(base), count(cur)
	var out []PromptChange
	for tmpl, fps := range now {
		old := before[tmpl]
		n0 := 0
		for _, f := range old {
			n0 += f.n
		}
		if n0 < minPromptBase {
			continue // a template new (or rare) in the baseline: nothing to change from
		}
		usual := ""
		for h, f := range old {
			if usual == "" || f.n > old[usual].n || f.n == old[usual].n && h < usual {
				usual = h
			}
		}
		total := 0
		for _, f := range fps {
			total += f.n
		}
		for h, f := range fps {
			if old[h] != nil || float64(f.n) < minPromptShare*float64(total) {
				continue
			}
			key, kn := "", 0
			for k, n := range f.keys {
				if n > kn || n == kn && k < key {
					key, kn = k, n
				}
			}
			out = append(out, PromptChange{Template: tmpl, At: f.first.Arrival.UTC().Truncate(time.Minute), TokensBefore: old[usual].tokens, TokensAfter: f.tokens,
				FingerprintBefore: usual, FingerprintAfter: h, Key: key, User: f.first.UserID, Requests: f.n})
		}
	}
	slices.SortFunc(out, func(a, b PromptChange) int { return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.Template, b.Template)) })
	return out
}

// EventKind is the store event kind of system-prompt changes.
const EventKind = "prompt"

// Events is where prompt-change events go (the store's event writer).
type Events interface {
	Send(ev store.Event)
}

// Watch turns the Records into prompt-change events as they finish: a
// template that has settled — Settle requests with at most maxKnown
// system prompts among them — and then comes with a system prompt it
// never had is an event. A template whose prompts vary by request (a
// user's name in them) has more than maxKnown before it settles and
// raises none; one alternating between a few (chat and Messages sending
// different ones) knows them all. It is a Record observer: cheap, never
// blocking (Events.Send drops when full).
type Watch struct {
	ev Events
	mu sync.Mutex
	t  map[string]*watched
}

type watched struct {
	n      int                // requests seen
	known  map[string]*prompt // by fingerprint
	varied bool               // more than maxKnown: never raises
}

type prompt struct {
	tokens int64
	n      int
}

// Settle is how many requests a template must have sent before a new
// system prompt of it is an event.
const Settle = 20

// maxKnown is how many system prompts a template may have and still be
// watched.
const maxKnown = 8

// maxWatched bounds the templates watched (client-controlled ids).
const maxWatched = 1000

// NewWatch returns a Watch sending to ev.
func NewWatch(ev Events) *Watch { return &Watch{ev: ev, t: map[string]*watched{}} }

// Observe is the gateway observer.
func (w *Watch) Observe(r *record.Record) {
	if r.SystemSHA256 == "" || r.Marks.UpstreamSent == 0 {
		return // no system prompt, or refused before any upstream
	}
	w.mu.Lock()
	t := w.t[r.TemplateID]
	if t == nil {
		if len(w.t) >= maxWatched {
			w.mu.Unlock()
			return
		}
		t = &watched{known: map[string]*prompt{}}
		w.t[r.TemplateID] = t
	}
	t.n++
	var change *PromptChange
	if p, ok := t.known[r.SystemSHA256]; ok {
		p.n++
	} else if !t.varied {
		if len(t.known) >= maxKnown {
			t.varied, t.known = true, nil
		} else {
			if t.n > Settle {
				// The change is from the template's usual prompt: its most
				// frequent one.
				usual := ""
				for h, p := range t.known {
					if usual == "" || p.n > t.known[usual].n || p.n == t.known[usual].n && h < usual {
						usual = h
					}
				}
				change = &PromptChange{Template: r.TemplateID, At: r.Arrival.UTC(), TokensBefore: t.known[usual].tokens, TokensAfter: r.SystemTokens,
					FingerprintBefore: usual, FingerprintAfter: r.SystemSHA256, Key: r.KeyID, User: r.UserID, Requests: 1}
			}
			t.known[r.SystemSHA256] = &prompt{tokens: r.SystemTokens, n: 1}
		}
	}
	w.mu.Unlock()
	if change != nil && w.ev != nil {
		data, _ := json.Marshal(change)
		w.ev.Send(store.Event{At: change.At, Kind: EventKind, Subject: "template " + orNone(change.Template), Message: change.Text(), Data: string(data)})
	}
}
