package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/overhead"
)

// runBenchOverhead is `tollgate bench overhead`: the gateway's own
// overhead harness (issue 8, point 3). It re-executes this binary for the
// mock engine (--role mock), the bare reverse proxy (--role bare) and
// `serve` for tollgate itself; see internal/overhead.
func runBenchOverhead(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench overhead", "bench overhead [--smoke] [--json] [--rounds N] [--duration D] [--raw FILE] [--clickhouse URL]", stderr)
	smoke := fs.Bool("smoke", false, "one short round (1s per scenario): the CI check, not a measurement")
	asJSON := fs.Bool("json", false, "print the report as JSON (progress goes to stderr)")
	rounds := fs.Int("rounds", 5, "`rounds`; the arms run in a new shuffled order in each")
	phase := fs.Duration("duration", 4*time.Second, "length of each scenario per arm and round")
	warmup := fs.Duration("warmup", time.Second, "unmeasured load before each arm's scenarios")
	rates := fs.String("rates", "200,1000", "fixed JSON `rates` in requests/s, comma-separated")
	workers := fs.Int("workers", 32, "closed loops at saturation")
	sse := fs.String("sse", "64,256", "SSE stream `concurrencies`, comma-separated")
	frames := fs.Int("frames", 32, "content frames per mock stream")
	ttft := fs.Duration("ttft", 20*time.Millisecond, "the mock's time to first token")
	itl := fs.Duration("itl", 20*time.Millisecond, "the mock's time between tokens")
	raw := fs.String("raw", "", "write the raw results, one JSON line per round, arm and scenario, to `file`")
	dir := fs.String("dir", "", "work `directory` for configs, ledgers and logs (default: a temporary one, removed afterwards)")
	seed := fs.Uint64("seed", 0, "seed of the arm order (0: from the clock)")
	chURL := fs.String("clickhouse", "", "also run arm BC, tollgate with its ledger in ClickHouse at this HTTP `URL` (http://host:8123), beside B on SQLite")
	from := fs.String("report", "", "print a saved --json report `file` as text, without running")
	// Hidden: the roles this command re-executes itself in.
	role := fs.String("role", "", "internal: mock | bare")
	listen := fs.String("listen", "", "internal: listen address of a role")
	upstream := fs.String("upstream", "", "internal: the bare proxy's upstream URL")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch *role {
	case "":
	case "mock":
		return overhead.Serve(ctx, *listen, overhead.NewMock(overhead.MockOptions{Frames: *frames, TTFT: *ttft, ITL: *itl}).Handler())
	case "bare":
		h, err := overhead.BareProxy(*upstream)
		if err != nil {
			return fmt.Errorf("--%w", err)
		}
		return overhead.Serve(ctx, *listen, h)
	default:
		return fmt.Errorf("--role: must be mock or bare; got %q", *role)
	}

	if *from != "" {
		b, err := os.ReadFile(*from)
		if err != nil {
			return fmt.Errorf("--report: %w", err)
		}
		var rep overhead.Report
		if err := json.Unmarshal(b, &rep); err != nil {
			return fmt.Errorf("--report %s: not a bench overhead JSON report: %w", *from, err)
		}
		rep.WriteText(stdout)
		return nil
	}

	o := overhead.Options{Rounds: *rounds, Phase: *phase, Warmup: *warmup, Settle: time.Second, Workers: *workers,
		Mock: overhead.MockOptions{Frames: *frames, TTFT: *ttft, ITL: *itl}, ClickHouse: *chURL, Seed: *seed, Progress: stderr}
	if *smoke {
		o.Rounds, o.Phase, o.Warmup, o.Settle = 1, time.Second, 200*time.Millisecond, 200*time.Millisecond
		// Explicit flags still win, so a test can shorten the smoke run.
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "rounds":
				o.Rounds = *rounds
			case "duration":
				o.Phase = *phase
			case "warmup":
				o.Warmup = *warmup
			}
		})
	}
	var err error
	if o.Rates, err = parseList(*rates, "--rates", strconv.ParseFloat); err != nil {
		return err
	}
	if o.SSE, err = parseList(*sse, "--sse", func(s string, _ int) (int, error) { return strconv.Atoi(s) }); err != nil {
		return err
	}
	if o.Exe, err = os.Executable(); err != nil {
		return fmt.Errorf("find the tollgate binary: %w", err)
	}
	var done func()
	if o.Dir, done, err = benchWorkDir(*dir, "tollgate-overhead-"); err != nil {
		return err
	}
	defer done()
	if *raw != "" {
		f, err := os.Create(*raw)
		if err != nil {
			return fmt.Errorf("--raw: %w", err)
		}
		defer f.Close()
		o.Raw = f
	}

	rep, err := overhead.Run(ctx, o)
	if err != nil {
		return fmt.Errorf("bench overhead: %w", err)
	}
	if err := writeBenchReport(stdout, *asJSON, rep); err != nil {
		return err
	}
	// Lost rows or frames are failures; speed never is.
	if rep.RowsLost > 0 || !rep.TokensMatch || rep.FramesLostAll > 0 {
		return fmt.Errorf("bench overhead: integrity failed: %d ledger rows lost, tokens match %v, %d frames lost", rep.RowsLost, rep.TokensMatch, rep.FramesLostAll)
	}
	return nil
}

// parseList parses a comma-separated list, naming the flag on error.
func parseList[T any](s, flagName string, parse func(string, int) (T, error)) ([]T, error) {
	var out []T
	for f := range strings.SplitSeq(s, ",") {
		v, err := parse(strings.TrimSpace(f), 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a number", flagName, f)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, errors.New(flagName + ": empty")
	}
	return out, nil
}
