package report

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
)

var t0 = time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC) // a Monday

type req struct {
	user, biz, model, tmpl, prompt, finish string
	endUser                                string
	in, cached, out                        int64
	costNanos                              int64
	day                                    int
	src                                    record.Source // "": engine
}

func seed(t *testing.T, reqs []req) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "r.db"), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	var recs []*record.Record
	for i, q := range reqs {
		r := &record.Record{
			RequestID: fmt.Sprintf("r%d", i), UserID: q.user, BizLine: q.biz, Model: q.model, ServedModel: q.model + "-v1",
			TemplateID: q.tmpl, PromptSHA256: q.prompt, FinishReason: q.finish, Status: 200, Upstream: "u", UpstreamStatus: 200,
			EndUser: q.endUser,
			Arrival: t0.AddDate(0, 0, q.day).Add(time.Duration(i) * time.Minute),
			Usage:   record.Usage{InputTokens: q.in, CachedInputTokens: q.cached, OutputTokens: q.out, Source: record.SourceEngine},
			Cost:    record.Cost{Nanos: q.costNanos, Currency: "USD", PriceVersion: "v"},
		}
		if q.prompt == "" {
			r.PromptSHA256 = fmt.Sprintf("unique-%d", i)
		}
		if q.src != "" {
			r.Usage.Source = q.src
		}
		r.Marks.End = time.Millisecond
		r.Finish()
		recs = append(recs, r)
	}
	if err := s.Insert(context.Background(), store.Batch{Records: recs}); err != nil {
		t.Fatal(err)
	}
	return s
}

func week(days int) Query { return Query{From: t0, To: t0.AddDate(0, 0, days)} }

func cell(t *testing.T, res *Result, row int, col string) any {
	t.Helper()
	for i, c := range res.Columns {
		if c.Name == col {
			return res.Rows[row][i]
		}
	}
	t.Fatalf("no column %q in %v", col, res.Columns)
	return nil
}

func TestTopFlagsBigSpender(t *testing.T) {
	// alice 5 USD, bob 3 USD, carol 2 USD: alice has 50 % and is flagged.
	s := seed(t, []req{
		{user: "alice", costNanos: 5e9, in: 10, out: 10}, {user: "bob", costNanos: 3e9, in: 10, out: 10}, {user: "carol", costNanos: 2e9, in: 10, out: 10},
	})
	res, err := Run(context.Background(), s, "top", week(7))
	if err != nil {
		t.Fatal(err)
	}
	if cell(t, res, 0, "user") != "alice" || cell(t, res, 0, "cost_share") != 0.5 || cell(t, res, 0, "flag") != "over 40%" {
		t.Errorf("first row = %v", res.Rows[0])
	}
	if cell(t, res, 1, "flag") != "" || cell(t, res, 1, "cost_share") != 0.3 {
		t.Errorf("second row = %v", res.Rows[1])
	}
	if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "alice accounts for 50%") {
		t.Errorf("notes = %v", res.Notes)
	}
}

func TestTemplatesAndLength(t *testing.T) {
	var reqs []req
	for i := range 10 {
		fin := "stop"
		if i < 3 {
			fin = "length"
		}
		reqs = append(reqs, req{user: "u", model: "m", tmpl: "long", in: 3000, cached: 1000, out: 200, costNanos: 2e6, finish: fin})
	}
	for range 10 {
		reqs = append(reqs, req{user: "u", model: "m", tmpl: "short", in: 200, out: 100, costNanos: 1e6, finish: "stop"})
	}
	s := seed(t, reqs)
	res, err := Run(context.Background(), s, "templates", week(7))
	if err != nil {
		t.Fatal(err)
	}
	// Dearest first: "long" costs 20,000,000 nanos over 10 requests.
	if cell(t, res, 0, "template") != "long" || cell(t, res, 0, "avg_input_tokens") != 3000.0 ||
		cell(t, res, 0, "cost_per_request") != int64(2e6) || cell(t, res, 0, "cache_hit_rate") != 1.0/3 {
		t.Errorf("templates row 0 = %v", res.Rows[0])
	}
	lres, err := Run(context.Background(), s, "length", week(7))
	if err != nil {
		t.Fatal(err)
	}
	if cell(t, lres, 0, "template") != "long" || cell(t, lres, 0, "length_share") != 0.3 || len(lres.Notes) != 1 {
		t.Errorf("length row 0 = %v, notes %v", lres.Rows[0], lres.Notes)
	}
}

func TestWaste(t *testing.T) {
	var reqs []req
	// Previous week: template "faq" averaged 200 input tokens.
	for range 5 {
		reqs = append(reqs, req{user: "u", model: "m", tmpl: "faq", in: 200, out: 50, costNanos: 1000, day: -3})
	}
	// This week: 3000 input tokens (a grown system prompt), the same prompt
	// four times, one answer cut, no prefix-cache hits.
	for i := range 4 {
		fin := "stop"
		if i == 0 {
			fin = "length"
		}
		reqs = append(reqs, req{user: "u", model: "m", tmpl: "faq", in: 3000, out: 100, costNanos: 31000, prompt: "same", finish: fin, day: 1})
	}
	s := seed(t, reqs)
	res, err := Run(context.Background(), s, "waste", week(7))
	if err != nil {
		t.Fatal(err)
	}
	found := map[string][]any{}
	for _, row := range res.Rows {
		found[row[0].(string)] = row
	}
	dup := found["duplicate_prompt"]
	if dup == nil || dup[2] != int64(3) || dup[5] != int64(31000*3) {
		t.Errorf("duplicate_prompt = %v, want 3 repeats costing 93000 nanos", dup)
	}
	grew := found["prompt_grew"]
	if grew == nil || grew[4] != int64((3000-200)*4) || !strings.Contains(grew[7].(string), "200 → 3000") {
		t.Errorf("prompt_grew = %v", grew)
	}
	cut := found["cut_by_max_tokens"]
	if cut == nil || cut[2] != int64(1) || cut[5] != int64(124000/4) {
		t.Errorf("cut_by_max_tokens = %v", cut)
	}
	if low := found["low_prefix_cache_hits"]; low == nil || low[4] != int64(12000) {
		t.Errorf("low_prefix_cache_hits = %v", low)
	}
	if _, err := Run(context.Background(), s, "waste", Query{}); err == nil {
		t.Error("waste without a period accepted")
	}
}

// TestEndUsers: the end user a body named is reported beside the key's
// user, never in its place; requests that named none stay out.
func TestEndUsers(t *testing.T) {
	s := seed(t, []req{
		{user: "app", endUser: "cust-1", model: "m", in: 10, out: 5, costNanos: 300},
		{user: "app", endUser: "cust-1", model: "m", in: 10, out: 5, costNanos: 200, day: 2},
		{user: "app", endUser: "cust-2", model: "m", in: 1, out: 1, costNanos: 7},
		{user: "app", model: "m", in: 100, out: 100, costNanos: 9000},
	})
	res, err := Run(context.Background(), s, "end-users", week(7))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 2 || cell(t, res, 0, "end_user") != "cust-1" || cell(t, res, 0, "user") != "app" ||
		cell(t, res, 0, "cost") != int64(500) || cell(t, res, 1, "requests") != int64(1) {
		t.Fatalf("end-users = %v", res.Rows)
	}
	// Filtered by end user, any report that groups by what the end-user
	// rollups keep.
	q := week(7)
	q.Where = map[store.Dim]string{store.DimEndUser: "cust-1"}
	if res, err = Run(context.Background(), s, "users", q); err != nil || len(res.Rows) != 2 {
		t.Fatalf("users where end_user = cust-1: %v, %v", res, err)
	}
	if _, err := Run(context.Background(), s, "templates", q); err == nil || !strings.Contains(err.Error(), "end user") {
		t.Errorf("templates where end_user: %v; want an error naming what end-user reports keep", err)
	}
}

func TestGroupedAndRender(t *testing.T) {
	s := seed(t, []req{
		{user: "alice", biz: "search", model: "m", in: 10, out: 5, costNanos: 1_500_000_000},
		{user: "alice", biz: "search", model: "m", in: 10, out: 5, costNanos: 500_000_000, day: 1},
		{user: "bob", biz: "ads", model: "m", in: 1, out: 1, costNanos: 1},
	})
	res, err := Run(context.Background(), s, "users", week(7))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 3 || cell(t, res, 0, "user") != "alice" || cell(t, res, 0, "day") != "2026-11-02" || cell(t, res, 0, "cost") != int64(1_500_000_000) {
		t.Fatalf("users = %v", res.Rows)
	}
	var buf bytes.Buffer
	if err := Render(&buf, res, "json"); err != nil {
		t.Fatal(err)
	}
	var js struct {
		Rows []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal(buf.Bytes(), &js); err != nil || js.Rows[0]["cost"] != "1.5" || js.Rows[2]["cost"] != "0.000000001" {
		t.Errorf("json (err %v): %s", err, buf.String())
	}
	buf.Reset()
	if err := Render(&buf, res, "csv"); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&buf).ReadAll()
	if err != nil || len(recs) != 4 || recs[0][0] != "user" || recs[1][8] != "1.5" {
		t.Errorf("csv (err %v): %v", err, recs)
	}
	buf.Reset()
	if err := Render(&buf, res, "table"); err != nil || !strings.Contains(buf.String(), "1.50") {
		t.Errorf("table (err %v):\n%s", err, buf.String())
	}
	bres, err := Run(context.Background(), s, "biz", week(7))
	if err != nil || len(bres.Rows) != 2 || cell(t, bres, 1, "month") != "2026-11" || cell(t, bres, 1, "requests") != int64(2) {
		t.Errorf("biz (err %v) = %v", err, bres.Rows)
	}
	if _, err := Run(context.Background(), s, "nope", week(7)); err == nil || !strings.Contains(err.Error(), "one of users") {
		t.Errorf("unknown kind: %v", err)
	}
	if err := Render(&buf, res, "xml"); err == nil {
		t.Error("unknown format accepted")
	}
}

var _ Source = (*sqlite.Store)(nil)

// allMeasures is a Source that ignores the reports' choice of measures.
type allMeasures struct{ *sqlite.Store }

func (a allMeasures) Report(ctx context.Context, q store.ReportQuery) ([]store.ReportRow, error) {
	q.Measures = nil
	return a.Store.Report(ctx, q)
}

// TestUnknownInputNoted: requests whose input nobody counted add nothing
// to input_tokens, and every report summing input tokens says how many
// there were.
func TestUnknownInputNoted(t *testing.T) {
	s := seed(t, []req{
		{user: "u1", biz: "b", model: "m", tmpl: "t", finish: "stop", in: 100, out: 10, costNanos: 5},
		{user: "u1", biz: "b", model: "m", tmpl: "t", finish: "stop", out: 12, costNanos: 5, src: record.SourceChunks},
		{user: "u2", biz: "b", model: "m", tmpl: "t", finish: "stop", out: 3, costNanos: 5, src: record.SourceChunks},
	})
	for _, kind := range []string{"users", "biz", "models", "templates", "top"} {
		res, err := Run(context.Background(), s, kind, week(1))
		if err != nil {
			t.Fatal(err)
		}
		want := "2 requests reached an engine that reported no usage and no tokenizer counted their prompt"
		if !slices.ContainsFunc(res.Notes, func(n string) bool { return strings.HasPrefix(n, want) }) {
			t.Errorf("%s: notes %q, want one starting %q", kind, res.Notes, want)
		}
	}
	res, err := Run(context.Background(), s, "biz", week(1))
	if err != nil {
		t.Fatal(err)
	}
	if in := cell(t, res, 0, "input_tokens"); in != int64(100) {
		t.Errorf("input_tokens = %v, want the 100 counted", in)
	}
	clean := seed(t, []req{{user: "u1", biz: "b", model: "m", tmpl: "t", finish: "stop", in: 100, out: 10, costNanos: 5}})
	if res, err := Run(context.Background(), clean, "users", week(1)); err != nil || len(res.Notes) != 0 {
		t.Errorf("every input counted: notes %q (err %v), want none", res.Notes, err)
	}
}

// TestMeasuresSuffice: every report gives the same result whether it reads
// only the measures it asks for or all of them, so none reads a sum it
// did not ask for (which would be zero).
func TestMeasuresSuffice(t *testing.T) {
	var reqs []req
	for i := range 60 {
		fin := "stop"
		if i%4 == 0 {
			fin = "length"
		}
		prompt := ""
		if i%3 == 0 {
			prompt = "same"
		}
		reqs = append(reqs, req{user: fmt.Sprintf("u%d", i%5), biz: fmt.Sprintf("b%d", i%2), model: fmt.Sprintf("m%d", i%2),
			tmpl: fmt.Sprintf("t%d", i%3), prompt: prompt, finish: fin, in: int64(100 + i*50), cached: int64(i * 7), out: int64(20 + i),
			costNanos: int64(1000 + i*13), day: i%14 - 7, endUser: fmt.Sprintf("c%d", i%4)})
	}
	s := seed(t, reqs)
	for _, k := range Kinds {
		got, err := Run(context.Background(), s, k.Name, week(7))
		if err != nil {
			t.Fatal(err)
		}
		want, err := Run(context.Background(), allMeasures{s}, k.Name, week(7))
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Rows) == 0 {
			t.Errorf("%s: no rows; the check needs some", k.Name)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s with only its measures differs from all measures (-all +own):\n%s", k.Name, diff)
		}
	}
}
