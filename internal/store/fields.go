package store

import (
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// Fields are the ledger's columns: one row per stored Record field, read
// by both backends to build their CREATE TABLE (ClickHouse), their added
// columns (ClickHouse at Open, SQLite through a migration that names the
// field), their INSERT and their reads. A new Record field is stored by
// adding one row here (and, on SQLite, a migration entry naming it).
//
// The order is the INSERT's and the SELECT's, not the tables' physical
// order: both backends name their columns, so a row may go anywhere; new
// ones go at the end. The timeline is not here: SQLite keeps it in a
// table of its own, ClickHouse in a column after these, each its own way.
var Fields = []Field{
	str("request_id", func(r *record.Record) *string { return &r.RequestID }),
	str("logical_request_id", func(r *record.Record) *string { return &r.LogicalRequestID }),
	str("client_request_id", func(r *record.Record) *string { return &r.ClientRequestID }),
	integer("attempt", func(r *record.Record) *int { return &r.Attempt }),
	str("trace_id", func(r *record.Record) *string { return &r.TraceID }),
	str("span_id", func(r *record.Record) *string { return &r.SpanID }),
	str("parent_span_id", func(r *record.Record) *string { return &r.ParentSpanID }),
	str("user_id", func(r *record.Record) *string { return &r.UserID }),
	dim("key_id", func(r *record.Record) *string { return &r.KeyID }),
	dim("team", func(r *record.Record) *string { return &r.Team }),
	dim("biz_line", func(r *record.Record) *string { return &r.BizLine }),
	str("session_id", func(r *record.Record) *string { return &r.SessionID }),
	dim("template_id", func(r *record.Record) *string { return &r.TemplateID }),
	jsonText("tags", func(r *record.Record) any { return &r.Tags }, func(r *record.Record) bool { return r.Tags == nil }),
	dim("endpoint", func(r *record.Record) *string { return &r.Endpoint }),
	dim("model", func(r *record.Record) *string { return &r.Model }),
	dim("served_model", func(r *record.Record) *string { return &r.ServedModel }),
	dim("upstream", func(r *record.Record) *string { return &r.Upstream }),
	dim("engine", func(r *record.Record) *string { return &r.Engine }),

	boolean("stream", func(r *record.Record) *bool { return &r.Stream }),
	boolean("include_usage", func(r *record.Record) *bool { return &r.IncludeUsage }),
	optInt64("max_tokens", func(r *record.Record) **int64 { return &r.MaxTokens }),
	optFloat64("temperature", func(r *record.Record) **float64 { return &r.Temperature }),
	optFloat64("top_p", func(r *record.Record) **float64 { return &r.TopP }),
	str("prompt_sha256", func(r *record.Record) *string { return &r.PromptSHA256 }),
	int64s("prompt_bytes", func(r *record.Record) *int64 { return &r.PromptBytes }),
	integer("messages", func(r *record.Record) *int { return &r.Messages }),
	int64s("request_bytes", func(r *record.Record) *int64 { return &r.RequestBytes }),

	{Name: "arrival", ClickHouseName: "arrival_ns", Kind: KindTime, Get: func(r *record.Record) *time.Time { return &r.Arrival }},
	duration("auth_done_ns", func(r *record.Record) *time.Duration { return &r.Marks.AuthDone }),
	duration("admitted_ns", func(r *record.Record) *time.Duration { return &r.Marks.Admitted }),
	duration("upstream_sent_ns", func(r *record.Record) *time.Duration { return &r.Marks.UpstreamSent }),
	duration("upstream_headers_ns", func(r *record.Record) *time.Duration { return &r.Marks.UpstreamHeaders }),
	duration("first_upstream_token_ns", func(r *record.Record) *time.Duration { return &r.Marks.FirstUpstreamToken }),
	duration("first_client_token_ns", func(r *record.Record) *time.Duration { return &r.Marks.FirstClientToken }),
	duration("last_token_ns", func(r *record.Record) *time.Duration { return &r.Marks.LastToken }),
	duration("last_upstream_token_ns", func(r *record.Record) *time.Duration { return &r.Marks.LastUpstreamToken }),
	duration("end_ns", func(r *record.Record) *time.Duration { return &r.Marks.End }),

	integer("status", func(r *record.Record) *int { return &r.Status }),
	integer("upstream_status", func(r *record.Record) *int { return &r.UpstreamStatus }),
	dim("error_type", func(r *record.Record) *string { return &r.ErrorType }),
	str("error_message", func(r *record.Record) *string { return &r.ErrorMessage }),
	dim("finish_reason", func(r *record.Record) *string { return &r.FinishReason }),
	str("response_id", func(r *record.Record) *string { return &r.ResponseID }),
	int64s("response_bytes", func(r *record.Record) *int64 { return &r.ResponseBytes }),
	integer("content_chunks", func(r *record.Record) *int { return &r.ContentChunks }),
	integer("first_chunk_bytes", func(r *record.Record) *int { return &r.FirstChunkBytes }),
	int64s("content_bytes", func(r *record.Record) *int64 { return &r.ContentBytes }),
	boolean("client_disconnect", func(r *record.Record) *bool { return &r.ClientDisconnect }),
	integer("retries", func(r *record.Record) *int { return &r.Retries }),
	boolean("sampled", func(r *record.Record) *bool { return &r.Sampled }),

	int64s("input_tokens", func(r *record.Record) *int64 { return &r.Usage.InputTokens }),
	int64s("cached_input_tokens", func(r *record.Record) *int64 { return &r.Usage.CachedInputTokens }),
	int64s("output_tokens", func(r *record.Record) *int64 { return &r.Usage.OutputTokens }),
	int64s("reasoning_tokens", func(r *record.Record) *int64 { return &r.Usage.ReasoningTokens }),
	int64s("cache_write_tokens", func(r *record.Record) *int64 { return &r.Usage.CacheWriteTokens }),
	int64s("cache_write_1h_tokens", func(r *record.Record) *int64 { return &r.Usage.CacheWrite1hTokens }),
	integer("tool_calls", func(r *record.Record) *int { return &r.Usage.ToolCalls }),
	dim("usage_source", func(r *record.Record) *string { return (*string)(&r.Usage.Source) }),

	int64s("cost_nanos", func(r *record.Record) *int64 { return &r.Cost.Nanos }),
	dim("currency", func(r *record.Record) *string { return &r.Cost.Currency }),
	dim("price_version", func(r *record.Record) *string { return &r.Cost.PriceVersion }),
	boolean("cache_hit", func(r *record.Record) *bool { return &r.CacheHit }),

	duration("connect_wait_ns", func(r *record.Record) *time.Duration { return &r.ConnectWait }),
	duration("client_write_ns", func(r *record.Record) *time.Duration { return &r.ClientWrite }),
	duration("client_write_tail_ns", func(r *record.Record) *time.Duration { return &r.ClientWriteTail }),
	jsonText("engine_timing", func(r *record.Record) any { return &r.EngineTiming }, func(r *record.Record) bool { return r.EngineTiming == nil }),

	optDerived("ttft_ns", func(r *record.Record) *time.Duration { return r.Derived.TTFT }),
	derived("e2e_ns", func(r *record.Record) int64 { return int64(r.Derived.E2E) }),
	optDerived("tpot_ns", func(r *record.Record) *time.Duration { return r.Derived.TPOT }),
	segment("seg_gateway_queue_ns", record.SegGatewayQueue),
	segment("seg_connect_ns", record.SegConnect),
	segment("seg_engine_queue_ns", record.SegEngineQueue),
	segment("seg_prefill_ns", record.SegPrefill),
	segment("seg_decode_ns", record.SegDecode),
	segment("seg_client_write_ns", record.SegClientWrite),
	segment("seg_post_processing_ns", record.SegPostProcessing),
	segment("seg_unattributed_ns", record.SegUnattributed),

	duration("engine_timing_due_ns", func(r *record.Record) *time.Duration { return &r.EngineTimingDue }),

	// The end user a request's body named (an agent's customer), and the
	// API's own finish reason (Anthropic's stop_reason, Responses' status).
	str("end_user", func(r *record.Record) *string { return &r.EndUser }),
	dim("native_finish_reason", func(r *record.Record) *string { return &r.NativeFinish }),

	// The system prompt's own fingerprint and length (never its text).
	str("system_sha256", func(r *record.Record) *string { return &r.SystemSHA256 }),
	int64s("system_tokens", func(r *record.Record) *int64 { return &r.SystemTokens }),
}

// Field is one column of the ledger. Kind says how it is stored and which
// function type Get holds; each backend turns a Kind into its column type
// and its encoding once, when its package loads.
type Field struct {
	Name string
	// ClickHouseName is the column's name on ClickHouse when it differs
	// from Name.
	ClickHouseName string
	Kind           Kind
	// LowCardinality marks a string dimension with few values: ClickHouse
	// stores it as LowCardinality(String) where the server has it.
	LowCardinality bool
	// Get reaches the field in a Record: a func(*record.Record) *T for the
	// T the Kind names, or what KindJSON and the derived kinds say.
	Get any
	// IsNil is, for KindJSON, whether the field is nil (stored as NULL).
	IsNil func(*record.Record) bool
}

// Kind is how a Field is stored. Each kind has one column type per
// backend, so a Field never names a type of its own.
type Kind int

const (
	KindString     Kind = iota // *string: TEXT NOT NULL DEFAULT '' | String
	KindInt                    // *int: INTEGER NOT NULL DEFAULT 0 | Int64
	KindInt64                  // *int64: as KindInt
	KindDuration               // *time.Duration, in nanoseconds: as KindInt
	KindBool                   // *bool: INTEGER NOT NULL DEFAULT 0 | UInt8
	KindOptInt64               // **int64, nil as NULL: INTEGER | Nullable(Int64)
	KindOptFloat64             // **float64, nil as NULL: REAL | Nullable(Float64)
	// KindTime is a *time.Time as Unix nanoseconds: a nullable INTEGER on
	// SQLite (NULL for the zero time), an Int64 on ClickHouse (math.MinInt64
	// for the zero time), read back in UTC.
	KindTime
	// KindJSON is stored as JSON text, NULL when IsNil: TEXT |
	// Nullable(String). Get is a func(*record.Record) any returning a
	// pointer to the field, for encoding/json (which sorts map keys, so
	// equal values are equal text).
	KindJSON
	// KindDerived is a figure Finish computes, stored to be queried, never
	// read back (Finish computes it again): Get is a
	// func(*record.Record) int64. As KindInt.
	KindDerived
	// KindOptDerived is KindDerived that may be absent: Get is a
	// func(*record.Record) *time.Duration, nil as NULL. As KindOptInt64.
	KindOptDerived
)

// Column is the field's name on ClickHouse.
func (f Field) Column() string {
	if f.ClickHouseName != "" {
		return f.ClickHouseName
	}
	return f.Name
}

func str(name string, get func(*record.Record) *string) Field {
	return Field{Name: name, Kind: KindString, Get: get}
}

// dim is a string with few distinct values (see Field.LowCardinality).
func dim(name string, get func(*record.Record) *string) Field {
	return Field{Name: name, Kind: KindString, LowCardinality: true, Get: get}
}

func integer(name string, get func(*record.Record) *int) Field {
	return Field{Name: name, Kind: KindInt, Get: get}
}

func int64s(name string, get func(*record.Record) *int64) Field {
	return Field{Name: name, Kind: KindInt64, Get: get}
}

func duration(name string, get func(*record.Record) *time.Duration) Field {
	return Field{Name: name, Kind: KindDuration, Get: get}
}

func boolean(name string, get func(*record.Record) *bool) Field {
	return Field{Name: name, Kind: KindBool, Get: get}
}

func optInt64(name string, get func(*record.Record) **int64) Field {
	return Field{Name: name, Kind: KindOptInt64, Get: get}
}

func optFloat64(name string, get func(*record.Record) **float64) Field {
	return Field{Name: name, Kind: KindOptFloat64, Get: get}
}

func jsonText(name string, get func(*record.Record) any, isNil func(*record.Record) bool) Field {
	return Field{Name: name, Kind: KindJSON, Get: get, IsNil: isNil}
}

func derived(name string, get func(*record.Record) int64) Field {
	return Field{Name: name, Kind: KindDerived, Get: get}
}

func optDerived(name string, get func(*record.Record) *time.Duration) Field {
	return Field{Name: name, Kind: KindOptDerived, Get: get}
}

func segment(name, seg string) Field {
	return derived(name, func(r *record.Record) int64 { return int64(r.Derived.Segments.Get(seg)) })
}
