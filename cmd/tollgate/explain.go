package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/tollgate-dev/tollgate/internal/report"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// runExplain prints where one request's time went.
func runExplain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("explain", "explain [--db PATH | --config FILE] REQUEST_ID", stderr)
	lf := addLedgerFlags(fs, "SQLite ledger `path`")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "tollgate explain: give exactly one request id")
		return errUsage
	}
	recs, err := loadRequest(ctx, lf, fs.Arg(0))
	if err != nil {
		return err
	}
	for i, r := range recs {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		report.Waterfall(stdout, r, time.Now())
	}
	return nil
}

// runDiagnose prints the diagnosis tables over recent requests.
func runDiagnose(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("diagnose", "diagnose [--db PATH | --config FILE] [--since 1h] [--model M] [--biz B] [--format table|json|csv]", stderr)
	lf := addLedgerFlags(fs, "SQLite ledger `path`")
	since := fs.Duration("since", time.Hour, "look at requests of this last `duration`")
	limit := fs.Int("limit", 100000, "at most this many recent requests")
	format := fs.String("format", "table", "table, json or csv")
	var f store.Filter
	fs.StringVar(&f.Model, "model", "", "only this model")
	fs.StringVar(&f.BizLine, "biz", "", "only this business line")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	st, err := lf.open(ctx, nil, false)
	if err != nil {
		return err
	}
	defer st.Close()
	now := time.Now()
	results, err := report.Diagnose(ctx, st, now.Add(-*since), now.Add(time.Second), f, *limit)
	if err != nil {
		return err
	}
	for i, res := range results {
		if i > 0 && *format == "table" {
			fmt.Fprintln(stdout)
		}
		if err := report.Render(stdout, res, *format); err != nil {
			return err
		}
	}
	return nil
}
