package clickhouse

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// column is one column of the requests table. The CREATE TABLE, the INSERT
// and the SELECT are all built from the one list below, in its order, so
// they cannot drift apart (RowBinary has no column names to catch a swap).
type column struct {
	name string
	typ  string
	// dim marks a low-cardinality dimension: LowCardinality(String) where
	// the server has it (see Features).
	dim bool
	enc func(e *enc, r *record.Record)
	// dec reads the column back into r; nil for columns that are only
	// there to be queried (derived figures are recomputed by Finish, the
	// partition day and version are bookkeeping).
	dec func(d *dec, r *record.Record) error
}

func strCol(name string, dim bool, p func(*record.Record) *string) column {
	return column{name, "String", dim,
		func(e *enc, r *record.Record) { e.str(*p(r)) },
		func(d *dec, r *record.Record) error { *p(r) = d.str(); return nil }}
}

func intCol(name string, p func(*record.Record) *int) column {
	return column{name, "Int64", false,
		func(e *enc, r *record.Record) { e.i64(int64(*p(r))) },
		func(d *dec, r *record.Record) error { *p(r) = int(d.i64()); return nil }}
}

func i64Col(name string, p func(*record.Record) *int64) column {
	return column{name, "Int64", false,
		func(e *enc, r *record.Record) { e.i64(*p(r)) },
		func(d *dec, r *record.Record) error { *p(r) = d.i64(); return nil }}
}

func durCol(name string, p func(*record.Record) *time.Duration) column {
	return column{name, "Int64", false,
		func(e *enc, r *record.Record) { e.i64(int64(*p(r))) },
		func(d *dec, r *record.Record) error { *p(r) = time.Duration(d.i64()); return nil }}
}

func boolCol(name string, p func(*record.Record) *bool) column {
	return column{name, "UInt8", false,
		func(e *enc, r *record.Record) { e.flag(*p(r)) },
		func(d *dec, r *record.Record) error { *p(r) = d.flag(); return nil }}
}

func optI64Col(name string, p func(*record.Record) **int64) column {
	return column{name, "Nullable(Int64)", false,
		func(e *enc, r *record.Record) {
			if v := *p(r); e.null(v == nil) {
				e.i64(*v)
			}
		},
		func(d *dec, r *record.Record) error {
			if d.null() {
				v := d.i64()
				*p(r) = &v
			}
			return nil
		}}
}

func optF64Col(name string, p func(*record.Record) **float64) column {
	return column{name, "Nullable(Float64)", false,
		func(e *enc, r *record.Record) {
			if v := *p(r); e.null(v == nil) {
				e.f64(*v)
			}
		},
		func(d *dec, r *record.Record) error {
			if d.null() {
				v := d.f64()
				*p(r) = &v
			}
			return nil
		}}
}

// optStr writes s as a Nullable(String), NULL when ok is false.
func optStr(e *enc, s string, ok bool) {
	if e.null(!ok) {
		e.str(s)
	}
}

// derived is a query-only Int64 column computed from the finished record.
func derived(name string, v func(*record.Record) int64) column {
	return column{name, "Int64", false, func(e *enc, r *record.Record) { e.i64(v(r)) }, nil}
}

func optDerived(name string, v func(*record.Record) *time.Duration) column {
	return column{name, "Nullable(Int64)", false, func(e *enc, r *record.Record) {
		if d := v(r); e.null(d == nil) {
			e.i64(int64(*d))
		}
	}, nil}
}

func segCol(name, seg string) column {
	return derived(name, func(r *record.Record) int64 { return int64(r.Derived.Segments.Get(seg)) })
}

// noArrival stands for a zero Arrival, which has no Unix time. The gateway
// always sets Arrival; this keeps a Record without one exact on the round
// trip (1677-09-21 is no real arrival).
const noArrival = math.MinInt64

func arrivalNS(t time.Time) int64 {
	if t.IsZero() {
		return noArrival
	}
	return t.UnixNano()
}

// maxDay is the last day a Date holds on every server: 2105-12-31 on
// 18.16 (later days read back as 0000-00-00), 2149-06-06 on current ones.
const maxDay = 49672

// day is the partition: the UTC day of arrival, as ClickHouse's Date (days
// since 1970), clamped to what a Date holds. The clamp is monotonic, so a
// bound on day derived from a bound on arrival never drops a row; the
// exact bound is always arrival_ns. Report days in another zone come from
// the rollups, not from this column.
func day(t time.Time) uint16 {
	switch {
	case t.IsZero() || t.Unix() < 0:
		return 0
	case t.Unix()/86400 > maxDay:
		return maxDay
	}
	return uint16(t.Unix() / 86400)
}

// ledger is the requests table. The names follow the SQLite ledger's
// columns, so a query reads the same on both.
var ledger = []column{
	{"day", "Date", false, func(e *enc, r *record.Record) { e.u16(day(r.Arrival)) }, nil},
	strCol("request_id", false, func(r *record.Record) *string { return &r.RequestID }),
	strCol("logical_request_id", false, func(r *record.Record) *string { return &r.LogicalRequestID }),
	strCol("client_request_id", false, func(r *record.Record) *string { return &r.ClientRequestID }),
	intCol("attempt", func(r *record.Record) *int { return &r.Attempt }),
	strCol("trace_id", false, func(r *record.Record) *string { return &r.TraceID }),
	strCol("span_id", false, func(r *record.Record) *string { return &r.SpanID }),
	strCol("parent_span_id", false, func(r *record.Record) *string { return &r.ParentSpanID }),
	strCol("user_id", false, func(r *record.Record) *string { return &r.UserID }),
	strCol("key_id", true, func(r *record.Record) *string { return &r.KeyID }),
	strCol("team", true, func(r *record.Record) *string { return &r.Team }),
	strCol("biz_line", true, func(r *record.Record) *string { return &r.BizLine }),
	strCol("session_id", false, func(r *record.Record) *string { return &r.SessionID }),
	strCol("template_id", true, func(r *record.Record) *string { return &r.TemplateID }),
	{"tags", "Nullable(String)", false,
		func(e *enc, r *record.Record) { s, ok := jsonOf(r.Tags, r.Tags != nil); optStr(e, s, ok) },
		func(d *dec, r *record.Record) error {
			if d.null() {
				if err := json.Unmarshal([]byte(d.str()), &r.Tags); err != nil && d.err == nil {
					return fmt.Errorf("decode tags of %q: %w", r.RequestID, err)
				}
			}
			return nil
		}},
	strCol("endpoint", true, func(r *record.Record) *string { return &r.Endpoint }),
	strCol("model", true, func(r *record.Record) *string { return &r.Model }),
	strCol("served_model", true, func(r *record.Record) *string { return &r.ServedModel }),
	strCol("upstream", true, func(r *record.Record) *string { return &r.Upstream }),
	strCol("engine", true, func(r *record.Record) *string { return &r.Engine }),

	boolCol("stream", func(r *record.Record) *bool { return &r.Stream }),
	boolCol("include_usage", func(r *record.Record) *bool { return &r.IncludeUsage }),
	optI64Col("max_tokens", func(r *record.Record) **int64 { return &r.MaxTokens }),
	optF64Col("temperature", func(r *record.Record) **float64 { return &r.Temperature }),
	optF64Col("top_p", func(r *record.Record) **float64 { return &r.TopP }),
	strCol("prompt_sha256", false, func(r *record.Record) *string { return &r.PromptSHA256 }),
	i64Col("prompt_bytes", func(r *record.Record) *int64 { return &r.PromptBytes }),
	intCol("messages", func(r *record.Record) *int { return &r.Messages }),
	i64Col("request_bytes", func(r *record.Record) *int64 { return &r.RequestBytes }),

	{"arrival_ns", "Int64", false,
		func(e *enc, r *record.Record) { e.i64(arrivalNS(r.Arrival)) },
		func(d *dec, r *record.Record) error {
			if ns := d.i64(); ns != noArrival {
				r.Arrival = time.Unix(0, ns).UTC()
			}
			return nil
		}},
	durCol("auth_done_ns", func(r *record.Record) *time.Duration { return &r.Marks.AuthDone }),
	durCol("admitted_ns", func(r *record.Record) *time.Duration { return &r.Marks.Admitted }),
	durCol("upstream_sent_ns", func(r *record.Record) *time.Duration { return &r.Marks.UpstreamSent }),
	durCol("upstream_headers_ns", func(r *record.Record) *time.Duration { return &r.Marks.UpstreamHeaders }),
	durCol("first_upstream_token_ns", func(r *record.Record) *time.Duration { return &r.Marks.FirstUpstreamToken }),
	durCol("first_client_token_ns", func(r *record.Record) *time.Duration { return &r.Marks.FirstClientToken }),
	durCol("last_token_ns", func(r *record.Record) *time.Duration { return &r.Marks.LastToken }),
	durCol("last_upstream_token_ns", func(r *record.Record) *time.Duration { return &r.Marks.LastUpstreamToken }),
	durCol("end_ns", func(r *record.Record) *time.Duration { return &r.Marks.End }),

	intCol("status", func(r *record.Record) *int { return &r.Status }),
	intCol("upstream_status", func(r *record.Record) *int { return &r.UpstreamStatus }),
	strCol("error_type", true, func(r *record.Record) *string { return &r.ErrorType }),
	strCol("error_message", false, func(r *record.Record) *string { return &r.ErrorMessage }),
	strCol("finish_reason", true, func(r *record.Record) *string { return &r.FinishReason }),
	strCol("response_id", false, func(r *record.Record) *string { return &r.ResponseID }),
	strCol("end_user", false, func(r *record.Record) *string { return &r.EndUser }),
	strCol("native_finish_reason", true, func(r *record.Record) *string { return &r.NativeFinish }),
	i64Col("response_bytes", func(r *record.Record) *int64 { return &r.ResponseBytes }),
	intCol("content_chunks", func(r *record.Record) *int { return &r.ContentChunks }),
	intCol("first_chunk_bytes", func(r *record.Record) *int { return &r.FirstChunkBytes }),
	i64Col("content_bytes", func(r *record.Record) *int64 { return &r.ContentBytes }),
	boolCol("client_disconnect", func(r *record.Record) *bool { return &r.ClientDisconnect }),
	intCol("retries", func(r *record.Record) *int { return &r.Retries }),
	boolCol("sampled", func(r *record.Record) *bool { return &r.Sampled }),

	i64Col("input_tokens", func(r *record.Record) *int64 { return &r.Usage.InputTokens }),
	i64Col("cached_input_tokens", func(r *record.Record) *int64 { return &r.Usage.CachedInputTokens }),
	i64Col("output_tokens", func(r *record.Record) *int64 { return &r.Usage.OutputTokens }),
	i64Col("reasoning_tokens", func(r *record.Record) *int64 { return &r.Usage.ReasoningTokens }),
	i64Col("cache_write_tokens", func(r *record.Record) *int64 { return &r.Usage.CacheWriteTokens }),
	i64Col("cache_write_1h_tokens", func(r *record.Record) *int64 { return &r.Usage.CacheWrite1hTokens }),
	intCol("tool_calls", func(r *record.Record) *int { return &r.Usage.ToolCalls }),
	strCol("usage_source", true, func(r *record.Record) *string { return (*string)(&r.Usage.Source) }),

	i64Col("cost_nanos", func(r *record.Record) *int64 { return &r.Cost.Nanos }),
	strCol("currency", true, func(r *record.Record) *string { return &r.Cost.Currency }),
	strCol("price_version", true, func(r *record.Record) *string { return &r.Cost.PriceVersion }),
	boolCol("cache_hit", func(r *record.Record) *bool { return &r.CacheHit }),

	durCol("connect_wait_ns", func(r *record.Record) *time.Duration { return &r.ConnectWait }),
	durCol("client_write_ns", func(r *record.Record) *time.Duration { return &r.ClientWrite }),
	durCol("client_write_tail_ns", func(r *record.Record) *time.Duration { return &r.ClientWriteTail }),
	{"engine_timing", "Nullable(String)", false,
		func(e *enc, r *record.Record) {
			s, ok := jsonOf(r.EngineTiming, r.EngineTiming != nil)
			optStr(e, s, ok)
		},
		func(d *dec, r *record.Record) error {
			if d.null() {
				r.EngineTiming = new(record.EngineTiming)
				if err := json.Unmarshal([]byte(d.str()), r.EngineTiming); err != nil && d.err == nil {
					return fmt.Errorf("decode engine timing of %q: %w", r.RequestID, err)
				}
			}
			return nil
		}},

	optDerived("ttft_ns", func(r *record.Record) *time.Duration { return r.Derived.TTFT }),
	derived("e2e_ns", func(r *record.Record) int64 { return int64(r.Derived.E2E) }),
	optDerived("tpot_ns", func(r *record.Record) *time.Duration { return r.Derived.TPOT }),
	segCol("seg_gateway_queue_ns", record.SegGatewayQueue),
	segCol("seg_connect_ns", record.SegConnect),
	segCol("seg_engine_queue_ns", record.SegEngineQueue),
	segCol("seg_prefill_ns", record.SegPrefill),
	segCol("seg_decode_ns", record.SegDecode),
	segCol("seg_client_write_ns", record.SegClientWrite),
	segCol("seg_post_processing_ns", record.SegPostProcessing),
	segCol("seg_unattributed_ns", record.SegUnattributed),

	durCol("engine_timing_due_ns", func(r *record.Record) *time.Duration { return &r.EngineTimingDue }),
}

// The sampled detail and the write version follow the ledger columns. The
// timeline lives in the same row rather than a second table, so one INSERT
// writes a request whole; ClickHouse reads only the columns a query names,
// so listing never touches it.
var (
	timelineCol = column{"timeline", "Nullable(String)", false,
		func(e *enc, r *record.Record) {
			if e.null(!r.Sampled || r.Timeline == nil) {
				e.scratch = record.AppendTimeline(e.scratch[:0], r.Timeline)
				e.bytes(e.scratch)
			}
		},
		func(d *dec, r *record.Record) error {
			if d.null() {
				tl, err := record.ParseTimeline(d.str())
				if err != nil && d.err == nil {
					return fmt.Errorf("decode timeline of %q: %w", r.RequestID, err)
				}
				r.Timeline = tl
			}
			return nil
		}}
	// verCol is ReplacingMergeTree's version. It falls as the clock rises,
	// so when two writers race on one request_id (the only way a second row
	// gets in, see Insert) the merge keeps the earlier write: the first
	// write wins, as the store contract says.
	verCol = column{"ver", "UInt64", false, nil, nil}
)

// allColumns is the table in order: the ledger, the timeline, the version.
var allColumns = append(append(ledger[:len(ledger):len(ledger)], timelineCol), verCol)

// createRequests is the CREATE TABLE of the ledger for a server with f.
//
// Partitioned by UTC day so that a time range reads only its days and old
// days drop whole; ordered by (day, request_id) because that is the
// identity ReplacingMergeTree collapses replays on, and it serves the
// lookups by id. Time-range listings read whole days, which is what
// ClickHouse is for.
func createRequests(db string, f Features) string {
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE IF NOT EXISTS %s.requests (\n", quoteIdent(db))
	for i, c := range allColumns {
		typ := c.typ
		if c.dim && f.LowCardinality {
			typ = "LowCardinality(" + typ + ")"
		}
		fmt.Fprintf(&b, "\t%s %s", c.name, typ)
		if i < len(allColumns)-1 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString(") ENGINE = ReplacingMergeTree(ver)\nPARTITION BY day\nORDER BY (day, request_id)")
	return b.String()
}

// names lists cols' names, for INSERT and SELECT.
func names(cols []column) string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = c.name
	}
	return strings.Join(out, ", ")
}

var (
	insertColumns = names(allColumns)
	// readColumns are the ledger columns read back, in order.
	readColumns = func() []column {
		var out []column
		for _, c := range ledger {
			if c.dec != nil {
				out = append(out, c)
			}
		}
		return out
	}()
	selectColumns = names(readColumns)
)

// encodeRow appends r (finished) as a row of allColumns written at ver.
func encodeRow(e *enc, r *record.Record, ver uint64) {
	for _, c := range ledger {
		c.enc(e, r)
	}
	timelineCol.enc(e, r)
	e.u64(ver)
}

// decodeRow reads a row of readColumns, then the timeline if withTimeline.
func decodeRow(d *dec, withTimeline bool) (*record.Record, error) {
	r := new(record.Record)
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	for _, c := range readColumns {
		keep(c.dec(d, r))
	}
	if withTimeline {
		keep(timelineCol.dec(d, r))
	}
	if d.err != nil {
		return nil, d.err
	}
	return r, first
}

// jsonOf is v's JSON when ok, as the SQLite ledger stores tags and engine
// timing (encoding/json sorts map keys, so equal tags are equal text).
func jsonOf(v any, ok bool) (string, bool) {
	if !ok {
		return "", false
	}
	b, err := json.Marshal(v)
	if err != nil {
		// Maps of strings and the timing struct always marshal.
		return "", false
	}
	return string(b), true
}
