package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/billing"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/cost"
	"github.com/tollgate-dev/tollgate/internal/report"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// runRerate re-rates history after a price change: token prices for most
// upstreams, GPU-hour allocation for those priced by the hour.
func runRerate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("rerate", "rerate --config FILE --from DATE --to DATE [--db PATH]", stderr)
	cfgPath := fs.String("config", "", "YAML config `file` with the price table (prices:, gpu_hours:)")
	db := fs.String("db", "", "SQLite ledger `path` (default: the config's store — store.sqlite.path, or ClickHouse with store.backend clickhouse)")
	from := fs.String("from", "", "first `date` (2026-11-01) or RFC 3339 time to re-rate (required)")
	to := fs.String("to", "", "end (exclusive) `date` or time (required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *cfgPath == "" || *from == "" || *to == "" {
		fmt.Fprintln(stderr, "tollgate rerate: --config, --from and --to are required")
		return errUsage
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	if *db != "" {
		cfg.Store.SQLite.Path = *db
	}
	loc := cfg.Location()
	f, t, err := report.ParsePeriod(*from, *to, loc, time.Now(), 0)
	if err != nil {
		return err
	}
	tbl, err := cost.NewTable(cfg.CostConfig())
	if err != nil {
		return err
	}
	// The ledger is the config's store (ClickHouse for a fleet) unless
	// --db names a SQLite file.
	var st store.Backend
	if *db == "" && cfg.Store.Backend == "clickhouse" {
		st, err = openStore(ctx, cfg, slog.New(slog.DiscardHandler))
	} else {
		st, err = openSQLite(ctx, cfg.Store.SQLite.Path, loc, false, "pass --db PATH")
	}
	if err != nil {
		return err
	}
	defer st.Close()
	n, err := billing.Rerate(ctx, st, tbl, f, t)
	if err != nil {
		return err
	}
	g, err := billing.AllocateGPUHours(ctx, st, tbl, f, t)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "re-rated %d requests with token prices and %d with GPU-hour prices in [%s, %s)\n",
		n, g, f.Format(time.RFC3339), t.Format(time.RFC3339))
	return nil
}

// runReconcile compares a provider's usage export with the ledger.
func runReconcile(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("reconcile", `reconcile --bill FILE [--bill-format openai|generic --map day=COL,model=COL,...] [--db PATH] [--json]

Exit status, by the worst line's severity: 0 ok or every difference explained;
3 warning; 4 critical; 1 an error; 2 a usage error.`, stderr)
	billPath := fs.String("bill", "", "the provider's usage export (CSV) (required)")
	format := fs.String("bill-format", "openai", "openai (usage export / Usage API fields) or generic (with --map)")
	mapping := fs.String("map", "", "generic CSV columns: day=,day_layout=,model=,key=,requests=,input=,cached=,cache_write=,output=,cost=,currency=,cost_currency= (a count may sum columns: cache_write=A+B)")
	db := fs.String("db", "./tollgate.db", "SQLite ledger `path`")
	asJSON := fs.Bool("json", false, "JSON instead of a table")
	noSave := fs.Bool("no-save", false, "do not keep this run in the ledger file (the dashboard's Cost page lists kept runs)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *billPath == "" {
		fmt.Fprintln(stderr, "tollgate reconcile: --bill is required")
		return errUsage
	}
	bill, err := readBill(*billPath, *format, *mapping)
	if err != nil {
		return err
	}
	if len(bill) == 0 {
		return fmt.Errorf("%s: no usage lines", *billPath)
	}
	// The period is the bill's: its first day to the day after its last.
	days := make([]string, 0, len(bill))
	for _, b := range bill {
		days = append(days, b.Day)
	}
	sort.Strings(days)
	from, _ := time.ParseInLocation(time.DateOnly, days[0], time.UTC)
	last, _ := time.ParseInLocation(time.DateOnly, days[len(days)-1], time.UTC)
	st, err := openLedgerIn(ctx, *db, time.UTC)
	if err != nil {
		return err
	}
	defer st.Close()
	ledger, err := billing.LedgerLines(ctx, st, from, last.AddDate(0, 0, 1))
	if err != nil {
		return err
	}
	tol := cost.DefaultTolerance()
	rep := cost.Reconcile(bill, ledger, tol)
	if !*noSave {
		// Kept before printing, so that what the dashboard lists is what
		// this command showed.
		runs, err := billing.OpenRuns(ctx, *db)
		if err != nil {
			return err
		}
		defer runs.Close()
		id, err := runs.Save(ctx, billing.NewRun(time.Now(), *billPath, *format, days[0], days[len(days)-1], tol, rep), rep)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "kept as reconciliation run %d (dashboard: Cost → Reconciliation; --no-save to skip)\n", id)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = rep.WriteText(stdout)
	}
	if err != nil {
		return err
	}
	return reconcileExit(rep)
}

// reconcileExit turns the report's severity into the exit status, so a
// scheduled reconciliation can page on what it found.
func reconcileExit(rep cost.Report) error {
	over := 0
	for _, ln := range rep.Lines {
		if ln.Severity >= cost.SeverityWarning {
			over++
		}
	}
	switch rep.Severity {
	case cost.SeverityCritical:
		return &exitError{code: exitCritical, msg: fmt.Sprintf("reconciliation critical: %d of %d lines beyond tolerance", over, len(rep.Lines))}
	case cost.SeverityWarning:
		return &exitError{code: exitWarning, msg: fmt.Sprintf("reconciliation warning: %d of %d lines beyond tolerance", over, len(rep.Lines))}
	}
	return nil
}

func readBill(path, format, mapping string) ([]cost.BillLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read bill: %w", err)
	}
	defer f.Close()
	switch format {
	case "openai":
		return cost.ParseOpenAIUsageCSV(f)
	case "generic":
		m, err := parseColumnMap(mapping)
		if err != nil {
			return nil, err
		}
		return cost.ParseGenericCSV(f, m)
	default:
		return nil, fmt.Errorf("--bill-format: %q is neither openai nor generic", format)
	}
}

func parseColumnMap(s string) (cost.ColumnMap, error) {
	var m cost.ColumnMap
	if s == "" {
		return m, fmt.Errorf("--map is required with --bill-format generic, e.g. --map day=Date,model=Model,input=Input,output=Output")
	}
	fields := map[string]*string{"day": &m.Day, "day_layout": &m.DayLayout, "model": &m.Model, "key": &m.Key, "requests": &m.Requests,
		"input": &m.Input, "cached": &m.Cached, "cache_write": &m.CacheWrite, "output": &m.Output, "cost": &m.Cost, "currency": &m.Currency, "cost_currency": &m.CostCurrency}
	for part := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(part, "=")
		p, known := fields[strings.TrimSpace(k)]
		if !ok || !known {
			return m, fmt.Errorf("--map: %q is not name=column with a name among day, day_layout, model, key, requests, input, cached, cache_write, output, cost, currency, cost_currency", part)
		}
		*p = strings.TrimSpace(v)
	}
	return m, nil
}
