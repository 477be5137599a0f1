package bench

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ledgerMeasure is a rollup column and the SQL that sums it from the
// ledger.
type ledgerMeasure struct{ name, expr string }

// ledgerMeasures sums, over ledger rows, what store.TotalsOf adds to a
// rollup, in the rollup tables' column order. It is written again here in
// SQL, rather than reused, so that a mistake in the store's Go shows up as
// a difference instead of being repeated.
var ledgerMeasures = []ledgerMeasure{
	{"requests", "COUNT(*)"},
	{"errors", "SUM(error_type != '')"},
	{"disconnects", "SUM(client_disconnect)"},
	{"cache_hits", "SUM(cache_hit)"},
	{"input_tokens", "SUM(input_tokens)"},
	{"cached_input_tokens", "SUM(cached_input_tokens)"},
	{"output_tokens", "SUM(output_tokens)"},
	{"reasoning_tokens", "SUM(reasoning_tokens)"},
	{"cost_nanos", "SUM(cost_nanos)"},
	{"finish_length", "SUM(finish_reason = 'length')"},
	{"usage_missing", `SUM(CASE WHEN usage_source = 'engine' THEN 0
		WHEN usage_source IN ('tokenizer', 'merged') THEN upstream != ''
		ELSE upstream != '' AND upstream_status != 0 END)`},
	{"retried", "SUM(retries)"},
	{"retried_input_est", "SUM(retries * input_tokens)"},
	{"cut_streams", "SUM(usage_source != 'engine' AND output_tokens > 0)"},
	{"cut_output", "SUM(CASE WHEN usage_source != 'engine' AND output_tokens > 0 THEN output_tokens ELSE 0 END)"},
	{"tokenizer_input", "SUM(CASE WHEN usage_source IN ('tokenizer', 'merged') THEN input_tokens ELSE 0 END)"},
	{"tokenizer_output", "SUM(CASE WHEN usage_source IN ('tokenizer', 'merged') THEN output_tokens ELSE 0 END)"},
	{"e2e_sum_ns", "SUM(e2e_ns)"},
	{"ttft_sum_ns", "COALESCE(SUM(ttft_ns), 0)"},
	{"ttft_count", "COUNT(ttft_ns)"},
	{"prompt_bytes", "SUM(prompt_bytes)"},
	// Migration 3.
	{"reached", "SUM(upstream_status != 0)"},
	{"cut_output_limit", "SUM(CASE WHEN usage_source != 'engine' AND output_tokens > 0 AND max_tokens > 0 THEN max_tokens ELSE 0 END)"},
	{"cut_unlimited", "SUM(usage_source != 'engine' AND output_tokens > 0 AND COALESCE(max_tokens, 0) <= 0)"},
	{"cut_input_est", "SUM(CASE WHEN usage_source != 'engine' AND output_tokens > 0 AND input_tokens = 0 THEN prompt_bytes / 4 ELSE 0 END)"},
	// Migration 4: the ledger keeps each segment, the rollups their sums.
	{"seg_gateway_queue_ns", "SUM(seg_gateway_queue_ns)"},
	{"seg_connect_ns", "SUM(seg_connect_ns)"},
	{"seg_engine_queue_ns", "SUM(seg_engine_queue_ns)"},
	{"seg_prefill_ns", "SUM(seg_prefill_ns)"},
	{"seg_decode_ns", "SUM(seg_decode_ns)"},
	{"seg_client_write_ns", "SUM(seg_client_write_ns)"},
	{"seg_post_processing_ns", "SUM(seg_post_processing_ns)"},
	{"seg_unattributed_ns", "SUM(seg_unattributed_ns)"},
	// Migration 12.
	{"input_unknown", "SUM(usage_source NOT IN ('engine', 'tokenizer', 'merged') AND upstream_status != 0)"},
}

// rollupSpec is how a rollup table's rows follow from ledger rows.
type rollupSpec struct {
	table  string
	bucket string // SQL over arrival (ns); ?1 is the report zone's offset in seconds
	dims   []string
	where  string // ledger rows the rollup counts
	// measures are the names of the ledgerMeasures the rollup keeps; nil:
	// all of them.
	measures []string
}

// sums are the ledgerMeasures s keeps, in its column order.
func (s rollupSpec) sums() []ledgerMeasure {
	if s.measures == nil {
		return ledgerMeasures
	}
	var out []ledgerMeasure
	for _, n := range s.measures {
		i := slices.IndexFunc(ledgerMeasures, func(m ledgerMeasure) bool { return m.name == n })
		if i < 0 {
			panic("verify: no ledger measure " + n)
		}
		out = append(out, ledgerMeasures[i])
	}
	return out
}

var billing = []string{"model", "served_model", "upstream", "biz_line", "user_id", "key_id", "template_id", "currency"}

const (
	hourBucket = "arrival / 3600000000000 * 3600"
	localDay   = "date(arrival / 1000000000 + ?1, 'unixepoch')"
	localMonth = "strftime('%Y-%m', arrival / 1000000000 + ?1, 'unixepoch')"
)

var (
	perUser    = []string{"user_id", "currency", "biz_line"}
	perModel   = []string{"model", "served_model", "upstream", "biz_line", "template_id", "currency"}
	perEndUser = []string{"end_user", "user_id", "biz_line", "model", "currency"}
)

var rollupSpecs = []rollupSpec{
	{"rollup_hour", hourBucket, billing, "1", nil},
	{"rollup_day", localDay, billing, "1", nil},
	{"rollup_minute", "arrival / 60000000000 * 60", []string{"model", "upstream", "biz_line", "currency"}, "1", nil},
	// Since migration 20, only what the waste report reads.
	{"prompt_day", localDay, []string{"prompt_sha256", "model", "template_id", "currency"}, "prompt_sha256 != ''",
		[]string{"requests", "input_tokens", "output_tokens", "cost_nanos"}},
	{"rollup_day_user", localDay, perUser, "1", nil},
	{"rollup_month", localMonth, perModel, "1", nil},
	{"rollup_month_user", localMonth, perUser, "1", nil},
	{"end_user_hour", hourBucket, perEndUser, "end_user != ''", nil},
	{"end_user_day", localDay, perEndUser, "end_user != ''", nil},
	{"end_user_month", localMonth, perEndUser, "end_user != ''", nil},
}

// checkSpecs fails when the ledger has a rollup (a WITHOUT ROWID table)
// this check has no spec for: a new rollup must be verified too.
func checkSpecs(ctx context.Context, db *sql.DB) error {
	rows, err := db.QueryContext(ctx, "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE '%WITHOUT ROWID%' ORDER BY name")
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return err
		}
		if !slices.ContainsFunc(rollupSpecs, func(s rollupSpec) bool { return s.table == n }) {
			return fmt.Errorf("verify: rollup %s has no spec here", n)
		}
	}
	return rows.Err()
}

// Check is what Verify compared for one rollup table.
type Check struct {
	Table      string
	RollupRows int64 // rows of the rollup in the range
	Missing    int64 // ledger groups absent from the rollup or summed differently
	Extra      int64 // rollup rows with no equal ledger group
}

// Verify recomputes every rollup row of the local days [from, to) (zero:
// everything) from the ledger at path and compares them, row for row and
// measure for measure. The ledger's report zone must be Loc.
func Verify(ctx context.Context, path string, from, to time.Time) ([]Check, error) {
	return verify(ctx, path, from, to)
}

// VerifyTotals compares, per rollup table and currency, the sum of every
// measure with the ledger's over the whole file. It scans the ledger twice
// (all rows, rows with a prompt hash), where Verify sorts all of it once
// per rollup. RollupRows then counts currencies.
func VerifyTotals(ctx context.Context, path string) ([]Check, error) {
	db, err := sql.Open("sqlite", path+"?_query_only=1")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, "PRAGMA cache_size = -524288"); err != nil {
		return nil, err
	}
	ledger := map[string]map[string]string{} // where and measures → currency → sums
	var out []Check
	for _, s := range rollupSpecs {
		if err := checkColumns(ctx, db, s); err != nil {
			return out, err
		}
		var sums, names []string
		for _, m := range s.sums() {
			sums = append(sums, m.expr)
			names = append(names, "SUM("+m.name+")")
		}
		key := s.where + "\x00" + strings.Join(names, ",")
		want, ok := ledger[key]
		if !ok {
			if want, err = sumsBy(ctx, db, fmt.Sprintf("SELECT currency, %s FROM requests WHERE %s GROUP BY currency",
				strings.Join(sums, ", "), s.where)); err != nil {
				return out, err
			}
			ledger[key] = want
		}
		got, err := sumsBy(ctx, db, fmt.Sprintf("SELECT currency, %s FROM %s GROUP BY currency", strings.Join(names, ", "), s.table))
		if err != nil {
			return out, err
		}
		c := Check{Table: s.table, RollupRows: int64(len(got))}
		for cur, w := range want {
			if got[cur] != w {
				c.Missing++
			}
		}
		for cur := range got {
			if _, ok := want[cur]; !ok {
				c.Extra++
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// sumsBy runs q, whose first column is a key, and returns the other
// columns of each row as one comparable string.
func sumsBy(ctx context.Context, db *sql.DB, q string) (map[string]string, error) {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for rows.Next() {
		var key string
		vals := make([]int64, len(cols)-1)
		dsts := []any{&key}
		for i := range vals {
			dsts = append(dsts, &vals[i])
		}
		if err := rows.Scan(dsts...); err != nil {
			return nil, err
		}
		out[key] = fmt.Sprint(vals)
	}
	return out, rows.Err()
}

func verify(ctx context.Context, path string, from, to time.Time) ([]Check, error) {
	db, err := sql.Open("sqlite", path+"?_query_only=1")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, "PRAGMA cache_size = -524288"); err != nil {
		return nil, err
	}
	if err := checkSpecs(ctx, db); err != nil {
		return nil, err
	}
	_, off := from.In(Loc).Zone() // Loc has no DST: one offset
	var out []Check
	for _, s := range rollupSpecs {
		if err := checkColumns(ctx, db, s); err != nil {
			return out, err
		}
		var sums, names []string
		for _, m := range s.sums() {
			sums = append(sums, m.expr)
			names = append(names, m.name)
		}
		from, to := from, to
		if s.bucket == localMonth {
			// A month row is checked whole: widen to the months touched.
			from = monthOf(from)
			if !to.IsZero() {
				to = monthOf(to.Add(-time.Nanosecond)).AddDate(0, 1, 0)
			}
		}
		// Numbered parameters, so that either bound can be absent.
		lw, rw, args := s.where, "1", []any{off, nil, nil, nil, nil}
		if !from.IsZero() {
			lw += " AND arrival >= ?2"
			rw += " AND bucket >= ?3"
			args[1], args[2] = from.UnixNano(), bucketOf(s, from)
		}
		if !to.IsZero() {
			lw += " AND arrival < ?4"
			rw += " AND bucket < ?5"
			args[3], args[4] = to.UnixNano(), bucketOf(s, to)
		}
		cols := strings.Join(append([]string{"bucket"}, s.dims...), ", ")
		ledger := fmt.Sprintf("SELECT %s AS bucket, %s, %s FROM requests WHERE %s GROUP BY %s",
			s.bucket, strings.Join(s.dims, ", "), strings.Join(sums, ", "), lw, cols)
		rollup := fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s", cols, strings.Join(names, ", "), s.table, rw)
		// ?1..?5 must all appear for the driver to accept five arguments.
		rollup += " AND ?2 IS ?2 AND ?3 IS ?3 AND ?4 IS ?4 AND ?5 IS ?5"
		c := Check{Table: s.table}
		q := fmt.Sprintf(`SELECT (SELECT COUNT(*) FROM (%s)),
			(SELECT COUNT(*) FROM (%s EXCEPT %s)), (SELECT COUNT(*) FROM (%s EXCEPT %s))`,
			rollup, ledger, rollup, rollup, ledger)
		if err := db.QueryRowContext(ctx, q, args...).Scan(&c.RollupRows, &c.Missing, &c.Extra); err != nil {
			return out, fmt.Errorf("verify %s: %w", s.table, err)
		}
		out = append(out, c)
	}
	return out, nil
}

func bucketOf(s rollupSpec, t time.Time) any {
	switch {
	case s.bucket == hourBucket:
		return t.Unix() / 3600 * 3600
	case s.table == "rollup_minute":
		return t.Unix() / 60 * 60
	case s.bucket == localMonth:
		return t.In(Loc).Format("2006-01")
	}
	return t.In(Loc).Format(time.DateOnly)
}

// monthOf is the start of t's month in Loc; zero stays zero.
func monthOf(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	lt := t.In(Loc)
	return time.Date(lt.Year(), lt.Month(), 1, 0, 0, 0, 0, Loc)
}

// checkColumns fails when the store's rollup has columns this check does
// not know: a new measure must be verified too, not skipped silently.
func checkColumns(ctx context.Context, db *sql.DB, s rollupSpec) error {
	rows, err := db.QueryContext(ctx, "SELECT name FROM pragma_table_info(?) ORDER BY cid", s.table)
	if err != nil {
		return err
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return err
		}
		got = append(got, n)
	}
	want := append([]string{"bucket"}, s.dims...)
	for _, m := range s.sums() {
		want = append(want, m.name)
	}
	if !slices.Equal(got, want) {
		return fmt.Errorf("verify %s: columns are %v, this check knows %v", s.table, got, want)
	}
	return rows.Err()
}

// TableRows counts the rows of every table of the ledger at path.
func TableRows(ctx context.Context, path string) (map[string]int64, error) {
	db, err := sql.Open("sqlite", path+"?_query_only=1")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
	if err != nil {
		return nil, err
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return nil, err
		}
		names = append(names, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, n := range names {
		var c int64
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM "`+n+`"`).Scan(&c); err != nil {
			return nil, err
		}
		out[n] = c
	}
	return out, nil
}
