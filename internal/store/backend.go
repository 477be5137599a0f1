package store

import (
	"context"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// A store does more than keep the ledger: reports read its rollups, the
// alerting windows and engine samples are kept in it, the ledger amends
// it, the retention pass prunes it. Each of those consumers takes only the
// small interface below that it needs; Backend is all of them, what a
// backend implements (checked by the conformance suite) and what serve
// opens and wires.

// Backend is a whole store backend: the ledger and everything kept beside
// it. SQLite and ClickHouse implement it and pass storetest.
type Backend interface {
	Store
	Reports
	Rerater
	Amender
	EventLog
	EngineLog
	WindowLog
	Pruner
	Captures
}

// Reports is what reports read: internal/report, billing's ledger lines,
// the API's report and overview endpoints, and quotas (today's usage).
type Reports interface {
	// Report sums rollups; it never scans the ledger.
	Report(ctx context.Context, q ReportQuery) ([]ReportRow, error)
	// Prompts returns prompts seen at least minCount times in [from, to),
	// most requests first.
	Prompts(ctx context.Context, from, to time.Time, minCount int64, limit int) ([]PromptRow, error)
}

// Rerater is what billing needs to re-price the ledger (tollgate rerate,
// GPU-hour allocation).
type Rerater interface {
	// Rerate recomputes the cost of ledger rows that arrived in [from, to)
	// with rate, updating the rows and their rollups together; it returns
	// how many rows changed.
	Rerate(ctx context.Context, from, to time.Time, rate func(*record.Record) record.Cost) (int, error)
}

// Amender is what the ledger (internal/ledger) needs beyond Store: late
// engine timings.
type Amender interface {
	// SetEngineTiming amends a stored request with what its engine
	// reported after it ended (a vLLM span arrives seconds later): the
	// segments are recomputed and the rollups move with them. A request
	// not (or no longer) stored is ignored.
	SetEngineTiming(ctx context.Context, requestID string, et record.EngineTiming) error
}

// EventLog is the event history: written by the EventWriter (quotas,
// alerts), read by the API's events and alert history.
type EventLog interface {
	// AddEvents stores events; Events lists them newest first.
	AddEvents(ctx context.Context, evs []Event) error
	Events(ctx context.Context, since time.Time, kind string, limit int) ([]Event, error)
}

// EngineLog keeps engines' own gauges: written by the scraper, read by
// the API's diagnostics.
type EngineLog interface {
	// AddEngineSamples stores engines' own gauges as time series;
	// EngineSamples reads them back, oldest first ("" = every upstream).
	AddEngineSamples(ctx context.Context, ss []EngineSample) error
	EngineSamples(ctx context.Context, from, to time.Time, upstream string) ([]EngineSample, error)
}

// WindowLog keeps the alerting windows (internal/window): written by its
// Aggregator and Compactor, read by them, by internal/fleet and by the
// API's percentiles.
type WindowLog interface {
	// AddWindowMinutes appends the alerting windows' closed minutes;
	// WindowMinutes reads those of [from, to) back. Rows are appended,
	// never merged: several replicas may each write the same minute, and
	// readers add them up.
	AddWindowMinutes(ctx context.Context, ms []WindowMinute) error
	WindowMinutes(ctx context.Context, from, to time.Time) ([]WindowMinute, error)
	// AddWindowHours appends closed hours of the alerting windows, each
	// the merge of one writer's 60 minutes of a series (written only once
	// all of them were flushed); WindowHours reads those of [from, to)
	// back. Appended like minutes: readers add up the rows of an hour and
	// fall back to its minutes when it has none. Pruned by Retention.Hour.
	AddWindowHours(ctx context.Context, hs []WindowHour) error
	WindowHours(ctx context.Context, from, to time.Time) ([]WindowHour, error)
	// AddWindowDay writes the closed local day [start, end) of the
	// alerting windows merged, one row per series, unless that day has
	// rows already (then it writes nothing and answers false): one
	// compactor wins, however many replicas try. A day with no traffic
	// is written as one empty row, so that readers know it is done.
	// WindowDays reads the rows of the days starting in [from, to).
	// Pruned by Retention.Day.
	AddWindowDay(ctx context.Context, start, end time.Time, rows []WindowDay) (bool, error)
	WindowDays(ctx context.Context, from, to time.Time) ([]WindowDay, error)
}

// Pruner is what the retention pass needs.
type Pruner interface {
	// Prune deletes what the retention says is too old at now.
	Prune(ctx context.Context, now time.Time, r Retention) (int64, error)
}

// The two interfaces below are optional by design: a caller asserts them
// on a Backend and does without when it is not there.

// RollUpper is a backend whose rollups are recomputed by a pass rather
// than kept in the insert's transaction: ClickHouse (SQLite's rollups are
// written with the rows they sum, so it has no pass to run). serve runs
// the pass every minute to keep the one Report runs first short.
type RollUpper interface {
	RollUp(ctx context.Context) error
}

// Connector is a backend that may connect after it was opened: ClickHouse
// opened by serve during an outage, which connects in the background.
// Connected is nil once it has. A backend without it (SQLite) is
// connected from Open on.
type Connector interface {
	Connected() error
}
