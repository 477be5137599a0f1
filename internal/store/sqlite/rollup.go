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
	// only, when set, is a dimension a request must have non-empty to be
	// counted: such a table sums a subset of the ledger, so Report reads
	// it only for a query on that dimension.
	only string
	// measures, when set, are the only measures the table keeps (nil:
	// all of them). A table read by Report keeps all.
	measures []store.Measure
}

// sums are the measures t keeps, in its column order.
func (t rollupTable) sums() []store.Measure {
	if t.measures != nil {
		return t.measures
	}
	return measures
}

// billingDims are what cost reports group by; the currency is always a
// key, so different currencies are never added together.
var billingDims = []string{"model", "served_model", "upstream", "biz_line", "user_id", "key_id", "template_id", "currency"}

var (
	rollupHour   = rollupTable{name: "rollup_hour", grain: grainHour, dims: billingDims, report: true}
	rollupDay    = rollupTable{name: "rollup_day", grain: grainDay, dims: billingDims, report: true}
	rollupMinute = rollupTable{name: "rollup_minute", grain: grainMinute, dims: []string{"model", "upstream", "biz_line", "currency"}}
	// Migration 20 narrowed prompt_day to what Prompts returns: most
	// prompts are new, so it writes about a row per request, and its 34
	// measures made each of those rows wide.
	promptDay = rollupTable{name: "prompt_day", grain: grainDay, dims: []string{"prompt_sha256", "model", "template_id", "currency"},
		only: "prompt_sha256", measures: store.PromptMeasures}

	// Migration 6: narrower rollups, so that a month-wide report reads
	// thousands of rows rather than every user × key × model × template
	// combination of every day (175 k rows for 10 M requests, about a
	// second in SQLite). Per user without the key and model; per month
	// without the user and key.
	// The key is (bucket, user_id, currency, biz_line) so that grouping by
	// user and day walks the key in order, without a sort.
	rollupDayUser   = rollupTable{name: "rollup_day_user", grain: grainDay, dims: []string{"user_id", "currency", "biz_line"}, report: true}
	rollupMonth     = rollupTable{name: "rollup_month", grain: grainMonth, dims: []string{"model", "served_model", "upstream", "biz_line", "template_id", "currency"}, report: true}
	rollupMonthUser = rollupTable{name: "rollup_month_user", grain: grainMonth, dims: []string{"user_id", "currency", "biz_line"}, report: true}

	// Migration 17: the end users a request's body named (an agent's
	// customers), per hour and per local day, with the key's user, the
	// biz line and the model beside them. Only requests that named one
	// are counted: the requests without stay out, so these tables grow
	// with the end users actually seen, not with the traffic. Months are
	// summed from days.
	endUserDims = []string{"end_user", "user_id", "biz_line", "model", "currency"}
	endUserHour = rollupTable{name: "end_user_hour", grain: grainHour, dims: endUserDims, report: true, only: "end_user"}
	endUserDay  = rollupTable{name: "end_user_day", grain: grainDay, dims: endUserDims, report: true, only: "end_user"}
	// Migration 21: and per local month, for month-wide end-user reports
	// (summed from the days, a month of them read 490 k rows and took
	// 1.3 s over 10 M requests).
	endUserMonth = rollupTable{name: "end_user_month", grain: grainMonth, dims: endUserDims, report: true, only: "end_user"}

	// v2Tables are the tables migrations 2–4 create and alter: frozen.
	v2Tables  = []rollupTable{rollupHour, rollupDay, rollupMinute, promptDay}
	v6Tables  = []rollupTable{rollupDayUser, rollupMonth, rollupMonthUser}
	v17Tables = []rollupTable{endUserHour, endUserDay}
	v21Tables = []rollupTable{endUserMonth}
	// rollupTables are every rollup, maintained as rows arrive.
	rollupTables = slices.Concat(v2Tables, v6Tables, v17Tables, v21Tables)
	// reportTables are what Report may read, narrowest first within a grain:
	// the first whose dimensions cover a query is the smallest that can
	// answer it.
	reportTables = []rollupTable{rollupDayUser, rollupDay, rollupMonthUser, rollupMonth, rollupHour, endUserHour, endUserDay, endUserMonth}
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

// ddl is t as the migrations before 20 created it, with the first ms
// measures: frozen, so it is the shape of their time, wide for every table
// (migration 20 narrows prompt_day).
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
	for _, m := range t.sums() {
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
	for _, t := range slices.Concat(v2Tables, v6Tables) {
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

// migration17 creates the end-user rollups; backfillRollups fills them.
var migration17 = func() string {
	var b strings.Builder
	for _, t := range v17Tables {
		b.WriteString(t.ddl(v13Measures))
	}
	return b.String()
}()

// migration21 creates the end users' month rollup from their day rollup,
// as migration 6 made the month rollups from rollup_day.
var migration21 = func() string {
	var b strings.Builder
	for _, t := range v21Tables {
		b.WriteString(t.ddl(v13Measures))
		sums := make([]string, v13Measures)
		for i, m := range measures[:v13Measures] {
			sums[i] = "SUM(" + m.Name + ")"
		}
		dims := strings.Join(t.dims, ", ")
		fmt.Fprintf(&b, "INSERT INTO %s SELECT substr(bucket, 1, 7), %s, %s FROM end_user_day GROUP BY substr(bucket, 1, 7), %s;\n",
			t.name, dims, strings.Join(sums, ", "), dims)
	}
	return b.String()
}()

// backfillRollups sums every ledger row into tables, new rollups that
// start empty, inside the migration's transaction: reports over periods
// before the upgrade then read what they would have.
func backfillRollups(tables []rollupTable) func(ctx context.Context, tx *sql.Tx, loc *time.Location) error {
	return func(ctx context.Context, tx *sql.Tx, loc *time.Location) error {
		acc := newRollupAcc(loc)
		acc.tables = map[int]bool{}
		var where []string
		for _, t := range tables {
			acc.tables[slices.IndexFunc(rollupTables, func(r rollupTable) bool { return r.name == t.name })] = true
			if t.only != "" {
				where = append(where, t.only+" != ''")
			}
		}
		var q string
		if len(where) == len(tables) {
			q = strings.Join(where, " OR ")
		}
		if _, err := sumLedger(ctx, tx, acc, q); err != nil {
			return err
		}
		stmts := map[int]*sql.Stmt{}
		defer func() {
			for _, st := range stmts {
				st.Close()
			}
		}()
		return acc.upsert(func(table int, args []any) error {
			st, ok := stmts[table]
			if !ok {
				var err error
				if st, err = tx.PrepareContext(ctx, rollupTables[table].upsertSQL()); err != nil {
					return err
				}
				stmts[table] = st
			}
			_, err := st.ExecContext(ctx, args...)
			return err
		})
	}
}

// rollupKey identifies one rollup row. The bucket is num (minutes and
// hours, Unix seconds) or str (days and months): an int64 in an interface
// would cost an allocation per Record per table.
type rollupKey struct {
	table int
	num   int64
	str   string
	dims  [8]string
}

func (k *rollupKey) bucket() any {
	if g := rollupTables[k.table].grain; g == grainMinute || g == grainHour {
		return k.num
	}
	return k.str
}

// rollupAcc sums the Totals of a batch per rollup row, so a batch of 512
// similar requests costs a handful of upserts rather than 2048.
type rollupAcc struct {
	loc  *time.Location
	sums map[rollupKey]*store.Totals
	keys []rollupKey // insertion order, for deterministic upserts
	// tables, when set, limits the sums to the rollupTables whose index
	// it marks (a migration filling its new tables).
	tables map[int]bool
	// day and month are the last local day and month a Record fell in,
	// [from, to) in Unix seconds with its name: consecutive Records
	// share them, and formatting a date per Record per table was a
	// tenth of the insert.
	day, month period
}

// period is a local day or month and its name.
type period struct {
	from, to int64
	name     string
}

// of returns the name of the period of grain g (grainDay or grainMonth)
// holding t, from the cache when t falls in the last one.
func (p *period) of(g grain, t time.Time, loc *time.Location) string {
	if u := t.Unix(); u >= p.from && u < p.to && p.name != "" {
		return p.name
	}
	lt := t.In(loc)
	y, m, d := lt.Date()
	var from, to time.Time
	if g == grainDay {
		from, to = time.Date(y, m, d, 0, 0, 0, 0, loc), time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	} else {
		from, to = time.Date(y, m, 1, 0, 0, 0, 0, loc), time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
	}
	*p = period{from: from.Unix(), to: to.Unix(), name: bucket(g, t, loc).(string)}
	return p.name
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
	"end_user":      func(r *record.Record) string { return r.EndUser },
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

// onlyGet is, per rollupTables entry, the getter of its only dimension
// (nil for a table that counts every request).
var onlyGet = func() []func(*record.Record) string {
	out := make([]func(*record.Record) string, len(rollupTables))
	for i, t := range rollupTables {
		if t.only != "" {
			out[i] = dimValues[t.only]
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
	u := at.Unix()
	minute, hour := u-mod(u, 60), u-mod(u, 3600)
	for i, tbl := range rollupTables {
		if (onlyGet[i] != nil && onlyGet[i](r) == "") || (a.tables != nil && !a.tables[i]) {
			continue
		}
		k := rollupKey{table: i}
		switch tbl.grain {
		case grainMinute:
			k.num = minute
		case grainHour:
			k.num = hour
		case grainDay:
			k.str = a.day.of(grainDay, at, a.loc)
		default:
			k.str = a.month.of(grainMonth, at, a.loc)
		}
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
	return a.upsert(func(table int, args []any) error {
		st := txStmts[table]
		if st == nil {
			st = tx.StmtContext(ctx, stmts[table])
			txStmts[table] = st
		}
		_, err := st.ExecContext(ctx, args...)
		return err
	})
}

// upsert passes each accumulated row to exec with its upsert's arguments
// (a slice exec must not keep: it is reused).
func (a *rollupAcc) upsert(exec func(table int, args []any) error) error {
	var args []any
	for i, k := range a.keys {
		yield(i)
		tbl := rollupTables[k.table]
		args = append(args[:0], k.bucket())
		for j := range tbl.dims {
			args = append(args, k.dims[j])
		}
		sum := a.sums[k]
		if *sum == (store.Totals{}) {
			continue // an undone batch's, or an amendment that moved nothing
		}
		for _, m := range tbl.sums() {
			args = append(args, *m.Field(sum))
		}
		if err := exec(k.table, args); err != nil {
			return fmt.Errorf("update %s: %w", tbl.name, err)
		}
	}
	return nil
}
