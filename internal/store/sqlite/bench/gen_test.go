package bench

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/report"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
)

// small is the ledger the ordinary suite builds: dense enough (two days)
// that rollups aggregate, small enough for CI under -race.
func small() Config {
	if raceEnabled {
		return Config{Rows: 1000, Days: 2, Users: 50, Seed: 7}
	}
	return Config{Rows: 12000, Days: 2, Users: 150, Seed: 7}
}

func generate(cfg Config, buf int) []record.Record {
	g := New(cfg)
	var out []record.Record
	b := make([]record.Record, buf)
	for {
		n := g.Next(b)
		if n == 0 {
			return out
		}
		out = append(out, b[:n]...)
	}
}

// TestGenDeterministic: the same Config gives the same rows whatever the
// batch size, and day ranges give exactly the whole period's rows there,
// which is what makes a sharded build equal to a sequential one.
func TestGenDeterministic(t *testing.T) {
	cfg := Config{Rows: 5000, Days: 3, Users: 50, Seed: 3}
	whole := generate(cfg, 512)
	if len(whole) != cfg.Rows {
		t.Fatalf("generated %d rows, want %d", len(whole), cfg.Rows)
	}
	// reflect.DeepEqual first: cmp.Diff is slow on thousands of Records.
	if other := generate(cfg, 7); !reflect.DeepEqual(whole, other) {
		t.Fatalf("batch size changed the rows (-512 +7):\n%s", cmp.Diff(whole, other))
	}
	var parts []record.Record
	for d := range cfg.Days {
		c := cfg
		c.FromDay, c.ToDay = d, d+1
		parts = append(parts, generate(c, 100)...)
	}
	if !reflect.DeepEqual(whole, parts) {
		t.Fatalf("day ranges differ from the whole period:\n%s", cmp.Diff(whole, parts))
	}
	cfg.Seed = 4
	if reflect.DeepEqual(whole, generate(cfg, 512)) {
		t.Fatal("another seed gave the same rows")
	}
}

// TestGenShape checks that the generated traffic is what docs/benchmarks.md
// says it is.
func TestGenShape(t *testing.T) {
	cfg := Config{Rows: 50000, Days: 7, Users: 300, Seed: 1}.withDefaults()
	if raceEnabled {
		cfg.Rows = 20000
	}
	recs := generate(cfg, 1000)
	var (
		failed, length, stream, cached, cny, sampled, retried int
		bizOf                                                 = map[string]string{}
		byHour                                                [24]int
		prompts                                               = map[string]int{}
		ids                                                   = map[string]bool{}
		byUser                                                = map[string]int{}
	)
	for i := range recs {
		r := &recs[i]
		if i > 0 && r.Arrival.Before(recs[i-1].Arrival) {
			t.Fatalf("row %d arrives before row %d", i, i-1)
		}
		if r.Arrival.Before(cfg.Start) || !r.Arrival.Before(cfg.Start.AddDate(0, 0, cfg.Days)) {
			t.Fatalf("row %d arrives at %v, outside the period", i, r.Arrival)
		}
		checkIDs(t, i, r)
		if i > 0 && r.RequestID[:16] < recs[i-1].RequestID[:16] {
			t.Fatalf("row %d's id %q sorts before row %d's %q", i, r.RequestID, i-1, recs[i-1].RequestID)
		}
		if ids[r.RequestID] {
			t.Fatalf("row %d: id %q twice", i, r.RequestID)
		}
		ids[r.RequestID] = true
		if b, ok := bizOf[r.UserID]; ok && b != r.BizLine {
			t.Fatalf("user %s in business lines %s and %s", r.UserID, b, r.BizLine)
		}
		bizOf[r.UserID] = r.BizLine
		if r.ErrorType != "" {
			failed++
		}
		if r.FinishReason == "length" {
			length++
		}
		if r.Stream {
			stream++
		}
		if r.Usage.CachedInputTokens > 0 {
			cached++
		}
		if r.Usage.CachedInputTokens > r.Usage.InputTokens {
			t.Fatalf("row %d: cached %d > input %d", i, r.Usage.CachedInputTokens, r.Usage.InputTokens)
		}
		if r.Cost.Currency == "CNY" {
			cny++
		}
		if r.Sampled {
			sampled++
		}
		if r.Retries > 0 {
			retried++
		}
		byHour[r.Arrival.In(Loc).Hour()]++
		prompts[r.PromptSHA256]++
		byUser[r.UserID]++
	}
	dups := 0
	for _, n := range prompts {
		dups += n - 1
	}
	top := slices.Max(mapValues(byUser))
	share := func(n int) float64 { return float64(n) / float64(len(recs)) }
	checks := []struct {
		name     string
		got      float64
		min, max float64
	}{
		{"failed", share(failed), 0.015, 0.03},
		{"finish_reason=length", share(length), 0.02, 0.12},
		{"streamed", share(stream), 0.6, 0.9},
		{"with cached tokens", share(cached), 0.4, 0.8},
		{"in CNY", share(cny), 0.01, 0.2},
		{"sampled", share(sampled), 0.15, 0.5},
		{"retried", share(retried), 0.001, 0.01},
		{"duplicate prompts", share(dups), 0.05, 0.3},
		{"top user", share(top), 0.05, 0.3},
		{"peak hour / quietest hour", float64(slices.Max(byHour[:])) / float64(max(1, slices.Min(byHour[:]))), 5, 40},
	}
	for _, c := range checks {
		t.Logf("%-26s %.3f", c.name, c.got)
		if c.got < c.min || c.got > c.max {
			t.Errorf("%s = %.3f, want within [%.3f, %.3f]", c.name, c.got, c.min, c.max)
		}
	}
}

// checkIDs: the generator writes the gateway's id layouts, from the
// arrival, so the benchmarks insert what production does.
func checkIDs(t *testing.T, i int, r *record.Record) {
	t.Helper()
	id, want := r.LogicalRequestID, r.LogicalRequestID
	if r.Attempt > 1 {
		want += ".a" + strconv.Itoa(r.Attempt)
	}
	ms, err := strconv.ParseUint(id[min(4, len(id)):min(16, len(id))], 16, 64)
	if len(id) != record.RequestIDLen || !strings.HasPrefix(id, "req_") || err != nil || int64(ms) != r.Arrival.UnixMilli() || r.RequestID != want {
		t.Fatalf("row %d (attempt %d, at %d ms): ids %q / %q, want req_ + 12 hex digits of the ms + 16 and %q",
			i, r.Attempt, r.Arrival.UnixMilli(), r.RequestID, id, want)
	}
	sec, err := strconv.ParseUint(r.TraceID[:min(8, len(r.TraceID))], 16, 32)
	if len(r.TraceID) != 32 || err != nil || int64(sec) != r.Arrival.Unix() {
		t.Fatalf("row %d (at %d s): trace id %q, want 8 hex digits of the second + 24", i, r.Arrival.Unix(), r.TraceID)
	}
}

func mapValues(m map[string]int) []int {
	out := make([]int, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// TestBuildVerify builds a small ledger through the production path and
// again the fast way the 10M benchmark uses, checks every rollup row of
// each against its ledger and the reports against sums taken from the
// generated Records, and checks that the two files hold the same rows.
// Under -race, where SQLite runs many times slower, only the fast build
// and its full check run: the build is what has goroutines.
func TestBuildVerify(t *testing.T) {
	ctx := context.Background()
	cfg := small().withDefaults()
	dir := t.TempDir()
	builds := []struct {
		name string
		opt  BuildOptions
	}{
		{"production", BuildOptions{}},
		{"fast", BuildOptions{Batch: 5000, DeferIndexes: true, CacheMiB: 64, Shards: 2, Workers: 2}},
	}
	if raceEnabled {
		builds = builds[1:]
	}
	var paths []string
	for _, b := range builds {
		path := filepath.Join(dir, b.name+".db")
		paths = append(paths, path)
		st, err := Build(ctx, path, cfg, b.opt)
		if err != nil {
			t.Fatalf("Build %s: %v", b.name, err)
		}
		if st.Rows != cfg.Rows {
			t.Fatalf("Build %s: %d rows, want %d", b.name, st.Rows, cfg.Rows)
		}
		t.Logf("%s build: %d rows in %v", b.name, st.Rows, st.Total)
		verifyAll(t, path, time.Time{}, time.Time{})
		if raceEnabled {
			continue // the SQL below has no goroutines of ours to race
		}
		// One day only, as the 10M benchmark verifies its sample.
		day := cfg.Start.AddDate(0, 0, 1)
		verifyAll(t, path, day, day.AddDate(0, 0, 1))
		checkReports(t, path, cfg)
	}
	if len(paths) == 2 {
		sameFiles(t, paths[0], paths[1])
	}
}

func verifyAll(t *testing.T, path string, from, to time.Time) {
	t.Helper()
	checks, err := Verify(context.Background(), path, from, to)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	for _, c := range checks {
		if c.RollupRows == 0 || c.Missing != 0 || c.Extra != 0 {
			t.Errorf("%s [%v, %v): %d rows, %d ledger groups missing or summed differently, %d extra",
				c.Table, from, to, c.RollupRows, c.Missing, c.Extra)
		}
	}
}

// checkReports compares what report.Run and store.Report answer with sums
// over the generated Records.
func checkReports(t *testing.T, path string, cfg Config) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, path, nil, sqlite.WithLocation(Loc))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := map[string]store.Totals{}
	var all store.Totals
	for _, r := range generate(cfg, 1000) {
		r.Finish()
		k := r.UserID + "/" + r.Arrival.In(Loc).Format(time.DateOnly) + "/" + r.Cost.Currency
		tot := want[k]
		tot.Add(store.TotalsOf(&r))
		want[k] = tot
		all.Add(store.TotalsOf(&r))
	}
	from, to := cfg.Start, cfg.Start.AddDate(0, 0, cfg.Days)
	rows, err := s.Report(ctx, store.ReportQuery{From: from, To: to, GroupBy: []store.Dim{store.DimUser, store.DimDay}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]store.Totals{}
	for _, r := range rows {
		got[r.Keys[0]+"/"+r.Keys[1]+"/"+r.Currency] = r.Totals
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("user × day report differs from the generated rows' sums (-want +got):\n%s", diff)
	}
	// The same over hour bounds, which reads rollup_hour and folds hours.
	rows, err = s.Report(ctx, store.ReportQuery{From: from.Add(time.Hour), To: to.Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatal("no rows over hour bounds")
	}
	// Every named report runs and the users report adds up to everything.
	for _, k := range report.Kinds {
		res, err := report.Run(ctx, s, k.Name, report.Query{From: from, To: to})
		if err != nil {
			t.Fatalf("report %s: %v", k.Name, err)
		}
		if len(res.Rows) == 0 {
			t.Errorf("report %s: no rows", k.Name)
		}
		if k.Name == "users" {
			var reqs int64
			for _, row := range res.Rows {
				reqs += row[2].(int64)
			}
			if reqs != all.Requests {
				t.Errorf("users report counts %d requests, the ledger has %d", reqs, all.Requests)
			}
		}
	}
}

// sameFiles fails unless the two ledgers hold the same rows (with the same
// rowids), the same rollups and the same indexes.
func sameFiles(t *testing.T, a, b string) {
	t.Helper()
	db, err := sql.Open("sqlite", a)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec("ATTACH DATABASE ? AS b", b); err != nil {
		t.Fatal(err)
	}
	queries := []string{"SELECT type, name, tbl_name, sql FROM %s.sqlite_master WHERE name NOT LIKE 'sqlite_stat%%'"}
	for _, tb := range []string{"requests", "request_details"} {
		queries = append(queries, "SELECT rowid, * FROM %s."+tb)
	}
	for _, s := range rollupSpecs {
		queries = append(queries, "SELECT * FROM %s."+s.table)
	}
	for _, q := range queries {
		var na, nb, diff int64
		qa, qb := fmt.Sprintf(q, "main"), fmt.Sprintf(q, "b")
		err := db.QueryRow(fmt.Sprintf("SELECT (SELECT COUNT(*) FROM (%s)), (SELECT COUNT(*) FROM (%s)), (SELECT COUNT(*) FROM (%s EXCEPT %s)) + (SELECT COUNT(*) FROM (%s EXCEPT %s))",
			qa, qb, qa, qb, qb, qa)).Scan(&na, &nb, &diff)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if na != nb || diff != 0 || na == 0 {
			t.Errorf("%s: %d rows vs %d, %d differ", qa, na, nb, diff)
		}
	}
	var ok string
	if err := db.QueryRow("PRAGMA b.integrity_check").Scan(&ok); err != nil || ok != "ok" {
		t.Errorf("integrity_check of the fast build: %q, %v", ok, err)
	}
}
