package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tollgate-dev/tollgate/internal/alert"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
	"github.com/tollgate-dev/tollgate/internal/window"
)

const alertsUsage = `Usage:
  tollgate alerts test [-v] FILE   unit-test alert rules against synthetic traffic
  tollgate alerts rules [--config FILE]
                                   list the rules that would run (built-in and configured)
`

// errTestsFailed means alert rule tests ran and some failed.
var errTestsFailed = errors.New("alert rule tests failed")

func runAlerts(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, alertsUsage)
		return errUsage
	}
	switch args[0] {
	case "test":
		return runAlertsTest(ctx, args[1:], stdout, stderr)
	case "rules":
		return runAlertsRules(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "tollgate alerts: unknown subcommand %q\n\n%s", args[0], alertsUsage)
	return errUsage
}

func runAlertsTest(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("alerts test", "alerts test [-v] FILE", stderr)
	verbose := fs.Bool("v", false, "also print every firing and resolution")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fmt.Fprint(stderr, alertsUsage)
		return errUsage
	}
	b, err := os.ReadFile(fs.Arg(0))
	if err != nil {
		return err
	}
	f, err := alert.ParseTestFile(b)
	if err != nil {
		return fmt.Errorf("%s: %w", fs.Arg(0), err)
	}
	dir, err := os.MkdirTemp("", "tollgate-alerts-test-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	scratch := func(i int) (window.Persister, func() error, error) {
		st, err := sqlite.Open(ctx, filepath.Join(dir, fmt.Sprintf("test-%d.db", i)), nil)
		if err != nil {
			return nil, nil, err
		}
		return st, st.Close, nil
	}
	results, err := alert.RunTests(ctx, f, scratch)
	if err != nil {
		return err
	}
	failed := 0
	for _, r := range results {
		status := "PASS"
		if len(r.Failures) > 0 {
			status = "FAIL"
			failed++
		}
		fmt.Fprintf(stdout, "%s  %s\n", status, r.Name)
		for _, f := range r.Failures {
			fmt.Fprintf(stdout, "      %s\n", f)
		}
		if *verbose {
			for _, l := range r.Fired {
				fmt.Fprintf(stdout, "      | %s\n", l)
			}
		}
	}
	if failed > 0 {
		fmt.Fprintf(stdout, "%d of %d tests failed\n", failed, len(results))
		return errTestsFailed
	}
	fmt.Fprintf(stdout, "all %d tests passed\n", len(results))
	return nil
}

func runAlertsRules(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("alerts rules", "alerts rules [--config FILE]", stderr)
	cfgPath := fs.String("config", "", "config `file` (default: built-in rules only)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg := config.Default()
	if *cfgPath != "" {
		var err error
		if cfg, err = config.Load(*cfgPath); err != nil {
			return err
		}
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tSIGNAL\tBY\tWINDOWS\tLEVELS\tMIN\tFOR")
	for _, r := range cfg.Alerts.Effective() {
		var ws []string
		for _, w := range r.Windows {
			ws = append(ws, shortDuration(w))
		}
		levels := levelsText(r)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", r.Name, r.Signal, strings.Join(r.By, ","), strings.Join(ws, " AND "), levels, r.MinRequests, shortDuration(r.For))
	}
	return tw.Flush()
}

// levelsText says when a rule warns and when it is critical.
func levelsText(r alert.Rule) string {
	l, op, unit := alert.Levels{}, ">", ""
	if r.Below {
		op = "<"
	}
	switch {
	case r.Threshold != nil:
		l = *r.Threshold
	case r.Baseline.Previous > 0:
		l, op, unit = r.Baseline.Levels, "×", " the "+shortDuration(r.Baseline.Previous)+" before"
	default:
		l, op, unit = r.Baseline.Levels, "×", fmt.Sprintf(" the same hour of %d days", r.Baseline.SameHourDays)
	}
	var parts []string
	if l.Warning != 0 {
		parts = append(parts, fmt.Sprintf("warning %s%g", op, l.Warning))
	}
	if l.Critical != 0 {
		parts = append(parts, fmt.Sprintf("critical %s%g", op, l.Critical))
	}
	return strings.Join(parts, ", ") + unit
}

// shortDuration prints 5m0s as 5m and 1h0m0s as 1h.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
