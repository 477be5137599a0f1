package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the time zone tests run wherever the suite does

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func openAt(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path, testLogger(t))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return openAt(t, filepath.Join(t.TempDir(), "ledger.db"))
	})
}

func schemaVersion(t *testing.T, path string) int {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v int
	if err := db.QueryRow("SELECT MAX(version) FROM schema_migrations").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestReopenIsNoop(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	for range 3 {
		s := openAt(t, path)
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if got := schemaVersion(t, path); got != len(migrations) {
			t.Fatalf("schema version %d, want %d", got, len(migrations))
		}
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM schema_migrations").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(migrations) {
		t.Errorf("schema_migrations has %d rows after three opens, want %d", n, len(migrations))
	}
}

// spaced returns storetest's Records 0 … n-1, the i-th arriving at
// base + i × step and costing 100 + i nanos of USD, then edit(i, r) if
// set, finished.
func spaced(n int, base time.Time, step time.Duration, edit func(i int, r *record.Record)) []*record.Record {
	recs := storetest.Records(0, n)
	for i, r := range recs {
		r.Arrival = base.Add(time.Duration(i) * step)
		r.Cost = record.Cost{Nanos: int64(100 + i), Currency: "USD"}
		if edit != nil {
			edit(i, r)
		}
		r.Finish()
	}
	return recs
}

// TestMigration6Backfills: a ledger from before the per-user and monthly
// rollups gets them filled from rollup_day, so month reports read the
// same sums before and after the upgrade.
func TestMigration6Backfills(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	ctx := t.Context()
	s := openAt(t, path)
	recs := spaced(200, time.Date(2026, 1, 25, 0, 0, 0, 0, time.UTC), 7*time.Hour, nil)
	if err := s.Insert(ctx, store.Batch{Records: recs}); err != nil {
		t.Fatal(err)
	}
	queries := []store.ReportQuery{
		{GroupBy: []store.Dim{store.DimUser, store.DimMonth}},
		{GroupBy: []store.Dim{store.DimTemplate, store.DimModel}, From: time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)},
		{GroupBy: []store.Dim{store.DimUser, store.DimDay}},
	}
	report := func(s *Store) [][]store.ReportRow {
		var out [][]store.ReportRow
		for _, q := range queries {
			rows, err := s.Report(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, rows)
		}
		return out
	}
	before := report(s)
	// Back to schema 5: the tables migrations 6 and later made are gone.
	for _, tbl := range append(slices.Concat(v6Tables, v17Tables, v21Tables), rollupTable{name: "window_minute"}, rollupTable{name: "window_hour"}, rollupTable{name: "window_day"},
		rollupTable{name: "captures"}) {
		if _, err := s.w.ExecContext(ctx, "DROP TABLE "+tbl.name); err != nil {
			t.Fatal(err)
		}
	}
	// …and the columns migrations 11, 12, 14, 15, 16 and 18 added, and
	// the measure of migration 13.
	if _, err := s.w.ExecContext(ctx, "DROP INDEX requests_client_id; ALTER TABLE requests DROP COLUMN client_request_id;"+
		"ALTER TABLE requests DROP COLUMN parent_span_id; ALTER TABLE requests DROP COLUMN response_id;"+
		"ALTER TABLE requests DROP COLUMN engine_timing_due_ns;"+
		"ALTER TABLE requests DROP COLUMN cache_write_tokens; ALTER TABLE requests DROP COLUMN cache_write_1h_tokens;"+
		"ALTER TABLE requests DROP COLUMN tool_calls;"+
		"DROP INDEX requests_end_user; ALTER TABLE requests DROP COLUMN end_user; ALTER TABLE requests DROP COLUMN native_finish_reason;"+
		"ALTER TABLE requests DROP COLUMN system_sha256; ALTER TABLE requests DROP COLUMN system_tokens;"+
		"DROP TABLE rollup_state"); err != nil {
		t.Fatal(err)
	}
	for _, tbl := range v2Tables {
		if tbl.name == promptDay.name {
			continue
		}
		if _, err := s.w.ExecContext(ctx, "ALTER TABLE "+tbl.name+" DROP COLUMN input_unknown"); err != nil {
			t.Fatal(err)
		}
	}
	// …and prompt_day as wide as it was (migration 20 narrowed it).
	widenPromptDay(t, s, v4Measures, recs)
	s = rewind(t, s, path, 6)
	defer s.Close()
	var n int
	if err := s.r.QueryRowContext(ctx, "SELECT COUNT(*) FROM rollup_month").Scan(&n); err != nil || n == 0 {
		t.Fatalf("rollup_month after migration 6: %d rows, %v", n, err)
	}
	if diff := cmp.Diff(before, report(s)); diff != "" {
		t.Errorf("reports after migration 6 differ (-before +after):\n%s", diff)
	}
}

// TestMigration17Backfills: the end-user rollups of a ledger written
// before them are filled from its rows, so reports by end user cover the
// days before the upgrade.
func TestMigration17Backfills(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	ctx := t.Context()
	s := openAt(t, path)
	recs := spaced(120, time.Date(2026, 1, 30, 0, 0, 0, 0, time.UTC), 97*time.Minute, func(i int, r *record.Record) {
		if i%3 != 0 {
			r.EndUser = fmt.Sprintf("customer-%d", i%5)
		}
	})
	if err := s.Insert(ctx, store.Batch{Records: recs}); err != nil {
		t.Fatal(err)
	}
	q := store.ReportQuery{GroupBy: []store.Dim{store.DimEndUser, store.DimDay, store.DimModel},
		From: time.Date(2026, 1, 30, 7, 0, 0, 0, time.UTC), To: time.Date(2026, 2, 6, 5, 0, 0, 0, time.UTC)}
	before, err := s.Report(ctx, q)
	if err != nil || len(before) == 0 {
		t.Fatalf("report by end user: %d rows, %v", len(before), err)
	}
	for _, tbl := range slices.Concat(v17Tables, v21Tables) {
		if _, err := s.w.ExecContext(ctx, "DROP TABLE "+tbl.name); err != nil {
			t.Fatal(err)
		}
	}
	// …and what migrations 18 and 19 added.
	if _, err := s.w.ExecContext(ctx, "ALTER TABLE requests DROP COLUMN system_sha256; ALTER TABLE requests DROP COLUMN system_tokens; DROP TABLE rollup_state"); err != nil {
		t.Fatal(err)
	}
	s = rewind(t, s, path, 17)
	defer s.Close()
	after, err := s.Report(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("report by end user after migration 17 differs (-before +after):\n%s", diff)
	}
}

// rewind forgets migrations from version on (whose changes the caller
// undid) and opens the ledger again, which applies them anew.
func rewind(t *testing.T, s *Store, path string, version int) *Store {
	t.Helper()
	if _, err := s.w.ExecContext(t.Context(), "DELETE FROM schema_migrations WHERE version >= ?", version); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return openAt(t, path)
}

func TestRefusesNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	s := openAt(t, path)
	ctx := t.Context()
	if err := s.Insert(ctx, store.Batch{Records: storetest.Records(0, 3)}); err != nil {
		t.Fatal(err)
	}
	future := len(migrations) + 1
	if _, err := s.w.ExecContext(ctx, "INSERT INTO schema_migrations VALUES (?, 0)", future); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	_, err := Open(ctx, path, testLogger(t))
	if !errors.Is(err, ErrNewerSchema) {
		t.Fatalf("Open of a version %d ledger = %v, want ErrNewerSchema", future, err)
	}
	for _, want := range []string{path, fmt.Sprintf("version %d", future), "upgrade tollgate"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	// Refusing must not have touched the file.
	if got := schemaVersion(t, path); got != future {
		t.Errorf("schema version after refusal = %d, want %d", got, future)
	}
}

func TestSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	recs := storetest.Records(0, 20)
	s := openAt(t, path)
	if err := s.Insert(t.Context(), store.Batch{Records: recs}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openAt(t, path)
	defer s.Close()
	for _, r := range recs {
		got, err := s.Request(t.Context(), r.RequestID)
		if err != nil {
			t.Fatalf("Request(%q) after reopen: %v", r.RequestID, err)
		}
		if diff := cmp.Diff([]*record.Record{r}, got); diff != "" {
			t.Errorf("Request(%q) after reopen (-want +got):\n%s", r.RequestID, diff)
		}
	}
	// Still idempotent across processes' lifetimes.
	if err := s.Insert(t.Context(), store.Batch{Records: recs}); err != nil {
		t.Fatal(err)
	}
	all, err := s.Requests(t.Context(), store.Filter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(recs) {
		t.Errorf("%d rows after replay on reopen, want %d", len(all), len(recs))
	}
}

func TestPragmas(t *testing.T) {
	s := openAt(t, filepath.Join(t.TempDir(), "ledger.db"))
	defer s.Close()
	tests := []struct {
		db     *sql.DB
		pragma string
		want   string
	}{
		{s.w, "journal_mode", "wal"},
		{s.w, "synchronous", "1"}, // NORMAL
		{s.w, "foreign_keys", "1"},
		{s.w, "busy_timeout", fmt.Sprint(busyTimeoutMS)},
		{s.r, "foreign_keys", "1"},
		{s.r, "busy_timeout", fmt.Sprint(busyTimeoutMS)},
		{s.r, "query_only", "1"},
	}
	for _, tt := range tests {
		var got string
		if err := tt.db.QueryRowContext(t.Context(), "PRAGMA "+tt.pragma).Scan(&got); err != nil {
			t.Fatalf("PRAGMA %s: %v", tt.pragma, err)
		}
		if got != tt.want {
			t.Errorf("PRAGMA %s = %q, want %q", tt.pragma, got, tt.want)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	notADB := filepath.Join(dir, "not-a-db")
	if err := os.WriteFile(notADB, []byte(strings.Repeat("this is not an SQLite file\n", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path string
	}{
		{"empty", ""},
		{"memory", ":memory:"},
		{"uri", "file:x.db?mode=memory"},
		{"question mark", filepath.Join(dir, "a?b.db")},
		{"missing directory", filepath.Join(dir, "no", "such", "dir", "ledger.db")},
		{"not a database", notADB},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Open(t.Context(), tt.path, testLogger(t))
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded", tt.path)
			}
			if want := fmt.Sprintf("open ledger %q: ", tt.path); !strings.HasPrefix(err.Error(), want) {
				t.Errorf("Open(%q) error %q, want prefix %q", tt.path, err, want)
			}
		})
	}
}

// TestDetailsCascade checks the foreign key: retention deletes ledger rows
// and must not leave orphaned details behind.
func TestDetailsCascade(t *testing.T) {
	s := openAt(t, filepath.Join(t.TempDir(), "ledger.db"))
	defer s.Close()
	ctx := t.Context()
	if err := s.Insert(ctx, store.Batch{Records: storetest.Records(0, 3)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, "DELETE FROM requests WHERE request_id = ?", storetest.Record(1).RequestID); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.r.QueryRowContext(ctx, "SELECT COUNT(*) FROM request_details").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("%d details left after deleting one of three requests, want 2", n)
	}
}

// TestQueriesUseIndexes guards the plans of the real queries: a full scan
// or a sort of months of ledger would not show up in tests otherwise.
func TestQueriesUseIndexes(t *testing.T) {
	s := openAt(t, filepath.Join(t.TempDir(), "ledger.db"))
	defer s.Close()
	since := storetest.Base
	tests := []struct {
		name      string
		filter    store.Filter
		wantIndex string
		sorts     bool // acceptable when the index finds a handful of rows
	}{
		{"newest", store.Filter{}, "requests_arrival", false},
		{"window", store.Filter{Since: since, Until: since.Add(time.Hour)}, "requests_arrival (arrival>? AND arrival<?)", false},
		{"user", store.Filter{UserID: "u"}, "requests_user (user_id=?)", false},
		{"user window", store.Filter{UserID: "u", Since: since}, "requests_user (user_id=? AND arrival>?)", false},
		{"biz line", store.Filter{BizLine: "b", Since: since}, "requests_biz_line (biz_line=? AND arrival>?)", false},
		{"model", store.Filter{Model: "m", Since: since}, "requests_model (model=? AND arrival>?)", false},
		{"trace", store.Filter{TraceID: "t"}, "requests_trace (trace_id=?)", true},
		// Without an index of their own, these walk arrival newest first
		// and stop at Limit.
		{"errors", store.Filter{ErrorsOnly: true}, "requests_arrival", false},
		{"slow", store.Filter{MinE2E: time.Second}, "requests_arrival", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, args := requestsQuery(tt.filter)
			p := plan(t, s, q, args...)
			if !strings.Contains(p, tt.wantIndex) {
				t.Errorf("plan does not use %s:\n%s", tt.wantIndex, p)
			}
			if !tt.sorts && strings.Contains(p, "TEMP B-TREE") {
				t.Errorf("plan sorts instead of reading the index in order:\n%s", p)
			}
		})
	}
	t.Run("Request", func(t *testing.T) {
		p := plan(t, s, requestSQL, "id")
		for _, want := range []string{"sqlite_autoindex_requests_1 (request_id=?)", "requests_logical (logical_request_id=?)"} {
			if !strings.Contains(p, want) {
				t.Errorf("plan does not use %s:\n%s", want, p)
			}
		}
		if strings.Contains(p, "SCAN requests") {
			t.Errorf("plan scans the ledger:\n%s", p)
		}
	})
}

func plan(t *testing.T, s *Store, q string, args ...any) string {
	t.Helper()
	rows, err := s.r.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		b.WriteString(detail + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func BenchmarkInsert(b *testing.B) {
	const batch = 512
	s := openAt(b, filepath.Join(b.TempDir(), "ledger.db"))
	defer s.Close()
	tmpl := storetest.Records(0, batch)
	recs := make([]*record.Record, batch)
	for i := range recs {
		c := *tmpl[i]
		recs[i] = &c
	}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		for _, r := range recs {
			r.RequestID = fmt.Sprintf("bench-%09d", n)
			n++
		}
		if err := s.Insert(b.Context(), store.Batch{Records: recs}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
}

func TestAnalyticsConformance(t *testing.T) {
	storetest.RunAnalytics(t, func(t *testing.T) storetest.AnalyticsStore {
		return openAt(t, filepath.Join(t.TempDir(), "ledger.db"))
	})
}

// TestReportPeriodsInZones: the period checks in time zones with a
// daylight-saving change (23- and 25-hour days) and with midnights off the
// UTC hour (read from hourly rollups alone).
func TestReportPeriodsInZones(t *testing.T) {
	for _, name := range []string{"America/New_York", "America/Havana", "Asia/Kolkata", "Asia/Shanghai"} {
		t.Run(name, func(t *testing.T) {
			loc, err := time.LoadLocation(name)
			if err != nil {
				t.Fatal(err)
			}
			s, err := Open(context.Background(), filepath.Join(t.TempDir(), "tz.db"), testLogger(t), WithLocation(loc))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			storetest.ReportPeriods(t, s, loc)
		})
	}
}

// TestReportTimeZone: days follow the report time zone, so a request at
// 23:30 UTC counts for the next day in Shanghai (UTC+8).
func TestReportTimeZone(t *testing.T) {
	sh, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Skip("no tzdata:", err)
	}
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "tz.db"), testLogger(t), WithLocation(sh))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := storetest.Record(1)
	r.Arrival = time.Date(2026, 3, 1, 23, 30, 0, 0, time.UTC) // 2026-03-02 07:30 in Shanghai
	if err := s.Insert(context.Background(), store.Batch{Records: []*record.Record{r}}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []store.ReportQuery{
		{GroupBy: []store.Dim{store.DimDay}},
		{GroupBy: []store.Dim{store.DimDay}, From: time.Date(2026, 3, 2, 0, 0, 0, 0, sh), To: time.Date(2026, 3, 3, 0, 0, 0, 0, sh)},
		{GroupBy: []store.Dim{store.DimDay}, From: time.Date(2026, 3, 2, 6, 0, 0, 0, sh), To: time.Date(2026, 3, 2, 9, 0, 0, 0, sh)},
	} {
		rows, err := s.Report(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 1 || rows[0].Keys[0] != "2026-03-02" || rows[0].Requests != 1 {
			t.Errorf("Report(%v..%v) = %+v, want one request on 2026-03-02", q.From, q.To, rows)
		}
	}
}

// TestMigration21EndUserMonths: a month of end users is read from their
// month rollup, which migration 21 fills from the day rollup of a ledger
// written before it: the same rows as summing the days.
func TestMigration21EndUserMonths(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	ctx := t.Context()
	s := openAt(t, path)
	// Three months, a request every 14 hours.
	recs := spaced(150, time.Date(2026, 1, 3, 0, 0, 0, 0, time.UTC), 14*time.Hour, func(i int, r *record.Record) {
		if i%4 != 0 {
			r.EndUser = fmt.Sprintf("customer-%d", i%6)
		}
	})
	if err := s.Insert(ctx, store.Batch{Records: recs}); err != nil {
		t.Fatal(err)
	}
	q := store.ReportQuery{GroupBy: []store.Dim{store.DimEndUser, store.DimMonth, store.DimModel},
		From: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)}
	var need []string
	for _, d := range q.GroupBy {
		if c, ok := dimColumn[d]; ok {
			need = append(need, c)
		}
	}
	plan := s.plan(q, time.UTC, need)
	if len(plan) != 1 || plan[0].table.name != "end_user_month" {
		t.Fatalf("a quarter of whole months by end user reads %+v; want end_user_month alone", plan)
	}
	before, err := s.Report(ctx, q)
	if err != nil || len(before) == 0 {
		t.Fatalf("report by end user and month: %d rows, %v", len(before), err)
	}
	// From the days, as before migration 21.
	q.GroupBy = []store.Dim{store.DimEndUser, store.DimDay, store.DimModel}
	days, err := s.Report(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	months := map[string]store.Totals{}
	for _, r := range days {
		k := r.Keys[0] + "|" + r.Keys[1][:7] + "|" + r.Keys[2]
		sum := months[k]
		sum.Add(r.Totals)
		months[k] = sum
	}
	for _, r := range before {
		if diff := cmp.Diff(months[r.Keys[0]+"|"+r.Keys[1][:7]+"|"+r.Keys[2]], r.Totals); diff != "" {
			t.Errorf("%v: month rollup differs from its days (-days +month):\n%s", r.Keys, diff)
		}
	}
	q.GroupBy = []store.Dim{store.DimEndUser, store.DimMonth, store.DimModel}
	if _, err := s.w.ExecContext(ctx, "DROP TABLE end_user_month"); err != nil {
		t.Fatal(err)
	}
	s = rewind(t, s, path, 21)
	defer s.Close()
	after, err := s.Report(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("report by end user and month after migration 21 differs (-before +after):\n%s", diff)
	}
}
