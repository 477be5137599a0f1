// Package alert evaluates rules over the sliding windows of internal/window
// (and the store's rollups) on a ticker: threshold rules, and baseline rules
// that compare a window with the same figure over an earlier window. An
// alert moves pending → firing → resolved, is deduplicated by rule and
// group, kept in the store's event history and handed to the notifiers
// (internal/notify) by severity. It sits after the gateway: it reads what
// finished requests left behind and never touches the request path.
package alert

import (
	"context"
	"time"

	"github.com/tollgate-dev/tollgate/internal/window"
)

// Severity of an alert; a baseline rule escalates from warning to critical.
type Severity string

const (
	Warning  Severity = "warning"
	Critical Severity = "critical"
)

// State of an alert in its lifecycle.
type State string

const (
	Pending  State = "pending"  // breaching, but not yet for the rule's `for:`
	Firing   State = "firing"   // notified
	Resolved State = "resolved" // stopped breaching after firing
)

// Alert is one rule breaching for one group (for example one model), as
// notifiers and the history see it.
type Alert struct {
	Rule     string            `json:"rule"`
	Signal   string            `json:"signal,omitempty"` // the rule's signal
	Severity Severity          `json:"severity"`
	State    State             `json:"state"`
	Labels   map[string]string `json:"labels,omitempty"` // the group: model, biz_line, upstream, template, user
	// Summary is one plain sentence saying what breached and what to do.
	Summary string `json:"summary"`
	// Value is the figure now; Threshold the limit it crossed (for a
	// baseline rule: Baseline × the severity's factor).
	Value     float64 `json:"value"`
	Threshold float64 `json:"threshold"`
	Baseline  float64 `json:"baseline,omitempty"`
	// BaselineFrom and BaselineTo are the period of a baseline rule's
	// baseline; YoungBaseline says it is shorter than the rule's own, the
	// history of a gateway started recently (docs/metrics.md).
	BaselineFrom  time.Time `json:"baseline_from,omitzero"`
	BaselineTo    time.Time `json:"baseline_to,omitzero"`
	YoungBaseline bool      `json:"young_baseline,omitempty"`
	Unit          string    `json:"unit,omitempty"` // "s", "tokens", "ratio", "USD/h", …
	// StartsAt is when the rule first breached for this group; EndsAt is
	// when it resolved (zero while pending or firing).
	StartsAt time.Time `json:"starts_at"`
	EndsAt   time.Time `json:"ends_at,omitzero"`
	// From and To are the window that caused it, and Link the API query
	// that lists its requests (drill-down).
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	Link string    `json:"link,omitempty"`
	// Fingerprint identifies rule + group: repeats of the same alert share it.
	Fingerprint string `json:"fingerprint"`
	// Why is what changed, for a latency or tokens alert (internal/why):
	// the figure, the segment, the slice and since when, in plain
	// sentences; also appended to Summary.
	Why string `json:"why,omitempty"`
}

// ExplainFunc says what changed behind an alert (internal/why, wired by
// serve); "" when it cannot tell.
type ExplainFunc func(ctx context.Context, a Alert) string

// Explains says whether a rule's alerts are explained: those on latency
// and token figures.
func Explains(signal string) bool {
	s, ok := SignalNamed(signal)
	if !ok {
		return false
	}
	return s.quantity != window.NoQuantity || s.Unit == "tokens" && s.Name != "max_input_tokens" || s.Name == "tokens"
}

// Notifier delivers alerts. Notify must not block the evaluator for long:
// implementations queue and retry on their own.
type Notifier interface {
	Notify(ctx context.Context, a Alert)
}
