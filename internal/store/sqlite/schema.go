package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// migrations are applied in order; migration i brings the ledger to schema
// version i+1. They are frozen once released: a change to the schema is a new
// entry at the end, never an edit, because ledgers in the field have already
// run the old text.
var migrations = []string{
	// 1: the ledger and the sampled details.
	//
	// STRICT keeps SQLite from silently changing a value's type, which the
	// exact round trip relies on. Times are INTEGER nanoseconds: arrival is
	// Unix time in UTC, marks and derived figures are offsets from arrival.
	// arrival is nullable only so a Record without one survives the round
	// trip; the gateway always sets it.
	`CREATE TABLE requests (
		request_id          TEXT PRIMARY KEY,
		logical_request_id  TEXT NOT NULL DEFAULT '',
		attempt             INTEGER NOT NULL DEFAULT 0,
		trace_id            TEXT NOT NULL DEFAULT '',
		span_id             TEXT NOT NULL DEFAULT '',
		user_id             TEXT NOT NULL DEFAULT '',
		key_id              TEXT NOT NULL DEFAULT '',
		team                TEXT NOT NULL DEFAULT '',
		biz_line            TEXT NOT NULL DEFAULT '',
		session_id          TEXT NOT NULL DEFAULT '',
		template_id         TEXT NOT NULL DEFAULT '',
		tags                TEXT,
		endpoint            TEXT NOT NULL DEFAULT '',
		model               TEXT NOT NULL DEFAULT '',
		served_model        TEXT NOT NULL DEFAULT '',
		upstream            TEXT NOT NULL DEFAULT '',
		engine              TEXT NOT NULL DEFAULT '',

		stream              INTEGER NOT NULL DEFAULT 0,
		include_usage       INTEGER NOT NULL DEFAULT 0,
		max_tokens          INTEGER,
		temperature         REAL,
		top_p               REAL,
		prompt_sha256       TEXT NOT NULL DEFAULT '',
		prompt_bytes        INTEGER NOT NULL DEFAULT 0,
		messages            INTEGER NOT NULL DEFAULT 0,
		request_bytes       INTEGER NOT NULL DEFAULT 0,

		arrival                 INTEGER,
		auth_done_ns            INTEGER NOT NULL DEFAULT 0,
		admitted_ns             INTEGER NOT NULL DEFAULT 0,
		upstream_sent_ns        INTEGER NOT NULL DEFAULT 0,
		upstream_headers_ns     INTEGER NOT NULL DEFAULT 0,
		first_upstream_token_ns INTEGER NOT NULL DEFAULT 0,
		first_client_token_ns   INTEGER NOT NULL DEFAULT 0,
		last_token_ns           INTEGER NOT NULL DEFAULT 0,
		end_ns                  INTEGER NOT NULL DEFAULT 0,

		status              INTEGER NOT NULL DEFAULT 0,
		upstream_status     INTEGER NOT NULL DEFAULT 0,
		error_type          TEXT NOT NULL DEFAULT '',
		error_message       TEXT NOT NULL DEFAULT '',
		finish_reason       TEXT NOT NULL DEFAULT '',
		response_bytes      INTEGER NOT NULL DEFAULT 0,
		content_chunks      INTEGER NOT NULL DEFAULT 0,
		first_chunk_bytes   INTEGER NOT NULL DEFAULT 0,
		content_bytes       INTEGER NOT NULL DEFAULT 0,
		client_disconnect   INTEGER NOT NULL DEFAULT 0,
		retries             INTEGER NOT NULL DEFAULT 0,
		sampled             INTEGER NOT NULL DEFAULT 0,

		input_tokens        INTEGER NOT NULL DEFAULT 0,
		cached_input_tokens INTEGER NOT NULL DEFAULT 0,
		output_tokens       INTEGER NOT NULL DEFAULT 0,
		reasoning_tokens    INTEGER NOT NULL DEFAULT 0,
		usage_source        TEXT NOT NULL DEFAULT '',

		ttft_ns             INTEGER,
		e2e_ns              INTEGER NOT NULL DEFAULT 0,
		tpot_ns             INTEGER
	) STRICT;
	CREATE INDEX requests_arrival ON requests (arrival);
	CREATE INDEX requests_logical ON requests (logical_request_id);
	CREATE INDEX requests_trace ON requests (trace_id);
	CREATE INDEX requests_user ON requests (user_id, arrival);
	CREATE INDEX requests_biz_line ON requests (biz_line, arrival);
	CREATE INDEX requests_model ON requests (model, arrival);

	-- The timeline is [[chunk index, offset ns], ...]: integers, not the
	-- API's milliseconds, so it comes back to the nanosecond.
	CREATE TABLE request_details (
		request_id TEXT PRIMARY KEY REFERENCES requests (request_id) ON DELETE CASCADE,
		timeline   TEXT
	) STRICT;`,

	// 2: cost, rollups, prompt statistics and events (see rollup.go).
	migration2,
	// 3: the rollups' reconciliation measures.
	migration3,
	// 4: latency segments.
	migration4,
	// 5: engines' own metrics as time series.
	`CREATE TABLE engine_samples (
		at         INTEGER NOT NULL,
		upstream   TEXT NOT NULL,
		model      TEXT NOT NULL DEFAULT '',
		up         INTEGER NOT NULL,
		running    REAL, waiting REAL, kv_cache_usage REAL, prefix_cache_hit_rate REAL,
		ttft_p50 REAL, ttft_p95 REAL, ttft_p99 REAL, prompt_tps REAL, generation_tps REAL
	) STRICT;
	CREATE INDEX engine_samples_at ON engine_samples (upstream, at);`,
	// 6: rollups per user and per month, for month-wide reports.
	migration6,
	// 7: the alerting windows' minutes (internal/window).
	`CREATE TABLE window_minute (
		minute   INTEGER NOT NULL,
		model    TEXT NOT NULL,
		biz_line TEXT NOT NULL,
		upstream TEXT NOT NULL,
		template TEXT NOT NULL,
		data     BLOB NOT NULL
	) STRICT;
	CREATE INDEX window_minute_at ON window_minute (minute);`,
	// 8: the alerting windows' closed hours, merged from their minutes.
	`CREATE TABLE window_hour (
		hour     INTEGER NOT NULL,
		model    TEXT NOT NULL,
		biz_line TEXT NOT NULL,
		upstream TEXT NOT NULL,
		template TEXT NOT NULL,
		data     BLOB NOT NULL
	) STRICT;
	CREATE INDEX window_hour_at ON window_hour (hour);`,
	// 9: the alerting windows' closed local days, merged from their hours,
	// for percentiles over weeks and months.
	`CREATE TABLE window_day (
		day      INTEGER NOT NULL,
		day_end  INTEGER NOT NULL,
		model    TEXT NOT NULL,
		biz_line TEXT NOT NULL,
		upstream TEXT NOT NULL,
		template TEXT NOT NULL,
		data     BLOB NOT NULL
	) STRICT;
	CREATE INDEX window_day_at ON window_day (day);`,
	// 10: the opt-in captures of slow or failed requests' text, redacted
	// (internal/capture, captures.go), apart from the ledger.
	`CREATE TABLE captures (
		request_id         TEXT PRIMARY KEY,
		at                 INTEGER NOT NULL,
		reason             TEXT NOT NULL,
		request            BLOB NOT NULL,
		response           BLOB NOT NULL,
		request_truncated  INTEGER NOT NULL,
		response_truncated INTEGER NOT NULL
	) STRICT;
	CREATE INDEX captures_at ON captures (at);`,
	// 11: the client's own X-Request-Id, kept beside tollgate's key (it
	// was the key before, so a reused id lost rows). The index is partial:
	// most clients send none, and an index entry per row costs the writer.
	`ALTER TABLE requests ADD COLUMN client_request_id TEXT NOT NULL DEFAULT '';
	CREATE INDEX requests_client_id ON requests (client_request_id) WHERE client_request_id != '';`,
	// 12: the client's span id (the parent of the gateway's span) and the
	// engine's id of its answer, which its own logs and usage exports
	// carry.
	`ALTER TABLE requests ADD COLUMN parent_span_id TEXT NOT NULL DEFAULT '';
	ALTER TABLE requests ADD COLUMN response_id TEXT NOT NULL DEFAULT '';`,
	// 13: the rollups count the attempts whose input nobody counted.
	migration13,
	// 14: until when the engine's own timing is expected (vLLM's span).
	`ALTER TABLE requests ADD COLUMN engine_timing_due_ns INTEGER NOT NULL DEFAULT 0;`,
	// 15: prompt-cache writes (and their 1-hour part), priced apart from
	// plain input by Anthropic, and the tool calls of an agent's step.
	`ALTER TABLE requests ADD COLUMN cache_write_tokens INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE requests ADD COLUMN cache_write_1h_tokens INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE requests ADD COLUMN tool_calls INTEGER NOT NULL DEFAULT 0;`,
	// 16: the end user a request's body named (an agent's customer) and
	// the API's own finish reason (Anthropic's stop_reason, Responses'
	// status). The index is partial, as 11's: most requests name none.
	`ALTER TABLE requests ADD COLUMN end_user TEXT NOT NULL DEFAULT '';
	ALTER TABLE requests ADD COLUMN native_finish_reason TEXT NOT NULL DEFAULT '';
	CREATE INDEX requests_end_user ON requests (end_user, arrival) WHERE end_user != '';`,
	// 17: the end-user rollups, filled from the ledger (backfills).
	migration17,
	// 18: the system prompt's own fingerprint and token length, for
	// "what changed" and the prompt-change events.
	addColumns("system_sha256", "system_tokens"),
	// 19: how far the rollups have summed the ledger, by rowid: sums wait
	// in memory across batches and this mark says which rows a crash
	// left to sum again (pending.go). Every row already in the ledger is
	// in the rollups.
	`CREATE TABLE rollup_state (
		id             INTEGER PRIMARY KEY CHECK (id = 1),
		rolled_through INTEGER NOT NULL
	) STRICT;
	INSERT INTO rollup_state (id, rolled_through) SELECT 1, COALESCE(MAX(rowid), 0) FROM requests;`,
	// 20: prompt_day keeps only what Prompts returns (store.PromptMeasures),
	// not every measure: it writes about a row per request, most prompts
	// being new, and its other 30 sums were never read. Rebuilt rather
	// than 30 DROP COLUMNs, each of which would rewrite the table.
	`CREATE TABLE prompt_day_narrow (
		bucket        TEXT NOT NULL,
		prompt_sha256 TEXT NOT NULL,
		model         TEXT NOT NULL,
		template_id   TEXT NOT NULL,
		currency      TEXT NOT NULL,
		requests      INTEGER NOT NULL DEFAULT 0,
		input_tokens  INTEGER NOT NULL DEFAULT 0,
		output_tokens INTEGER NOT NULL DEFAULT 0,
		cost_nanos    INTEGER NOT NULL DEFAULT 0,
		PRIMARY KEY (bucket, prompt_sha256, model, template_id, currency)
	) STRICT, WITHOUT ROWID;
	INSERT INTO prompt_day_narrow
		SELECT bucket, prompt_sha256, model, template_id, currency, requests, input_tokens, output_tokens, cost_nanos
		FROM prompt_day;
	DROP TABLE prompt_day;
	ALTER TABLE prompt_day_narrow RENAME TO prompt_day;`,
	// 21: the end users' month rollup (rollup.go).
	migration21,
}

// backfills fill, after the migrations in the same transaction, what a
// migration's SQL alone cannot: rollups whose sums are store.TotalsOf of
// the rows already in the ledger. Each runs when the ledger was older
// than its version.
var backfills = []struct {
	version int
	run     func(ctx context.Context, tx *sql.Tx, loc *time.Location) error
}{
	{17, backfillRollups(v17Tables)},
}

// ErrNewerSchema is wrapped by Open when the ledger was written by a newer
// tollgate than this one: reading it could misinterpret columns and writing
// it could corrupt them, so it is refused rather than guessed at.
var ErrNewerSchema = errors.New("ledger schema is newer than this tollgate")

// migrate brings the ledger to the latest schema in one transaction, so a
// crash mid-way leaves the previous version intact. The writer connection
// begins IMMEDIATE, which also serialises two processes opening a new file.
func migrate(ctx context.Context, db *sql.DB, now time.Time, loc *time.Location) (from, to int, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, 0, err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		applied_at INTEGER NOT NULL
	) STRICT`); err != nil {
		return 0, 0, fmt.Errorf("create schema_migrations: %w", err)
	}
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&from); err != nil {
		return 0, 0, fmt.Errorf("read schema version: %w", err)
	}
	if from > len(migrations) {
		return from, from, fmt.Errorf("%w: ledger is at version %d, this tollgate knows up to %d; upgrade tollgate",
			ErrNewerSchema, from, len(migrations))
	}
	for v := from + 1; v <= len(migrations); v++ {
		if _, err := tx.ExecContext(ctx, migrations[v-1]); err != nil {
			return from, 0, fmt.Errorf("apply schema migration %d: %w", v, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`,
			v, now.UnixNano()); err != nil {
			return from, 0, fmt.Errorf("record schema migration %d: %w", v, err)
		}
	}
	for _, b := range backfills {
		if from < b.version && from > 0 {
			if err := b.run(ctx, tx, loc); err != nil {
				return from, 0, fmt.Errorf("schema migration %d: %w", b.version, err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return from, 0, fmt.Errorf("commit schema migrations: %w", err)
	}
	return from, len(migrations), nil
}

// column is one ledger column as SQLite stores it. The INSERT, the SELECT
// and the scan are all built from ledger, itself built from store.Fields,
// so they cannot drift apart.
type column struct {
	name string
	// typ is the column's type as a migration adds it (see addColumns).
	typ string
	// val returns the value to insert. r has been finished, so derived
	// columns always agree with the marks, whatever the caller did.
	val func(r *record.Record) any
	// dst returns where to scan the column into r; nil for columns that
	// are only there to be queried (derived figures are recomputed by
	// Finish).
	dst func(r *record.Record) any
}

var ledger = func() []column {
	out := make([]column, len(store.Fields))
	for i, f := range store.Fields {
		out[i] = columnOf(f)
	}
	return out
}()

// columnOf is f's column: its SQLite type, and how its value goes in and
// comes back, by its kind.
func columnOf(f store.Field) column {
	c := column{name: f.Name, typ: sqlType(f.Kind)}
	switch f.Kind {
	case store.KindString:
		get := f.Get.(func(*record.Record) *string)
		c.val = func(r *record.Record) any { return *get(r) }
		c.dst = func(r *record.Record) any { return get(r) }
	case store.KindInt:
		get := f.Get.(func(*record.Record) *int)
		c.val = func(r *record.Record) any { return int64(*get(r)) }
		c.dst = func(r *record.Record) any { return get(r) }
	case store.KindInt64:
		get := f.Get.(func(*record.Record) *int64)
		c.val = func(r *record.Record) any { return *get(r) }
		c.dst = func(r *record.Record) any { return get(r) }
	case store.KindDuration:
		get := f.Get.(func(*record.Record) *time.Duration)
		c.val = func(r *record.Record) any { return int64(*get(r)) }
		c.dst = func(r *record.Record) any { return get(r) }
	case store.KindBool:
		get := f.Get.(func(*record.Record) *bool)
		c.val = func(r *record.Record) any { return *get(r) }
		c.dst = func(r *record.Record) any { return get(r) }
	case store.KindOptInt64:
		get := f.Get.(func(*record.Record) **int64)
		c.val = func(r *record.Record) any { return *get(r) } // a nil *int64 is NULL
		c.dst = func(r *record.Record) any { return get(r) }
	case store.KindOptFloat64:
		get := f.Get.(func(*record.Record) **float64)
		c.val = func(r *record.Record) any { return *get(r) }
		c.dst = func(r *record.Record) any { return get(r) }
	case store.KindTime:
		get := f.Get.(func(*record.Record) *time.Time)
		c.val = func(r *record.Record) any {
			if t := *get(r); !t.IsZero() {
				return t.UnixNano()
			}
			return nil
		}
		c.dst = func(r *record.Record) any { return timeDst{get(r)} }
	case store.KindJSON:
		get, isNil := f.Get.(func(*record.Record) any), f.IsNil
		c.val = func(r *record.Record) any { return jsonValue(get(r), isNil(r)) }
		c.dst = func(r *record.Record) any { return &jsonDst{name: f.Name, r: r, p: get(r)} }
	case store.KindDerived:
		get := f.Get.(func(*record.Record) int64)
		c.val = func(r *record.Record) any { return get(r) }
	case store.KindOptDerived:
		get := f.Get.(func(*record.Record) *time.Duration)
		c.val = func(r *record.Record) any { return optNS(get(r)) }
	default:
		panic(fmt.Sprintf("sqlite: field %s has kind %d, which this store cannot keep", f.Name, f.Kind))
	}
	return c
}

// sqlType is the SQLite column type of a kind, as migration 1 wrote
// them: STRICT, with NOT NULL and a zero default except where NULL means
// absent.
func sqlType(k store.Kind) string {
	switch k {
	case store.KindString:
		return "TEXT NOT NULL DEFAULT ''"
	case store.KindInt, store.KindInt64, store.KindDuration, store.KindBool, store.KindDerived:
		return "INTEGER NOT NULL DEFAULT 0"
	case store.KindOptInt64, store.KindOptDerived, store.KindTime:
		return "INTEGER"
	case store.KindOptFloat64:
		return "REAL"
	case store.KindJSON:
		return "TEXT"
	}
	return ""
}

// addColumns is the migration that adds the named fields' columns to the
// ledger, typed as store.Fields says: what a new Record field's migration
// is. It panics on a name that is not a field, which the first test to
// open a ledger catches.
func addColumns(names ...string) string {
	var b strings.Builder
	for _, n := range names {
		c := mustColumn(n)
		fmt.Fprintf(&b, "ALTER TABLE requests ADD COLUMN %s %s;\n", c.name, c.typ)
	}
	return b.String()
}

// mustColumn is the ledger column called name, which the code spells out.
func mustColumn(name string) column {
	for _, c := range ledger {
		if c.name == name {
			return c
		}
	}
	panic("sqlite: no ledger column " + name)
}

// timeDst scans a KindTime column: NULL leaves the zero time.
type timeDst struct{ t *time.Time }

func (d timeDst) Scan(v any) error {
	switch v := v.(type) {
	case nil:
	case int64:
		*d.t = time.Unix(0, v).UTC()
	default:
		return fmt.Errorf("time column holds %T", v)
	}
	return nil
}

// jsonDst scans a KindJSON column into p: NULL leaves it nil.
type jsonDst struct {
	name string
	r    *record.Record // for the error's request id
	p    any
}

func (d *jsonDst) Scan(v any) error {
	var b []byte
	switch v := v.(type) {
	case nil:
		return nil
	case string:
		b = []byte(v)
	case []byte:
		b = v
	default:
		return fmt.Errorf("%s column holds %T", d.name, v)
	}
	if err := json.Unmarshal(b, d.p); err != nil {
		return fmt.Errorf("decode %s of %q: %w", d.name, d.r.RequestID, err)
	}
	return nil
}

// jsonValue is v's JSON text, or NULL when isNil. encoding/json sorts map
// keys, so equal tags are equal text; nil and empty stay apart (NULL and
// "{}"), so the round trip is exact.
func jsonValue(v any, isNil bool) any {
	if isNil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		// Maps of strings and the timing struct always marshal; keep
		// the row regardless.
		return nil
	}
	return string(b)
}

// Statements built once from ledger.
var (
	insertRequestSQL = func() string {
		names := make([]string, len(ledger))
		for i, c := range ledger {
			names[i] = c.name
		}
		return `INSERT INTO requests (` + strings.Join(names, ", ") + `) VALUES (` +
			strings.TrimSuffix(strings.Repeat("?, ", len(ledger)), ", ") +
			`) ON CONFLICT (request_id) DO NOTHING`
	}()
	insertDetailSQL = `INSERT INTO request_details (request_id, timeline) VALUES (?, ?)
		ON CONFLICT (request_id) DO NOTHING`
	// requestSQL is Request's query. The sub-select finds the logical
	// request of an attempt's own id; NULLIF keeps a record without a
	// logical id from matching every other such record.
	requestSQL = "SELECT " + selectColumns + `, request_details.timeline
		FROM requests LEFT JOIN request_details USING (request_id)
		WHERE request_id = ?1 OR logical_request_id = ?1
		   OR logical_request_id = (SELECT NULLIF(logical_request_id, '') FROM requests WHERE request_id = ?1)
		ORDER BY attempt, request_id`
	// selectColumns are the scanned columns, qualified so that they can be
	// joined with request_details.
	selectColumns = func() string {
		var names []string
		for _, c := range ledger {
			if c.dst != nil {
				names = append(names, "requests."+c.name)
			}
		}
		return strings.Join(names, ", ")
	}()
)

// rowArgs appends the INSERT arguments of r to args.
func rowArgs(args []any, r *record.Record) []any {
	for _, c := range ledger {
		args = append(args, c.val(r))
	}
	return args
}

// scanDests returns the scan destinations of the selectColumns for r.
func scanDests(dsts []any, r *record.Record) []any {
	for _, c := range ledger {
		if c.dst != nil {
			dsts = append(dsts, c.dst(r))
		}
	}
	return dsts
}

func optNS(d *time.Duration) any {
	if d == nil {
		return nil
	}
	return int64(*d)
}

// timelineJSON encodes the timeline (record.EncodeTimeline). A nil
// timeline is NULL so that it comes back nil.
func timelineJSON(tl []record.TimelinePoint) any {
	if tl == nil {
		return nil
	}
	return record.EncodeTimeline(tl)
}
