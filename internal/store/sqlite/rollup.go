package sqlite

import (
	"context"
	"database/sql"
	"fmt"
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

// dimValues reach a rollup dimension's value in a Record, by column name.
var dimValues = map[string]func(*record.Record) string{
	"model":         func(r *record.Record) string { return r.Model },
	"served_model":  func(r *record.Record) string { return r.ServedModel },
	"upstream":      func(r *record.Record) string { return r.Upstream },
	"biz_line":      func(r *record.Record) string { return r.BizLine },
	"user_id":       func(r *record.Record) string { return r.UserID },
	"key_id":        func(r *record.Record) string { return r.KeyID },
	"template_id":   func(r *record.Record) string { return r.TemplateID },
	"currency":      func(r *record.Record) string { return r.Cost.Currency },
	"prompt_sha256": func(r *record.Record) string { return r.PromptSHA256 },
}

// rollupDims are dimValues in the order of each rollupTable's dims,
// looked up once: a map built per Record was an eighth of the ledger's
// allocations.
var rollupDims = func() [][]func(*record.Record) string {
	out := make([][]func(*record.Record) string, len(rollupTables))
	for i, t := range rollupTables {
		for _, d := range t.dims {
			get, ok := dimValues[d]
			if !ok {
				panic("sqlite: rollup " + t.name + " has dimension " + d + ", which dimValues lacks")
			}
			out[i] = append(out[i], get)
		}
	}
	return out
}()

// add adds sign × the Totals of r to every rollup it belongs to.
func (a *rollupAcc) add(r *record.Record, sign int64) {
	t := store.TotalsOf(r)
	if sign < 0 {
		negate(&t)
	}
	at := r.Arrival.UTC()
	for i, tbl := range rollupTables {
		if tbl.name == promptDay.name && r.PromptSHA256 == "" {
			continue
		}
		k := rollupKey{table: i, bucket: bucket(tbl.grain, at, a.loc)}
		for j, get := range rollupDims[i] {
			k.dims[j] = get(r)
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
	txStmts := make([]*sql.Stmt, len(stmts))
	var args []any
	for _, k := range a.keys {
		tbl := rollupTables[k.table]
		args = append(args[:0], k.bucket)
		for j := range tbl.dims {
			args = append(args, k.dims[j])
		}
		sum := a.sums[k]
		for _, m := range measures {
			args = append(args, *m.Field(sum))
		}
		st := txStmts[k.table]
		if st == nil {
			st = tx.StmtContext(ctx, stmts[k.table])
			txStmts[k.table] = st
		}
		if _, err := st.ExecContext(ctx, args...); err != nil {
			return fmt.Errorf("update %s: %w", tbl.name, err)
		}
	}
	return nil
}
