package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/report"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/why"
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

// runWhy prints what changed in the last --since against the --against
// before it (internal/why).
func runWhy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("why", "why [--db PATH | --config FILE] [--since 15m] [--against 1h] [--figure F] [--model M] [--biz B] [--template T] [--format text|json]", stderr)
	lf := addLedgerFlags(fs, "SQLite ledger `path`")
	since := fs.Duration("since", 15*time.Minute, "the `period` to explain, ending now")
	against := fs.Duration("against", time.Hour, "the baseline: this `long` before --since")
	figure := fs.String("figure", "", "the figure to explain (default: the one that moved most): "+strings.Join(why.FigureNames(), ", "))
	format := fs.String("format", "text", "text or json")
	q := why.Query{Where: map[string]string{}}
	var model, biz, tmpl string
	fs.StringVar(&model, "model", "", "only this model")
	fs.StringVar(&biz, "biz", "", "only this business line")
	fs.StringVar(&tmpl, "template", "", "only this prompt template")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *since < time.Minute || *against < time.Minute:
		fmt.Fprintln(stderr, "tollgate why: --since and --against must be at least 1m")
		return errUsage
	case *format != "text" && *format != "json":
		fmt.Fprintln(stderr, "tollgate why: --format must be text or json")
		return errUsage
	}
	if _, ok := why.FigureNamed(*figure); *figure != "" && !ok {
		fmt.Fprintf(stderr, "tollgate why: --figure %q: one of %s\n", *figure, strings.Join(why.FigureNames(), ", "))
		return errUsage
	}
	for k, v := range map[string]string{"model": model, "biz_line": biz, "template": tmpl} {
		if v != "" {
			q.Where[k] = v
		}
	}
	st, err := lf.open(ctx, nil, false)
	if err != nil {
		return err
	}
	defer st.Close()
	now := time.Now()
	q.From, q.To, q.BaselineTo, q.BaselineFrom, q.Figure = now.Add(-*since), now, now.Add(-*since), now.Add(-*since-*against), *figure
	rep, err := why.Ask(ctx, st, q)
	if err != nil {
		return err
	}
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(stdout, "What changed in %s–%s UTC (%d requests) against %s–%s (%d):\n\n", rep.From.UTC().Format("15:04"), rep.To.UTC().Format("15:04"), rep.Requests,
		rep.BaselineFrom.UTC().Format("15:04"), rep.BaselineTo.UTC().Format("15:04"), rep.RequestsBefore)
	for _, m := range rep.Messages {
		fmt.Fprintf(stdout, "  %s\n", m.Text)
	}
	if len(rep.Slices) > 0 {
		fmt.Fprintf(stdout, "\n  %-14s %-24s %8s %10s %10s\n", "dimension", "slice", "share", "mix", "rate")
		for _, c := range rep.Slices {
			fmt.Fprintf(stdout, "  %-14s %-24s %7.0f%% %10.4g %10.4g\n", c.Dim, c.Value, 100*c.Share, c.Mix, c.Rate)
		}
	}
	if rep.Truncated {
		fmt.Fprintf(stdout, "\n  (a period had over %d requests: its newest were read)\n", why.Limit)
	}
	return nil
}

// runEvents lists the event history: alerts, quotas, system-prompt
// changes.
func runEvents(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("events", "events [--db PATH | --config FILE] [--since 24h] [--kind alert|prompt|…] [--limit N] [--json]", stderr)
	lf := addLedgerFlags(fs, "SQLite ledger `path`")
	since := fs.Duration("since", 24*time.Hour, "events of this last `duration`")
	kind := fs.String("kind", "", "only events of this `kind` (alert, prompt, quota_warning, …)")
	limit := fs.Int("limit", 100, "at most this many, newest first")
	asJSON := fs.Bool("json", false, "one JSON object a line")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *limit < 1 || *limit > 10000 {
		fmt.Fprintln(stderr, "tollgate events: --limit must be 1–10000")
		return errUsage
	}
	st, err := lf.open(ctx, nil, false)
	if err != nil {
		return err
	}
	defer st.Close()
	evs, err := st.Events(ctx, time.Now().Add(-*since), *kind, *limit)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	for _, ev := range evs {
		if *asJSON {
			if err := enc.Encode(map[string]any{"at": ev.At.UTC(), "kind": ev.Kind, "subject": ev.Subject, "message": ev.Message}); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(stdout, "%s  %-8s %-28s %s\n", ev.At.UTC().Format("2006-01-02 15:04:05"), ev.Kind, ev.Subject, ev.Message)
	}
	return nil
}
