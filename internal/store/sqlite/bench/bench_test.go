package bench

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
)

// The 10M-row benchmark is opt-in: building its ledger takes a while and
// gigabytes of disk, so the ordinary suite must never start it.
const (
	envRun  = "TOLLGATE_BENCH_10M"  // "1" runs it
	envDir  = "TOLLGATE_BENCH_DIR"  // where ledgers are cached; default the user cache dir
	envRows = "TOLLGATE_BENCH_ROWS" // rows of the ledger; default 10,000,000
	// envReuse names a ledger file built earlier (by an older tollgate,
	// with its .json beside it) to query instead of the cached one: Open
	// migrates it, so a schema change is measured on the same rows.
	envReuse = "TOLLGATE_BENCH_LEDGER"
)

// genVersion names the generator's output: bump it whenever Gen changes
// what it generates, so that a cached ledger is not reused for new rows.
const genVersion = 2 // 2: time-ordered request and trace ids

// buildOptions is the fast route to a big ledger; docs/benchmarks.md says
// why each part is there and TestBuildVerify shows it builds the same file
// as the production path.
var buildOptions = BuildOptions{Batch: 10000, DeferIndexes: true, CacheMiB: 256, Shards: 10, Workers: 2}

// cached is what is kept next to a built ledger, so that a rerun reusing
// it still reports how it was built and checked.
type cached struct {
	Config    Config
	Options   string
	Stats     BuildStats
	Verified  []Check // one day, row for row
	Totals    []Check // whole period, per currency
	VerifyDur time.Duration
	Tables    map[string]int64
	Sizes     map[string]float64 // MiB per table or index
	FileMiB   float64
}

func benchConfig(tb testing.TB) Config {
	if os.Getenv(envRun) != "1" {
		tb.Skipf("set %s=1 to build (once, cached) and query a 10M-row ledger; see docs/benchmarks.md", envRun)
	}
	cfg := Config{Seed: 1}
	if v := os.Getenv(envRows); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			tb.Fatalf("%s=%q: want a positive number of rows", envRows, v)
		}
		cfg.Rows = n
	}
	return cfg.withDefaults()
}

// ledger returns the cached ledger for cfg, building it first if needed.
// The file name carries a hash of the generator version, cfg and the
// store's schema: a migration or a generator change builds a new one.
func ledger(tb testing.TB, cfg Config) (string, cached) {
	tb.Helper()
	dir := os.Getenv(envDir)
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			tb.Fatal(err)
		}
		dir = filepath.Join(base, "tollgate-bench")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	if p := os.Getenv(envReuse); p != "" {
		var c cached
		b, err := os.ReadFile(p + ".json")
		if err != nil {
			tb.Fatalf("%s=%s: %v", envReuse, p, err)
		}
		if err := json.Unmarshal(b, &c); err != nil {
			tb.Fatalf("%s.json: %v", p, err)
		}
		tb.Logf("reusing %s (%s)", p, envReuse)
		return p, c
	}
	h := sha256.New()
	fmt.Fprintf(h, "%d %+v\n%s", genVersion, cfg, schema(tb))
	path := filepath.Join(dir, fmt.Sprintf("ledger-%d-%s.db", cfg.Rows, hex.EncodeToString(h.Sum(nil))[:12]))
	var c cached
	if b, err := os.ReadFile(path + ".json"); err == nil {
		if err := json.Unmarshal(b, &c); err != nil {
			tb.Fatalf("%s.json: %v", path, err)
		}
		tb.Logf("reusing %s", path)
		return path, c
	}
	c = build(tb, path, cfg)
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		tb.Fatal(err)
	}
	// Written last: a ledger without it is incomplete and gets rebuilt.
	if err := os.WriteFile(path+".json", b, 0o644); err != nil {
		tb.Fatal(err)
	}
	return path, c
}

// schema is the DDL of a new ledger, as the store creates it.
func schema(tb testing.TB) string {
	path := filepath.Join(tb.TempDir(), "schema.db")
	s, err := sqlite.Open(context.Background(), path, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.Close(); err != nil {
		tb.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	var ddl string
	if err := db.QueryRow("SELECT group_concat(sql, ';') FROM (SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name)").Scan(&ddl); err != nil {
		tb.Fatal(err)
	}
	return ddl
}

func build(tb testing.TB, path string, cfg Config) cached {
	ctx := context.Background()
	removeDB(path)
	tb.Logf("building %s: %d rows, options %+v, on %d CPUs, load %s", path, cfg.Rows, buildOptions, runtime.NumCPU(), loadavg())
	next := 0
	opt := buildOptions
	opt.Progress = func(rows int, el time.Duration) {
		if rows*50 >= next*cfg.Rows {
			tb.Logf("  %5.1f%%  %9d rows  %6.0fs  %6.0f rows/s  load %s", 100*float64(rows)/float64(cfg.Rows), rows,
				el.Seconds(), float64(rows)/el.Seconds(), loadavg())
			next++
		}
	}
	st, err := Build(ctx, path, cfg, opt)
	if err != nil {
		tb.Fatalf("Build: %v", err)
	}
	tb.Logf("built: %+v (%.0f rows/s over the whole build)", st, float64(st.Rows)/st.Total.Seconds())
	c := cached{Config: cfg, Options: fmt.Sprintf("%+v", buildOptions), Stats: st}

	t0 := time.Now()
	day := cfg.Start.AddDate(0, 0, cfg.Days/2)
	if c.Verified, err = Verify(ctx, path, day, day.AddDate(0, 0, 1)); err != nil {
		tb.Fatalf("Verify: %v", err)
	}
	if c.Totals, err = VerifyTotals(ctx, path); err != nil {
		tb.Fatalf("VerifyTotals: %v", err)
	}
	c.VerifyDur = time.Since(t0)
	for _, ch := range append(c.Verified, c.Totals...) {
		if ch.Missing != 0 || ch.Extra != 0 || ch.RollupRows == 0 {
			tb.Fatalf("rollups disagree with the ledger: %+v", ch)
		}
	}
	tb.Logf("verified in %v: %+v %+v", c.VerifyDur, c.Verified, c.Totals)
	if c.Tables, err = TableRows(ctx, path); err != nil {
		tb.Fatal(err)
	}
	if c.Sizes, err = sizes(ctx, path); err != nil {
		tb.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		tb.Fatal(err)
	}
	c.FileMiB = float64(fi.Size()) / (1 << 20)
	return c
}

// sizes returns the MiB each table and index takes in the file.
func sizes(ctx context.Context, path string) (map[string]float64, error) {
	db, err := sql.Open("sqlite", path+"?_query_only=1")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SELECT name, SUM(pgsize) FROM dbstat GROUP BY name")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]float64{}
	for rows.Next() {
		var n string
		var b int64
		if err := rows.Scan(&n, &b); err != nil {
			return nil, err
		}
		out[n] = float64(b) / (1 << 20)
	}
	return out, rows.Err()
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// TestLedger10M builds (or reuses) the big ledger and reports how it was
// built, its verification, and what it holds.
func TestLedger10M(t *testing.T) {
	cfg := benchConfig(t)
	path, c := ledger(t, cfg)
	t.Logf("ledger %s: %.0f MiB", path, c.FileMiB)
	t.Logf("build: %d rows, insert phase %v, copy %v, indexes %v, total %v (%.0f rows/s), %d sampled",
		c.Stats.Rows, c.Stats.Insert.Round(time.Second), c.Stats.Copy.Round(time.Second), c.Stats.Index.Round(time.Second),
		c.Stats.Total.Round(time.Second), float64(c.Stats.Rows)/c.Stats.Total.Seconds(), c.Stats.Sampled)
	for _, ch := range c.Verified {
		t.Logf("verify one day  %-14s %9d rollup rows  missing %d  extra %d", ch.Table, ch.RollupRows, ch.Missing, ch.Extra)
	}
	for _, ch := range c.Totals {
		t.Logf("verify totals   %-14s %9d currencies   missing %d  extra %d", ch.Table, ch.RollupRows, ch.Missing, ch.Extra)
	}
	for n, rows := range c.Tables {
		t.Logf("table %-16s %10d rows", n, rows)
	}
	for n, mib := range c.Sizes {
		t.Logf("size %-36s %9.1f MiB", n, mib)
	}
}

// TestIngest10M measures the production path (Store.Insert, batches of
// 512, SQLite's default cache) where it matters: appending the next day's
// traffic to a copy of the 10M-row ledger, whose random-key indexes no
// longer fit any cache. TestBuildVerify logs the same on an empty ledger.
func TestIngest10M(t *testing.T) {
	cfg := benchConfig(t)
	path, _ := ledger(t, cfg)
	cp := path + ".ingest"
	removeDB(cp)
	defer removeDB(cp)
	t0 := time.Now()
	if err := copyFile(path, cp); err != nil {
		t.Fatal(err)
	}
	t.Logf("copied the ledger in %v", time.Since(t0).Round(time.Second))
	next := cfg
	next.Rows, next.Days, next.Seed, next.Start = 200_000, 1, cfg.Seed+1, cfg.Start.AddDate(0, 0, cfg.Days)
	if v := os.Getenv("TOLLGATE_BENCH_INGEST_ROWS"); v != "" {
		next.Rows, _ = strconv.Atoi(v)
	}
	t.Logf("appending %d rows of day %d through Store.Insert, batches of 512, default cache; load %s", next.Rows, cfg.Days+1, loadavg())
	last, lastAt := 0, time.Duration(0)
	st, err := Build(context.Background(), cp, next, BuildOptions{Progress: func(rows int, el time.Duration) {
		if rows-last >= next.Rows/5 {
			t.Logf("  %7d rows  %5.0fs  %5.0f rows/s in this stretch  load %s", rows, el.Seconds(),
				float64(rows-last)/(el-lastAt).Seconds(), loadavg())
			last, lastAt = rows, el
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("production path on a 10M-row ledger: %d rows in %v = %.0f rows/s (%d sampled); load %s",
		st.Rows, st.Insert.Round(time.Second), float64(st.Rows)/st.Insert.Seconds(), st.Sampled, loadavg())
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
