package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// measures are the rollup columns, one per store.Totals field. The DDL, the
// upserts and the report SELECT are all generated from this one list.
var measures = []struct {
	name string
	get  func(*store.Totals) *int64
}{
	{"requests", func(t *store.Totals) *int64 { return &t.Requests }},
	{"errors", func(t *store.Totals) *int64 { return &t.Errors }},
	{"disconnects", func(t *store.Totals) *int64 { return &t.Disconnects }},
	{"cache_hits", func(t *store.Totals) *int64 { return &t.CacheHits }},
	{"input_tokens", func(t *store.Totals) *int64 { return &t.Input }},
	{"cached_input_tokens", func(t *store.Totals) *int64 { return &t.Cached }},
	{"output_tokens", func(t *store.Totals) *int64 { return &t.Output }},
	{"reasoning_tokens", func(t *store.Totals) *int64 { return &t.Reasoning }},
	{"cost_nanos", func(t *store.Totals) *int64 { return &t.CostNanos }},
	{"finish_length", func(t *store.Totals) *int64 { return &t.FinishLength }},
	{"usage_missing", func(t *store.Totals) *int64 { return &t.UsageMissing }},
	{"retried", func(t *store.Totals) *int64 { return &t.Retried }},
	{"retried_input_est", func(t *store.Totals) *int64 { return &t.RetriedInputEst }},
	{"cut_streams", func(t *store.Totals) *int64 { return &t.CutStreams }},
	{"cut_output", func(t *store.Totals) *int64 { return &t.CutOutput }},
	{"tokenizer_input", func(t *store.Totals) *int64 { return &t.TokenizerInput }},
	{"tokenizer_output", func(t *store.Totals) *int64 { return &t.TokenizerOutput }},
	{"e2e_sum_ns", func(t *store.Totals) *int64 { return &t.E2ESumNS }},
	{"ttft_sum_ns", func(t *store.Totals) *int64 { return &t.TTFTSumNS }},
	{"ttft_count", func(t *store.Totals) *int64 { return &t.TTFTCount }},
	{"prompt_bytes", func(t *store.Totals) *int64 { return &t.PromptBytes }},
	// Added by migration 3.
	{"reached", func(t *store.Totals) *int64 { return &t.Reached }},
	{"cut_output_limit", func(t *store.Totals) *int64 { return &t.CutOutputLimit }},
	{"cut_unlimited", func(t *store.Totals) *int64 { return &t.CutUnlimited }},
	{"cut_input_est", func(t *store.Totals) *int64 { return &t.CutInputEst }},
	// Added by migration 4: latency segments, in record.SegmentNames order.
	{"seg_gateway_queue_ns", func(t *store.Totals) *int64 { return &t.SegmentNS[0] }},
	{"seg_connect_ns", func(t *store.Totals) *int64 { return &t.SegmentNS[1] }},
	{"seg_engine_queue_ns", func(t *store.Totals) *int64 { return &t.SegmentNS[2] }},
	{"seg_prefill_ns", func(t *store.Totals) *int64 { return &t.SegmentNS[3] }},
	{"seg_decode_ns", func(t *store.Totals) *int64 { return &t.SegmentNS[4] }},
	{"seg_client_write_ns", func(t *store.Totals) *int64 { return &t.SegmentNS[5] }},
	{"seg_post_processing_ns", func(t *store.Totals) *int64 { return &t.SegmentNS[6] }},
	{"seg_unattributed_ns", func(t *store.Totals) *int64 { return &t.SegmentNS[7] }},
}

// v3Measures is how many measures existed after migration 3.
const v3Measures = 25

// v2Measures is how many measures migration 2 created: its DDL is frozen
// at that list, later measures are added by later migrations.
const v2Measures = 21

// rollupTable describes one rollup: its bucket and the dimensions kept.
type rollupTable struct {
	name   string
	bucket string // SQL type of the bucket column
	dims   []string
}

// billingDims are what cost reports group by; the currency is always a
// key, so different currencies are never added together.
var billingDims = []string{"model", "served_model", "upstream", "biz_line", "user_id", "key_id", "template_id", "currency"}

var (
	rollupHour   = rollupTable{"rollup_hour", "INTEGER", billingDims} // bucket: Unix seconds of the UTC hour
	rollupDay    = rollupTable{"rollup_day", "TEXT", billingDims}     // bucket: YYYY-MM-DD, report time zone
	rollupMinute = rollupTable{"rollup_minute", "INTEGER", []string{"model", "upstream", "biz_line", "currency"}}
	promptDay    = rollupTable{"prompt_day", "TEXT", []string{"prompt_sha256", "model", "template_id", "currency"}}
	rollupTables = []rollupTable{rollupHour, rollupDay, rollupMinute, promptDay}
)

func (t rollupTable) ddl(ms int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE %s (\n\tbucket %s NOT NULL,\n", t.name, t.bucket)
	for _, d := range t.dims {
		fmt.Fprintf(&b, "\t%s TEXT NOT NULL,\n", d)
	}
	for _, m := range measures[:ms] {
		fmt.Fprintf(&b, "\t%s INTEGER NOT NULL DEFAULT 0,\n", m.name)
	}
	fmt.Fprintf(&b, "\tPRIMARY KEY (bucket, %s)\n) STRICT, WITHOUT ROWID;\n", strings.Join(t.dims, ", "))
	return b.String()
}

func (t rollupTable) upsertSQL() string {
	cols := append([]string{"bucket"}, t.dims...)
	var sets []string
	for _, m := range measures {
		cols = append(cols, m.name)
		sets = append(sets, fmt.Sprintf("%s = %s + excluded.%s", m.name, m.name, m.name))
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
	for _, t := range rollupTables {
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
	for _, t := range rollupTables {
		for _, m := range measures[v3Measures:] {
			fmt.Fprintf(&b, "ALTER TABLE %s ADD COLUMN %s INTEGER NOT NULL DEFAULT 0;\n", t.name, m.name)
		}
	}
	return b.String()
}()

// migration3 adds the measures reconciliation needs: attempts that
// reached an engine, and the limits and input estimates of cut streams. Rollup rows written before it read 0, so
// reconciling periods from before the upgrade under-counts requests.
var migration3 = func() string {
	var b strings.Builder
	for _, t := range rollupTables {
		for _, m := range measures[v2Measures:v3Measures] {
			fmt.Fprintf(&b, "ALTER TABLE %s ADD COLUMN %s INTEGER NOT NULL DEFAULT 0;\n", t.name, m.name)
		}
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
	buckets := []any{
		at.Truncate(time.Hour).Unix(),
		at.In(a.loc).Format(time.DateOnly),
		at.Truncate(time.Minute).Unix(),
		at.In(a.loc).Format(time.DateOnly),
	}
	for i, tbl := range rollupTables {
		if tbl.name == promptDay.name && r.PromptSHA256 == "" {
			continue
		}
		k := rollupKey{table: i, bucket: buckets[i]}
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
		p := m.get(t)
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
			args = append(args, *m.get(sum))
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

// Report sums the billing rollups. Whole local days are read from
// rollup_day; anything finer (an hour grouping, or bounds inside a day)
// from rollup_hour, folding hours into local days in Go when asked.
func (s *Store) Report(ctx context.Context, q store.ReportQuery) ([]store.ReportRow, error) {
	for _, d := range q.GroupBy {
		if !slices.Contains(store.Dims, d) {
			return nil, fmt.Errorf("report: unknown dimension %q", d)
		}
	}
	for d := range q.Where {
		if _, ok := dimColumn[d]; !ok {
			return nil, fmt.Errorf("report: cannot filter on %q", d)
		}
	}
	loc := s.loc
	if q.Zone != nil {
		loc = q.Zone
	}
	useDay := loc.String() == s.loc.String() && !slices.Contains(q.GroupBy, store.DimHour) && s.onDay(q.From) && s.onDay(q.To)
	var (
		sel, group []string
		where      []string
		args       []any
		table      = rollupHour.name
	)
	if useDay {
		table = rollupDay.name
	}
	for _, d := range q.GroupBy {
		var expr string
		switch {
		case d == store.DimDay && useDay:
			expr = "bucket"
		case d == store.DimMonth && useDay:
			expr = "substr(bucket, 1, 7)"
		case d == store.DimDay || d == store.DimMonth || d == store.DimHour:
			expr = "bucket" // an hour; folded below
		default:
			expr = dimColumn[d]
		}
		sel = append(sel, expr)
		group = append(group, expr)
	}
	if !q.From.IsZero() {
		where = append(where, "bucket >= ?")
		args = append(args, s.bucketOf(q.From, useDay))
	}
	if !q.To.IsZero() {
		where = append(where, "bucket < ?")
		args = append(args, s.bucketOf(q.To, useDay))
	}
	wdims := make([]store.Dim, 0, len(q.Where))
	for d := range q.Where {
		wdims = append(wdims, d)
	}
	slices.Sort(wdims)
	for _, d := range wdims {
		where = append(where, dimColumn[d]+" = ?")
		args = append(args, q.Where[d])
	}
	sel = append(sel, "currency")
	group = append(group, "currency")
	for _, m := range measures {
		sel = append(sel, "SUM("+m.name+")")
	}
	query := "SELECT " + strings.Join(sel, ", ") + " FROM " + table
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " GROUP BY " + strings.Join(group, ", ")

	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	defer rows.Close()
	var out []store.ReportRow
	index := map[string]int{} // folding hours into days or months
	for rows.Next() {
		raw := make([]any, len(q.GroupBy))
		var row store.ReportRow
		dsts := make([]any, 0, len(raw)+1+len(measures))
		for i := range raw {
			dsts = append(dsts, &raw[i])
		}
		dsts = append(dsts, &row.Currency)
		for _, m := range measures {
			dsts = append(dsts, m.get(&row.Totals))
		}
		if err := rows.Scan(dsts...); err != nil {
			return nil, fmt.Errorf("report: %w", err)
		}
		row.Keys = make([]string, len(q.GroupBy))
		for i, d := range q.GroupBy {
			row.Keys[i] = keyString(d, raw[i], useDay, loc)
		}
		if useDay {
			out = append(out, row)
			continue
		}
		k := strings.Join(row.Keys, "\x00") + "\x00" + row.Currency
		if i, ok := index[k]; ok {
			out[i].Totals.Add(row.Totals)
			continue
		}
		index[k] = len(out)
		out = append(out, row)
	}
	return out, rows.Err()
}

// onDay reports whether t is a local midnight (or unbounded).
func (s *Store) onDay(t time.Time) bool {
	if t.IsZero() {
		return true
	}
	lt := t.In(s.loc)
	return lt.Hour() == 0 && lt.Minute() == 0 && lt.Second() == 0 && lt.Nanosecond() == 0
}

func (s *Store) bucketOf(t time.Time, day bool) any {
	if day {
		return t.In(s.loc).Format(time.DateOnly)
	}
	return t.UTC().Truncate(time.Hour).Unix()
}

func keyString(d store.Dim, v any, useDay bool, loc *time.Location) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		if useDay {
			return fmt.Sprint(x)
		}
		t := time.Unix(x, 0)
		switch d {
		case store.DimHour:
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
		sel = append(sel, "SUM("+m.name+")")
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
			dsts = append(dsts, m.get(&p.Totals))
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
	day := func(cut time.Time) any { return cut.In(s.loc).Format(time.DateOnly) }
	jobs := []job{
		{r.Details, "DELETE FROM request_details WHERE request_id IN (SELECT d.request_id FROM request_details d JOIN requests q USING (request_id) WHERE q.arrival < ? LIMIT 5000)", ns},
		{r.Ledger, "DELETE FROM requests WHERE rowid IN (SELECT rowid FROM requests WHERE arrival < ? LIMIT 5000)", ns},
		{r.Minute, "DELETE FROM rollup_minute WHERE bucket < ?", sec},
		{r.Hour, "DELETE FROM rollup_hour WHERE bucket < ?", sec},
		{r.Day, "DELETE FROM rollup_day WHERE bucket < ?", day},
		{r.Day, "DELETE FROM prompt_day WHERE bucket < ?", day},
		{r.Events, "DELETE FROM events WHERE id IN (SELECT id FROM events WHERE at < ? LIMIT 5000)", ns},
		{r.Engine, "DELETE FROM engine_samples WHERE rowid IN (SELECT rowid FROM engine_samples WHERE at < ? LIMIT 5000)", ns},
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
	sets := []string{"engine_timing = ?"}
	args := []any{engineJSON(nr.EngineTiming)}
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
