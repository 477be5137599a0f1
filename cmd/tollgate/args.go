package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/tollgate-dev/tollgate/internal/config"
)

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

// parseFlags parses the arguments of a command that takes flags only;
// parseArgs those of a command that also takes positional
// arguments (fs.Args() afterwards). Both read flags and positionals in any
// order — `requests show ID --db X` as well as `requests show --db X ID` —
// which the flag package alone does not do: it stops at the first
// positional and leaves the flags after it unread. "--" ends the flags;
// every argument after it is positional, even one starting with "-".
func parseFlags(fs *flag.FlagSet, args []string) error {
	return parseCommandLine(fs, args, false)
}

func parseArgs(fs *flag.FlagSet, args []string) error {
	return parseCommandLine(fs, args, true)
}

// parseCommandLine is parseFlags and parseArgs. Without positional, a
// positional argument is a usage error, named, rather than silently
// ignored.
func parseCommandLine(fs *flag.FlagSet, args []string, positional bool) error {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			pos = append(pos, args[i+1:]...)
			i = len(args)
		case len(a) < 2 || a[0] != '-': // "-" alone is a positional (stdin), as in the flag package
			pos = append(pos, a)
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
	if err := fs.Parse(append([]string{"--"}, append(fs.Args(), pos...)...)); err != nil {
		return errUsage
	}
	if !positional && fs.NArg() > 0 {
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
