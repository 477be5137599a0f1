package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/tollgate-dev/tollgate/internal/soak"
)

// runBenchSoak is `tollgate bench soak`: steady streaming load through a
// `tollgate serve` child to a `tollgate sim` child, the gateway's RSS and
// goroutines sampled throughout (issue 10); see internal/soak. A
// benchmark run, not a CI step: it is meant to last half an hour.
func runBenchSoak(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench soak", "bench soak [--duration 30m] [--rps 50] [--json] [--output FILE] [flags]", stderr)
	var o soak.Options
	fs.DurationVar(&o.Duration, "duration", 30*time.Minute, "how `long` the steady load lasts")
	fs.Float64Var(&o.Rate, "rps", 50, "streamed chat completions per `second`, constant arrivals")
	fs.DurationVar(&o.Warmup, "warmup", 2*time.Minute, "from the load's start to the RSS reference point")
	fs.DurationVar(&o.Window, "window", time.Minute, "RSS at the reference point and at the end: the mean of the samples of this `long`")
	fs.DurationVar(&o.Interval, "interval", 5*time.Second, "between samples of the gateway")
	fs.DurationVar(&o.Settle, "settle", 3*time.Minute, "after the load, how `long` goroutines may take to return to the idle baseline (idle upstream connections close after 90 s)")
	fs.IntVar(&o.InputLen, "input-len", 128, "synthetic prompt `tokens`")
	fs.IntVar(&o.OutputLen, "output-len", 32, "output `tokens` per request (the simulator's X-Sim-Output-Tokens; max_tokens is twice that)")
	fs.Float64Var(&o.MaxGrowth, "max-growth", 0.05, "RSS growth `limit` (0.05: 5 %)")
	fs.IntVar(&o.GoroutineSlack, "goroutine-slack", 0, "goroutines allowed above the idle baseline once settled")
	dir := fs.String("dir", "", "work `directory` for the ledger and the children's logs (default: a temporary one, removed afterwards)")
	asJSON := fs.Bool("json", false, "print the report, samples included, as JSON")
	output := fs.String("output", "", "also write the JSON report to this `file`")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var err error
	if o.Exe, err = os.Executable(); err != nil {
		return fmt.Errorf("find the tollgate binary: %w", err)
	}
	var done func()
	if o.Dir, done, err = benchWorkDir(*dir, "tollgate-soak-"); err != nil {
		return err
	}
	defer done()
	o.Progress = stderr

	rep, err := soak.Run(ctx, o)
	if err != nil {
		return fmt.Errorf("bench soak: %w", err)
	}
	if *output != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*output, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("--output: %w", err)
		}
	}
	if err := writeBenchReport(stdout, *asJSON, rep); err != nil {
		return err
	}
	if !rep.Passed() {
		return fmt.Errorf("bench soak failed: %d limit(s) broken", len(rep.Failures))
	}
	return nil
}
