package billing

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/tollgate-dev/tollgate/internal/cost"
)

// Run is the summary of one reconciliation of a provider's bill with the
// ledger (tollgate reconcile), as kept in the ledger file.
type Run struct {
	ID     int64     `json:"id"`
	At     time.Time `json:"at"`     // when it ran
	Bill   string    `json:"bill"`   // the bill file as given
	Format string    `json:"format"` // the bill's format: openai or generic
	// From and To are the bill's first and last day (UTC, YYYY-MM-DD),
	// the period the ledger was summed over.
	From string `json:"from"`
	To   string `json:"to"`
	// Lines counts the day × model (× key) lines compared.
	Lines int `json:"lines"`
	// Severity is the worst line's: ok, explained, warning or critical;
	// OverTolerance is true for the last two, when a difference the known
	// causes do not explain is above Tolerance.Warn.
	Severity      string       `json:"severity"`
	OverTolerance bool         `json:"over_tolerance"`
	Tolerance     RunTolerance `json:"tolerance"`
	// Token and request totals over all lines.
	BillTotal   cost.Counts                `json:"bill_total"`
	LedgerTotal cost.Counts                `json:"ledger_total"`
	Diff        cost.Counts                `json:"diff"` // bill − ledger
	Explained   map[cost.Cause]cost.Counts `json:"explained"`
	Unexplained cost.Counts                `json:"unexplained"`
	// BillCost and LedgerCost sum the lines' costs per currency (the
	// bill's where it has a cost column, the ledger's rated cost), sorted
	// by currency; empty when neither side has one.
	BillCost   []cost.Money `json:"bill_cost"`
	LedgerCost []cost.Money `json:"ledger_cost"`
}

// RunTolerance is the tolerance a run graded its lines with.
type RunTolerance struct {
	Warn     float64 `json:"warn"`
	Critical float64 `json:"critical"`
}

// NewRun summarises rep, the reconciliation of bill (in format) for the
// days from..to, run at at with tolerance tol.
func NewRun(at time.Time, bill, format, from, to string, tol cost.Tolerance, rep cost.Report) Run {
	r := Run{At: at.UTC(), Bill: bill, Format: format, From: from, To: to, Lines: len(rep.Lines),
		Severity: rep.Severity.String(), OverTolerance: rep.Severity >= cost.SeverityWarning,
		Tolerance: RunTolerance{Warn: tol.Warn, Critical: tol.Critical},
		BillTotal: rep.Bill, LedgerTotal: rep.Ledger, Diff: rep.Diff, Explained: rep.Explained, Unexplained: rep.Unexplained}
	if r.Explained == nil {
		r.Explained = map[cost.Cause]cost.Counts{}
	}
	billCost, ledgerCost := map[string]int64{}, map[string]int64{}
	for _, ln := range rep.Lines {
		if m := ln.BillCost; m != nil {
			billCost[m.Currency] += m.Nanos
		}
		if m := ln.LedgerCost; m != nil {
			ledgerCost[m.Currency] += m.Nanos
		}
	}
	r.BillCost, r.LedgerCost = sortedMoney(billCost), sortedMoney(ledgerCost)
	return r
}

func sortedMoney(m map[string]int64) []cost.Money {
	out := make([]cost.Money, 0, len(m))
	for _, c := range slices.Sorted(maps.Keys(m)) {
		out = append(out, cost.Money{Nanos: m[c], Currency: c})
	}
	return out
}

// ErrNoRun is Runs.Get's error for an id that was never saved.
var ErrNoRun = errors.New("no such reconciliation run")

// Runs keeps reconciliation runs in the ledger's SQLite file, in a table
// of their own (reconcile_run) that this package creates, rather than in
// the ledger's migrations: the runs are the billing tools' record, written
// by the CLI and only read by the dashboard, and nothing in the request
// path depends on them. The DDL is IF NOT EXISTS, so a later migration of
// the ledger can adopt the table as it is.
type Runs struct {
	db *sql.DB
}

const runsDDL = `CREATE TABLE IF NOT EXISTS reconcile_run (
	id      INTEGER PRIMARY KEY AUTOINCREMENT,
	at      INTEGER NOT NULL,  -- Unix nanoseconds, UTC
	summary TEXT NOT NULL,     -- Run as JSON, without id
	report  TEXT NOT NULL      -- the whole cost.Report as JSON, lines included
) STRICT`

// OpenRuns opens the runs kept in the SQLite file at path (the ledger's),
// creating their table when it is missing. path must be a file that
// exists: the ledger is opened (and created) by the store first.
func OpenRuns(ctx context.Context, path string) (*Runs, error) {
	switch {
	case path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") || strings.ContainsRune(path, '?'):
		return nil, fmt.Errorf("open reconciliation runs in %q: want a plain file path", path)
	}
	db, err := sql.Open("sqlite", path+"?_txlock=immediate&_busy_timeout=5000")
	if err != nil {
		return nil, fmt.Errorf("open reconciliation runs in %q: %w", path, err)
	}
	// Few, short statements: one connection serialises them and keeps the
	// ledger's writer from meeting more than one extra writer.
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, runsDDL); err != nil {
		db.Close()
		return nil, fmt.Errorf("open reconciliation runs in %q: %w", path, err)
	}
	return &Runs{db: db}, nil
}

// Close closes the runs' connection.
func (r *Runs) Close() error { return r.db.Close() }

// Save stores a run with its report and returns the run's id.
func (r *Runs) Save(ctx context.Context, run Run, rep cost.Report) (int64, error) {
	run.ID = 0
	sum, err := json.Marshal(run)
	if err != nil {
		return 0, fmt.Errorf("save reconciliation run: %w", err)
	}
	full, err := json.Marshal(rep)
	if err != nil {
		return 0, fmt.Errorf("save reconciliation run: %w", err)
	}
	res, err := r.db.ExecContext(ctx, `INSERT INTO reconcile_run (at, summary, report) VALUES (?, ?, ?)`, run.At.UnixNano(), string(sum), string(full))
	if err != nil {
		return 0, fmt.Errorf("save reconciliation run: %w", err)
	}
	return res.LastInsertId()
}

// List returns the newest runs first, at most limit of them.
func (r *Runs) List(ctx context.Context, limit int) ([]Run, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT id, summary FROM reconcile_run ORDER BY id DESC LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("list reconciliation runs: %w", err)
	}
	defer rows.Close()
	out := []Run{}
	for rows.Next() {
		var id int64
		var sum string
		if err := rows.Scan(&id, &sum); err != nil {
			return nil, fmt.Errorf("list reconciliation runs: %w", err)
		}
		run, err := decodeRun(id, sum)
		if err != nil {
			return nil, err
		}
		out = append(out, run)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list reconciliation runs: %w", err)
	}
	return out, nil
}

// Get returns one run and its report (cost.Report's JSON, lines included),
// or ErrNoRun.
func (r *Runs) Get(ctx context.Context, id int64) (Run, json.RawMessage, error) {
	var sum, rep string
	err := r.db.QueryRowContext(ctx, `SELECT summary, report FROM reconcile_run WHERE id = ?`, id).Scan(&sum, &rep)
	if errors.Is(err, sql.ErrNoRows) {
		return Run{}, nil, ErrNoRun
	}
	if err != nil {
		return Run{}, nil, fmt.Errorf("read reconciliation run %d: %w", id, err)
	}
	run, err := decodeRun(id, sum)
	if err != nil {
		return Run{}, nil, err
	}
	if !json.Valid([]byte(rep)) {
		return Run{}, nil, fmt.Errorf("read reconciliation run %d: its report is not JSON", id)
	}
	return run, json.RawMessage(rep), nil
}

func decodeRun(id int64, sum string) (Run, error) {
	var run Run
	if err := json.Unmarshal([]byte(sum), &run); err != nil {
		return Run{}, fmt.Errorf("read reconciliation run %d: %w", id, err)
	}
	run.ID = id
	return run, nil
}
