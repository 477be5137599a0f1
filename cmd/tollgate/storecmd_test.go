package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/clickhouse"
	"github.com/tollgate-dev/tollgate/internal/store/clickhouse/chtest"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
	"github.com/tollgate-dev/tollgate/internal/store/storetest"
)

// movedLedger fills a real SQLite file with what a single replica leaves
// behind: varied records (sampled and not, failed, retried, every field
// set, none set), more rows sharing one arrival than a page holds,
// amendments (engine timing after the fact), events, alerting windows and
// engine samples. It returns the file's path.
func movedLedger(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "single.db")
	st, err := sqlite.Open(ctx, path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var recs []*record.Record
	for i := range 400 {
		r := storetest.Record(i)
		if i%5 == 0 {
			r.Sampled, r.Timeline = false, nil
		}
		recs = append(recs, r)
	}
	// 120 requests refused in the same nanosecond: more than a page of 50,
	// so paging by arrival must neither cut nor repeat them forever.
	tie := storetest.Base.Add(100*time.Second + 7)
	for i := range 120 {
		recs = append(recs, storetest.Minimal(fmt.Sprintf("tie-%03d", i), tie))
	}
	retry := storetest.Record(1000)
	retry.RequestID, retry.Attempt, retry.Retries = "req-001000-2", 2, 1
	recs = append(recs, storetest.Record(1000), retry, storetest.Filled())
	if err := st.Insert(ctx, store.Batch{Records: recs}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"req-000010", "req-000011", "req-000015"} {
		et := record.EngineTiming{Signal: "vllm_span", Queue: 3*time.Millisecond + 1, TTFT: 90*time.Millisecond + 3, Prefill: 80 * time.Millisecond,
			Decode: 700*time.Millisecond + 9, PromptTokens: 512, CompletionTokens: 64, CachedTokens: 128}
		if err := st.SetEngineTiming(ctx, id, et); err != nil {
			t.Fatal(err)
		}
	}
	base := storetest.Base.UTC().Truncate(time.Hour)
	if err := st.AddEvents(ctx, []store.Event{
		{At: base.Add(time.Minute + 5), Kind: "quota_warning", Subject: "user:alice", Message: "80 % of daily tokens", Data: `{"used":800}`},
		{At: base.Add(2 * time.Minute), Kind: "alert", Subject: "ttft_p99", Message: "firing", Data: `{}`},
		{At: base.Add(2 * time.Minute), Kind: "alert", Subject: "ttft_p99", Message: "firing", Data: `{}`}, // twice, as it happened
	}); err != nil {
		t.Fatal(err)
	}
	minute := store.WindowMinute{Minute: base.Add(3 * time.Minute), Model: "model-0", BizLine: "biz-0", Upstream: "vllm-a", Data: []byte{1, 2, 3, 0, 255}}
	if err := st.AddWindowMinutes(ctx, []store.WindowMinute{minute, minute, // two replicas, the same minute
		{Minute: base.Add(4 * time.Minute), Model: "model-1", Template: "tpl-1", Data: []byte("sketch")}}); err != nil {
		t.Fatal(err)
	}
	if err := st.AddWindowHours(ctx, []store.WindowHour{{Hour: base, Model: "model-0", BizLine: "biz-0", Data: []byte("hour")}}); err != nil {
		t.Fatal(err)
	}
	day := store.FloorDay(base, time.UTC)
	if ok, err := st.AddWindowDay(ctx, day, day.AddDate(0, 0, 1), []store.WindowDay{{Start: day, End: day.AddDate(0, 0, 1), Model: "model-0", Data: []byte("day")}}); err != nil || !ok {
		t.Fatalf("AddWindowDay: %v %v", ok, err)
	}
	if err := st.AddEngineSamples(ctx, []store.EngineSample{
		{At: base.Add(10 * time.Second), Upstream: "vllm-a", Model: "model-0", Up: true, Running: 3, Waiting: 1, KVCacheUsage: 0.5,
			PrefixCacheHitRate: 0.25, TTFTP50: 0.1, TTFTP95: 0.2, TTFTP99: 0.3, PromptTokensPerS: 100, GenerationTokensPerS: 50},
		{At: base.Add(20 * time.Second), Upstream: "vllm-a", Model: "model-0", Up: false, Running: math.NaN(), Waiting: math.NaN(), KVCacheUsage: math.NaN(),
			PrefixCacheHitRate: math.NaN(), TTFTP50: math.NaN(), TTFTP95: math.NaN(), TTFTP99: math.NaN(), PromptTokensPerS: math.NaN(), GenerationTokensPerS: math.NaN()},
	}); err != nil {
		t.Fatal(err)
	}
	return path
}

// sameLedger checks that dst holds exactly src's ledger: the listing of
// every row is equal, requests come back equal with all their attempts,
// timelines and amendments (a sample of them: each is a query), and the
// reports' totals by day, model and user are equal. viaJSON: the JSON form
// writes an unset usage source as "none", which means the same.
func sameLedger(t *testing.T, src, dst store.Backend, viaJSON bool) {
	t.Helper()
	ctx := context.Background()
	norm := func(recs []*record.Record) []*record.Record {
		if viaJSON {
			for _, r := range recs {
				if r.Usage.Source == "" {
					r.Usage.Source = record.SourceNone
				}
			}
		}
		return recs
	}
	all, err := src.Requests(ctx, store.Filter{Limit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 400+120+3 {
		t.Fatalf("source holds %d rows; the fixture has 523", len(all))
	}
	there, err := dst.Requests(ctx, store.Filter{Limit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	// Rows sharing an arrival may list in another order.
	byID := cmpopts.SortSlices(func(a, b *record.Record) bool { return a.RequestID < b.RequestID })
	if diff := cmp.Diff(norm(all), there, byID); diff != "" {
		t.Errorf("every row listed (-source +destination):\n%s", diff)
	}
	for i, r := range all {
		if i%9 != 0 && r.EngineTiming == nil && r.Attempt < 2 && !strings.HasPrefix(r.RequestID, "value-") {
			continue
		}
		want, err := src.Request(ctx, r.RequestID)
		if err != nil {
			t.Fatal(err)
		}
		got, err := dst.Request(ctx, r.RequestID)
		if err != nil {
			t.Errorf("Request(%q) in the destination: %v", r.RequestID, err)
			continue
		}
		if diff := cmp.Diff(norm(want), got); diff != "" {
			t.Errorf("Request(%q) (-source +destination):\n%s", r.RequestID, diff)
		}
	}
	q := store.ReportQuery{GroupBy: []store.Dim{store.DimDay, store.DimModel, store.DimUser}}
	want, err := src.Report(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	got, err := dst.Report(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	key := func(r store.ReportRow) string { return strings.Join(r.Keys, "|") + "|" + r.Currency }
	wm, gm := map[string]store.Totals{}, map[string]store.Totals{}
	var n int64
	for _, r := range want {
		if r.Totals == (store.Totals{}) {
			continue // a group re-rated into another currency, left as zeros by SQLite
		}
		wm[key(r)] = r.Totals
		n += r.Requests
	}
	for _, r := range got {
		gm[key(r)] = r.Totals
	}
	if n != int64(len(all)) {
		t.Errorf("source report counts %d requests, want %d", n, len(all))
	}
	if diff := cmp.Diff(wm, gm); diff != "" {
		t.Errorf("report by day, model, user (-source +destination):\n%s", diff)
	}
}

// sameAnalytics checks that dst holds src's events, windows and engine
// samples, as many times each as src does.
func sameAnalytics(t *testing.T, src, dst store.Backend) {
	t.Helper()
	ctx := context.Background()
	from, to := storetest.Base.Add(-48*time.Hour), storetest.Base.Add(48*time.Hour)
	check := func(what string, want, got any, err1, err2 error) {
		t.Helper()
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: %v %v", what, err1, err2)
		}
		if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b float64) bool { return a == b || (math.IsNaN(a) && math.IsNaN(b)) })); diff != "" {
			t.Errorf("%s (-source +destination):\n%s", what, diff)
		}
	}
	e1, err1 := src.Events(ctx, from, "", 100)
	e2, err2 := dst.Events(ctx, from, "", 100)
	check("events", e1, e2, err1, err2)
	m1, err1 := src.WindowMinutes(ctx, from, to)
	m2, err2 := dst.WindowMinutes(ctx, from, to)
	check("window minutes", len(m1), len(m2), err1, err2)
	check("window minutes", missing(m1, m2, minuteKey), []store.WindowMinute(nil), nil, nil)
	h1, err1 := src.WindowHours(ctx, from, to)
	h2, err2 := dst.WindowHours(ctx, from, to)
	check("window hours", h1, h2, err1, err2)
	d1, err1 := src.WindowDays(ctx, from, to)
	d2, err2 := dst.WindowDays(ctx, from, to)
	check("window days", d1, d2, err1, err2)
	s1, err1 := src.EngineSamples(ctx, from, to, "")
	s2, err2 := dst.EngineSamples(ctx, from, to, "")
	check("engine samples", s1, s2, err1, err2)
}

func minuteKey(m store.WindowMinute) string {
	return fmt.Sprintf("%d|%s|%s|%s|%s|%x", m.Minute.UnixNano(), m.Model, m.BizLine, m.Upstream, m.Template, m.Data)
}

// clickHouseConfig writes a config file naming database db on the server.
func clickHouseConfig(t testing.TB, chURL, db string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), db+".yaml")
	yml := "store:\n  backend: clickhouse\n  clickhouse: {url: \"" + chURL + "\", database: " + db + ", timeout: 30s}\n"
	if err := os.WriteFile(path, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func openClickHouse(t *testing.T, chURL, db string) *clickhouse.Store {
	t.Helper()
	st, err := clickhouse.Open(context.Background(), clickhouse.Config{HTTP: chURL, Database: db}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func dropDatabase(t *testing.T, chURL, db string) {
	t.Cleanup(func() {
		if _, err := chtest.Exec(context.Background(), chURL, "DROP DATABASE IF EXISTS "+db); err != nil {
			t.Errorf("drop %s: %v", db, err)
		}
	})
}

// TestStoreToClickHouse moves a SQLite ledger into a real ClickHouse
// server, with "store copy" and with "store export | store import", each
// twice, and reads it back through the store and through the CLI's
// --config.
func TestStoreToClickHouse(t *testing.T) {
	chURL := chtest.Server(t)
	from := movedLedger(t)
	src, err := sqlite.Open(context.Background(), from, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()

	t.Run("copy", func(t *testing.T) {
		db := chtest.Database()
		dropDatabase(t, chURL, db)
		cfg := clickHouseConfig(t, chURL, db)
		_, stderr, err := runCmd(t, "store", "copy", "--from", from, "--config", cfg, "--batch", "50")
		if err != nil {
			t.Fatalf("store copy: %v\n%s", err, stderr)
		}
		if !strings.Contains(stderr, "copied 523 rows") || !strings.Contains(stderr, "copied 3 events, 3 window minutes, 1 window hours, 1 window days, 2 engine samples") {
			t.Errorf("progress on stderr:\n%s", stderr)
		}
		dst := openClickHouse(t, chURL, db)
		sameLedger(t, src, dst, false)
		sameAnalytics(t, src, dst)

		// Again: nothing doubles.
		_, stderr, err = runCmd(t, "store", "copy", "--from", from, "--config", cfg, "--batch", "50")
		if err != nil {
			t.Fatalf("second store copy: %v\n%s", err, stderr)
		}
		if !strings.Contains(stderr, "copied 0 events, 0 window minutes, 0 window hours, 0 window days, 0 engine samples") {
			t.Errorf("second copy added analytics rows:\n%s", stderr)
		}
		sameLedger(t, src, dst, false)
		sameAnalytics(t, src, dst)

		// The CLI reads the fleet's store with --config exactly as the
		// file with --db.
		for _, tc := range []struct{ cmd, args []string }{
			{[]string{"requests"}, []string{"--json", "--limit", "30"}},
			{[]string{"requests"}, []string{"--json", "--limit", "5", "--errors", "--model", "model-1"}},
			{[]string{"requests", "show"}, []string{"--json", "req-001000"}},
			{[]string{"explain"}, []string{"req-000010"}},
			{[]string{"diagnose"}, []string{"--since", "100000h", "--format", "csv"}},
			{[]string{"report", "models"}, []string{"--from", "2025-03-01", "--to", "2025-04-01", "--format", "csv"}},
			{[]string{"report", "users"}, []string{"--from", "2025-03-01", "--to", "2025-04-01", "--format", "json", "--biz_line", "biz-1"}},
		} {
			args := func(flag, val string) []string {
				return append(append(slices.Clone(tc.cmd), flag, val), tc.args...)
			}
			want, _, err1 := runCmd(t, args("--db", from)...)
			got, _, err2 := runCmd(t, args("--config", cfg)...)
			if err1 != nil || err2 != nil || len(want) < 100 {
				t.Errorf("%v: --db: %v, --config: %v (output %q)", tc, err1, err2, want)
				continue
			}
			if want != got {
				t.Errorf("%v: --config (ClickHouse) differs from --db (SQLite):\n%s", tc, cmp.Diff(want, got))
			}
		}
		if _, _, err := runCmd(t, "requests", "--config", cfg, "--db", from); err == nil || !strings.Contains(err.Error(), "give one of --db and --config") {
			t.Errorf("--db with a ClickHouse config: %v", err)
		}

		// rerate with a ClickHouse config re-rates ClickHouse; the same
		// prices on the SQLite file give the same reports.
		prices := "prices:\n  - {model: \"model-*\", currency: EUR, input: 1.5, cached_input: 0.25, output: 4}\n"
		sqlCfg := filepath.Join(t.TempDir(), "prices.yaml")
		chCfg := filepath.Join(t.TempDir(), "ch-prices.yaml")
		chYAML, err := os.ReadFile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := errors.Join(os.WriteFile(sqlCfg, []byte(prices), 0o644), os.WriteFile(chCfg, append(chYAML, prices...), 0o644)); err != nil {
			t.Fatal(err)
		}
		reportArgs := []string{"report", "models", "--from", "2025-03-01", "--to", "2025-04-01", "--format", "csv"}
		before, _, _ := runCmd(t, append(reportArgs, "--config", cfg)...)
		want, _, err1 := runCmd(t, "rerate", "--config", sqlCfg, "--db", from, "--from", "2025-03-01", "--to", "2025-04-01")
		got, _, err2 := runCmd(t, "rerate", "--config", chCfg, "--from", "2025-03-01", "--to", "2025-04-01")
		if err1 != nil || err2 != nil || want != got || !strings.Contains(got, "re-rated 403 requests") {
			t.Errorf("rerate: SQLite %q (%v), ClickHouse %q (%v); want the 403 priced rows re-rated on both", want, err1, got, err2)
		}
		afterSQL, _, err1 := runCmd(t, append(reportArgs, "--db", from)...)
		afterCH, _, err2 := runCmd(t, append(reportArgs, "--config", cfg)...)
		// SQLite keeps a group whose rows all moved to another currency
		// as a row of zeros; ClickHouse recomputes it away.
		afterSQL = dropZeroRows(afterSQL)
		if err1 != nil || err2 != nil || afterSQL != afterCH || afterCH == before || !strings.Contains(afterCH, "EUR") {
			t.Errorf("reports after rerate (errors %v, %v):\nSQLite:\n%s\nClickHouse:\n%s\nClickHouse before:\n%s", err1, err2, afterSQL, afterCH, before)
		}
	})

	t.Run("export and import", func(t *testing.T) {
		var jsonl, stderr bytes.Buffer
		if err := runStore(context.Background(), []string{"export", "--db", from, "--batch", "50"}, nil, &jsonl, &stderr); err != nil {
			t.Fatalf("store export: %v\n%s", err, stderr.String())
		}
		if n := strings.Count(jsonl.String(), "\n"); n != 523 || !strings.Contains(stderr.String(), "exported 523 rows") {
			t.Fatalf("export wrote %d lines; stderr:\n%s", n, stderr.String())
		}
		db := chtest.Database()
		dropDatabase(t, chURL, db)
		cfg := clickHouseConfig(t, chURL, db)
		for range 2 { // the second import changes nothing
			stderr.Reset()
			if err := runStore(context.Background(), []string{"import", "--config", cfg, "--batch", "100"}, bytes.NewReader(jsonl.Bytes()), nil, &stderr); err != nil {
				t.Fatalf("store import: %v\n%s", err, stderr.String())
			}
			if !strings.Contains(stderr.String(), "imported 523 rows") {
				t.Errorf("stderr:\n%s", stderr.String())
			}
			sameLedger(t, src, openClickHouse(t, chURL, db), true)
		}
	})
}

// TestStoreImportBadInput: a line that is not a record stops the import
// with an error that names it; the lines before it are in the store.
func TestStoreImportBadInput(t *testing.T) {
	good := func(i int) string {
		b, err := storetest.Record(i).MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	cases := []struct {
		name, input, want string
		written           int
	}{
		{"not JSON", good(1) + "\n" + good(2) + "\nhello\n" + good(3) + "\n", "line 3: not a JSON object", 2},
		{"cut short", good(1) + "\n" + good(2)[:40] + "\n", "line 2: not a record: unexpected end of JSON input", 1},
		{"no request id", good(1) + "\n\n" + `{"timing":{"arrival":"2026-01-02T03:04:05Z"}}` + "\n", "line 3: no request_id", 1},
		{"no arrival", `{"request_id":"x"}` + "\n", "line 1: no timing.arrival", 0},
		{"bad arrival", `{"request_id":"x","timing":{"arrival":"yesterday"}}` + "\n", `line 1: not a record: parsing time "yesterday"`, 0},
		{"wrong type", `{"request_id":7,"timing":{"arrival":"2026-01-02T03:04:05Z"}}` + "\n", "line 1: not a record: json: cannot unmarshal number", 0},
		{"array", "[1,2]\n", "line 1: not a JSON object", 0},
		{"too long", good(1) + "\n{" + strings.Repeat(" ", maxImportLine) + "}\n", "line 2: longer than 16 MiB", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "in.db")
			var stderr bytes.Buffer
			err := runStore(context.Background(), []string{"import", "--db", db, "--batch", "1"}, strings.NewReader(tc.input), nil, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want it to contain %q", err, tc.want)
			}
			if got := len(allRequests(t, db)); got != tc.written {
				t.Errorf("%d rows stored before the bad line; want %d", got, tc.written)
			}
		})
	}
}

// TestStoreCommandLine: usage errors, and a missing source named.
func TestStoreCommandLine(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none.db")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"store"}, "usage"},
		{[]string{"store", "move"}, "usage"},
		{[]string{"store", "copy", "--db", "x.db"}, "usage"},    // no --from
		{[]string{"store", "copy", "--from", missing}, "usage"}, // nowhere to
		{[]string{"store", "export", "--batch", "0"}, "usage"},  // bad batch
		{[]string{"store", "copy", "--from", missing, "--db", "y.db"}, "no ledger at " + missing},
		{[]string{"store", "export", "--db", missing}, "no ledger at " + missing},
	} {
		_, _, err := runCmd(t, tc.args...)
		switch {
		case err == nil:
			t.Errorf("%v: no error, want %q", tc.args, tc.want)
		case tc.want == "usage" && err != errUsage:
			t.Errorf("%v: %v, want a usage error", tc.args, err)
		case tc.want != "usage" && !strings.Contains(err.Error(), tc.want):
			t.Errorf("%v: %v, want it to mention %q", tc.args, err, tc.want)
		}
	}
}

// BenchmarkStoreCopyClickHouse: "store copy" of a 20,000-row SQLite ledger
// (a fifth of it sampled with timelines) into a fresh ClickHouse database
// per iteration; reports rows/s. Needs a server (skipped without one).
func BenchmarkStoreCopyClickHouse(b *testing.B) {
	chURL := chtest.Server(b)
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "bench.db")
	st, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		b.Fatal(err)
	}
	const n = 20000
	for from := 0; from < n; from += 1000 {
		recs := storetest.Records(from, 1000)
		for i, r := range recs {
			r.Sampled = (from+i)%5 == 0
			if !r.Sampled {
				r.Timeline = nil
			}
		}
		if err := st.Insert(ctx, store.Batch{Records: recs}); err != nil {
			b.Fatal(err)
		}
	}
	st.Close()
	b.ResetTimer()
	for b.Loop() {
		db := chtest.Database()
		var stderr bytes.Buffer
		err := run(ctx, []string{"store", "copy", "--from", path, "--config", clickHouseConfig(b, chURL, db), "--no-analytics"}, io.Discard, &stderr)
		b.StopTimer()
		if err != nil {
			b.Fatalf("%v\n%s", err, stderr.String())
		}
		if _, err := chtest.Exec(ctx, chURL, "DROP DATABASE IF EXISTS "+db); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

// dropZeroRows drops the CSV report lines that count no request.
func dropZeroRows(csv string) string {
	var out []string
	for _, line := range strings.SplitAfter(csv, "\n") {
		if f := strings.Split(line, ","); len(f) > 2 && f[2] == "0" {
			continue
		}
		out = append(out, line)
	}
	return strings.Join(out, "")
}
