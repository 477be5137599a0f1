// Command tollgate is the observability gateway for LLM inference: one
// binary whose subcommands run the gateway (serve), a simulated engine
// (sim), both with traffic (demo), and read the recorded health reports
// (requests). main only parses flags and wires components; the flow lives
// in internal/.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	_ "time/tzdata" // store.timezone and quota days work on hosts without tzdata

	"github.com/tollgate-dev/tollgate/internal/buildinfo"
	"github.com/tollgate-dev/tollgate/internal/config"
)

const usageText = `tollgate — an observability gateway for LLM inference

Usage:
  tollgate serve    [--config FILE] [--listen ADDR] [--upstream URL] [--db PATH]
                    run the gateway (embedded defaults without --config)
  tollgate sim      [--listen ADDR] [--model NAME] [--seed N] ...
                    run the simulated OpenAI-compatible engine (vLLM stand-in)
  tollgate demo     [--duration D] [--db PATH]
                    run the simulator, the gateway and sample traffic together
  tollgate requests [--db PATH | --config FILE] [--limit N] [--json] [filters]
                    list recent requests; "requests show ID" prints one health report
  tollgate report   KIND [--db PATH | --config FILE] [--from DATE] [--to DATE] [--format table|json|csv]
                    cost reports: users, biz, models, templates, top, length, waste
  tollgate rerate   --config FILE --from DATE --to DATE
                    re-rate history after a price change (and allocate GPU-hour prices)
  tollgate reconcile --bill FILE [--bill-format openai|generic --map ...]
                    compare a provider's usage export with the ledger, and explain the differences
  tollgate explain  [--db PATH | --config FILE] REQUEST_ID
                    where one request's time went, as a waterfall
  tollgate diagnose [--since 1h]
                    latency by input length, cache hit vs miss, long tail, segments, timeline decay
  tollgate tokens count --model M [--chat] [--json] [--jsonl] < input
                    count tokens exactly with the model's own tokenizer (and chat template)
  tollgate keys     hash < key
                    print the SHA-256 of a key or API token for key_sha256 / token_sha256
  tollgate alerts   test [-v] FILE | rules [--config FILE]
                    unit-test alert rules on synthetic traffic; list the rules that run
  tollgate bench    [--base-url URL] [--rate R | --concurrency C] [--num-prompts N] ...
                    load-test an OpenAI-compatible endpoint (TTFT, TPOT, ITL, E2EL, throughput)
  tollgate baseline run --suite FILE --save NAME | compare NAME --suite FILE | watch --suite FILE
                    regression check: fixed prompts, deterministic sampling; latency, length and output
                    drift; watch runs on the suite's schedule and alerts through the notifiers
  tollgate store    copy --from DB --config FILE | export [--db PATH] | import --config FILE
                    move a ledger (and its events and alerting windows) from SQLite to ClickHouse;
                    export and import carry it as JSON lines
  tollgate config   check --config FILE
                    load and validate a config file as serve would, and stop
  tollgate version  print the version, VCS revision and time, modified flag and Go version

Run "tollgate COMMAND -h" for the flags of a command.

Flags and arguments may come in any order after the command ("requests show
ID --db PATH"); "--" ends the flags.

Exit status: 0 success, 1 an error, 2 a usage error; reconcile exits 3 on a
warning and 4 on a critical mismatch; baseline compare exits 1 on drift and 3
when it is inconclusive (requests failed).
`

// errUsage means the command line was wrong; the message was printed.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	var ex *exitError
	switch {
	case err == nil:
	case errors.Is(err, errUsage), errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	case errors.As(err, &ex):
		fmt.Fprintln(os.Stderr, "tollgate:", err)
		os.Exit(ex.code)
	default:
		fmt.Fprintln(os.Stderr, "tollgate:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return errUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return runServe(ctx, rest, stdout, stderr)
	case "sim":
		return runSim(ctx, rest, stderr)
	case "demo":
		return runDemo(ctx, rest, stdout, stderr)
	case "requests":
		return runRequests(ctx, rest, stdout, stderr)
	case "report":
		return runReport(ctx, rest, stdout, stderr)
	case "rerate":
		return runRerate(ctx, rest, stdout, stderr)
	case "reconcile":
		return runReconcile(ctx, rest, stdout, stderr)
	case "explain":
		return runExplain(ctx, rest, stdout, stderr)
	case "diagnose":
		return runDiagnose(ctx, rest, stdout, stderr)
	case "tokens":
		return runTokens(ctx, rest, os.Stdin, stdout, stderr)
	case "keys":
		return runKeys(ctx, rest, os.Stdin, stdout, stderr)
	case "alerts":
		return runAlerts(ctx, rest, stdout, stderr)
	case "baseline":
		return runBaseline(ctx, rest, stdout, stderr)
	case "store":
		return runStore(ctx, rest, os.Stdin, stdout, stderr)
	case "bench":
		if len(rest) > 0 && rest[0] == "overhead" {
			return runBenchOverhead(ctx, rest[1:], stdout, stderr)
		}
		if len(rest) > 0 && rest[0] == "soak" {
			return runBenchSoak(ctx, rest[1:], stdout, stderr)
		}
		return runBench(ctx, rest, stdout, stderr)
	case "config":
		return runConfig(ctx, rest, stdout, stderr)
	case "version", "--version", "-v":
		fmt.Fprint(stdout, buildinfo.Read())
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usageText)
		return nil
	default:
		fmt.Fprintf(stderr, "tollgate: unknown command %q\n\n%s", cmd, usageText)
		return errUsage
	}
}

// newLogger builds the process logger from the config's log section.
func newLogger(c config.Log, w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: lvl}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// newFlagSet returns a flag set that reports errors as errUsage, printing
// the command's own usage.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: tollgate %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}
