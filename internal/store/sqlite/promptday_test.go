package sqlite

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/report"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// narrowPromptDay is prompt_day's columns since migration 20: its key and
// the four sums the waste report prices a duplicate prompt with.
var narrowPromptDay = []string{"bucket", "prompt_sha256", "model", "template_id", "currency",
	"requests", "input_tokens", "output_tokens", "cost_nanos"}

// TestRollupColumns: a new ledger's rollups have exactly the columns the
// code writes and reads, and prompt_day only the four sums Prompts returns
// (not every measure, which made each request's insert write a second row
// as wide as rollup_day's).
func TestRollupColumns(t *testing.T) {
	s := openAt(t, filepath.Join(t.TempDir(), "ledger.db"))
	defer s.Close()
	for _, tbl := range rollupTables {
		want := append([]string{"bucket"}, tbl.dims...)
		for _, m := range tbl.sums() {
			want = append(want, m.Name)
		}
		if got := columns(t, s, tbl.name); !slices.Equal(got, want) {
			t.Errorf("%s: columns %v, the code writes %v", tbl.name, got, want)
		}
	}
	if got := columns(t, s, "prompt_day"); !slices.Equal(got, narrowPromptDay) {
		t.Errorf("prompt_day: columns %v, want %v", got, narrowPromptDay)
	}
	var ddl string
	if err := s.r.QueryRowContext(t.Context(), "SELECT sql FROM sqlite_master WHERE name = 'prompt_day'").Scan(&ddl); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(ddl, "STRICT, WITHOUT ROWID") {
		t.Errorf("prompt_day is not STRICT and WITHOUT ROWID as the other rollups:\n%s", ddl)
	}
}

// TestMigration20NarrowsPromptDay: a ledger whose prompt_day keeps every
// measure (schema 19) keeps, after migration 20, the same four sums per
// row, and the waste report reads the same from it.
func TestMigration20NarrowsPromptDay(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	ctx := t.Context()
	s := openAt(t, path)
	recs := spaced(300, time.Date(2026, 2, 10, 0, 0, 0, 0, time.UTC), 23*time.Minute, func(i int, r *record.Record) {
		r.Cost.Nanos = int64(100 + 7*i)
		if i%7 == 0 {
			r.Cost.Currency = "CNY"
		}
		r.PromptSHA256 = fmt.Sprintf("prompt-%d", i%40)
		if i%3 == 0 {
			r.PromptSHA256 = fmt.Sprintf("once-%d", i)
		}
	})
	if err := s.Insert(ctx, store.Batch{Records: recs}); err != nil {
		t.Fatal(err)
	}
	// The rows' sums in the tables, not in memory, before the table is
	// rebuilt under the store.
	if err := s.syncRollups(ctx); err != nil {
		t.Fatal(err)
	}
	widenPromptDay(t, s, v13Measures, recs)
	var other int64
	if err := s.r.QueryRowContext(ctx, "SELECT SUM(e2e_sum_ns) FROM prompt_day").Scan(&other); err != nil || other == 0 {
		t.Fatalf("the schema-19 prompt_day holds no other measures: %d, %v", other, err)
	}
	kept := promptSums(t, s)
	q := report.Query{From: time.Date(2026, 2, 10, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 2, 15, 0, 0, 0, 0, time.UTC)}
	waste := func(s *Store) *report.Result {
		res, err := report.Run(ctx, s, "waste", q)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	prompts := func(s *Store) []store.PromptRow {
		rows, err := s.Prompts(ctx, q.From, q.To, 2, 1000)
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	before, beforePrompts := waste(s), prompts(s)
	if len(beforePrompts) == 0 {
		t.Fatal("no duplicate prompts to compare")
	}

	if _, err := s.w.ExecContext(ctx, "DROP TABLE end_user_month"); err != nil { // migration 21's
		t.Fatal(err)
	}
	s = rewind(t, s, path, 20)
	defer s.Close()
	if got := columns(t, s, "prompt_day"); !slices.Equal(got, narrowPromptDay) {
		t.Errorf("prompt_day after migration 20: columns %v, want %v", got, narrowPromptDay)
	}
	if diff := cmp.Diff(kept, promptSums(t, s)); diff != "" {
		t.Errorf("prompt_day's sums after migration 20 differ (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(beforePrompts, prompts(s)); diff != "" {
		t.Errorf("Prompts after migration 20 differ (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(before, waste(s)); diff != "" {
		t.Errorf("waste report after migration 20 differs (-before +after):\n%s", diff)
	}
}

// widenPromptDay replaces prompt_day by the table migrations 2 to 19 left,
// with the first ms measures, holding what the store wrote into it then:
// each prompt's store.TotalsOf summed per local day.
func widenPromptDay(t *testing.T, s *Store, ms int, recs []*record.Record) {
	t.Helper()
	ctx := t.Context()
	if _, err := s.w.ExecContext(ctx, "DROP TABLE prompt_day; "+promptDay.ddl(ms)); err != nil {
		t.Fatal(err)
	}
	type key struct{ day, prompt, model, template, currency string }
	sums := map[key]*store.Totals{}
	var keys []key
	for _, r := range recs {
		if r.PromptSHA256 == "" {
			continue
		}
		k := key{r.Arrival.In(s.loc).Format(time.DateOnly), r.PromptSHA256, r.Model, r.TemplateID, r.Cost.Currency}
		if sums[k] == nil {
			sums[k] = &store.Totals{}
			keys = append(keys, k)
		}
		sums[k].Add(store.TotalsOf(r))
	}
	names := []string{"bucket", "prompt_sha256", "model", "template_id", "currency"}
	for _, m := range measures[:ms] {
		names = append(names, m.Name)
	}
	ins := fmt.Sprintf("INSERT INTO prompt_day (%s) VALUES (%s)", strings.Join(names, ", "),
		strings.TrimSuffix(strings.Repeat("?, ", len(names)), ", "))
	for _, k := range keys {
		args := []any{k.day, k.prompt, k.model, k.template, k.currency}
		for _, m := range measures[:ms] {
			args = append(args, *m.Field(sums[k]))
		}
		if _, err := s.w.ExecContext(ctx, ins, args...); err != nil {
			t.Fatal(err)
		}
	}
}

// promptSums are prompt_day's rows: key and the four sums Prompts reads.
func promptSums(t *testing.T, s *Store) []string {
	t.Helper()
	rows, err := s.r.QueryContext(t.Context(), "SELECT "+strings.Join(narrowPromptDay, ", ")+" FROM prompt_day ORDER BY "+
		strings.Join(narrowPromptDay[:5], ", "))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var key [5]string
		var sums [4]int64
		if err := rows.Scan(&key[0], &key[1], &key[2], &key[3], &key[4], &sums[0], &sums[1], &sums[2], &sums[3]); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprint(key, sums))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// columns are table's column names, in order.
func columns(t *testing.T, s *Store, table string) []string {
	t.Helper()
	rows, err := s.r.QueryContext(t.Context(), "SELECT name FROM pragma_table_info(?) ORDER BY cid", table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
