package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/report"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
)

func reportUsage() string {
	var b strings.Builder
	b.WriteString("report KIND [--db PATH | --config FILE] [--from DATE] [--to DATE] [--format table|json|csv] [filters]\n\nKinds:\n")
	for _, k := range report.Kinds {
		fmt.Fprintf(&b, "  %-10s %s\n", k.Name, k.Help)
	}
	return b.String()
}

func runReport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("report", reportUsage(), stderr)
	lf := addLedgerFlags(fs, "SQLite ledger `path`")
	from := fs.String("from", "", "start `date` (2026-11-01) or RFC 3339 time; default 7 days before --to")
	to := fs.String("to", "", "end (exclusive) `date` or time; default the end of today")
	tz := fs.String("tz", "", "time `zone` of dates and day/month groups, e.g. Asia/Shanghai (default store.timezone with --config, else UTC)")
	format := fs.String("format", "table", "table, json or csv")
	limit := fs.Int("limit", 20, "rows of ranked reports (top, waste)")
	where := map[store.Dim]*string{}
	for _, d := range []store.Dim{store.DimUser, store.DimBizLine, store.DimModel, store.DimTemplate, store.DimUpstream, store.DimKey, store.DimEndUser} {
		where[d] = fs.String(string(d), "", "only this "+strings.ReplaceAll(string(d), "_", " "))
	}
	// The kind is the one positional, before or after the flags.
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errUsage
	}
	kind := fs.Arg(0)
	// The store is opened first: without --tz its time zone
	// (store.timezone) is the one dates are read in.
	var zone *time.Location
	if *tz != "" {
		var err error
		if zone, err = time.LoadLocation(*tz); err != nil {
			return fmt.Errorf("--tz: %w", err)
		}
	}
	st, err := lf.open(ctx, zone, false)
	if err != nil {
		return err
	}
	defer st.Close()
	f, t, err := report.ParsePeriod(*from, *to, lf.loc, time.Now(), 7)
	if err != nil {
		return err
	}
	q := report.Query{From: f, To: t, Limit: *limit, Where: map[store.Dim]string{}}
	for d, v := range where {
		if *v != "" {
			q.Where[d] = *v
		}
	}
	res, err := report.Run(ctx, st, kind, q)
	if err != nil {
		return err
	}
	return report.Render(stdout, res, *format)
}

// openLedgerIn opens an existing ledger with a report time zone.
func openLedgerIn(ctx context.Context, path string, loc *time.Location) (*sqlite.Store, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("no ledger at %s (start \"tollgate serve\" or \"tollgate demo\" first, or pass --db PATH)", path)
	}
	return sqlite.Open(ctx, path, slog.New(slog.DiscardHandler), sqlite.WithLocation(loc))
}
