// Package budget tracks budgets longer than a quota day: monthly and
// rolling-window budgets of tokens and cost for a user, a key, a business
// line or a team (the keys whose auth.keys[].team names it). It sits
// beside the quotas, after the ledger: a Tracker reads each budget's
// usage from the store's rollups (the fleet's, with ClickHouse) every
// interval, raises an alert through the notifiers the first time each
// threshold (50/80/100 % by default) is crossed in a period, and keeps a
// snapshot the gateway's admission reads without waiting: a budget with
// enforce: true refuses its subject's requests (429 insufficient_quota)
// once it is used up, until its period ends (or, rolling, until usage
// falls back under it).
//
// Daily quotas (internal/quota) are exact, reserving every request's
// estimate at admission. Budgets are enforced on recorded usage, read
// every interval: a subject can go past a budget by what it uses within
// one interval plus the ledger's write delay. That is the trade for
// months of usage read from rollups rather than counted per request.
package budget

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/quota"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// Config is one budget (YAML budgets[i]):
//
//	budgets:
//	  - name: platform-month
//	    scope: team            # user | key | biz_line | team
//	    subject: platform      # the user id, key name, business line or team
//	    period: month          # day | month | rolling
//	    window: 168h           # rolling only: the window's length
//	    tokens: 500000000      # input + output; 0: no token budget
//	    cost: "2000.00"        # in the price table's currency; "": no cost budget
//	    thresholds: [0.5, 0.8, 1.0]
//	    enforce: true          # refuse requests at 100 % (default: alert only)
type Config struct {
	Name       string        `yaml:"name"`
	Scope      string        `yaml:"scope"`
	Subject    string        `yaml:"subject"`
	Period     string        `yaml:"period"`
	Window     time.Duration `yaml:"window"`
	Tokens     int64         `yaml:"tokens"`
	Cost       string        `yaml:"cost"`
	Thresholds []float64     `yaml:"thresholds"`
	Enforce    bool          `yaml:"enforce"`
}

// Scopes and periods, as in YAML.
const (
	ScopeUser    = "user"
	ScopeKey     = "key"
	ScopeBizLine = "biz_line"
	ScopeTeam    = "team"

	PeriodDay     = "day"
	PeriodMonth   = "month"
	PeriodRolling = "rolling"
)

// DefaultThresholds are the shares that alert when none are configured.
var DefaultThresholds = []float64{0.5, 0.8, 1.0}

// Validate checks the budgets found at path ("budgets"); keyNames are
// the configured keys' names (a key budget names one) and teams the
// keys' teams.
func Validate(path string, bs []Config, keyNames, teams map[string]bool) error {
	var errs []error
	names := map[string]int{}
	for i, b := range bs {
		p := fmt.Sprintf("%s[%d]", path, i)
		bad := func(key, format string, args ...any) {
			errs = append(errs, fmt.Errorf("%s.%s: %s", p, key, fmt.Sprintf(format, args...)))
		}
		switch {
		case strings.TrimSpace(b.Name) == "":
			bad("name", "must not be empty")
		default:
			if j, dup := names[b.Name]; dup {
				bad("name", "%q is also budgets[%d]'s name", b.Name, j)
			}
			names[b.Name] = i
		}
		switch b.Scope {
		case ScopeUser, ScopeBizLine:
		case ScopeKey:
			if b.Subject != "" && !keyNames[b.Subject] {
				bad("subject", "no auth.keys[].name is %q", b.Subject)
			}
		case ScopeTeam:
			if b.Subject != "" && !teams[b.Subject] {
				bad("subject", "no auth.keys[].team is %q", b.Subject)
			}
		default:
			bad("scope", "must be one of user, key, biz_line, team; got %q", b.Scope)
		}
		if strings.TrimSpace(b.Subject) == "" {
			bad("subject", "must not be empty")
		}
		switch b.Period {
		case PeriodDay, PeriodMonth:
			if b.Window != 0 {
				bad("window", "only a rolling budget has a window")
			}
		case PeriodRolling:
			if b.Window < time.Hour || b.Window > 366*24*time.Hour {
				bad("window", "must be between 1h and 366 days for a rolling budget; got %v", b.Window)
			}
		default:
			bad("period", "must be one of day, month, rolling; got %q", b.Period)
		}
		if b.Tokens < 0 {
			bad("tokens", "must not be negative")
		}
		if b.Cost != "" {
			if n, err := quota.ParseCost(b.Cost); err != nil {
				bad("cost", "%v", err)
			} else if n <= 0 {
				bad("cost", "must be positive")
			}
		}
		if b.Tokens == 0 && b.Cost == "" {
			bad("tokens", "a budget needs tokens, cost or both")
		}
		for j, th := range b.Thresholds {
			if !(th > 0 && th <= 10) || math.IsNaN(th) {
				bad(fmt.Sprintf("thresholds[%d]", j), "must be a share between 0 and 10 (0.8 is 80 %%); got %v", th)
			}
		}
	}
	return errors.Join(errs...)
}

// Status is one budget's burn in its current period.
type Status struct {
	Name     string    `json:"name"`
	Scope    string    `json:"scope"`   // user, key, biz_line or team
	Subject  string    `json:"subject"` // as configured (a key's name)
	Period   string    `json:"period"`
	From     time.Time `json:"from"`
	To       time.Time `json:"to"` // the period's end; for rolling, now
	Tokens   int64     `json:"tokens"`
	TokenCap int64     `json:"token_budget,omitempty"`
	Cost     int64     `json:"cost_nanos"`
	CostCap  int64     `json:"cost_budget_nanos,omitempty"`
	// Share is the larger of the token and cost shares.
	Share      float64   `json:"share"`
	Thresholds []float64 `json:"thresholds"`
	Enforce    bool      `json:"enforce"`
	Exceeded   bool      `json:"exceeded"` // at or over 100 %
	Updated    time.Time `json:"updated"`
}

// Alert is a threshold crossing, for the notifiers (serve turns it into
// an alert.Alert) and the event log.
type Alert struct {
	Status    Status
	Threshold float64
	At        time.Time
	Until     time.Time // when it resolves by itself: the period's end
}

// Options wire a Tracker.
type Options struct {
	Reports store.Reports
	// Events, when set, stores each crossing (kind budget_threshold) and
	// is read back at start, so that a restart does not alert again.
	Events store.EventLog
	// Raise receives each threshold crossing once per period.
	Raise func(Alert)
	// KeyIDs resolves a key's name to its id; TeamKeys a team to its
	// keys' ids (from auth.keys).
	KeyIDs   map[string]string
	TeamKeys map[string][]string
	Location *time.Location // day and month boundaries; nil is UTC
	Now      func() time.Time
	Log      *slog.Logger
}

// EventKind is the event log kind of a threshold crossing.
const EventKind = "budget_threshold"

// Tracker keeps the budgets' burn.
type Tracker struct {
	budgets []Config
	o       Options
	snap    atomic.Pointer[snapshot]

	mu     sync.Mutex
	raised map[string]bool // budget|period start|threshold
	loaded bool
}

type snapshot struct {
	statuses []Status
	blocked  map[quota.Scope][]int // subject → index of exceeded, enforced budgets in statuses
}

// New builds a tracker of validated budgets.
func New(bs []Config, o Options) *Tracker {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Location == nil {
		o.Location = time.UTC
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	t := &Tracker{budgets: slices.Clone(bs), o: o, raised: map[string]bool{}}
	t.snap.Store(&snapshot{})
	return t
}

// Run refreshes every interval until ctx ends; the first refresh is at once.
func (t *Tracker) Run(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		interval = time.Minute
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if err := t.Refresh(ctx); err != nil && ctx.Err() == nil {
			t.o.Log.Warn("budgets not refreshed; the last burn figures stay in force", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// period is the current period of b at now.
func (t *Tracker) period(b Config, now time.Time) (from, to time.Time) {
	l := now.In(t.o.Location)
	switch b.Period {
	case PeriodDay:
		from = time.Date(l.Year(), l.Month(), l.Day(), 0, 0, 0, 0, t.o.Location)
		return from, from.AddDate(0, 0, 1)
	case PeriodMonth:
		from = time.Date(l.Year(), l.Month(), 1, 0, 0, 0, 0, t.o.Location)
		return from, from.AddDate(0, 1, 0)
	}
	return now.Add(-b.Window), now
}

// Refresh reads every budget's usage from the store, raises the
// thresholds newly crossed and publishes the snapshot admission reads.
func (t *Tracker) Refresh(ctx context.Context) error {
	now := t.o.Now()
	t.loadRaised(ctx, now)
	statuses := make([]Status, 0, len(t.budgets))
	blocked := map[quota.Scope][]int{}
	var errs []error
	prev := t.snap.Load()
	for i, b := range t.budgets {
		from, to := t.period(b, now)
		st := Status{Name: b.Name, Scope: b.Scope, Subject: b.Subject, Period: b.Period, From: from, To: to,
			TokenCap: b.Tokens, Thresholds: b.Thresholds, Enforce: b.Enforce, Updated: now}
		if len(st.Thresholds) == 0 {
			st.Thresholds = DefaultThresholds
		}
		st.CostCap, _ = quota.ParseCost(b.Cost) // validated
		tokens, cost, err := t.usage(ctx, b, from, now)
		if err != nil {
			errs = append(errs, fmt.Errorf("budget %s: %w", b.Name, err))
			if i < len(prev.statuses) { // keep the last figures
				st = prev.statuses[i]
			}
		} else {
			st.Tokens, st.Cost = tokens, cost
			st.Share = share(tokens, b.Tokens, cost, st.CostCap)
			st.Exceeded = st.Share >= 1
			t.cross(ctx, st, now)
		}
		statuses = append(statuses, st)
		if st.Exceeded && b.Enforce {
			for _, s := range t.scopes(b) {
				blocked[s] = append(blocked[s], i)
			}
		}
	}
	t.snap.Store(&snapshot{statuses: statuses, blocked: blocked})
	return errors.Join(errs...)
}

func share(tokens, tokenCap, cost, costCap int64) float64 {
	s := 0.0
	if tokenCap > 0 {
		s = float64(tokens) / float64(tokenCap)
	}
	if costCap > 0 {
		s = max(s, float64(cost)/float64(costCap))
	}
	return s
}

// scopes are the quota scopes a budget covers: its subject, or a team's keys.
func (t *Tracker) scopes(b Config) []quota.Scope {
	switch b.Scope {
	case ScopeUser:
		return []quota.Scope{{Kind: quota.KindUser, Name: b.Subject}}
	case ScopeBizLine:
		return []quota.Scope{{Kind: quota.KindBizLine, Name: b.Subject}}
	case ScopeKey:
		return []quota.Scope{{Kind: quota.KindKey, Name: t.o.KeyIDs[b.Subject]}}
	}
	var out []quota.Scope
	for _, id := range t.o.TeamKeys[b.Subject] {
		out = append(out, quota.Scope{Kind: quota.KindKey, Name: id})
	}
	return out
}

// usage sums a budget's input + output tokens and cost from its period's
// start: one report query over the rollups.
func (t *Tracker) usage(ctx context.Context, b Config, from, now time.Time) (tokens, cost int64, err error) {
	// The rollups answer whole hours: the query runs to the end of the
	// current hour (a fixed period: to its end), so the hour in progress
	// counts, and a rolling window starts at the top of its first hour.
	to := now.Truncate(time.Hour).Add(time.Hour)
	if b.Period == PeriodRolling {
		from = from.Truncate(time.Hour)
	} else if _, end := t.period(b, now); end.After(to) {
		to = end
	}
	q := store.ReportQuery{From: from, To: to, Measures: []string{"input_tokens", "output_tokens", "cost_nanos"}}
	var want map[string]bool
	switch b.Scope {
	case ScopeUser:
		q.GroupBy, q.Where = []store.Dim{store.DimUser}, map[store.Dim]string{store.DimUser: b.Subject}
	case ScopeBizLine:
		q.GroupBy, q.Where = []store.Dim{store.DimBizLine}, map[store.Dim]string{store.DimBizLine: b.Subject}
	case ScopeKey:
		id := t.o.KeyIDs[b.Subject]
		q.GroupBy, q.Where = []store.Dim{store.DimKey}, map[store.Dim]string{store.DimKey: id}
	case ScopeTeam:
		// A team is its keys: the rollups keep keys, not teams.
		q.GroupBy = []store.Dim{store.DimKey}
		want = map[string]bool{}
		for _, id := range t.o.TeamKeys[b.Subject] {
			want[id] = true
		}
	}
	rows, err := t.o.Reports.Report(ctx, q)
	if err != nil {
		return 0, 0, err
	}
	for _, r := range rows {
		if want != nil && !want[r.Keys[0]] {
			continue
		}
		tokens += r.Input + r.Output
		cost += r.CostNanos
	}
	return tokens, cost, nil
}

// raisedKey names one threshold of one period: a rolling budget has one
// period, whose thresholds re-arm when usage falls back under them.
func raisedKey(st Status, th float64) string {
	from := st.From.UTC().Format(time.RFC3339)
	if st.Period == PeriodRolling {
		from = "rolling"
	}
	return st.Name + "|" + from + "|" + strconv.FormatFloat(th, 'g', -1, 64)
}

// cross raises each threshold st is at or over for the first time this
// period (the highest only, when several are crossed at once).
func (t *Tracker) cross(ctx context.Context, st Status, now time.Time) {
	t.mu.Lock()
	var top float64
	var crossed []float64
	for _, th := range st.Thresholds {
		k := raisedKey(st, th)
		switch {
		case st.Share >= th && !t.raised[k]:
			t.raised[k] = true
			top = max(top, th)
			crossed = append(crossed, th)
		case st.Share < th && st.Period == PeriodRolling:
			delete(t.raised, k)
		}
	}
	t.mu.Unlock()
	if top == 0 {
		return
	}
	until := st.To
	if st.Period == PeriodRolling {
		until = now.Add(time.Hour)
	}
	a := Alert{Status: st, Threshold: top, At: now, Until: until}
	if t.o.Events != nil {
		// One event per threshold crossed, so a restart knows each of
		// them; one notification, of the highest.
		evs := make([]store.Event, 0, len(crossed))
		for _, th := range crossed {
			evs = append(evs, store.Event{At: now, Kind: EventKind, Subject: st.Name, Message: Summary(Alert{Status: st, Threshold: th}),
				Data: fmt.Sprintf(`{"key":%q,"threshold":%g,"share":%g}`, raisedKey(st, th), th, st.Share)})
		}
		if err := t.o.Events.AddEvents(ctx, evs); err != nil {
			t.o.Log.Warn("budget threshold not stored; a restart may alert it again", "budget", st.Name, "err", err)
		}
	}
	if t.o.Raise != nil {
		t.o.Raise(a)
	}
}

// loadRaised reads the crossings already stored this month (the longest
// fixed period), once, so a restart does not alert them again.
func (t *Tracker) loadRaised(ctx context.Context, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.loaded || t.o.Events == nil {
		t.loaded = true
		return
	}
	l := now.In(t.o.Location)
	since := time.Date(l.Year(), l.Month(), 1, 0, 0, 0, 0, t.o.Location)
	evs, err := t.o.Events.Events(ctx, since, EventKind, 10000)
	if err != nil {
		t.o.Log.Warn("budget thresholds already raised not read; they may alert again", "err", err)
		return // tried again at the next refresh
	}
	for _, e := range evs {
		if _, rest, ok := strings.Cut(e.Data, `"key":"`); ok {
			if k, _, ok := strings.Cut(rest, `"`); ok && !strings.Contains(k, "|rolling|") {
				t.raised[k] = true
			}
		}
	}
	t.loaded = true
}

// Summary is the one line of a crossing: "budget platform-month (team
// platform, month): 81 % used, threshold 80 %".
func Summary(a Alert) string {
	s := a.Status
	return fmt.Sprintf("budget %s (%s %s, %s): %.0f %% used, threshold %.0f %%", s.Name, s.Scope, s.Subject, s.Period, s.Share*100, a.Threshold*100)
}

// Statuses is every budget's burn as of the last refresh.
func (t *Tracker) Statuses() []Status { return slices.Clone(t.snap.Load().statuses) }

// Blocked reports the enforced budget a request of subject is over, if
// any. It reads the last snapshot only: no I/O, no lock.
func (t *Tracker) Blocked(s quota.Subject) (Status, bool) {
	sn := t.snap.Load()
	if len(sn.blocked) == 0 {
		return Status{}, false
	}
	for _, sc := range []quota.Scope{{Kind: quota.KindKey, Name: s.KeyID}, {Kind: quota.KindUser, Name: s.UserID}, {Kind: quota.KindBizLine, Name: s.BizLine}} {
		if sc.Name == "" {
			continue
		}
		if is := sn.blocked[sc]; len(is) > 0 {
			return sn.statuses[is[0]], true
		}
	}
	return Status{}, false
}
