package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/alert"
	"github.com/tollgate-dev/tollgate/internal/baseline"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/notify"
)

// errDrift is returned when a comparison found drift, so scripts and CI
// can act on the exit status; the report was printed.
var errDrift = errors.New("drift against the baseline")

// runBaseline is `tollgate baseline run|compare` (issue 8, point 2).
func runBaseline(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, "Usage: tollgate baseline run --suite FILE --save NAME | compare NAME [--suite FILE | --against NAME] | watch --suite FILE [--config FILE]\n")
		return errUsage
	}
	switch args[0] {
	case "run":
		return runBaselineRun(ctx, args[1:], stdout, stderr)
	case "compare":
		return runBaselineCompare(ctx, args[1:], stdout, stderr)
	case "watch":
		return runBaselineWatch(ctx, args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "tollgate baseline: unknown subcommand %q (run, compare, watch)\n", args[0])
		return errUsage
	}
}

func baselineHeader(apiKey string) http.Header {
	h := http.Header{}
	if apiKey == "" {
		apiKey = os.Getenv("OPENAI_API_KEY")
	}
	if apiKey != "" {
		h.Set("Authorization", "Bearer "+apiKey)
	}
	return h
}

func runBaselineRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("baseline run", "baseline run --suite FILE --save NAME [--base-url URL] [--dir DIR]", stderr)
	suitePath := fs.String("suite", "", "suite `file` (YAML: model, sampling, prompts)")
	save := fs.String("save", "", "baseline `name` to save the run as")
	dir := fs.String("dir", "baselines", "`directory` of the baseline files (NAME.json)")
	baseURL := fs.String("base-url", "", "endpoint `URL` (…/v1); default the suite's base_url, else "+gatewayURL)
	apiKey := fs.String("api-key", "", "bearer `key` (default $OPENAI_API_KEY)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *suitePath == "" {
		return errors.New("--suite: required")
	}
	if *save == "" {
		return errors.New("--save: required (the name to store the baseline under)")
	}
	if err := baseline.CheckName(*save); err != nil {
		return fmt.Errorf("--save: %w", err)
	}
	s, err := baseline.LoadSuite(*suitePath)
	if err != nil {
		return fmt.Errorf("--suite: %w", err)
	}
	b, err := baseline.Run(ctx, s, baselineURL(*baseURL, s, ""), baselineHeader(*apiKey))
	if err != nil {
		return err
	}
	b.Name = *save
	failed := 0
	for _, sm := range b.Samples {
		if !sm.OK {
			failed++
		}
	}
	if failed == len(b.Samples) {
		return fmt.Errorf("every request of the suite failed (first: %s); nothing saved%s", b.Samples[0].Error, authHint(b.Samples[0].Error))
	}
	if err := baseline.Save(*dir, b); err != nil {
		return fmt.Errorf("save baseline: %w", err)
	}
	fmt.Fprintf(stdout, "saved baseline %q to %s/%s.json: %d requests (%d failed), %d prompts × %d, served by %s\n",
		b.Name, *dir, b.Name, len(b.Samples), failed, len(s.Prompts), s.Repeat, strings.Join(b.ServedModels, ", "))
	return nil
}

func runBaselineCompare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("baseline compare", `baseline compare NAME [--suite FILE | --against NAME] [--format text|json]

Exit status: 0 no drift; 1 drift (or an error); 2 a usage error;
3 inconclusive: requests of the run failed, so nothing is concluded.`, stderr)
	suitePath := fs.String("suite", "", "suite `file` to run now and compare (the same one the baseline ran)")
	against := fs.String("against", "", "compare with this saved baseline `name` instead of running the suite")
	save := fs.String("save", "", "also save the new run under this `name`")
	dir := fs.String("dir", "baselines", "`directory` of the baseline files")
	baseURL := fs.String("base-url", "", "endpoint `URL` (…/v1); default the suite's base_url, else the baseline's, else "+gatewayURL)
	apiKey := fs.String("api-key", "", "bearer `key` (default $OPENAI_API_KEY)")
	ratio := fs.Float64("latency-ratio", 1.5, "a latency drifts when its median grows by this `factor` (and the KS test agrees)")
	share := fs.Float64("length-share", 0.1, "output length drifts when its mean moves by this `share` (and the KS test agrees)")
	format := fs.String("format", "text", "report `format`: text or json")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	var name string
	if fs.NArg() > 1 {
		fmt.Fprintf(stderr, "tollgate baseline compare: unexpected argument %q (one baseline NAME)\n", fs.Arg(1))
		return errUsage
	}
	name = fs.Arg(0)
	switch {
	case name == "":
		return errors.New("baseline compare: the baseline NAME is required")
	case *format != "text" && *format != "json":
		return fmt.Errorf("--format: must be text or json, got %q", *format)
	case (*suitePath == "") == (*against == ""):
		return errors.New("--suite or --against: give exactly one (run the suite now, or compare two saved baselines)")
	case *ratio <= 1:
		return fmt.Errorf("--latency-ratio: must be above 1, got %g", *ratio)
	case *share <= 0:
		return fmt.Errorf("--length-share: must be above 0, got %g", *share)
	}
	base, err := baseline.Load(*dir, name)
	if err != nil {
		return err
	}
	var cur *baseline.Baseline
	if *against != "" {
		if cur, err = baseline.Load(*dir, *against); err != nil {
			return err
		}
	} else {
		s, err := baseline.LoadSuite(*suitePath)
		if err != nil {
			return fmt.Errorf("--suite: %w", err)
		}
		if cur, err = baseline.Run(ctx, s, baselineURL(*baseURL, s, base.BaseURL), baselineHeader(*apiKey)); err != nil {
			return err
		}
		cur.Name = *save
		if *save != "" {
			if err := baseline.Save(*dir, cur); err != nil {
				return fmt.Errorf("--save: %w", err)
			}
		}
	}
	r := baseline.Compare(base, cur, baseline.Options{LatencyRatio: *ratio, LengthShare: *share})
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(r)
	} else {
		err = baseline.WriteText(stdout, r)
	}
	if err != nil {
		return err
	}
	switch {
	case r.Inconclusive:
		return &exitError{code: exitInconclusive, msg: r.Verdict + authHint(r.FirstError)}
	case r.Drift:
		return errDrift
	}
	return nil
}

// baselineURL is the endpoint a run goes to: --base-url, else the suite's
// base_url, else the saved baseline's (saved is "" for run), else a
// gateway on its default address.
func baselineURL(flag string, s *baseline.Suite, saved string) string {
	for _, u := range []string{flag, s.BaseURL, saved} {
		if u != "" {
			return u
		}
	}
	return gatewayURL
}

// runBaselineWatch runs the suite on the schedule of its `schedule:`
// section (or flags) against a saved baseline, and raises an alert
// (rule baseline_drift) through the notifiers of tollgate's config when it
// drifts — warning, critical when the model looks changed — and resolves
// it when the drift ends.
func runBaselineWatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("baseline watch", "baseline watch --suite FILE [--baseline NAME] [--every D] [--config FILE]", stderr)
	suitePath := fs.String("suite", "", "suite `file`; its schedule section gives the baseline and the interval")
	name := fs.String("baseline", "", "saved baseline `name` to compare with (default the suite's schedule.baseline)")
	every := fs.Duration("every", 0, "`interval` between runs (default the suite's schedule.every)")
	runs := fs.Int("runs", 0, "stop after this many runs (0: until stopped)")
	cfgPath := fs.String("config", "", "tollgate config `file` whose notifiers receive the alerts; without it alerts are logged to stderr")
	dir := fs.String("dir", "baselines", "`directory` of the baseline files")
	baseURL := fs.String("base-url", "", "endpoint `URL` (…/v1); default the suite's base_url, else the baseline's, else "+gatewayURL)
	apiKey := fs.String("api-key", "", "bearer `key` (default $OPENAI_API_KEY)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *suitePath == "" {
		return errors.New("--suite: required")
	}
	if *runs < 0 {
		return fmt.Errorf("--runs: must not be negative, got %d", *runs)
	}
	s, err := baseline.LoadSuite(*suitePath)
	if err != nil {
		return fmt.Errorf("--suite: %w", err)
	}
	if *name == "" {
		*name = s.Schedule.Baseline
	}
	if *every == 0 {
		*every = s.Schedule.Every
	}
	if *name == "" {
		return errors.New("--baseline: required (or schedule.baseline in the suite)")
	}
	if *every <= 0 && *runs != 1 {
		return errors.New("--every: required (or schedule.every in the suite), unless --runs 1")
	}
	base, err := baseline.Load(*dir, *name)
	if err != nil {
		return err
	}
	url := baselineURL(*baseURL, s, base.BaseURL)

	// Notifiers: tollgate's own, from its config; else a log notifier.
	log := slog.New(slog.NewTextHandler(stderr, nil))
	targets := notify.Config{{Name: "log", Type: notify.TypeLog}}
	loc := time.UTC
	if *cfgPath != "" {
		cfg, err := config.Load(*cfgPath)
		if err != nil {
			return err
		}
		if len(cfg.Notifiers) == 0 {
			return fmt.Errorf("--config: %s has no notifiers; drift alerts would go nowhere", *cfgPath)
		}
		targets, loc = cfg.Notifiers, cfg.Location()
	}
	disp, err := notify.New(targets, notify.Options{Log: log.With("component", "notify"), Location: loc})
	if err != nil {
		return err
	}
	defer disp.Close() // delivers what is queued

	header := baselineHeader(*apiKey)
	check := func(ctx context.Context) (*baseline.Report, error) {
		cur, err := baseline.Run(ctx, s, url, header)
		if err != nil {
			return nil, err
		}
		return baseline.Compare(base, cur, baseline.Options{}), nil
	}
	report := func(r *baseline.Report, err error) {
		if err != nil {
			log.Warn("baseline run failed", "baseline", *name, "err", err)
			return
		}
		fmt.Fprintf(stdout, "--- %s\n", time.Now().UTC().Format(time.RFC3339))
		_ = baseline.WriteText(stdout, r)
	}
	return baseline.Watch(ctx, *name, *every, *runs, check, func(a alert.Alert) { disp.Notify(ctx, a) }, report)
}
