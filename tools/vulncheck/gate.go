package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// gateMain reads govulncheck's -format json from stdin and decides: a
// vulnerability whose code the scanned program calls fails the gate; one
// only imported or required does not (govulncheck's own text mode draws
// the same line). -stdlib=warn lets those of the standard library pass
// with a warning: they are fixed by a newer Go toolchain, not by a
// dependency upgrade, and the toolchain is the project's decision.
func gateMain(args []string) int {
	fs := flag.NewFlagSet("gate", flag.ContinueOnError)
	stdlib := fs.String("stdlib", "fail", "called vulnerabilities of the standard library: fail or warn")
	if err := fs.Parse(args); err != nil || (*stdlib != "fail" && *stdlib != "warn") {
		fmt.Fprintln(os.Stderr, "usage: vulncheck gate [-stdlib fail|warn] < govulncheck-json")
		return 2
	}
	called, err := calledFindings(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vulncheck gate:", err)
		return 2
	}
	failed := false
	for _, f := range called {
		verdict := "FAIL"
		if f.module == "stdlib" && *stdlib == "warn" {
			verdict = "warn (needs Go " + f.fixed + ")"
		} else {
			failed = true
		}
		fmt.Printf("%s: %s in %s@%s, called from %s; fixed in %s\n", verdict, f.id, f.module, f.version, f.caller, f.fixed)
	}
	if failed {
		fmt.Println("vulncheck gate: called vulnerabilities above; upgrade the module to its fixed version")
		return 1
	}
	fmt.Printf("vulncheck gate: passed (%d called vulnerabilities, all of them in the standard library: warned)\n", len(called))
	return 0
}

type called struct {
	id, module, version, fixed, caller string
}

// calledFindings returns one line per vulnerability and module that the
// program calls: a finding whose trace reaches a function.
func calledFindings(r io.Reader) ([]called, error) {
	type frame struct {
		Module   string `json:"module"`
		Version  string `json:"version"`
		Package  string `json:"package"`
		Function string `json:"function"`
		Receiver string `json:"receiver"`
	}
	type message struct {
		Finding *struct {
			OSV          string  `json:"osv"`
			FixedVersion string  `json:"fixed_version"`
			Trace        []frame `json:"trace"`
		} `json:"finding"`
		Config *struct {
			ScannerVersion string `json:"scanner_version"`
		} `json:"config"`
	}
	dec := json.NewDecoder(r)
	var out []called
	seen := map[[2]string]bool{}
	sawConfig := false
	for {
		var m message
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading govulncheck output: %w", err)
		}
		sawConfig = sawConfig || m.Config != nil
		f := m.Finding
		if f == nil || len(f.Trace) == 0 || f.Trace[0].Function == "" {
			continue // only imported or required: not called
		}
		vuln := f.Trace[0]
		key := [2]string{f.OSV, vuln.Module}
		if seen[key] {
			continue
		}
		seen[key] = true
		caller := f.Trace[len(f.Trace)-1]
		out = append(out, called{id: f.OSV, module: vuln.Module, version: vuln.Version, fixed: f.FixedVersion,
			caller: caller.Package + "." + caller.Function})
	}
	if !sawConfig {
		return nil, errors.New("no govulncheck output (no config message): did the scan run?")
	}
	slices.SortFunc(out, func(a, b called) int {
		if a.module != b.module {
			return strings.Compare(a.module, b.module)
		}
		return strings.Compare(a.id, b.id)
	})
	return out, nil
}
