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
	"runtime/debug"
	"strings"
	"syscall"
	_ "time/tzdata" // store.timezone and quota days work on hosts without tzdata

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
  tollgate version  print the version

Run "tollgate COMMAND -h" for the flags of a command. Flags and arguments may
come in any order after the command ("requests show ID --db PATH"); "--" ends
the flags.

Exit status: 0 success, 1 an error, 2 a usage error; reconcile exits 3 on a
warning and 4 on a critical mismatch; baseline compare exits 1 on drift and 3
when it is inconclusive (requests failed).
`

// errUsage means the command line was wrong; the message was printed.
var errUsage = errors.New("usage")

// Exit statuses beyond 0 (success), 1 (an error) and 2 (a usage error),
// for commands whose result scripts act on: a finding of warning or
// critical severity (reconcile), or a check that could not conclude
// (baseline compare).
const (
	exitWarning      = 3
	exitCritical     = 4
	exitInconclusive = 3
)

// exitError is a result that is not a failure of the command itself but
// that ends it with its own exit status; its report was printed.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// authHint is what to do about a request error that is the endpoint
// refusing the key: "" for any other error.
func authHint(reqErr string) string {
	if !strings.Contains(reqErr, "HTTP 401") && !strings.Contains(reqErr, "HTTP 403") {
		return ""
	}
	keys := make([]string, len(demoUsers))
	for i, u := range demoUsers {
		keys[i] = u.key
	}
	return " (pass the endpoint's key with --api-key or $OPENAI_API_KEY; the demo's keys are " + strings.Join(keys, ", ") + ")"
}

// gatewayURL is the OpenAI base URL of a gateway started with the
// defaults (tollgate serve, tollgate demo): what the client commands
// (bench, baseline) talk to unless told otherwise.
var gatewayURL = "http://" + config.Default().Listen + "/v1"

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
	case "version", "--version", "-v":
		fmt.Fprintln(stdout, "tollgate", version())
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usageText)
		return nil
	default:
		fmt.Fprintf(stderr, "tollgate: unknown command %q\n\n%s", cmd, usageText)
		return errUsage
	}
}

// version is the module version when built from a tagged module, else the
// VCS revision the build recorded, else "dev".
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return "dev-" + s.Value[:12]
		}
	}
	return "dev"
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

// parseFlags parses a command's arguments with flags and positional
// arguments in any order — `requests show ID --db X` as well as
// `requests show --db X ID` — which the flag package alone does not do: it
// stops at the first positional and leaves the flags after it unread.
// "--" ends the flags; every argument after it is positional, even one
// starting with "-". Afterwards fs.Args() is the positionals in order.
func parseFlags(fs *flag.FlagSet, args []string) error {
	var flags, positional []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			positional = append(positional, args[i+1:]...)
			i = len(args)
		case len(a) < 2 || a[0] != '-': // "-" alone is a positional (stdin), as in the flag package
			positional = append(positional, a)
		default:
			flags = append(flags, a)
			if takesValue(fs, a) && i+1 < len(args) {
				i++
				flags = append(flags, args[i])
			}
		}
	}
	if err := fs.Parse(flags); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	// Every flag is set; parsing "--" and the positionals only makes them
	// fs.Args().
	return fs.Parse(append([]string{"--"}, append(fs.Args(), positional...)...))
}

// parseOnlyFlags is parseFlags for a command that takes no positional
// argument: one is a usage error, named, rather than silently ignored.
func parseOnlyFlags(fs *flag.FlagSet, args []string) error {
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "tollgate %s: unexpected argument %q (this command takes flags only)\n", fs.Name(), fs.Arg(0))
		return errUsage
	}
	return nil
}

// takesValue reports whether the flag argument a ("-name" or "--name")
// takes the next argument as its value, as the flag package reads it: a
// known flag that is not boolean and has no "=value" of its own.
func takesValue(fs *flag.FlagSet, a string) bool {
	name := strings.TrimPrefix(a[1:], "-")
	if strings.Contains(name, "=") {
		return false
	}
	f := fs.Lookup(name)
	if f == nil {
		return false
	}
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return !ok || !b.IsBoolFlag()
}
