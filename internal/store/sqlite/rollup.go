package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// measures are the rollup columns, one per store.Totals field. The DDL,
// the upserts and the report SELECT are all generated from this one list,
// whose order the migrations freeze.
var measures = store.Measures

// v3Measures is how many measures existed after migration 3.
const v3Measures = 25

// v2Measures is how many measures migration 2 created: its DDL is frozen
// at that list, later measures are added by later migrations.
const v2Measures = 21

// v4Measures is how many measures existed after migration 4, which
// migration 6's new tables are created with.
const v4Measures = 33

// v13Measures is how many measures existed after migration 13.
const v13Measures = 34

// grain is the width of a rollup's bucket.
type grain int

const (
	grainMinute grain = iota // INTEGER: Unix seconds of the UTC minute
	grainHour                // INTEGER: Unix seconds of the UTC hour
	grainDay                 // TEXT: YYYY-MM-DD in the report time zone
	grainMonth               // TEXT: YYYY-MM in the report time zone
)

// rollupTable describes one rollup: its bucket and the dimensions kept.
type rollupTable struct {
	name   string
	grain  grain
	dims   []string
	report bool // read by Report
}

// billingDims are what cost reports group by; the currency is always a
// key, so different currencies are never added together.
var billingDims = []string{"model", "served_model", "upstream", "biz_line", "user_id", "key_id", "template_id", "currency"}

var (
	rollupHour   = rollupTable{"rollup_hour", grainHour, billingDims, true}
	rollupDay    = rollupTable{"rollup_day", grainDay, billingDims, true}
	rollupMinute = rollupTable{"rollup_minute", grainMinute, []string{"model", "upstream", "biz_line", "currency"}, false}
	promptDay    = rollupTable{"prompt_day", grainDay, []string{"prompt_sha256", "model", "template_id", "currency"}, false}

	// Migration 6: narrower rollups, so that a month-wide report reads
	// thousands of rows rather than every user × key × model × template
	// combination of every day (175 k rows for 10 M requests, about a
	// second in SQLite). Per user without the key and model; per month
	// without the user and key.
	// The key is (bucket, user_id, currency, biz_line) so that grouping by
	// user and day walks the key in order, without a sort.
	rollupDayUser   = rollupTable{"rollup_day_user", grainDay, []string{"user_id", "currency", "biz_line"}, true}
	rollupMonth     = rollupTable{"rollup_month", grainMonth, []string{"model", "served_model", "upstream", "biz_line", "template_id", "currency"}, true}
	rollupMonthUser = rollupTable{"rollup_month_user", grainMonth, []string{"user_id", "currency", "biz_line"}, true}

	// v2Tables are the tables migrations 2–4 create and alter: frozen.
	v2Tables = []rollupTable{rollupHour, rollupDay, rollupMinute, promptDay}
	v6Tables = []rollupTable{rollupDayUser, rollupMonth, rollupMonthUser}
	// rollupTables are every rollup, maintained as rows arrive.
	rollupTables = append(slices.Clone(v2Tables), v6Tables...)
	// reportTables are what Report may read, narrowest first within a grain:
	// the first whose dimensions cover a query is the smallest that can
	// answer it.
	reportTables = []rollupTable{rollupDayUser, rollupDay, rollupMonthUser, rollupMonth, rollupHour}
)

func (t rollupTable) bucketType() string {
	if t.grain == grainMinute || t.grain == grainHour {
		return "INTEGER"
	}
	return "TEXT"
}

// bucket is the bucket of t (UTC) in a table of grain g; loc is the report
// time zone.
func bucket(g grain, t time.Time, loc *time.Location) any {
	switch g {
	case grainMinute:
		return t.Unix() - mod(t.Unix(), 60)
	case grainHour:
		return t.Unix() - mod(t.Unix(), 3600)
	case grainDay:
		return t.In(loc).Format(time.DateOnly)
	default:
		return t.In(loc).Format("2006-01")
	}
}

func mod(a, b int64) int64 { return ((a % b) + b) % b }

func (t rollupTable) ddl(ms int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE %s (\n\tbucket %s NOT NULL,\n", t.name, t.bucketType())
	for _, d := range t.dims {
		fmt.Fprintf(&b, "\t%s TEXT NOT NULL,\n", d)
	}
	for _, m := range measures[:ms] {
		fmt.Fprintf(&b, "\t%s INTEGER NOT NULL DEFAULT 0,\n", m.Name)
	}
	fmt.Fprintf(&b, "\tPRIMARY KEY (bucket, %s)\n) STRICT, WITHOUT ROWID;\n", strings.Join(t.dims, ", "))
	return b.String()
}

func (t rollupTable) upsertSQL() string {
	cols := append([]string{"bucket"}, t.dims...)
	var sets []string
	for _, m := range measures {
		cols = append(cols, m.Name)
		sets = append(sets, fmt.Sprintf("%s = %s + excluded.%s", m.Name, m.Name, m.Name))
	}
	return fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s) ON CONFLICT (bucket, %s) DO UPDATE SET %s",
		t.name, strings.Join(cols, ", "), strings.TrimSuffix(strings.Repeat("?, ", len(cols)), ", "),
		strings.Join(t.dims, ", "), strings.Join(sets, ", "))
}

// migration2 is frozen text once released (see migrations).
var migration2 = func() string {
	var b strings.Builder
	b.WriteString(`ALTER TABLE requests ADD COLUMN cost_nanos INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE requests ADD COLUMN currency TEXT NOT NULL DEFAULT '';
	ALTER TABLE requests ADD COLUMN price_version TEXT NOT NULL DEFAULT '';
	ALTER TABLE requests ADD COLUMN cache_hit INTEGER NOT NULL DEFAULT 0;
	CREATE TABLE events (
		id      INTEGER PRIMARY KEY,
		at      INTEGER NOT NULL,
		kind    TEXT NOT NULL,
		subject TEXT NOT NULL DEFAULT '',
		message TEXT NOT NULL DEFAULT '',
		data    TEXT NOT NULL DEFAULT ''
	) STRICT;
	CREATE INDEX events_at ON events (at);
	CREATE INDEX events_kind ON events (kind, at);
	`)
	for _, t := range v2Tables {
		b.WriteString(t.ddl(v2Measures))
	}
	return b.String()
}()

// migration4 adds the latency segments to the ledger (raw inputs, the
// engine's own timing, and derived columns for queries) and their sums to
// the rollups.
var migration4 = func() string {
	var b strings.Builder
	b.WriteString(`ALTER TABLE requests ADD COLUMN last_upstream_token_ns INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE requests ADD COLUMN connect_wait_ns INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE requests ADD COLUMN client_write_ns INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE requests ADD COLUMN client_write_tail_ns INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE requests ADD COLUMN engine_timing TEXT;
	`)
	for _, n := range record.SegmentNames {
		fmt.Fprintf(&b, "ALTER TABLE requests ADD COLUMN seg_%s_ns INTEGER NOT NULL DEFAULT 0;\n", n)
	}
	for _, t := range v2Tables {
		for _, m := range measures[v3Measures:v4Measures] {
			fmt.Fprintf(&b, "ALTER TABLE %s ADD COLUMN %s INTEGER NOT NULL DEFAULT 0;\n", t.name, m.Name)
		}
	}
	return b.String()
}()

// migration13 adds input_unknown to every rollup: the attempts whose
// input nobody counted. Rollup rows written before it read 0.
var migration13 = func() string {
	var b strings.Builder
	for _, t := range rollupTables {
		for _, m := range measures[v4Measures:v13Measures] {
			fmt.Fprintf(&b, "ALTER TABLE %s ADD COLUMN %s INTEGER NOT NULL DEFAULT 0;\n", t.name, m.Name)
		}
	}
	return b.String()
}()

// migration3 adds the measures reconciliation needs: attempts that
// reached an engine, and the limits and input estimates of cut streams. Rollup rows written before it read 0, so
// reconciling periods from before the upgrade under-counts requests.
var migration3 = func() string {
	var b strings.Builder
	for _, t := range v2Tables {
		for _, m := range measures[v2Measures:v3Measures] {
			fmt.Fprintf(&b, "ALTER TABLE %s ADD COLUMN %s INTEGER NOT NULL DEFAULT 0;\n", t.name, m.Name)
		}
	}
	return b.String()
}()

// migration6 creates the narrower rollups and fills them from rollup_day,
// so reports over periods before the upgrade read the same sums. Months
// whose first days the day rollups no longer hold (retention) start
// where they do.
var migration6 = func() string {
	var b strings.Builder
	for _, t := range v6Tables {
		b.WriteString(t.ddl(v4Measures))
		bucket := "bucket"
		if t.grain == grainMonth {
			bucket = "substr(bucket, 1, 7)"
		}
		sums := make([]string, v4Measures)
		for i, m := range measures[:v4Measures] {
			sums[i] = "SUM(" + m.Name + ")"
		}
		dims := strings.Join(t.dims, ", ")
		fmt.Fprintf(&b, "INSERT INTO %s SELECT %s, %s, %s FROM rollup_day GROUP BY %s, %s;\n",
			t.name, bucket, dims, strings.Join(sums, ", "), bucket, dims)
	}
	return b.String()
}()

// rollupKey identifies one rollup row.
type rollupKey struct {
	table  int
	bucket any
	dims   [8]string
}

// rollupAcc sums the Totals of a batch per rollup row, so a batch of 512
// similar requests costs a handful of upserts rather than 2048.
type rollupAcc struct {
	loc  *time.Location
	sums map[rollupKey]*store.Totals
	keys []rollupKey // insertion order, for deterministic upserts
}

func newRollupAcc(loc *time.Location) *rollupAcc {
	return &rollupAcc{loc: loc, sums: map[rollupKey]*store.Totals{}}
}

// add adds sign × the Totals of r to every rollup it belongs to.
func (a *rollupAcc) add(r *record.Record, sign int64) {
	t := store.TotalsOf(r)
	if sign < 0 {
		negate(&t)
	}
	at := r.Arrival.UTC()
	dimVals := map[string]string{
		"model": r.Model, "served_model": r.ServedModel, "upstream": r.Upstream, "biz_line": r.BizLine,
		"user_id": r.UserID, "key_id": r.KeyID, "template_id": r.TemplateID, "currency": r.Cost.Currency,
		"prompt_sha256": r.PromptSHA256,
	}
	for i, tbl := range rollupTables {
		if tbl.name == promptDay.name && r.PromptSHA256 == "" {
			continue
		}
		k := rollupKey{table: i, bucket: bucket(tbl.grain, at, a.loc)}
		for j, d := range tbl.dims {
			k.dims[j] = dimVals[d]
		}
		sum, ok := a.sums[k]
		if !ok {
			sum = &store.Totals{}
			a.sums[k] = sum
			a.keys = append(a.keys, k)
		}
		sum.Add(t)
	}
}

func negate(t *store.Totals) {
	for _, m := range measures {
		p := m.Field(t)
		*p = -*p
	}
}

// flush upserts the accumulated sums inside tx.
func (a *rollupAcc) flush(ctx context.Context, tx *sql.Tx, stmts []*sql.Stmt) error {
	for _, k := range a.keys {
		tbl := rollupTables[k.table]
		args := make([]any, 0, 1+len(tbl.dims)+len(measures))
		args = append(args, k.bucket)
		for j := range tbl.dims {
			args = append(args, k.dims[j])
		}
		sum := a.sums[k]
		for _, m := range measures {
			args = append(args, *m.Field(sum))
		}
		if _, err := tx.StmtContext(ctx, stmts[k.table]).ExecContext(ctx, args...); err != nil {
			return fmt.Errorf("update %s: %w", tbl.name, err)
		}
	}
	return nil
}

// dimColumn maps a report dimension to its column in a billing rollup.
var dimColumn = map[store.Dim]string{
	store.DimModel: "model", store.DimServedModel: "served_model", store.DimUpstream: "upstream",
	store.DimBizLine: "biz_line", store.DimUser: "user_id", store.DimKey: "key_id", store.DimTemplate: "template_id",
}

// span is a part of a report's period that one rollup table answers;
// from and to are bucket bounds, nil when unbounded.
type span struct {
	table    rollupTable
	from, to any
}

// plan splits [from, to) into the spans that read the fewest rollup rows:
// whole months from a month rollup where the query's dimensions allow it,
// whole days from a day rollup, and the hours at either end from
// rollup_hour. A period in another time zone than the store's, or grouped
// by hour, is read from rollup_hour alone; so is a period with part-days in
// a time zone whose midnights do not fall on a UTC hour (India's), where
// hours round to UTC hours as they always do.
func (s *Store) plan(q store.ReportQuery, loc *time.Location, need []string) []span {
	hours := func(from, to time.Time) span {
		sp := span{table: rollupHour}
		if !from.IsZero() {
			sp.from = bucket(grainHour, from, nil)
		}
		if !to.IsZero() {
			sp.to = bucket(grainHour, to, nil)
		}
		return sp
	}
	if slices.Contains(q.GroupBy, store.DimMinute) {
		sp := span{table: rollupMinute}
		if !q.From.IsZero() {
			sp.from = bucket(grainMinute, q.From, nil)
		}
		if !q.To.IsZero() {
			sp.to = bucket(grainMinute, q.To, nil)
		}
		return []span{sp}
	}
	if loc.String() != s.loc.String() || slices.Contains(q.GroupBy, store.DimHour) {
		return []span{hours(q.From, q.To)}
	}
	// [d0, d1) is the whole local days of the period.
	d0, d1 := ceilDay(q.From, s.loc), store.FloorDay(q.To, s.loc)
	offHour := func(t time.Time) bool { return t.Unix()%3600 != 0 }
	if (!q.From.IsZero() && !d0.Equal(q.From) && offHour(d0)) || (!q.To.IsZero() && !d1.Equal(q.To) && offHour(d1)) ||
		(!d0.IsZero() && !d1.IsZero() && !d0.Before(d1)) {
		return []span{hours(q.From, q.To)}
	}
	var out []span
	if !q.From.IsZero() && q.From.Before(d0) {
		out = append(out, hours(q.From, d0))
	}
	if !q.To.IsZero() && d1.Before(q.To) {
		out = append(out, hours(d1, q.To))
	}
	days := func(from, to time.Time) {
		if !from.IsZero() && !to.IsZero() && !from.Before(to) {
			return
		}
		sp := span{table: pickTable(grainDay, need)}
		if !from.IsZero() {
			sp.from = bucket(grainDay, from, s.loc)
		}
		if !to.IsZero() {
			sp.to = bucket(grainDay, to, s.loc)
		}
		out = append(out, sp)
	}
	mt, ok := rollupTable{}, false
	if !slices.Contains(q.GroupBy, store.DimDay) {
		mt, ok = findTable(grainMonth, need)
	}
	if !ok {
		days(d0, d1)
		return out
	}
	// [m0, m1) is the whole local months of the days.
	m0, m1 := ceilMonth(d0, s.loc), floorMonth(d1, s.loc)
	if !m0.IsZero() && !m1.IsZero() && !m0.Before(m1) {
		days(d0, d1)
		return out
	}
	if !d0.IsZero() {
		days(d0, m0)
	}
	if !d1.IsZero() {
		days(m1, d1)
	}
	sp := span{table: mt}
	if !m0.IsZero() {
		sp.from = bucket(grainMonth, m0, s.loc)
	}
	if !m1.IsZero() {
		sp.to = bucket(grainMonth, m1, s.loc)
	}
	return append(out, sp)
}

// selectMeasures are the measures named, in rollup column order; all of
// them for none.
func selectMeasures(names []string) ([]store.Measure, error) {
	if names == nil {
		return measures, nil
	}
	for _, n := range names {
		if !slices.ContainsFunc(measures, func(m store.Measure) bool { return m.Name == n }) {
			return nil, fmt.Errorf("unknown measure %q; one of %s", n, strings.Join(store.MeasureNames(), ", "))
		}
	}
	return slices.DeleteFunc(slices.Clone(measures), func(m store.Measure) bool { return !slices.Contains(names, m.Name) }), nil
}

// findTable is the narrowest report rollup of grain g with every
// dimension in need.
func findTable(g grain, need []string) (rollupTable, bool) {
	for _, t := range reportTables {
		if t.grain == g && !slices.ContainsFunc(need, func(d string) bool { return !slices.Contains(t.dims, d) }) {
			return t, true
		}
	}
	return rollupTable{}, false
}

// pickTable is findTable for a grain whose widest table has every
// billing dimension.
func pickTable(g grain, need []string) rollupTable {
	t, _ := findTable(g, need)
	return t
}

func ceilDay(t time.Time, loc *time.Location) time.Time {
	if t.IsZero() {
		return t
	}
	if f := store.FloorDay(t, loc); !f.Before(t) {
		return f
	}
	return store.NextDay(t, loc)
}

func floorMonth(t time.Time, loc *time.Location) time.Time {
	if t.IsZero() {
		return t
	}
	y, m, _ := t.In(loc).Date()
	return store.StartOfDay(y, m, 1, loc)
}

func ceilMonth(t time.Time, loc *time.Location) time.Time {
	if t.IsZero() {
		return t
	}
	if f := floorMonth(t, loc); !f.Before(t) {
		return f
	}
	y, m, _ := t.In(loc).Date()
	return store.StartOfDay(y, m+1, 1, loc)
}

// Report sums the billing rollups over the spans plan chooses and adds
// the spans' rows of the same group together. Rows come sorted by their
// keys, then currency.
func (s *Store) Report(ctx context.Context, q store.ReportQuery) ([]store.ReportRow, error) {
	for _, d := range q.GroupBy {
		if !slices.Contains(store.Dims, d) {
			return nil, fmt.Errorf("report: unknown dimension %q", d)
		}
	}
	var need []string
	for d := range q.Where {
		c, ok := dimColumn[d]
		if !ok {
			return nil, fmt.Errorf("report: cannot filter on %q", d)
		}
		need = append(need, c)
	}
	for _, d := range q.GroupBy {
		if c, ok := dimColumn[d]; ok {
			need = append(need, c)
		}
	}
	if slices.Contains(q.GroupBy, store.DimMinute) {
		// rollup_minute answers alone: it keeps fewer dimensions, and no
		// coarser time dimension is folded from it.
		for _, d := range q.GroupBy {
			if d == store.DimHour || d == store.DimDay || d == store.DimMonth {
				return nil, fmt.Errorf("report: cannot group by minute and %s together", d)
			}
		}
		for _, c := range need {
			if !slices.Contains(rollupMinute.dims, c) {
				return nil, fmt.Errorf("report: minutes are kept by model, upstream and biz_line only, not by %s", c)
			}
		}
	}
	ms, err := selectMeasures(q.Measures)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	loc := s.loc
	if q.Zone != nil {
		loc = q.Zone
	}
	var out []store.ReportRow
	index := map[string]int{} // group → its row in out
	for _, sp := range s.plan(q, loc, need) {
		if err := s.reportSpan(ctx, q, loc, sp, ms, func(row store.ReportRow) {
			k := strings.Join(row.Keys, "\x00") + "\x00" + row.Currency
			if i, ok := index[k]; ok {
				out[i].Totals.Add(row.Totals)
				return
			}
			index[k] = len(out)
			out = append(out, row)
		}); err != nil {
			return nil, fmt.Errorf("report: %s: %w", sp.table.name, err)
		}
	}
	slices.SortFunc(out, func(a, b store.ReportRow) int {
		if c := slices.Compare(a.Keys, b.Keys); c != 0 {
			return c
		}
		return strings.Compare(a.Currency, b.Currency)
	})
	return out, nil
}

// reportSpan runs the query over one span, passing each group's sums to
// emit; groups finer than asked (hours of a day) are emitted apart.
func (s *Store) reportSpan(ctx context.Context, q store.ReportQuery, loc *time.Location, sp span, ms []store.Measure, emit func(store.ReportRow)) error {
	var sel, group, where []string
	var args []any
	for _, d := range q.GroupBy {
		expr := dimColumn[d]
		switch {
		case d == store.DimMonth && sp.table.grain == grainDay:
			expr = "substr(bucket, 1, 7)"
		case d == store.DimDay || d == store.DimMonth || d == store.DimHour || d == store.DimMinute:
			expr = "bucket" // a day or month as such; an hour is folded below
		}
		sel = append(sel, expr)
		group = append(group, expr)
	}
	if sp.from != nil {
		where = append(where, "bucket >= ?")
		args = append(args, sp.from)
	}
	if sp.to != nil {
		where = append(where, "bucket < ?")
		args = append(args, sp.to)
	}
	wdims := slices.Sorted(maps.Keys(q.Where))
	for _, d := range wdims {
		where = append(where, dimColumn[d]+" = ?")
		args = append(args, q.Where[d])
	}
	sel = append(sel, "currency")
	group = append(group, "currency")
	for _, m := range ms {
		sel = append(sel, "SUM("+m.Name+")")
	}
	query := "SELECT " + strings.Join(sel, ", ") + " FROM " + sp.table.name
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " GROUP BY " + strings.Join(group, ", ")

	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	raw := make([]any, len(q.GroupBy))
	dsts := make([]any, 0, len(raw)+1+len(measures))
	for i := range raw {
		dsts = append(dsts, &raw[i])
	}
	for rows.Next() {
		var row store.ReportRow
		dsts = append(dsts[:len(raw)], &row.Currency)
		for _, m := range ms {
			dsts = append(dsts, m.Field(&row.Totals))
		}
		if err := rows.Scan(dsts...); err != nil {
			return err
		}
		row.Keys = make([]string, len(q.GroupBy))
		for i, d := range q.GroupBy {
			row.Keys[i] = keyString(d, raw[i], loc)
		}
		emit(row)
	}
	return rows.Err()
}

// keyString is a group's key as reports show it; hour buckets (Unix
// seconds) become the hour, day or month they fall in.
func keyString(d store.Dim, v any, loc *time.Location) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		t := time.Unix(x, 0)
		switch d {
		case store.DimHour, store.DimMinute:
			return t.UTC().Format(time.RFC3339)
		case store.DimDay:
			return t.In(loc).Format(time.DateOnly)
		case store.DimMonth:
			return t.In(loc).Format("2006-01")
		}
		return fmt.Sprint(x)
	case []byte:
		return string(x)
	case nil:
		return ""
	default:
		return fmt.Sprint(x)
	}
}

// Prompts lists prompts seen at least minCount times over whole local days
// from..to, most requests first.
func (s *Store) Prompts(ctx context.Context, from, to time.Time, minCount int64, limit int) ([]store.PromptRow, error) {
	if limit <= 0 {
		limit = 100
	}
	sel := []string{"prompt_sha256", "model", "template_id", "currency"}
	for _, m := range measures {
		sel = append(sel, "SUM("+m.Name+")")
	}
	q := "SELECT " + strings.Join(sel, ", ") + " FROM prompt_day WHERE bucket >= ? AND bucket < ?" +
		" GROUP BY prompt_sha256, model, template_id, currency HAVING SUM(requests) >= ? ORDER BY SUM(requests) DESC, prompt_sha256 LIMIT ?"
	fromDay, toDay := "0000-00-00", "9999-99-99"
	if !from.IsZero() {
		fromDay = from.In(s.loc).Format(time.DateOnly)
	}
	if !to.IsZero() {
		toDay = to.In(s.loc).Format(time.DateOnly)
	}
	rows, err := s.r.QueryContext(ctx, q, fromDay, toDay, minCount, limit)
	if err != nil {
		return nil, fmt.Errorf("prompts: %w", err)
	}
	defer rows.Close()
	var out []store.PromptRow
	for rows.Next() {
		var p store.PromptRow
		var currency string
		dsts := []any{&p.PromptSHA256, &p.Model, &p.TemplateID, &currency}
		for _, m := range measures {
			dsts = append(dsts, m.Field(&p.Totals))
		}
		if err := rows.Scan(dsts...); err != nil {
			return nil, fmt.Errorf("prompts: %w", err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// Rerate walks the ledger rows of [from, to) in arrival order, a chunk per
// transaction, and moves each changed row's totals from its old rollup
// rows to its new ones (cost and currency may both change).
func (s *Store) Rerate(ctx context.Context, from, to time.Time, rate func(*record.Record) record.Cost) (int, error) {
	changed := 0
	cursorAt, cursorID := from.UnixNano(), ""
	const chunk = 2000
	for {
		recs, err := s.query(ctx, "SELECT "+selectColumns+" FROM requests WHERE (arrival > ? OR (arrival = ? AND request_id > ?)) AND arrival < ? ORDER BY arrival, request_id LIMIT ?",
			false, cursorAt, cursorAt, cursorID, to.UnixNano(), chunk)
		if err != nil {
			return changed, fmt.Errorf("rerate: %w", err)
		}
		if len(recs) == 0 {
			return changed, nil
		}
		n, err := s.rerateChunk(ctx, recs, rate)
		changed += n
		if err != nil {
			return changed, fmt.Errorf("rerate: %w", err)
		}
		last := recs[len(recs)-1]
		cursorAt, cursorID = last.Arrival.UnixNano(), last.RequestID
		if len(recs) < chunk {
			return changed, nil
		}
	}
}

func (s *Store) rerateChunk(ctx context.Context, recs []*record.Record, rate func(*record.Record) record.Cost) (int, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	acc := newRollupAcc(s.loc)
	n := 0
	for _, r := range recs {
		c := rate(r)
		if c == r.Cost {
			continue
		}
		acc.add(r, -1)
		nr := *r
		nr.Cost = c
		acc.add(&nr, +1)
		if _, err := tx.ExecContext(ctx, "UPDATE requests SET cost_nanos = ?, currency = ?, price_version = ? WHERE request_id = ?",
			c.Nanos, c.Currency, c.PriceVersion, r.RequestID); err != nil {
			return 0, err
		}
		n++
	}
	if err := acc.flush(ctx, tx, s.upserts); err != nil {
		return 0, err
	}
	return n, tx.Commit()
}

// AddEvents stores events in one transaction.
func (s *Store) AddEvents(ctx context.Context, evs []store.Event) error {
	if len(evs) == 0 {
		return nil
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("add events: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	for _, e := range evs {
		if _, err := tx.ExecContext(ctx, "INSERT INTO events (at, kind, subject, message, data) VALUES (?, ?, ?, ?, ?)",
			e.At.UnixNano(), e.Kind, e.Subject, e.Message, e.Data); err != nil {
			return fmt.Errorf("add events: %w", err)
		}
	}
	return tx.Commit()
}

// Events lists events since a time, of one kind or all, newest first.
func (s *Store) Events(ctx context.Context, since time.Time, kind string, limit int) ([]store.Event, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.r.QueryContext(ctx, "SELECT at, kind, subject, message, data FROM events WHERE at >= ? AND (? = '' OR kind = ?) ORDER BY at DESC, id DESC LIMIT ?",
		since.UnixNano(), kind, kind, limit)
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	defer rows.Close()
	var out []store.Event
	for rows.Next() {
		var e store.Event
		var at int64
		if err := rows.Scan(&at, &e.Kind, &e.Subject, &e.Message, &e.Data); err != nil {
			return nil, fmt.Errorf("events: %w", err)
		}
		e.At = time.Unix(0, at).UTC()
		out = append(out, e)
	}
	return out, rows.Err()
}

// Prune deletes, in chunks so the writer is never held long, whatever the
// retention says is too old. It returns how many rows went.
func (s *Store) Prune(ctx context.Context, now time.Time, r store.Retention) (int64, error) {
	type job struct {
		keep time.Duration
		stmt string
		arg  func(cut time.Time) any
	}
	ns := func(cut time.Time) any { return cut.UnixNano() }
	sec := func(cut time.Time) any { return cut.Unix() }
	day := func(cut time.Time) any { return bucket(grainDay, cut, s.loc) }
	// A month goes once all of it is older than the retention, and the
	// day rollups go with their month: reports read whole months from the
	// month rollups and the rest from the day rollups, which must cover
	// the same months to agree.
	month := func(cut time.Time) any { return bucket(grainMonth, cut, s.loc) }
	monthDays := func(cut time.Time) any { return bucket(grainDay, floorMonth(cut, s.loc), s.loc) }
	jobs := []job{
		{r.Details, "DELETE FROM request_details WHERE request_id IN (SELECT d.request_id FROM request_details d JOIN requests q USING (request_id) WHERE q.arrival < ? LIMIT 5000)", ns},
		{r.Ledger, "DELETE FROM requests WHERE rowid IN (SELECT rowid FROM requests WHERE arrival < ? LIMIT 5000)", ns},
		{r.Minute, "DELETE FROM rollup_minute WHERE bucket < ?", sec},
		{r.Hour, "DELETE FROM rollup_hour WHERE bucket < ?", sec},
		{r.Day, "DELETE FROM rollup_day WHERE bucket < ?", monthDays},
		{r.Day, "DELETE FROM prompt_day WHERE bucket < ?", day},
		{r.Day, "DELETE FROM rollup_day_user WHERE bucket < ?", monthDays},
		{r.Day, "DELETE FROM rollup_month WHERE bucket < ?", month},
		{r.Day, "DELETE FROM rollup_month_user WHERE bucket < ?", month},
		{r.Events, "DELETE FROM events WHERE id IN (SELECT id FROM events WHERE at < ? LIMIT 5000)", ns},
		{r.Engine, "DELETE FROM engine_samples WHERE rowid IN (SELECT rowid FROM engine_samples WHERE at < ? LIMIT 5000)", ns},
		{r.Minute, "DELETE FROM window_minute WHERE rowid IN (SELECT rowid FROM window_minute WHERE minute < ? LIMIT 5000)", sec},
		{r.Hour, "DELETE FROM window_hour WHERE rowid IN (SELECT rowid FROM window_hour WHERE hour < ? LIMIT 5000)", sec},
		{r.Day, "DELETE FROM window_day WHERE rowid IN (SELECT rowid FROM window_day WHERE day < ? LIMIT 5000)", sec},
		{r.Captures, "DELETE FROM captures WHERE rowid IN (SELECT rowid FROM captures WHERE at < ? LIMIT 5000)", ns},
	}
	var total int64
	// Most prompts are sent once: prompt_day would otherwise hold nearly a
	// row per request. Once a day has closed, only prompts seen more than
	// once (what the waste report looks for) are kept; a day at a time, so
	// the writer is never held long.
	rows, err := s.w.QueryContext(ctx, "SELECT DISTINCT bucket FROM prompt_day WHERE bucket < ?", now.In(s.loc).Format(time.DateOnly))
	if err != nil {
		return 0, fmt.Errorf("prune single prompts: %w", err)
	}
	var days []string
	for rows.Next() {
		var d string
		if err := rows.Scan(&d); err != nil {
			rows.Close()
			return 0, fmt.Errorf("prune single prompts: %w", err)
		}
		days = append(days, d)
	}
	rows.Close()
	for _, d := range days {
		res, err := s.w.ExecContext(ctx, "DELETE FROM prompt_day WHERE bucket = ? AND requests <= 1", d)
		if err != nil {
			return total, fmt.Errorf("prune single prompts: %w", err)
		}
		n, _ := res.RowsAffected()
		total += n
	}
	for _, j := range jobs {
		if j.keep <= 0 {
			continue
		}
		cut := now.Add(-j.keep)
		for {
			res, err := s.w.ExecContext(ctx, j.stmt, j.arg(cut))
			if err != nil {
				return total, fmt.Errorf("prune: %w", err)
			}
			n, _ := res.RowsAffected()
			total += n
			if n < 5000 || !strings.Contains(j.stmt, "LIMIT") {
				break
			}
		}
	}
	return total, nil
}

// SetEngineTiming amends one row and its rollups in one transaction.
func (s *Store) SetEngineTiming(ctx context.Context, requestID string, et record.EngineTiming) error {
	recs, err := s.query(ctx, "SELECT "+selectColumns+" FROM requests WHERE request_id = ?", false, requestID)
	if err != nil {
		return fmt.Errorf("amend %q: %w", requestID, err)
	}
	if len(recs) == 0 {
		return nil
	}
	old := recs[0]
	nr := *old
	nr.EngineTiming = &et
	nr.Finish()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("amend %q: %w", requestID, err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	// A non-streamed answer's TPOT comes from the engine's decode time.
	sets := []string{"engine_timing = ?", "tpot_ns = ?"}
	args := []any{engineJSON(nr.EngineTiming), optNS(nr.Derived.TPOT)}
	for _, n := range record.SegmentNames {
		sets = append(sets, "seg_"+n+"_ns = ?")
		args = append(args, int64(nr.Derived.Segments.Get(n)))
	}
	args = append(args, requestID)
	if _, err := tx.ExecContext(ctx, "UPDATE requests SET "+strings.Join(sets, ", ")+" WHERE request_id = ?", args...); err != nil {
		return fmt.Errorf("amend %q: %w", requestID, err)
	}
	acc := newRollupAcc(s.loc)
	acc.add(old, -1)
	acc.add(&nr, +1)
	if err := acc.flush(ctx, tx, s.upserts); err != nil {
		return fmt.Errorf("amend %q: %w", requestID, err)
	}
	return tx.Commit()
}

// nullNaN stores NaN (unknown) as NULL, which SQLite would do anyway,
// but explicitly so that reading back gives NaN again.
func nullNaN(f float64) any {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil
	}
	return f
}

// AddEngineSamples stores samples in one transaction.
func (s *Store) AddEngineSamples(ctx context.Context, ss []store.EngineSample) error {
	if len(ss) == 0 {
		return nil
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("engine samples: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	for _, e := range ss {
		if _, err := tx.ExecContext(ctx, `INSERT INTO engine_samples (at, upstream, model, up, running, waiting, kv_cache_usage,
			prefix_cache_hit_rate, ttft_p50, ttft_p95, ttft_p99, prompt_tps, generation_tps) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			e.At.UnixNano(), e.Upstream, e.Model, e.Up, nullNaN(e.Running), nullNaN(e.Waiting), nullNaN(e.KVCacheUsage),
			nullNaN(e.PrefixCacheHitRate), nullNaN(e.TTFTP50), nullNaN(e.TTFTP95), nullNaN(e.TTFTP99),
			nullNaN(e.PromptTokensPerS), nullNaN(e.GenerationTokensPerS)); err != nil {
			return fmt.Errorf("engine samples: %w", err)
		}
	}
	return tx.Commit()
}

// EngineSamples reads samples of [from, to), oldest first.
func (s *Store) EngineSamples(ctx context.Context, from, to time.Time, upstream string) ([]store.EngineSample, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT at, upstream, model, up, running, waiting, kv_cache_usage, prefix_cache_hit_rate,
		ttft_p50, ttft_p95, ttft_p99, prompt_tps, generation_tps FROM engine_samples
		WHERE at >= ? AND at < ? AND (? = '' OR upstream = ?) ORDER BY at, rowid LIMIT 100000`,
		from.UnixNano(), to.UnixNano(), upstream, upstream)
	if err != nil {
		return nil, fmt.Errorf("engine samples: %w", err)
	}
	defer rows.Close()
	var out []store.EngineSample
	for rows.Next() {
		var e store.EngineSample
		var at int64
		var f [9]sql.NullFloat64
		if err := rows.Scan(&at, &e.Upstream, &e.Model, &e.Up, &f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &f[6], &f[7], &f[8]); err != nil {
			return nil, fmt.Errorf("engine samples: %w", err)
		}
		e.At = time.Unix(0, at).UTC()
		v := func(i int) float64 {
			if f[i].Valid {
				return f[i].Float64
			}
			return math.NaN()
		}
		e.Running, e.Waiting, e.KVCacheUsage, e.PrefixCacheHitRate = v(0), v(1), v(2), v(3)
		e.TTFTP50, e.TTFTP95, e.TTFTP99, e.PromptTokensPerS, e.GenerationTokensPerS = v(4), v(5), v(6), v(7), v(8)
		out = append(out, e)
	}
	return out, rows.Err()
}

// AddWindowMinutes appends minutes in one transaction.
func (s *Store) AddWindowMinutes(ctx context.Context, ms []store.WindowMinute) error {
	if len(ms) == 0 {
		return nil
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("window minutes: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	for _, m := range ms {
		if _, err := tx.ExecContext(ctx, "INSERT INTO window_minute (minute, model, biz_line, upstream, template, data) VALUES (?, ?, ?, ?, ?, ?)",
			m.Minute.Unix(), m.Model, m.BizLine, m.Upstream, m.Template, m.Data); err != nil {
			return fmt.Errorf("window minutes: %w", err)
		}
	}
	return tx.Commit()
}

// WindowMinutes reads the minutes of [from, to), oldest first.
func (s *Store) WindowMinutes(ctx context.Context, from, to time.Time) ([]store.WindowMinute, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT minute, model, biz_line, upstream, template, data FROM window_minute WHERE minute >= ? AND minute < ? ORDER BY minute, rowid",
		from.Unix(), to.Unix())
	if err != nil {
		return nil, fmt.Errorf("window minutes: %w", err)
	}
	defer rows.Close()
	var out []store.WindowMinute
	for rows.Next() {
		var m store.WindowMinute
		var at int64
		if err := rows.Scan(&at, &m.Model, &m.BizLine, &m.Upstream, &m.Template, &m.Data); err != nil {
			return nil, fmt.Errorf("window minutes: %w", err)
		}
		m.Minute = time.Unix(at, 0).UTC()
		out = append(out, m)
	}
	return out, rows.Err()
}

// AddWindowHours appends hours in one transaction.
func (s *Store) AddWindowHours(ctx context.Context, hs []store.WindowHour) error {
	if len(hs) == 0 {
		return nil
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("window hours: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	for _, h := range hs {
		if _, err := tx.ExecContext(ctx, "INSERT INTO window_hour (hour, model, biz_line, upstream, template, data) VALUES (?, ?, ?, ?, ?, ?)",
			h.Hour.Unix(), h.Model, h.BizLine, h.Upstream, h.Template, h.Data); err != nil {
			return fmt.Errorf("window hours: %w", err)
		}
	}
	return tx.Commit()
}

// WindowHours reads the hours of [from, to), oldest first.
func (s *Store) WindowHours(ctx context.Context, from, to time.Time) ([]store.WindowHour, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT hour, model, biz_line, upstream, template, data FROM window_hour WHERE hour >= ? AND hour < ? ORDER BY hour, rowid",
		from.Unix(), to.Unix())
	if err != nil {
		return nil, fmt.Errorf("window hours: %w", err)
	}
	defer rows.Close()
	var out []store.WindowHour
	for rows.Next() {
		var h store.WindowHour
		var at int64
		if err := rows.Scan(&at, &h.Model, &h.BizLine, &h.Upstream, &h.Template, &h.Data); err != nil {
			return nil, fmt.Errorf("window hours: %w", err)
		}
		h.Hour = time.Unix(at, 0).UTC()
		out = append(out, h)
	}
	return out, rows.Err()
}

// AddWindowDay writes a closed day's rows in one transaction, unless the
// day has rows already.
func (s *Store) AddWindowDay(ctx context.Context, start, end time.Time, ds []store.WindowDay) (bool, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("window day: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	var n int
	if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM (SELECT 1 FROM window_day WHERE day = ? LIMIT 1)", start.Unix()).Scan(&n); err != nil {
		return false, fmt.Errorf("window day: %w", err)
	}
	if n > 0 {
		return false, nil
	}
	if len(ds) == 0 {
		ds = []store.WindowDay{{}}
	}
	for _, d := range ds {
		if d.Data == nil {
			d.Data = []byte{}
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO window_day (day, day_end, model, biz_line, upstream, template, data) VALUES (?, ?, ?, ?, ?, ?, ?)",
			start.Unix(), end.Unix(), d.Model, d.BizLine, d.Upstream, d.Template, d.Data); err != nil {
			return false, fmt.Errorf("window day: %w", err)
		}
	}
	return true, tx.Commit()
}

// WindowDays reads the rows of the days starting in [from, to), oldest
// first.
func (s *Store) WindowDays(ctx context.Context, from, to time.Time) ([]store.WindowDay, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT day, day_end, model, biz_line, upstream, template, data FROM window_day WHERE day >= ? AND day < ? ORDER BY day, rowid",
		from.Unix(), to.Unix())
	if err != nil {
		return nil, fmt.Errorf("window days: %w", err)
	}
	defer rows.Close()
	var out []store.WindowDay
	for rows.Next() {
		var d store.WindowDay
		var start, end int64
		if err := rows.Scan(&start, &end, &d.Model, &d.BizLine, &d.Upstream, &d.Template, &d.Data); err != nil {
			return nil, fmt.Errorf("window days: %w", err)
		}
		d.Start, d.End = time.Unix(start, 0).UTC(), time.Unix(end, 0).UTC()
		out = append(out, d)
	}
	return out, rows.Err()
}
