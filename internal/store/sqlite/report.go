package sqlite

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/store"
)

// Reports: Report plans spans over the billing rollups and sums them;
// Prompts reads the prompt statistics.

// dimColumn maps a report dimension to its column in a billing rollup.
var dimColumn = map[store.Dim]string{
	store.DimModel: "model", store.DimServedModel: "served_model", store.DimUpstream: "upstream",
	store.DimBizLine: "biz_line", store.DimUser: "user_id", store.DimKey: "key_id", store.DimTemplate: "template_id",
	store.DimEndUser: "end_user",
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
		sp := span{table: pickTable(grainHour, need)}
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
// dimension in need. A table that counts only the requests with a
// dimension set answers only queries on that dimension.
func findTable(g grain, need []string) (rollupTable, bool) {
	for _, t := range reportTables {
		if t.grain == g && (t.only == "" || slices.Contains(need, t.only)) &&
			!slices.ContainsFunc(need, func(d string) bool { return !slices.Contains(t.dims, d) }) {
			return t, true
		}
	}
	return rollupTable{}, false
}

// pickTable is findTable for a grain that has a table for every query
// Report accepts: hours and days have one for the billing dimensions
// and one for the end users' (checkEndUser).
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
	if err := s.syncRollups(ctx); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
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
	if err := q.CheckEndUser(); err != nil {
		return nil, fmt.Errorf("report: %w", err)
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
// from..to, most requests first, with the measures prompt_day keeps
// (store.PromptMeasures).
func (s *Store) Prompts(ctx context.Context, from, to time.Time, minCount int64, limit int) ([]store.PromptRow, error) {
	if limit <= 0 {
		limit = 100
	}
	if err := s.syncRollups(ctx); err != nil {
		return nil, fmt.Errorf("prompts: %w", err)
	}
	sel := []string{"prompt_sha256", "model", "template_id", "currency"}
	for _, m := range promptDay.sums() {
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
		for _, m := range promptDay.sums() {
			dsts = append(dsts, m.Field(&p.Totals))
		}
		if err := rows.Scan(dsts...); err != nil {
			return nil, fmt.Errorf("prompts: %w", err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}
