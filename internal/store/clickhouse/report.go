package clickhouse

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/store"
)

// Report, as a first correct step, aggregates the requests table itself
// (with FINAL, so replays never count twice) rather than rollups: exact,
// and the same answers as the SQLite store's rollups, but it reads the
// ledger's rows of the period. Rollups (SummingMergeTree tables fed per
// batch, or materialised views) are the next step for months of traffic;
// the store.Analytics contract says "Report sums rollups", which this does
// not yet honour for speed, only for results.

// dimColumn is the column of each non-time dimension.
var dimColumn = map[store.Dim]string{
	store.DimModel: "model", store.DimServedModel: "served_model", store.DimUpstream: "upstream",
	store.DimBizLine: "biz_line", store.DimUser: "user_id", store.DimKey: "key_id", store.DimTemplate: "template_id",
}

// minuteDims are the dimensions a report by minute may use, as in the
// SQLite store (whose minute rollups keep no others), so that a query
// means the same on both backends.
var minuteDims = []store.Dim{store.DimModel, store.DimUpstream, store.DimBizLine}

// cut is the condition of a stream cut before its usage arrived.
const cut = "(usage_source != 'engine' AND output_tokens > 0)"

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
	"usage_missing": "sum(multiIf(usage_source = 'engine', 0, usage_source IN ('tokenizer', 'merged'), upstream != '', " +
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

// Report sums the requests of [q.From, q.To) by q.GroupBy and currency.
// Days and months are those of q.Zone (UTC by default), exact in every
// zone: each row's local time is its UTC time plus the zone's offset at
// that instant, the offsets and their changes computed by Go's time
// package over the period and passed in the query.
func (s *Store) Report(ctx context.Context, q store.ReportQuery) ([]store.ReportRow, error) {
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
	loc := s.loc
	if q.Zone != nil {
		loc = q.Zone
	}
	from, to := roundBound(q.From, loc, byMinute), roundBound(q.To, loc, byMinute)
	if !from.IsZero() {
		where = append(where, "day >= "+quoteDay(day(from))+" AND arrival_ns >= "+quoteInt(from.UnixNano()))
	}
	if !to.IsZero() {
		where = append(where, "day <= "+quoteDay(day(to))+" AND arrival_ns < "+quoteInt(to.UnixNano())+" AND arrival_ns != "+quoteInt(noArrival))
	}
	cond := ""
	if len(where) > 0 {
		cond = " WHERE " + strings.Join(where, " AND ")
	}
	t := quoteIdent(s.db) + ".requests FINAL"

	local := ""
	if slices.Contains(q.GroupBy, store.DimDay) || slices.Contains(q.GroupBy, store.DimMonth) {
		lo, hi, ok, err := s.arrivalSpan(ctx, t, cond)
		if err != nil || !ok {
			return nil, err // no rows: nothing to report
		}
		local = localSeconds(lo, hi, loc)
	}
	var sel []string
	for _, d := range q.GroupBy {
		switch d {
		case store.DimMinute:
			sel = append(sel, "intDiv(arrival_ns, 60000000000)")
		case store.DimHour:
			sel = append(sel, "intDiv(arrival_ns, 3600000000000)")
		case store.DimDay:
			sel = append(sel, "intDiv("+local+", 86400)")
		case store.DimMonth:
			sel = append(sel, "toInt64(toYYYYMM(toDateTime(toUInt32(greatest("+local+", 0)), 'UTC')))")
		default:
			sel = append(sel, "toString("+dimColumn[d]+")")
		}
	}
	sel = append(sel, "toString(currency)")
	// The keys are aliased and grouped by alias: 18.16 does not take
	// GROUP BY positions.
	group := make([]string, len(sel))
	for i, e := range sel {
		group[i] = fmt.Sprintf("k%d", i)
		sel[i] = e + " AS " + group[i]
	}
	for _, m := range ms {
		sel = append(sel, "toInt64("+measureSQL[m.Name]+")")
	}
	query := "SELECT " + strings.Join(sel, ", ") + " FROM " + t + cond + " GROUP BY " + strings.Join(group, ", ") + " FORMAT RowBinary"
	var out []store.ReportRow
	err = s.c.query(ctx, query, func(d *dec) error {
		for d.more() {
			row := store.ReportRow{Keys: make([]string, len(q.GroupBy))}
			for i, dim := range q.GroupBy {
				row.Keys[i] = readKey(d, dim)
			}
			row.Currency = d.str()
			for _, m := range ms {
				*m.Field(&row.Totals) = d.i64()
			}
			if d.err == nil {
				out = append(out, row)
			}
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

// readKey reads one group key as the SQLite store writes it.
func readKey(d *dec, dim store.Dim) string {
	switch dim {
	case store.DimMinute:
		return time.Unix(d.i64()*60, 0).UTC().Format(time.RFC3339)
	case store.DimHour:
		return time.Unix(d.i64()*3600, 0).UTC().Format(time.RFC3339)
	case store.DimDay:
		return time.Unix(d.i64()*86400, 0).UTC().Format(time.DateOnly)
	case store.DimMonth:
		ym := d.i64()
		return fmt.Sprintf("%04d-%02d", ym/100, ym%100)
	}
	return d.str()
}

// roundBound rounds a report bound down to the hour (the minute for
// reports by minute), as the rollups' grain does, unless it is a local
// midnight, which whole days of the report zone start at.
func roundBound(t time.Time, loc *time.Location, byMinute bool) time.Time {
	if t.IsZero() {
		return t
	}
	if byMinute {
		return t.Truncate(time.Minute)
	}
	lt := t.In(loc)
	if lt.Hour() == 0 && lt.Minute() == 0 && lt.Second() == 0 && lt.Nanosecond() == 0 {
		return t
	}
	return t.Truncate(time.Hour)
}

// arrivalSpan returns the first and last arrival (Unix seconds) of the
// rows matching cond; ok is false when there are none.
func (s *Store) arrivalSpan(ctx context.Context, table, cond string) (lo, hi int64, ok bool, err error) {
	q := "SELECT count(), min(arrival_ns), max(arrival_ns) FROM " + table + cond + " FORMAT RowBinary"
	err = s.c.query(ctx, q, func(d *dec) error {
		for d.more() {
			n := d.u64()
			lo, hi = d.i64(), d.i64()
			ok = n > 0
		}
		return d.err
	})
	return floorDiv(lo, 1e9), floorDiv(hi, 1e9), ok, err
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// localSeconds is the SQL for a row's local wall-clock time in loc as
// seconds since 1970, for arrivals in [lo, hi] (Unix seconds): UTC seconds
// plus the offset in force, picked from the zone's changes within the span.
func localSeconds(lo, hi int64, loc *time.Location) string {
	sec := "intDiv(arrival_ns, 1000000000)"
	t := time.Unix(lo, 0).In(loc)
	_, off := t.Zone()
	offsets := []string{strconv.Itoa(off)}
	var changes []string
	for {
		_, end := t.ZoneBounds()
		if end.IsZero() || end.Unix() > hi {
			break
		}
		t = end
		_, off = t.Zone()
		changes = append(changes, strconv.FormatInt(t.Unix(), 10))
		offsets = append(offsets, strconv.Itoa(off))
	}
	if len(changes) == 0 {
		return "(" + sec + " + " + quoteInt(int64(off)) + ")"
	}
	return fmt.Sprintf("(%s + [%s][arrayCount(x -> x <= %s, [%s]) + 1])",
		sec, strings.Join(offsets, ", "), sec, strings.Join(changes, ", "))
}
