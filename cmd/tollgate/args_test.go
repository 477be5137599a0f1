package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/baseline"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
	"github.com/tollgate-dev/tollgate/internal/store/storetest"
)

// TestParseFlagsInterleaved: flags after a positional are read as flags,
// "--" makes everything after it positional, and a flag's value is never
// taken for a positional (nor a positional for a bool flag's value); a
// command of flags only refuses a positional instead of ignoring it and
// the flags after it.
func TestParseFlagsInterleaved(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		db      string
		json    bool
		limit   int
		pos     []string
		wantErr bool
	}{
		{args: []string{"ID", "--db", "x.db"}, db: "x.db", limit: 20, pos: []string{"ID"}},
		{args: []string{"--db", "x.db", "ID"}, db: "x.db", limit: 20, pos: []string{"ID"}},
		{args: []string{"A", "--json", "B", "-limit=3", "C"}, json: true, limit: 3, pos: []string{"A", "B", "C"}},
		{args: []string{"--json", "ID"}, json: true, limit: 20, pos: []string{"ID"}}, // a bool flag takes no value
		{args: []string{"--limit", "-5", "ID"}, limit: -5, pos: []string{"ID"}},      // a value may start with "-"
		{args: []string{"--db", "--", "ID"}, db: "--", limit: 20, pos: []string{"ID"}},
		{args: []string{"--db", "x.db", "--", "--json", "-"}, db: "x.db", limit: 20, pos: []string{"--json", "-"}},
		{args: []string{"-", "--json"}, json: true, limit: 20, pos: []string{"-"}},
		{args: []string{"ID", "--no-such-flag"}, wantErr: true},
		{args: []string{"ID", "--db"}, wantErr: true}, // a missing value is an error, not a positional
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		db := fs.String("db", "", "")
		asJSON := fs.Bool("json", false, "")
		limit := fs.Int("limit", 20, "")
		err := parseArgs(fs, tc.args)
		if tc.wantErr {
			if !errors.Is(err, errUsage) {
				t.Errorf("%q: error %v, want a usage error", tc.args, err)
			}
			continue
		}
		if err != nil || *db != tc.db || *asJSON != tc.json || *limit != tc.limit || !slices.Equal(fs.Args(), tc.pos) {
			t.Errorf("%q: err %v, db %q json %v limit %d positionals %q; want db %q json %v limit %d positionals %q",
				tc.args, err, *db, *asJSON, *limit, fs.Args(), tc.db, tc.json, tc.limit, tc.pos)
		}
		fs = flag.NewFlagSet("t", flag.ContinueOnError)
		var out strings.Builder
		fs.SetOutput(&out)
		fs.String("db", "", "")
		fs.Bool("json", false, "")
		fs.Int("limit", 20, "")
		if err := parseFlags(fs, tc.args); !errors.Is(err, errUsage) || !strings.Contains(out.String(), "unexpected argument") {
			t.Errorf("%q with flags only: error %v, output %q; want the positional refused", tc.args, err, out.String())
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	db := fs.String("db", "", "")
	if err := parseFlags(fs, []string{"--db", "x.db"}); err != nil || *db != "x.db" {
		t.Errorf("flags only: %v, db %q", err, *db)
	}
}

// TestCommandsTakeFlagsAnyOrder runs real commands on a real ledger and
// saved baselines with their flags before, between and after their
// positional arguments: each order gives the same answer.
func TestCommandsTakeFlagsAnyOrder(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	st, err := sqlite.Open(context.Background(), db, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	recs := storetest.Records(0, 3) // 2025-03-14
	if err := st.Insert(context.Background(), store.Batch{Records: recs}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	id := recs[0].RequestID
	bdir := filepath.Join(dir, "baselines")
	for _, name := range []string{"v1", "v2"} {
		b := &baseline.Baseline{Name: name, CreatedAt: time.Now().UTC(), Model: "m", SuiteHash: "h", ServedModels: []string{"m"},
			Samples: []baseline.Sample{{Prompt: "a", OK: true, TTFTMS: 10, E2ELMS: 20, InputTokens: 5, OutputTokens: 3, OutputSHA256: "x"}}}
		if err := baseline.Save(bdir, b); err != nil {
			t.Fatal(err)
		}
	}

	for _, tc := range []struct {
		orders [][]string
		want   string // in stdout of every order
	}{
		{[][]string{
			{"requests", "show", "--db", db, id},
			{"requests", "show", id, "--db", db},
			{"requests", "show", "--json", id, "--db", db},
		}, id},
		{[][]string{
			{"explain", "--db", db, id},
			{"explain", id, "--db", db},
			{"explain", "--db", db, "--", id},
		}, id},
		{[][]string{
			{"report", "models", "--db", db, "--from", "2025-03-01", "--to", "2025-04-01", "--format", "csv"},
			{"report", "--db", db, "models", "--from", "2025-03-01", "--to", "2025-04-01", "--format", "csv"},
			{"report", "--db", db, "--from", "2025-03-01", "--to", "2025-04-01", "--format", "csv", "models"},
		}, recs[0].Model},
		{[][]string{
			{"baseline", "compare", "v1", "--against", "v2", "--dir", bdir},
			{"baseline", "compare", "--against", "v2", "--dir", bdir, "v1"},
			{"baseline", "compare", "--against", "v2", "v1", "--dir", bdir},
		}, "no drift"},
	} {
		for _, args := range tc.orders {
			out, errOut, err := runCmd(t, args...)
			if err != nil || !strings.Contains(out, tc.want) {
				t.Errorf("%q: err %v, stdout lacks %q:\n%s%s", args, err, tc.want, out, errOut)
			}
		}
	}

	// Commands without positionals name a stray one instead of ignoring it
	// (and the flags after it).
	for _, args := range [][]string{
		{"requests", "nope", "--db", db},
		{"requests", "show", "a", "b", "--db", db},
		{"reconcile", "bill.csv", "--db", db},
		{"bench", "http://127.0.0.1:1/v1"},
		{"baseline", "compare", "v1", "v2", "--dir", bdir},
	} {
		_, errOut, err := runCmd(t, args...)
		if !errors.Is(err, errUsage) || errOut == "" {
			t.Errorf("%q: error %v, stderr %q; want a usage error that says why", args, err, errOut)
		}
	}
}
