package web

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite/bench"
	"github.com/tollgate-dev/tollgate/internal/window"
)

// The overview benchmark is opt-in: it builds a 1M-request ledger over 30
// days (bench.Gen, bench.Build) and the alerting windows' stored minutes
// of the same requests, which takes a minute or two.
const (
	envOverview     = "TOLLGATE_BENCH_OVERVIEW"      // "1" runs it
	envOverviewRows = "TOLLGATE_BENCH_OVERVIEW_ROWS" // default 1,000,000
	envOverviewDB   = "TOLLGATE_BENCH_OVERVIEW_DB"   // reuse (or build once into) this file
)

// BenchmarkOverview measures GET /api/v1/overview, latency percentiles
// included, over the last day, week and month of a 1M-request ledger.
func BenchmarkOverview(b *testing.B) {
	if os.Getenv(envOverview) != "1" {
		b.Skipf("set %s=1 to build a 1M-request ledger and measure the overview over it", envOverview)
	}
	ctx := context.Background()
	cfg := bench.Config{Rows: 1_000_000, Days: 30, Seed: 1}
	if v := os.Getenv(envOverviewRows); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("%s=%q: want a positive number", envOverviewRows, v)
		}
		cfg.Rows = n
	}
	path := os.Getenv(envOverviewDB)
	if path == "" {
		path = filepath.Join(b.TempDir(), "overview.db")
	}
	if _, err := os.Stat(path + ".done"); err != nil {
		t0 := time.Now()
		st, err := bench.Build(ctx, path, cfg, bench.BuildOptions{Batch: 10000, DeferIndexes: true, CacheMiB: 256, Shards: 4, Workers: 2})
		if err != nil {
			b.Fatal(err)
		}
		n, err := storeWindowMinutes(ctx, path, cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("built %d rows in %s, %d requests in the windows; total %s", st.Rows, st.Total.Round(time.Second), n, time.Since(t0).Round(time.Second))
		if err := os.WriteFile(path+".done", nil, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	s, err := sqlite.Open(ctx, path, slog.New(slog.DiscardHandler), sqlite.WithLocation(bench.Loc))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	end := time.Date(2026, 11, 1, 0, 0, 0, 0, bench.Loc).AddDate(0, 0, cfg.Days)
	win := window.New(window.Config{}, s, nil, nil)
	if err := win.Load(ctx, end); err != nil {
		b.Fatal(err)
	}
	// As serve does at start and every 15 minutes: closed days merged
	// (a no-op once done).
	t0 := time.Now()
	n, err := window.NewCompactor(s, bench.Loc, nil).Compact(ctx, end)
	if err != nil {
		b.Fatal(err)
	}
	if n > 0 {
		b.Logf("compacted %d days of window hours in %s", n, time.Since(t0).Round(time.Millisecond))
	}
	for _, days := range []int{1, 7, 30} {
		span := "from=" + end.AddDate(0, 0, -days).UTC().Format(time.RFC3339) + "&to=" + end.UTC().Format(time.RFC3339)
		// What the Overview page asks for at once (internal/ui): the
		// overview, and per step its requests, E2E and TTFT percentiles;
		// its step as the page picks it (1 h up to 14 days, else 1 d).
		step := "1h"
		if days > 14 {
			step = "1d"
		}
		page := []string{"/api/v1/overview?" + span, "/api/v1/series?" + span + "&step=" + step + "&measures=requests,errors",
			"/api/v1/percentiles?" + span + "&step=" + step + "&quantity=e2e", "/api/v1/percentiles?" + span + "&step=" + step + "&quantity=ttft"}
		newAPI := func() *API {
			return NewAPI(Options{Store: s, Loc: bench.Loc, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return end.Add(-time.Second) }, Windows: win})
		}
		call := func(b *testing.B, api *API, url string) {
			req := httptest.NewRequest(http.MethodGet, url, nil)
			req.RemoteAddr = "127.0.0.1:1234" // no tokens: loopback only
			rec := httptest.NewRecorder()
			api.ServeHTTP(rec, req)
			if rec.Code != 200 {
				b.Fatalf("%d %s", rec.Code, rec.Body)
			}
		}
		b.Run(strconv.Itoa(days)+"d", func(b *testing.B) {
			// A new API: the first call merges every stored hour and day
			// (cold), the loop's calls find them merged (warm).
			api := newAPI()
			t0 := time.Now()
			call(b, api, page[0])
			b.Logf("%dd cold (first call): %s", days, time.Since(t0).Round(time.Millisecond))
			for b.Loop() {
				call(b, api, page[0])
			}
		})
		b.Run(strconv.Itoa(days)+"d-page", func(b *testing.B) {
			// The page's four calls at once, each loop on a new API (cold).
			for b.Loop() {
				api := newAPI()
				var wg sync.WaitGroup
				for _, url := range page {
					wg.Go(func() { call(b, api, url) })
				}
				wg.Wait()
			}
		})
	}
	noWin := NewAPI(Options{Store: s, Loc: bench.Loc, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return end.Add(-time.Second) }})
	b.Run("30d-rollups-only", func(b *testing.B) {
		url := "/api/v1/overview?from=" + end.AddDate(0, 0, -30).UTC().Format(time.RFC3339) + "&to=" + end.UTC().Format(time.RFC3339)
		for b.Loop() {
			req := httptest.NewRequest(http.MethodGet, url, nil)
			req.RemoteAddr = "127.0.0.1:1234"
			rec := httptest.NewRecorder()
			noWin.ServeHTTP(rec, req)
			if rec.Code != 200 {
				b.Fatalf("%d %s", rec.Code, rec.Body)
			}
		}
	})
}

// storeWindowMinutes feeds the ledger's requests, regenerated, to an
// alerting-window aggregator that persists its minutes, and its closed
// hours, as it does in serve. It returns how many requests it fed.
func storeWindowMinutes(ctx context.Context, path string, cfg bench.Config) (int, error) {
	s, err := sqlite.Open(ctx, path, nil, sqlite.WithLocation(bench.Loc))
	if err != nil {
		return 0, err
	}
	defer s.Close()
	start := cfg.Start
	if start.IsZero() {
		start = time.Date(2026, 11, 1, 0, 0, 0, 0, bench.Loc)
	}
	// Requests last at most minutes: a grace of 10 lets none be late.
	const grace = 10 * time.Minute
	// A batch spans hours of requests: memory keeps a day, so none is
	// forgotten before it is persisted.
	agg := window.New(window.Config{Grace: grace, Keep: 24 * time.Hour, From: start}, s, nil, nil)
	g := bench.New(cfg)
	buf := make([]record.Record, 4096)
	total := 0
	var last time.Time
	for {
		n := g.Next(buf)
		if n == 0 {
			break
		}
		for i := range buf[:n] {
			r := &buf[i]
			r.Finish()
			agg.Add(r)
			if r.Arrival.After(last) {
				last = r.Arrival
			}
		}
		total += n
		agg.Flush(ctx, last)
	}
	agg.Flush(ctx, last.Add(grace+time.Hour))
	return total, ctx.Err()
}
