package clickhouse

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// Report reads the rollups (rollup.go) after a roll-up pass, so that it
// includes every write made before it began; it never scans the ledger.
// The periods, roundings and keys are the SQLite store's, so that a query
// answers the same on both.

// dimColumn is the column of each non-time dimension.
var dimColumn = map[store.Dim]string{
	store.DimModel: "model", store.DimServedModel: "served_model", store.DimUpstream: "upstream",
	store.DimBizLine: "biz_line", store.DimUser: "user_id", store.DimKey: "key_id", store.DimTemplate: "template_id",
	store.DimEndUser: "end_user",
}

// minuteDims are the dimensions a report by minute may use, as in the
// SQLite store (whose minute rollups keep no others), so that a query
// means the same on both backends.
var minuteDims = []store.Dim{store.DimModel, store.DimUpstream, store.DimBizLine}

// cut is the condition of a stream cut before its usage arrived.
const cut = "(usage_source != 'engine' AND output_tokens > 0)"

// meteredEndpoints is record.MeteredEndpoints as a ClickHouse tuple.
var meteredEndpoints = func() string {
	q := make([]string, len(record.MeteredEndpoints))
	for i, e := range record.MeteredEndpoints {
		q[i] = "'" + e + "'"
	}
	return "(" + strings.Join(q, ", ") + ")"
}()

// measureSQL is each store.Measures entry as a sum over requests rows,
// the same arithmetic as store.TotalsOf.
var measureSQL = map[string]string{
	"requests":            "count()",
	"errors":              "sum(error_type != '')",
	"disconnects":         "sum(client_disconnect)",
	"cache_hits":          "sum(cache_hit)",
	"input_tokens":        "sum(input_tokens)",
	"cached_input_tokens": "sum(cached_input_tokens)",
	"output_tokens":       "sum(output_tokens)",
	"reasoning_tokens":    "sum(reasoning_tokens)",
	"cost_nanos":          "sum(cost_nanos)",
	"finish_length":       "sum(finish_reason = 'length')",
	"usage_missing": "sum(endpoint IN " + meteredEndpoints + " AND multiIf(usage_source = 'engine', 0, usage_source IN ('tokenizer', 'merged'), upstream != '', " +
		"upstream != '' AND upstream_status != 0))",
	"retried":                "sum(retries)",
	"retried_input_est":      "sum(retries * input_tokens)",
	"cut_streams":            "sum(" + cut + ")",
	"cut_output":             "sum(if(" + cut + ", output_tokens, 0))",
	"tokenizer_input":        "sum(if(usage_source IN ('tokenizer', 'merged'), input_tokens, 0))",
	"tokenizer_output":       "sum(if(usage_source IN ('tokenizer', 'merged'), output_tokens, 0))",
	"e2e_sum_ns":             "sum(e2e_ns)",
	"ttft_sum_ns":            "sum(ifNull(ttft_ns, 0))",
	"ttft_count":             "sum(isNotNull(ttft_ns))",
	"prompt_bytes":           "sum(prompt_bytes)",
	"reached":                "sum(upstream_status != 0)",
	"cut_output_limit":       "sum(if(" + cut + " AND ifNull(max_tokens, 0) > 0, ifNull(max_tokens, 0), 0))",
	"cut_unlimited":          "sum(" + cut + " AND NOT (ifNull(max_tokens, 0) > 0))",
	"cut_input_est":          "sum(if(" + cut + " AND input_tokens = 0, intDiv(prompt_bytes, 4), 0))",
	"seg_gateway_queue_ns":   "sum(seg_gateway_queue_ns)",
	"seg_connect_ns":         "sum(seg_connect_ns)",
	"seg_engine_queue_ns":    "sum(seg_engine_queue_ns)",
	"seg_prefill_ns":         "sum(seg_prefill_ns)",
	"seg_decode_ns":          "sum(seg_decode_ns)",
	"seg_client_write_ns":    "sum(seg_client_write_ns)",
	"seg_post_processing_ns": "sum(seg_post_processing_ns)",
	"seg_unattributed_ns":    "sum(seg_unattributed_ns)",
	"input_unknown":          "sum(usage_source NOT IN ('engine', 'tokenizer', 'merged') AND upstream_status != 0)",
}

func selectMeasures(names []string) ([]store.Measure, error) {
	if names == nil {
		return store.Measures, nil
	}
	var out []store.Measure
	for _, n := range names {
		i := slices.IndexFunc(store.Measures, func(m store.Measure) bool { return m.Name == n })
		if i < 0 {
			return nil, fmt.Errorf("unknown measure %q (known: %s)", n, strings.Join(store.MeasureNames(), ", "))
		}
		out = append(out, store.Measures[i])
	}
	return out, nil
}

// Report sums the rollups of [q.From, q.To) by q.GroupBy and currency.
// Bounds round down to the UTC hour (the minute for reports by minute)
// unless they are midnights of the rollup zone, exactly where the SQLite
// store's plan rounds them. Days and months are those of q.Zone (the
// store's zone by default): exact from the pieces' own local days in the
// rollup zone, and from UTC hours in any other zone, as in SQLite.
func (s *Store) Report(ctx context.Context, q store.ReportQuery) ([]store.ReportRow, error) {
	if err := s.Connected(); err != nil {
		return nil, err
	}
	rows, err := s.report(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	return rows, nil
}

func (s *Store) report(ctx context.Context, q store.ReportQuery) ([]store.ReportRow, error) {
	byMinute := slices.Contains(q.GroupBy, store.DimMinute)
	for _, d := range q.GroupBy {
		if !slices.Contains(store.Dims, d) {
			return nil, fmt.Errorf("unknown dimension %q", d)
		}
		if byMinute && (d == store.DimHour || d == store.DimDay || d == store.DimMonth) {
			return nil, fmt.Errorf("cannot group by minute and %s together", d)
		}
		if byMinute && dimColumn[d] != "" && !slices.Contains(minuteDims, d) {
			return nil, fmt.Errorf("minutes are kept by model, upstream and biz_line only, not by %s", d)
		}
	}
	var where []string
	for _, d := range slices.Sorted(mapKeys(q.Where)) {
		c, ok := dimColumn[d]
		if !ok {
			return nil, fmt.Errorf("cannot filter on %q", d)
		}
		if byMinute && !slices.Contains(minuteDims, d) {
			return nil, fmt.Errorf("minutes are kept by model, upstream and biz_line only, not by %s", d)
		}
		where = append(where, c+" = "+quoteString(q.Where[d]))
	}
	ms, err := selectMeasures(q.Measures)
	if err != nil {
		return nil, err
	}
	if err := q.CheckEndUser(); err != nil {
		return nil, err
	}
	loc := s.loc
	if q.Zone != nil {
		loc = q.Zone
	}
	if _, ok := q.Where[store.DimEndUser]; ok || slices.Contains(q.GroupBy, store.DimEndUser) {
		return s.reportEndUsers(ctx, q, loc, where, ms)
	}
	if err := s.rollUp(ctx); err != nil {
		return nil, err
	}
	table, pieceCol := rollupHour, "bucket"
	from, to, days := s.bounds(q, loc)
	var pieces []string // bounds the pieces read, for the latest versions
	if byMinute {
		table, pieceCol = rollupMinute, "piece"
		if from != nil {
			pieces = append(pieces, "piece >= "+quoteInt(*from-3600))
		}
		if to != nil {
			pieces = append(pieces, "piece < "+quoteInt(*to))
		}
	}
	var bnd []string
	if from != nil {
		bnd = append(bnd, "bucket >= "+quoteInt(*from))
	}
	if to != nil {
		bnd = append(bnd, "bucket < "+quoteInt(*to))
	}
	where = append(where, bnd...)
	if !byMinute {
		pieces = bnd // a piece is its own bucket
	}
	pieces = append(pieces, "1")
	where = append(where, s.latest(table, pieceCol, strings.Join(pieces, " AND ")))

	const hour = "(bucket - ((bucket % 3600) + 3600) % 3600)"
	var sel []string
	for _, d := range q.GroupBy {
		switch {
		case d == store.DimMinute || d == store.DimHour:
			sel = append(sel, "toString(bucket)")
			if d == store.DimHour {
				sel[len(sel)-1] = "toString(" + hour + ")"
			}
		case d == store.DimDay && days:
			sel = append(sel, "local_day")
		case d == store.DimMonth && days:
			sel = append(sel, "substring(local_day, 1, 7)")
		case d == store.DimDay || d == store.DimMonth:
			sel = append(sel, "toString("+hour+")") // keyed in loc below
		default:
			sel = append(sel, dimColumn[d])
		}
	}
	sel = append(sel, "currency")
	// The keys are aliased and grouped by alias: 18.16 does not take
	// GROUP BY positions.
	group := make([]string, len(sel))
	for i, e := range sel {
		group[i] = fmt.Sprintf("k%d", i)
		sel[i] = e + " AS " + group[i]
	}
	for _, m := range ms {
		sel = append(sel, "toInt64(sum("+m.Name+"))")
	}
	query := "SELECT " + strings.Join(sel, ", ") + " FROM " + s.table(table) + " FINAL WHERE " + strings.Join(where, " AND ") +
		" GROUP BY " + strings.Join(group, ", ") + " FORMAT RowBinary"
	return s.collectReport(ctx, query, q, ms, days, loc)
}

// collectReport runs a report's query, whose columns are the group keys,
// the currency and the measures ms, and adds up the rows of one group
// (the hours of one day), sorted by keys and currency.
func (s *Store) collectReport(ctx context.Context, query string, q store.ReportQuery, ms []store.Measure, days bool, loc *time.Location) ([]store.ReportRow, error) {
	var out []store.ReportRow
	index := map[string]int{} // group → its row in out: hours of one day add up
	err := s.c.query(ctx, query, func(d *dec) error {
		for d.more() {
			row := store.ReportRow{Keys: make([]string, len(q.GroupBy))}
			for i, dim := range q.GroupBy {
				row.Keys[i] = timeKey(dim, d.str(), days, loc)
			}
			row.Currency = d.str()
			for _, m := range ms {
				*m.Field(&row.Totals) = d.i64()
			}
			if d.err != nil {
				break
			}
			k := strings.Join(row.Keys, "\x00") + "\x00" + row.Currency
			if i, ok := index[k]; ok {
				out[i].Totals.Add(row.Totals)
				continue
			}
			index[k] = len(out)
			out = append(out, row)
		}
		return d.err
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b store.ReportRow) int {
		if c := slices.Compare(a.Keys, b.Keys); c != 0 {
			return c
		}
		return strings.Compare(a.Currency, b.Currency)
	})
	return out, nil
}

// reportEndUsers answers a report by end user from the ledger itself
// (requests FINAL: deduplicated, amendments applied), with the rollups'
// arithmetic (measureSQL) and the SQLite store's rounding: hours, and
// days and months folded from UTC hours. The end user has no rollup here:
// a columnar scan of the requests that named one is what a rollup of
// them would cost to keep, and it can never lag the ledger.
func (s *Store) reportEndUsers(ctx context.Context, q store.ReportQuery, loc *time.Location, where []string, ms []store.Measure) ([]store.ReportRow, error) {
	where = append(where, "end_user != ''")
	from, to, _ := s.bounds(q, loc)
	if from != nil {
		where = append(where, "arrival_ns >= "+quoteInt(*from*1e9))
	}
	if to != nil {
		where = append(where, "arrival_ns < "+quoteInt(*to*1e9))
	}
	var sel, group []string
	for i, d := range q.GroupBy {
		e := dimColumn[d]
		if e == "" { // hour, day, month: the UTC hour, keyed below
			e = "toString(intDiv(arrival_ns, 3600000000000) * 3600)"
		}
		sel = append(sel, e+fmt.Sprintf(" AS k%d", i))
		group = append(group, fmt.Sprintf("k%d", i))
	}
	sel = append(sel, "currency AS kc")
	group = append(group, "kc")
	for _, m := range ms {
		sel = append(sel, "toInt64("+measureSQL[m.Name]+")")
	}
	query := "SELECT " + strings.Join(sel, ", ") + " FROM " + s.table("requests") + " FINAL WHERE " + strings.Join(where, " AND ") +
		" GROUP BY " + strings.Join(group, ", ") + " FORMAT RowBinary"
	return s.collectReport(ctx, query, q, ms, false, loc)
}

// timeKey is a group key as the SQLite store writes it: minutes and hours
// (Unix seconds) as UTC times; days and months as they are when read from
// the pieces' local days, else those of the UTC hour in loc.
func timeKey(dim store.Dim, v string, days bool, loc *time.Location) string {
	switch dim {
	case store.DimMinute, store.DimHour, store.DimDay, store.DimMonth:
	default:
		return v
	}
	if days && (dim == store.DimDay || dim == store.DimMonth) {
		return v
	}
	sec, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return v
	}
	t := time.Unix(sec, 0)
	switch dim {
	case store.DimDay:
		return t.In(loc).Format(time.DateOnly)
	case store.DimMonth:
		return t.In(loc).Format("2006-01")
	}
	return t.UTC().Format(time.RFC3339)
}

// bounds are the bucket bounds (Unix seconds, nil when open) a report
// reads, and whether its days and months come from the pieces' local
// days. They follow the SQLite store's plan: whole local days of the
// rollup zone where the period has them and the query is in that zone
// and not by hour; otherwise UTC hours, the bounds rounded down to the
// hour, as a period with part-days in a zone whose midnights are off the
// UTC hour is too.
func (s *Store) bounds(q store.ReportQuery, loc *time.Location) (from, to *int64, days bool) {
	at := func(t time.Time) *int64 {
		if t.IsZero() {
			return nil
		}
		v := t.Unix()
		return &v
	}
	floor := func(t time.Time, d time.Duration) *int64 {
		if t.IsZero() {
			return nil
		}
		v := floorDiv(t.Unix(), int64(d/time.Second)) * int64(d/time.Second)
		return &v
	}
	if slices.Contains(q.GroupBy, store.DimMinute) {
		return floor(q.From, time.Minute), floor(q.To, time.Minute), false
	}
	hours := func() (*int64, *int64, bool) { return floor(q.From, time.Hour), floor(q.To, time.Hour), false }
	if loc.String() != s.zone.String() || slices.Contains(q.GroupBy, store.DimHour) {
		return hours()
	}
	d0, d1 := ceilDay(q.From, s.zone), store.FloorDay(q.To, s.zone)
	offHour := func(t time.Time) bool { return t.Unix()%3600 != 0 }
	if (!q.From.IsZero() && !d0.Equal(q.From) && offHour(d0)) || (!q.To.IsZero() && !d1.Equal(q.To) && offHour(d1)) ||
		(!d0.IsZero() && !d1.IsZero() && !d0.Before(d1)) {
		return hours()
	}
	from, to = floor(q.From, time.Hour), floor(q.To, time.Hour)
	if !q.From.IsZero() && d0.Equal(q.From) {
		from = at(q.From)
	}
	if !q.To.IsZero() && d1.Equal(q.To) {
		to = at(q.To)
	}
	return from, to, true
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

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
