package bench

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/report"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
)

// query is one thing a person asks of the ledger: a report, a listing or a
// lookup. run returns how many rows it answered with.
type query struct {
	name  string
	reads string // what it reads, for the table in docs/benchmarks.md
	extra bool   // not in the requirement, measured to find the limits
	run   func(ctx context.Context, s *sqlite.Store) (int, error)
}

// ids are ledger values the lookups need, read from the ledger itself.
type ids struct {
	request, retried, trace, heavyUser, lightUser string
}

func pickIDs(tb testing.TB, path string, cfg Config) ids {
	db, err := sql.Open("sqlite", path+"?_query_only=1")
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	var v ids
	// The middle row: an ordinary request of an ordinary day.
	if err := db.QueryRow("SELECT request_id, trace_id FROM requests WHERE rowid = ?", cfg.Rows/2).Scan(&v.request, &v.trace); err != nil {
		tb.Fatalf("pick a request: %v", err)
	}
	if err := db.QueryRow("SELECT logical_request_id FROM requests WHERE rowid > ? AND attempt = 2 LIMIT 1", cfg.Rows/2).Scan(&v.retried); err != nil {
		tb.Fatalf("pick a retried request: %v", err)
	}
	// Users are ranked by traffic (Zipf): u0000 sends the most.
	v.heavyUser, v.lightUser = "u0000", fmt.Sprintf("u%04d", cfg.Users-1)
	return v
}

func queries(cfg Config, v ids) []query {
	month := report.Query{From: cfg.Start, To: cfg.Start.AddDate(0, 0, cfg.Days)}
	dayStart := cfg.Start.AddDate(0, 0, cfg.Days/2)
	day := report.Query{From: dayStart, To: dayStart.AddDate(0, 0, 1)}
	var qs []query
	for _, k := range report.Kinds {
		for _, p := range []struct {
			name string
			q    report.Query
		}{{"month", month}, {"one day", day}} {
			qs = append(qs, query{name: "report " + k.Name + ", " + p.name, reads: reads(k.Name, p.name == "month"),
				run: func(ctx context.Context, s *sqlite.Store) (int, error) {
					res, err := report.Run(ctx, s, k.Name, p.q)
					if err != nil {
						return 0, err
					}
					return len(res.Rows), nil
				}})
		}
	}
	rep := func(q store.ReportQuery) func(ctx context.Context, s *sqlite.Store) (int, error) {
		return func(ctx context.Context, s *sqlite.Store) (int, error) {
			rows, err := s.Report(ctx, q)
			return len(rows), err
		}
	}
	list := func(f store.Filter) func(ctx context.Context, s *sqlite.Store) (int, error) {
		return func(ctx context.Context, s *sqlite.Store) (int, error) {
			recs, err := s.Requests(ctx, f)
			return len(recs), err
		}
	}
	get := func(id string) func(ctx context.Context, s *sqlite.Store) (int, error) {
		return func(ctx context.Context, s *sqlite.Store) (int, error) {
			recs, err := s.Request(ctx, id)
			return len(recs), err
		}
	}
	end := month.To
	qs = append(qs,
		query{name: "store.Report user × day, month", reads: "rollup_day_user",
			run: rep(store.ReportQuery{From: month.From, To: month.To, GroupBy: []store.Dim{store.DimUser, store.DimDay}})},
		query{name: "store.Report user × day, month on hour bounds", reads: "rollup_hour (2 × 23 h) + rollup_day_user", extra: true,
			run: rep(store.ReportQuery{From: month.From.Add(time.Hour), To: end.Add(-time.Hour), GroupBy: []store.Dim{store.DimUser, store.DimDay}})},
		query{name: "store.Report model × hour, last 24 h", reads: "rollup_hour", extra: true,
			run: rep(store.ReportQuery{From: end.Add(-27 * time.Hour), To: end.Add(-3 * time.Hour), GroupBy: []store.Dim{store.DimModel, store.DimHour}})},
		query{name: "store.Prompts month (waste's duplicates)", reads: "prompt_day", extra: true,
			run: func(ctx context.Context, s *sqlite.Store) (int, error) {
				rows, err := s.Prompts(ctx, month.From, month.To, 2, 20)
				return len(rows), err
			}},
		query{name: "Requests latest 100", reads: "requests_arrival", run: list(store.Filter{})},
		query{name: "Requests by user (heaviest), 100", reads: "requests_user", run: list(store.Filter{UserID: v.heavyUser})},
		query{name: "Requests by user (lightest), 100", reads: "requests_user", run: list(store.Filter{UserID: v.lightUser})},
		query{name: "Requests by trace id", reads: "requests_trace", run: list(store.Filter{TraceID: v.trace})},
		query{name: "Request(id)", reads: "pk + requests_logical", run: get(v.request)},
		query{name: "Request(logical id of a retried request)", reads: "pk + requests_logical", run: get(v.retried)},
		query{name: "Requests by user, one day", reads: "requests_user", extra: true,
			run: list(store.Filter{UserID: v.heavyUser, Since: day.From, Until: day.To})},
		query{name: "Requests errors only, 100", reads: "requests_arrival, filtered", extra: true, run: list(store.Filter{ErrorsOnly: true})},
		query{name: "Requests by template, 100", reads: "requests_arrival, filtered", extra: true, run: list(store.Filter{TemplateID: "tpl-05-rag-answer"})},
		query{name: "Requests slow only (≥ 30 s), 100", reads: "requests_arrival, filtered", extra: true, run: list(store.Filter{MinE2E: 30 * time.Second})},
		query{name: "Requests by user, errors only, 100", reads: "requests_user, filtered", extra: true,
			run: list(store.Filter{UserID: v.lightUser, ErrorsOnly: true})},
		query{name: "Requests by a template with no rows", reads: "requests_arrival, all of it", extra: true,
			run: list(store.Filter{TemplateID: "tpl-does-not-exist"})},
	)
	return qs
}

// reads says which rollups a named report reads for a whole day or month.
func reads(kind string, month bool) string {
	user, model := "rollup_day_user", "rollup_day"
	if month {
		user, model = "rollup_month_user", "rollup_month"
	}
	switch kind {
	case "users":
		return "rollup_day_user"
	case "biz", "top":
		return user
	case "waste":
		return user + " + " + model + " + rollup_day (previous period) + prompt_day"
	}
	return model
}

// prune runs the store's retention job once at the end of the period with
// everything kept, as the hourly job would have run on a live ledger: the
// store may still compact rollups of closed days (prompt_day keeps only
// repeated prompts). It changes the cached file; it is a no-op the second
// time.
func prune(tb testing.TB, path string, cfg Config) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, path, nil, sqlite.WithLocation(Loc))
	if err != nil {
		tb.Fatal(err)
	}
	defer s.Close()
	t0 := time.Now()
	n, err := s.Prune(ctx, cfg.Start.AddDate(0, 0, cfg.Days), store.Retention{})
	if err != nil {
		tb.Fatalf("Prune: %v", err)
	}
	rows, err := TableRows(ctx, path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Logf("Prune at the end of the period, retention off: %d rows deleted in %v; prompt_day now %d rows",
		n, time.Since(t0).Round(time.Millisecond), rows["prompt_day"])
}

// timing is p50 and max of runs.
type timing struct{ p50, max time.Duration }

func summarize(ds []time.Duration) timing {
	s := slices.Clone(ds)
	slices.Sort(s)
	return timing{s[len(s)/2], s[len(s)-1]}
}

const runs = 5

// TestReports10M times every query cold (the file evicted from the OS page
// cache where the platform allows, and a new sqlite.Open) and warm (the
// same Store, after one untimed run), runs times each, and prints the table
// that goes into docs/benchmarks.md.
func TestReports10M(t *testing.T) {
	cfg := benchConfig(t)
	path, c := ledger(t, cfg)
	ctx := context.Background()
	if os.Getenv("TOLLGATE_BENCH_PRUNE") != "0" {
		prune(t, path, cfg)
	}
	v := pickIDs(t, path, cfg)
	qs := queries(cfg, v)
	if f := os.Getenv("TOLLGATE_BENCH_ONLY"); f != "" {
		qs = slices.DeleteFunc(qs, func(q query) bool { return !strings.Contains(q.name, f) })
	}
	t.Logf("ledger %s (%.0f MiB, %d rows); load before: %s; cold = %s", path, c.FileMiB, c.Tables["requests"], loadavg(), evictNote)

	var b strings.Builder
	fmt.Fprintf(&b, "| query | reads | rows | runs | cold p50 | cold max | warm p50 | warm max |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
	var opens []time.Duration
	for _, q := range qs {
		var cold, warm []time.Duration
		n, k := 0, runs
		for i := 0; i < k; i++ {
			if err := evict(path); err != nil {
				t.Fatalf("evict: %v", err)
			}
			t0 := time.Now()
			s, err := sqlite.Open(ctx, path, nil, sqlite.WithLocation(Loc))
			if err != nil {
				t.Fatal(err)
			}
			opens = append(opens, time.Since(t0))
			t0 = time.Now()
			if n, err = q.run(ctx, s); err != nil {
				t.Fatalf("%s: %v", q.name, err)
			}
			cold = append(cold, time.Since(t0))
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if i == 0 && cold[0] > 10*time.Second {
				k = 3 // a query this slow has made its point
			}
		}
		s, err := sqlite.Open(ctx, path, nil, sqlite.WithLocation(Loc))
		if err != nil {
			t.Fatal(err)
		}
		for i := range k + 1 {
			t0 := time.Now()
			if _, err := q.run(ctx, s); err != nil {
				t.Fatalf("%s: %v", q.name, err)
			}
			if i > 0 {
				warm = append(warm, time.Since(t0))
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		ct, wt := summarize(cold), summarize(warm)
		name := q.name
		if q.extra {
			name += " *"
		}
		flag := ""
		if ct.max >= time.Second || wt.max >= time.Second {
			flag = " **≥ 1 s**"
		}
		fmt.Fprintf(&b, "| %s%s | %s | %d | %d | %s | %s | %s | %s |\n", name, flag, q.reads, n, k, ms(ct.p50), ms(ct.max), ms(wt.p50), ms(wt.max))
		t.Logf("%-52s rows %6d  cold p50 %8s max %8s  warm p50 %8s max %8s  load %s", q.name, n, ms(ct.p50), ms(ct.max), ms(wt.p50), ms(wt.max), loadavg())
	}
	o := summarize(opens)
	fmt.Fprintf(&b, "\nsqlite.Open of the evicted file (not included above): p50 %s, max %s over %d opens. Load after: %s.\n", ms(o.p50), ms(o.max), len(opens), loadavg())
	t.Logf("\n%s", b.String())
	if out := os.Getenv("TOLLGATE_BENCH_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func ms(d time.Duration) string {
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.0f ms", float64(d)/1e6)
}

// BenchmarkReports10M is the warm half of TestReports10M as Go benchmarks,
// for benchstat comparisons of a change to the store:
//
//	TOLLGATE_BENCH_10M=1 go test -run '^$' -bench Reports10M -benchtime 5x ./internal/store/sqlite/bench/
func BenchmarkReports10M(b *testing.B) {
	cfg := benchConfig(b)
	path, _ := ledger(b, cfg)
	ctx := context.Background()
	s, err := sqlite.Open(ctx, path, nil, sqlite.WithLocation(Loc))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for _, q := range queries(cfg, pickIDs(b, path, cfg)) {
		b.Run(strings.NewReplacer(" ", "_", ",", "").Replace(q.name), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := q.run(ctx, s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
