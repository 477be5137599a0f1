package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/clickhouse/chtest"
	"github.com/tollgate-dev/tollgate/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	needServer(t)
	storetest.Run(t, func(t *testing.T) store.Store { return openTest(t) })
}

// selectRowBinary runs q on s's server and decodes one value per row.
func selectRowBinary[T any](t *testing.T, s *Store, q string, read func(*dec) T) []T {
	t.Helper()
	var out []T
	err := s.c.query(t.Context(), q+" FORMAT RowBinary", func(d *dec) error {
		for d.more() {
			v := read(d)
			if d.err == nil {
				out = append(out, v)
			}
		}
		return d.err
	})
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return out
}

// TestQuoteString: every literal the store builds reads back as exactly the
// value it quoted, whatever the bytes.
func TestQuoteString(t *testing.T) {
	s := openTest(t)
	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	tests := []string{
		"", "plain", `quote'd "id"`, `back\slash`, `\'`, `'\`, "\\\\'", "line\nbreak\r\ttab",
		"nul\x00byte", "中文 ✓ ünïcode", "\xff\xfe invalid utf-8 \xc3", "'; DROP DATABASE x; --",
		"/* comment */", "-- comment", "?", "{p:String}", "$1", "`backtick`", string(every),
	}
	for _, want := range tests {
		got := selectRowBinary(t, s, "SELECT "+quoteString(want), (*dec).str)
		if len(got) != 1 || got[0] != want {
			t.Errorf("SELECT %s = %q, want %q", quoteString(want), got, want)
		}
	}
	list := selectRowBinary(t, s, "SELECT arrayJoin(["+strings.Trim(quoteStrings(tests), "()")+"])", (*dec).str)
	if diff := cmp.Diff(tests, list); diff != "" {
		t.Errorf("quoteStrings list (-want +got):\n%s", diff)
	}
}

func TestQuoteInt(t *testing.T) {
	s := openTest(t)
	for _, n := range []int64{0, 1, -1, 42, -42, math.MaxInt64, math.MinInt64 + 1, math.MinInt64} {
		got := selectRowBinary(t, s, "SELECT toInt64("+quoteInt(n)+")", (*dec).i64)
		if len(got) != 1 || got[0] != n {
			t.Errorf("toInt64(%s) = %v, want %d", quoteInt(n), got, n)
		}
		// After a minus, a negative literal must not start a comment.
		got = selectRowBinary(t, s, "SELECT toInt64(0 -"+quoteInt(n)+" + "+quoteInt(n)+")", (*dec).i64)
		if len(got) != 1 || got[0] != 0 {
			t.Errorf("0 -%s + %s = %v, want 0", quoteInt(n), quoteInt(n), got)
		}
	}
}

func TestQuoteDay(t *testing.T) {
	s := openTest(t)
	for _, d := range []uint16{0, 1, 20161, maxDay} {
		got := selectRowBinary(t, s, "SELECT toDate("+quoteDay(d)+")", (*dec).u16)
		if len(got) != 1 || got[0] != d {
			t.Errorf("toDate(%s) = %v, want %d", quoteDay(d), got, d)
		}
	}
}

func TestParseVersion(t *testing.T) {
	tests := []struct {
		in   string
		want Version
		err  bool
	}{
		{"18.16.1", Version{18, 16, 1}, false},
		{"23.8.16.40", Version{23, 8, 16}, false},
		{"24.3.1.2672-lts", Version{24, 3, 1}, false},
		{" 21.11 \n", Version{21, 11, 0}, false},
		{"19.1.6-stable", Version{19, 1, 6}, false},
		{"", Version{}, true},
		{"18", Version{}, true},
		{"x.1.2", Version{}, true},
		{"18.-1.2", Version{}, true},
	}
	for _, tt := range tests {
		got, err := ParseVersion(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestFeaturesOf(t *testing.T) {
	tests := []struct {
		v    Version
		want Features
	}{
		{Version{18, 16, 1}, Features{}},
		{Version{19, 6, 0}, Features{TTL: true}},
		{Version{20, 1, 0}, Features{LowCardinality: true, TTL: true}},
		{Version{21, 11, 0}, Features{LowCardinality: true, TTL: true, AsyncInsert: true}},
		{Version{23, 8, 16}, Features{LowCardinality: true, TTL: true, AsyncInsert: true}},
	}
	for _, tt := range tests {
		if got := FeaturesOf(tt.v); got != tt.want {
			t.Errorf("FeaturesOf(%v) = %+v, want %+v", tt.v, got, tt.want)
		}
	}
}

// TestServerVersionDetected: Open reads the version of the server the
// tests run against, and the table has the types its features call for.
func TestServerVersionDetected(t *testing.T) {
	s := openTest(t)
	v := s.Version()
	if v.Major < 18 {
		t.Fatalf("Version() = %v, want a real server version", v)
	}
	types := selectRowBinary(t, s, fmt.Sprintf("SELECT type FROM system.columns WHERE database = %s AND table = 'requests' AND name = 'model'", quoteString(s.db)), (*dec).str)
	want := "String"
	if FeaturesOf(v).LowCardinality {
		want = "LowCardinality(String)"
	}
	if len(types) != 1 || types[0] != want {
		t.Errorf("server %v: column model has type %v, want %s", v, types, want)
	}
}

// TestExactValues: what JSON or decimal text would bend comes back exact.
// ClickHouse 18.16 parses some decimal floats one ulp off, and JSON cannot
// carry bytes that are not UTF-8; RowBinary carries both.
func TestExactValues(t *testing.T) {
	s := openTest(t)
	f := func(v float64) *float64 { return &v }
	i := func(v int64) *int64 { return &v }
	mk := func(id string, edit func(r *record.Record)) *record.Record {
		r := storetest.Record(1)
		r.RequestID, r.LogicalRequestID = id, id
		edit(r)
		r.Finish()
		return r
	}
	recs := []*record.Record{
		mk("float-e284", func(r *record.Record) { r.Temperature, r.TopP = f(2.499932625751896e+284), f(8.856755877484914e+144) }),
		mk("float-extremes", func(r *record.Record) {
			r.Temperature, r.TopP = f(math.MaxFloat64), f(math.SmallestNonzeroFloat64)
		}),
		mk("float-negative", func(r *record.Record) { r.Temperature, r.TopP = f(-1.0000000000000002), f(0.1+0.2) }),
		mk("int-extremes", func(r *record.Record) {
			r.MaxTokens, r.Usage.InputTokens, r.Cost.Nanos = i(math.MaxInt64), math.MinInt64, math.MaxInt64
		}),
		mk("not utf-8 \xff", func(r *record.Record) {
			r.UserID, r.ErrorMessage, r.Model = "user\xfe\xff", "bad \xc3 byte\x00nul", "m\x80"
		}),
		mk("zero arrival", func(r *record.Record) { r.Arrival = time.Time{} }),
		mk("epoch arrival", func(r *record.Record) { r.Arrival = time.Unix(0, 0) }),
		mk("before 1970", func(r *record.Record) { r.Arrival = time.Date(1969, 7, 20, 20, 17, 40, 1, time.UTC) }),
		mk("far future", func(r *record.Record) { r.Arrival = time.Date(2199, 12, 31, 23, 59, 59, 999999999, time.UTC) }),
	}
	if err := s.Insert(t.Context(), store.Batch{Records: recs}); err != nil {
		t.Fatal(err)
	}
	for _, want := range recs {
		got, err := s.Request(t.Context(), want.RequestID)
		if err != nil {
			t.Fatalf("Request(%q): %v", want.RequestID, err)
		}
		if diff := cmp.Diff([]*record.Record{want}, got); diff != "" {
			t.Errorf("Request(%q) (-want +got):\n%s", want.RequestID, diff)
		}
	}
	all, err := s.Requests(t.Context(), store.Filter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(recs) {
		t.Errorf("Requests returned %d records, want %d", len(all), len(recs))
	}
	ranges := []struct {
		f    store.Filter
		want []string
	}{
		{store.Filter{Since: time.Date(2199, 12, 31, 23, 59, 59, 999999999, time.UTC)}, []string{"far future"}},
		{store.Filter{Since: time.Date(2199, 12, 31, 23, 59, 59, 999999999, time.UTC).Add(1)}, nil},
		{store.Filter{Since: time.Date(2150, 1, 1, 0, 0, 0, 0, time.UTC)}, []string{"far future"}},
		{store.Filter{Since: time.Date(2106, 1, 1, 0, 0, 0, 0, time.UTC), Until: time.Date(2199, 1, 1, 0, 0, 0, 0, time.UTC)}, nil},
		{store.Filter{Until: time.Unix(0, 1)}, []string{"epoch arrival", "before 1970"}},
		{store.Filter{Until: time.Unix(0, 0)}, []string{"before 1970"}},
	}
	for _, rg := range ranges {
		got, err := s.Requests(t.Context(), rg.f)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range got {
			ids = append(ids, r.RequestID)
		}
		if !slices.Equal(ids, rg.want) {
			t.Errorf("Requests(since %v, until %v) = %q, want %q", rg.f.Since, rg.f.Until, ids, rg.want)
		}
	}
	byUser, err := s.Requests(t.Context(), store.Filter{UserID: "user\xfe\xff", Model: "m\x80"})
	if err != nil || len(byUser) != 1 {
		t.Errorf("Requests by a non-UTF-8 user = %d records, %v; want 1", len(byUser), err)
	}
}

// TestRacingReplicasKeepFirstWrite: two writers that both found an id
// unstored both write it (Insert's check runs per process). Readers must
// still see one row, the first write, before and after ClickHouse merges.
func TestRacingReplicasKeepFirstWrite(t *testing.T) {
	s := openTest(t)
	first := storetest.Record(1)
	second := storetest.Record(1)
	second.Status, second.Usage.OutputTokens = 500, 99999
	second.Finish()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// Written in the opposite order of their clocks: the row with the
	// earlier clock is the first write, whatever order the parts land in.
	for _, w := range []struct {
		r  *record.Record
		at time.Time
	}{{second, t0.Add(time.Second)}, {first, t0}} {
		e := &enc{}
		encodeRow(e, w.r, math.MaxUint64-uint64(w.at.UnixNano()))
		q := fmt.Sprintf("INSERT INTO %s.requests (%s) FORMAT RowBinary", quoteIdent(s.db), insertColumns)
		if err := s.c.insert(t.Context(), q, e.b); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string) {
		t.Helper()
		got, err := s.Requests(t.Context(), store.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]*record.Record{storetest.Unsampled(first)}, got); diff != "" {
			t.Errorf("%s: Requests (-want +got):\n%s", when, diff)
		}
		one, err := s.Request(t.Context(), first.RequestID)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]*record.Record{first}, one); diff != "" {
			t.Errorf("%s: Request (-want +got):\n%s", when, diff)
		}
		// And a replay through Insert now finds it stored.
		if err := s.Insert(t.Context(), store.Batch{Records: []*record.Record{second}}); err != nil {
			t.Fatal(err)
		}
	}
	check("before merging")
	if err := s.c.exec(t.Context(), "", "OPTIMIZE TABLE "+quoteIdent(s.db)+".requests FINAL"); err != nil {
		t.Fatal(err)
	}
	rows := selectRowBinary(t, s, "SELECT status FROM "+quoteIdent(s.db)+".requests", (*dec).i64)
	if diff := cmp.Diff([]int64{int64(first.Status)}, rows); diff != "" {
		t.Errorf("stored statuses after OPTIMIZE FINAL (-want +got):\n%s", diff)
	}
	check("after merging")
}

// TestFirstDeliveryWritesWithoutLookup: a batch marked
// store.Batch.FirstDelivery is written without the look-up of stored ids (the
// table then holds a second row for an id a client reused), and reads and
// reports still show the first write once; an unmarked batch (a retry)
// still looks up and writes nothing stored.
func TestFirstDeliveryWritesWithoutLookup(t *testing.T) {
	s := openTest(t)
	first := storetest.Record(1)
	reused := storetest.Record(1) // another request, the same X-Request-Id
	reused.Status, reused.Usage.OutputTokens = 500, 99999
	reused.Finish()
	if err := s.Insert(t.Context(), store.Batch{Records: []*record.Record{first}, FirstDelivery: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.Insert(t.Context(), store.Batch{Records: []*record.Record{reused, storetest.Record(2)}, FirstDelivery: true}); err != nil {
		t.Fatal(err)
	}
	rows := func() uint64 {
		n := selectRowBinary(t, s, "SELECT count() FROM "+quoteIdent(s.db)+".requests", (*dec).u64)
		return n[0]
	}
	if n := rows(); n != 3 {
		t.Fatalf("%d rows stored; want 3: the first deliveries are written without a look-up", n)
	}
	got, err := s.Request(t.Context(), first.RequestID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]*record.Record{first}, got); diff != "" {
		t.Errorf("Request of the reused id (-want +got):\n%s", diff)
	}
	if n := requestsOf(t, s, store.ReportQuery{}); n != 2 {
		t.Errorf("report counts %d requests; want 2", n)
	}
	// A retry of both batches (not marked): nothing more is written.
	if err := s.Insert(t.Context(), store.Batch{Records: []*record.Record{first, reused, storetest.Record(2)}}); err != nil {
		t.Fatal(err)
	}
	if n := rows(); n != 3 {
		t.Errorf("%d rows after the retry; want still 3", n)
	}
}

// TestReplayAcrossStores: a batch written through one Store and replayed
// through another (a restarted replica) is stored once.
func TestReplayAcrossStores(t *testing.T) {
	a := openTest(t)
	b, err := Open(t.Context(), Config{HTTP: serverURL, Database: a.db}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	recs := storetest.Records(0, 50)
	if err := a.Insert(t.Context(), store.Batch{Records: recs[:30]}); err != nil {
		t.Fatal(err)
	}
	if err := b.Insert(t.Context(), store.Batch{Records: recs}); err != nil {
		t.Fatal(err)
	}
	n := selectRowBinary(t, a, "SELECT count() FROM "+quoteIdent(a.db)+".requests", (*dec).u64)
	if len(n) != 1 || n[0] != 50 {
		t.Errorf("raw rows after a replay through a second store = %v, want 50", n)
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := t.Context()
	closed := fmt.Sprintf("http://127.0.0.1:%d", mustFreePort(t))
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no address", Config{}, "want http://host:port"},
		{"not http", Config{HTTP: "tcp://127.0.0.1:9000"}, "want http://host:port"},
		{"password redacted", Config{HTTP: "ftp://u:secret@h"}, "u:xxxxx@h"},
		{"bad database", Config{HTTP: "http://127.0.0.1:1", Database: "a-b; DROP"}, "database name"},
		{"nobody listening", Config{HTTP: closed}, "connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Open(ctx, tt.cfg, nil)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%+v) succeeded", tt.cfg)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Open(%+v) = %v, want it to mention %q", tt.cfg, err, tt.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("Open error shows the password: %v", err)
			}
		})
	}
}

func mustFreePort(t *testing.T) int {
	t.Helper()
	p, err := chtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestServerErrorSurfaces: a failing query comes back as ClickHouse's own
// message, with its status, never as a short read of a 200.
func TestServerErrorSurfaces(t *testing.T) {
	s := openTest(t)
	if err := adminExec(t.Context(), "DROP TABLE "+quoteIdent(s.db)+".requests"); err != nil {
		t.Fatal(err)
	}
	_, err := s.Requests(t.Context(), store.Filter{})
	var se *ServerError
	if !errors.As(err, &se) || se.Status != http.StatusNotFound && se.Status != http.StatusInternalServerError || !strings.Contains(se.Message, "requests") {
		t.Errorf("Requests on a dropped table = %v, want a ServerError naming the table", err)
	}
	err = s.Insert(t.Context(), store.Batch{Records: storetest.Records(0, 1)})
	if !errors.As(err, &se) {
		t.Errorf("Insert into a dropped table = %v, want a ServerError", err)
	}
	// A query failing mid-way is an error too (wait_end_of_query).
	err = s.c.query(t.Context(), "SELECT throwIf(number = 70000) FROM system.numbers LIMIT 100000 FORMAT RowBinary", func(d *dec) error {
		for d.more() {
			d.u8()
		}
		return d.err
	})
	if !errors.As(err, &se) {
		t.Errorf("a query failing after rows = %v, want a ServerError", err)
	}
}

func TestCancelledReads(t *testing.T) {
	s := openTest(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Requests(ctx, store.Filter{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Requests with a cancelled context = %v", err)
	}
	if _, err := s.Request(ctx, "x"); !errors.Is(err, context.Canceled) {
		t.Errorf("Request with a cancelled context = %v", err)
	}
}

func TestSchemaColumns(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range allColumns {
		if seen[c.name] {
			t.Errorf("column %s twice", c.name)
		}
		seen[c.name] = true
	}
	// Every column the SQLite ledger queries by has the same name here.
	for _, name := range []string{"request_id", "logical_request_id", "arrival_ns", "user_id", "biz_line", "model", "trace_id", "template_id", "status", "error_type", "e2e_ns", "cost_nanos", "currency"} {
		if !seen[name] {
			t.Errorf("no column %s", name)
		}
	}
	if ddl := createRequests("db", Features{}); strings.Contains(ddl, "LowCardinality") {
		t.Errorf("DDL for 18.16 uses LowCardinality:\n%s", ddl)
	}
	if ddl := createRequests("db", Features{LowCardinality: true}); !strings.Contains(ddl, "model LowCardinality(String)") {
		t.Errorf("DDL with LowCardinality does not use it for model:\n%s", ddl)
	}
}

func TestAnalyticsConformance(t *testing.T) {
	needServer(t)
	storetest.RunAnalytics(t, func(t *testing.T) storetest.AnalyticsStore { return openTest(t) })
}

// TestOpenAddsMissingColumns: a requests table made by an older tollgate
// (here: without client_request_id, parent_span_id, response_id and the
// cache-write and tool-call columns) is
// brought up to date at Open, so INSERTs of the new Records work and old
// rows read back with defaults.
func TestOpenAddsMissingColumns(t *testing.T) {
	old := openTest(t)
	if err := old.Insert(t.Context(), store.Batch{Records: []*record.Record{storetest.Record(1)}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"client_request_id", "parent_span_id", "response_id", "cache_write_tokens", "cache_write_1h_tokens", "tool_calls"} {
		if err := old.c.exec(t.Context(), "", "ALTER TABLE "+old.table("requests")+" DROP COLUMN "+c); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Open(t.Context(), Config{HTTP: serverURL, Database: old.db}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := storetest.Record(2)
	if err := s.Insert(t.Context(), store.Batch{Records: []*record.Record{r}}); err != nil {
		t.Fatalf("insert after the upgrade: %v", err)
	}
	got, err := s.Request(t.Context(), r.RequestID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]*record.Record{r}, got); diff != "" {
		t.Errorf("round trip after the upgrade (-want +got):\n%s", diff)
	}
	older, err := s.Request(t.Context(), storetest.Record(1).RequestID)
	if err != nil || older[0].ClientRequestID != "" || older[0].ParentSpanID != "" || older[0].ResponseID != "" {
		t.Fatalf("old row: %v, client id %q, parent span %q, response id %q", err, older[0].ClientRequestID, older[0].ParentSpanID, older[0].ResponseID)
	}
	if u := older[0].Usage; u.CacheWriteTokens != 0 || u.CacheWrite1hTokens != 0 || u.ToolCalls != 0 {
		t.Fatalf("old row: usage %+v, want no cache writes or tool calls", u)
	}
}

// TestOpenAddsMissingMeasures: rollups made by an older tollgate (here:
// without input_unknown) get the measures added since at Open, so the
// rollup pass and reports work; new pieces count the new measure.
func TestOpenAddsMissingMeasures(t *testing.T) {
	old := openTest(t)
	for _, tb := range []string{rollupHour, rollupMinute, promptHour} {
		if err := old.c.exec(t.Context(), "", "ALTER TABLE "+old.table(tb)+" DROP COLUMN input_unknown"); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Open(t.Context(), Config{HTTP: serverURL, Database: old.db}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := storetest.Record(3)
	r.Usage = record.Usage{OutputTokens: 5, Source: record.SourceChunks}
	r.Finish()
	if err := s.Insert(t.Context(), store.Batch{Records: []*record.Record{r}}); err != nil {
		t.Fatal(err)
	}
	rows, err := s.Report(t.Context(), store.ReportQuery{Measures: []string{"requests", "input_unknown"}})
	if err != nil {
		t.Fatalf("report after the upgrade: %v", err)
	}
	if len(rows) != 1 || rows[0].Requests != 1 || rows[0].InputUnknown != 1 {
		t.Errorf("report rows %+v, want one request with an unknown input", rows)
	}
}
