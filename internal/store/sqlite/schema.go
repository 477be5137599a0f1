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
}

// ErrNewerSchema is wrapped by Open when the ledger was written by a newer
// tollgate than this one: reading it could misinterpret columns and writing
// it could corrupt them, so it is refused rather than guessed at.
var ErrNewerSchema = errors.New("ledger schema is newer than this tollgate")

// migrate brings the ledger to the latest schema in one transaction, so a
// crash mid-way leaves the previous version intact. The writer connection
// begins IMMEDIATE, which also serialises two processes opening a new file.
func migrate(ctx context.Context, db *sql.DB, now time.Time) (from, to int, err error) {
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
	if err := tx.Commit(); err != nil {
		return from, 0, fmt.Errorf("commit schema migrations: %w", err)
	}
	return from, len(migrations), nil
}

// column is one ledger column. The INSERT, the SELECT and the scan are all
// built from the one list below, so they cannot drift apart.
type column struct {
	name string
	// val returns the value to insert. r has been finished, so derived
	// columns always agree with the marks, whatever the caller did.
	val func(r *record.Record) any
	// dst returns where to scan the column; nil for columns that are only
	// there to be queried (derived figures are recomputed by Finish).
	dst func(r *record.Record, s *scratch) any
}

// scratch holds the columns that need converting after the scan.
type scratch struct {
	arrival sql.NullInt64
	tags    sql.NullString
	engine  sql.NullString
}

func (s *scratch) apply(r *record.Record) error {
	if s.arrival.Valid {
		r.Arrival = time.Unix(0, s.arrival.Int64).UTC()
	}
	if s.tags.Valid {
		if err := json.Unmarshal([]byte(s.tags.String), &r.Tags); err != nil {
			return fmt.Errorf("decode tags of %q: %w", r.RequestID, err)
		}
	}
	if s.engine.Valid {
		r.EngineTiming = &record.EngineTiming{}
		if err := json.Unmarshal([]byte(s.engine.String), r.EngineTiming); err != nil {
			return fmt.Errorf("decode engine timing of %q: %w", r.RequestID, err)
		}
	}
	return nil
}

var ledger = []column{
	{"request_id", func(r *record.Record) any { return r.RequestID }, func(r *record.Record, _ *scratch) any { return &r.RequestID }},
	{"logical_request_id", func(r *record.Record) any { return r.LogicalRequestID }, func(r *record.Record, _ *scratch) any { return &r.LogicalRequestID }},
	{"client_request_id", func(r *record.Record) any { return r.ClientRequestID }, func(r *record.Record, _ *scratch) any { return &r.ClientRequestID }},
	{"attempt", func(r *record.Record) any { return int64(r.Attempt) }, func(r *record.Record, _ *scratch) any { return &r.Attempt }},
	{"trace_id", func(r *record.Record) any { return r.TraceID }, func(r *record.Record, _ *scratch) any { return &r.TraceID }},
	{"span_id", func(r *record.Record) any { return r.SpanID }, func(r *record.Record, _ *scratch) any { return &r.SpanID }},
	{"parent_span_id", func(r *record.Record) any { return r.ParentSpanID }, func(r *record.Record, _ *scratch) any { return &r.ParentSpanID }},
	{"user_id", func(r *record.Record) any { return r.UserID }, func(r *record.Record, _ *scratch) any { return &r.UserID }},
	{"key_id", func(r *record.Record) any { return r.KeyID }, func(r *record.Record, _ *scratch) any { return &r.KeyID }},
	{"team", func(r *record.Record) any { return r.Team }, func(r *record.Record, _ *scratch) any { return &r.Team }},
	{"biz_line", func(r *record.Record) any { return r.BizLine }, func(r *record.Record, _ *scratch) any { return &r.BizLine }},
	{"session_id", func(r *record.Record) any { return r.SessionID }, func(r *record.Record, _ *scratch) any { return &r.SessionID }},
	{"template_id", func(r *record.Record) any { return r.TemplateID }, func(r *record.Record, _ *scratch) any { return &r.TemplateID }},
	{"tags", func(r *record.Record) any { return tagsJSON(r.Tags) }, func(_ *record.Record, s *scratch) any { return &s.tags }},
	{"endpoint", func(r *record.Record) any { return r.Endpoint }, func(r *record.Record, _ *scratch) any { return &r.Endpoint }},
	{"model", func(r *record.Record) any { return r.Model }, func(r *record.Record, _ *scratch) any { return &r.Model }},
	{"served_model", func(r *record.Record) any { return r.ServedModel }, func(r *record.Record, _ *scratch) any { return &r.ServedModel }},
	{"upstream", func(r *record.Record) any { return r.Upstream }, func(r *record.Record, _ *scratch) any { return &r.Upstream }},
	{"engine", func(r *record.Record) any { return r.Engine }, func(r *record.Record, _ *scratch) any { return &r.Engine }},

	{"stream", func(r *record.Record) any { return r.Stream }, func(r *record.Record, _ *scratch) any { return &r.Stream }},
	{"include_usage", func(r *record.Record) any { return r.IncludeUsage }, func(r *record.Record, _ *scratch) any { return &r.IncludeUsage }},
	{"max_tokens", func(r *record.Record) any { return r.MaxTokens }, func(r *record.Record, _ *scratch) any { return &r.MaxTokens }},
	{"temperature", func(r *record.Record) any { return r.Temperature }, func(r *record.Record, _ *scratch) any { return &r.Temperature }},
	{"top_p", func(r *record.Record) any { return r.TopP }, func(r *record.Record, _ *scratch) any { return &r.TopP }},
	{"prompt_sha256", func(r *record.Record) any { return r.PromptSHA256 }, func(r *record.Record, _ *scratch) any { return &r.PromptSHA256 }},
	{"prompt_bytes", func(r *record.Record) any { return r.PromptBytes }, func(r *record.Record, _ *scratch) any { return &r.PromptBytes }},
	{"messages", func(r *record.Record) any { return int64(r.Messages) }, func(r *record.Record, _ *scratch) any { return &r.Messages }},
	{"request_bytes", func(r *record.Record) any { return r.RequestBytes }, func(r *record.Record, _ *scratch) any { return &r.RequestBytes }},

	{"arrival", arrivalValue, func(_ *record.Record, s *scratch) any { return &s.arrival }},
	{"auth_done_ns", func(r *record.Record) any { return int64(r.Marks.AuthDone) }, func(r *record.Record, _ *scratch) any { return &r.Marks.AuthDone }},
	{"admitted_ns", func(r *record.Record) any { return int64(r.Marks.Admitted) }, func(r *record.Record, _ *scratch) any { return &r.Marks.Admitted }},
	{"upstream_sent_ns", func(r *record.Record) any { return int64(r.Marks.UpstreamSent) }, func(r *record.Record, _ *scratch) any { return &r.Marks.UpstreamSent }},
	{"upstream_headers_ns", func(r *record.Record) any { return int64(r.Marks.UpstreamHeaders) }, func(r *record.Record, _ *scratch) any { return &r.Marks.UpstreamHeaders }},
	{"first_upstream_token_ns", func(r *record.Record) any { return int64(r.Marks.FirstUpstreamToken) }, func(r *record.Record, _ *scratch) any { return &r.Marks.FirstUpstreamToken }},
	{"first_client_token_ns", func(r *record.Record) any { return int64(r.Marks.FirstClientToken) }, func(r *record.Record, _ *scratch) any { return &r.Marks.FirstClientToken }},
	{"last_token_ns", func(r *record.Record) any { return int64(r.Marks.LastToken) }, func(r *record.Record, _ *scratch) any { return &r.Marks.LastToken }},
	{"end_ns", func(r *record.Record) any { return int64(r.Marks.End) }, func(r *record.Record, _ *scratch) any { return &r.Marks.End }},

	{"status", func(r *record.Record) any { return int64(r.Status) }, func(r *record.Record, _ *scratch) any { return &r.Status }},
	{"upstream_status", func(r *record.Record) any { return int64(r.UpstreamStatus) }, func(r *record.Record, _ *scratch) any { return &r.UpstreamStatus }},
	{"error_type", func(r *record.Record) any { return r.ErrorType }, func(r *record.Record, _ *scratch) any { return &r.ErrorType }},
	{"error_message", func(r *record.Record) any { return r.ErrorMessage }, func(r *record.Record, _ *scratch) any { return &r.ErrorMessage }},
	{"finish_reason", func(r *record.Record) any { return r.FinishReason }, func(r *record.Record, _ *scratch) any { return &r.FinishReason }},
	{"response_id", func(r *record.Record) any { return r.ResponseID }, func(r *record.Record, _ *scratch) any { return &r.ResponseID }},
	{"end_user", func(r *record.Record) any { return r.EndUser }, func(r *record.Record, _ *scratch) any { return &r.EndUser }},
	{"native_finish_reason", func(r *record.Record) any { return r.NativeFinish }, func(r *record.Record, _ *scratch) any { return &r.NativeFinish }},
	{"response_bytes", func(r *record.Record) any { return r.ResponseBytes }, func(r *record.Record, _ *scratch) any { return &r.ResponseBytes }},
	{"content_chunks", func(r *record.Record) any { return int64(r.ContentChunks) }, func(r *record.Record, _ *scratch) any { return &r.ContentChunks }},
	{"first_chunk_bytes", func(r *record.Record) any { return int64(r.FirstChunkBytes) }, func(r *record.Record, _ *scratch) any { return &r.FirstChunkBytes }},
	{"content_bytes", func(r *record.Record) any { return r.ContentBytes }, func(r *record.Record, _ *scratch) any { return &r.ContentBytes }},
	{"client_disconnect", func(r *record.Record) any { return r.ClientDisconnect }, func(r *record.Record, _ *scratch) any { return &r.ClientDisconnect }},
	{"retries", func(r *record.Record) any { return int64(r.Retries) }, func(r *record.Record, _ *scratch) any { return &r.Retries }},
	{"sampled", func(r *record.Record) any { return r.Sampled }, func(r *record.Record, _ *scratch) any { return &r.Sampled }},

	{"input_tokens", func(r *record.Record) any { return r.Usage.InputTokens }, func(r *record.Record, _ *scratch) any { return &r.Usage.InputTokens }},
	{"cached_input_tokens", func(r *record.Record) any { return r.Usage.CachedInputTokens }, func(r *record.Record, _ *scratch) any { return &r.Usage.CachedInputTokens }},
	{"output_tokens", func(r *record.Record) any { return r.Usage.OutputTokens }, func(r *record.Record, _ *scratch) any { return &r.Usage.OutputTokens }},
	{"reasoning_tokens", func(r *record.Record) any { return r.Usage.ReasoningTokens }, func(r *record.Record, _ *scratch) any { return &r.Usage.ReasoningTokens }},
	{"cache_write_tokens", func(r *record.Record) any { return r.Usage.CacheWriteTokens }, func(r *record.Record, _ *scratch) any { return &r.Usage.CacheWriteTokens }},
	{"cache_write_1h_tokens", func(r *record.Record) any { return r.Usage.CacheWrite1hTokens }, func(r *record.Record, _ *scratch) any { return &r.Usage.CacheWrite1hTokens }},
	{"tool_calls", func(r *record.Record) any { return int64(r.Usage.ToolCalls) }, func(r *record.Record, _ *scratch) any { return &r.Usage.ToolCalls }},
	{"usage_source", func(r *record.Record) any { return string(r.Usage.Source) }, func(r *record.Record, _ *scratch) any { return &r.Usage.Source }},

	{"cost_nanos", func(r *record.Record) any { return r.Cost.Nanos }, func(r *record.Record, _ *scratch) any { return &r.Cost.Nanos }},
	{"currency", func(r *record.Record) any { return r.Cost.Currency }, func(r *record.Record, _ *scratch) any { return &r.Cost.Currency }},
	{"price_version", func(r *record.Record) any { return r.Cost.PriceVersion }, func(r *record.Record, _ *scratch) any { return &r.Cost.PriceVersion }},
	{"cache_hit", func(r *record.Record) any { return r.CacheHit }, func(r *record.Record, _ *scratch) any { return &r.CacheHit }},

	{"last_upstream_token_ns", func(r *record.Record) any { return int64(r.Marks.LastUpstreamToken) }, func(r *record.Record, _ *scratch) any { return &r.Marks.LastUpstreamToken }},
	{"connect_wait_ns", func(r *record.Record) any { return int64(r.ConnectWait) }, func(r *record.Record, _ *scratch) any { return &r.ConnectWait }},
	{"client_write_ns", func(r *record.Record) any { return int64(r.ClientWrite) }, func(r *record.Record, _ *scratch) any { return &r.ClientWrite }},
	{"client_write_tail_ns", func(r *record.Record) any { return int64(r.ClientWriteTail) }, func(r *record.Record, _ *scratch) any { return &r.ClientWriteTail }},
	{"engine_timing", func(r *record.Record) any { return engineJSON(r.EngineTiming) }, func(_ *record.Record, s *scratch) any { return &s.engine }},

	{"ttft_ns", func(r *record.Record) any { return optNS(r.Derived.TTFT) }, nil},
	{"e2e_ns", func(r *record.Record) any { return int64(r.Derived.E2E) }, nil},
	{"tpot_ns", func(r *record.Record) any { return optNS(r.Derived.TPOT) }, nil},
	{"seg_gateway_queue_ns", segNS(record.SegGatewayQueue), nil},
	{"seg_connect_ns", segNS(record.SegConnect), nil},
	{"seg_engine_queue_ns", segNS(record.SegEngineQueue), nil},
	{"seg_prefill_ns", segNS(record.SegPrefill), nil},
	{"seg_decode_ns", segNS(record.SegDecode), nil},
	{"seg_client_write_ns", segNS(record.SegClientWrite), nil},
	{"seg_post_processing_ns", segNS(record.SegPostProcessing), nil},
	{"seg_unattributed_ns", segNS(record.SegUnattributed), nil},

	// Migration 13.
	{"engine_timing_due_ns", func(r *record.Record) any { return int64(r.EngineTimingDue) }, func(r *record.Record, _ *scratch) any { return &r.EngineTimingDue }},
}

func segNS(name string) func(*record.Record) any {
	return func(r *record.Record) any { return int64(r.Derived.Segments.Get(name)) }
}

// engineJSON stores the engine's timing exactly (integer nanoseconds).
func engineJSON(e *record.EngineTiming) any {
	if e == nil {
		return nil
	}
	b, _ := json.Marshal(e)
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
func scanDests(dsts []any, r *record.Record, s *scratch) []any {
	for _, c := range ledger {
		if c.dst != nil {
			dsts = append(dsts, c.dst(r, s))
		}
	}
	return dsts
}

func arrivalValue(r *record.Record) any {
	if r.Arrival.IsZero() {
		return nil
	}
	return r.Arrival.UnixNano()
}

func optNS(d *time.Duration) any {
	if d == nil {
		return nil
	}
	return int64(*d)
}

// tagsJSON keeps nil and empty apart (NULL vs "{}") so that the round trip
// is exact. encoding/json sorts map keys, so equal tags are equal text.
func tagsJSON(tags map[string]string) any {
	if tags == nil {
		return nil
	}
	b, err := json.Marshal(tags)
	if err != nil {
		// A map[string]string always marshals; keep the row regardless.
		return nil
	}
	return string(b)
}

// timelineJSON encodes the timeline (record.EncodeTimeline). A nil
// timeline is NULL so that it comes back nil.
func timelineJSON(tl []record.TimelinePoint) any {
	if tl == nil {
		return nil
	}
	return record.EncodeTimeline(tl)
}
