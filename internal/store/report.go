package store

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// Aggregates are kept as rollups maintained in the same transaction as the
// ledger rows they sum, so a report over months reads rollups, never the
// ledger, and a rollup can never disagree with the ledger it came from.

// Dim is a dimension a report can group or filter by.
type Dim string

const (
	// DimMinute is the UTC minute, RFC 3339. Minutes are kept for model,
	// upstream, biz_line and currency only (and as long as the minute
	// retention says): a report grouped by minute may group and filter by
	// those and no other time dimension.
	DimMinute      Dim = "minute"
	DimHour        Dim = "hour"  // UTC hour, RFC 3339
	DimDay         Dim = "day"   // YYYY-MM-DD in the store's report time zone
	DimMonth       Dim = "month" // YYYY-MM in the store's report time zone
	DimModel       Dim = "model"
	DimServedModel Dim = "served_model" // the model version the engine reported
	DimUpstream    Dim = "upstream"
	DimBizLine     Dim = "biz_line"
	DimUser        Dim = "user"
	DimKey         Dim = "key"
	DimTemplate    Dim = "template"
	// DimEndUser is the end user the request's body named (an agent's
	// customer: OpenAI's user or safety_identifier, Anthropic's
	// metadata.user_id). Reports by it count only the requests that named
	// one, and group and filter beside it by user, biz line and model only
	// (and by hour, day and month, not minute).
	DimEndUser Dim = "end_user"
)

// EndUserDims are the dimensions a report by end user may group and
// filter by beside the end user, with hour, day and month: the end-user
// rollups keep no others.
var EndUserDims = []Dim{DimEndUser, DimUser, DimBizLine, DimModel}

// CheckEndUser refuses a query by end user that the end-user rollups
// cannot answer; a query without the end user passes.
func (q ReportQuery) CheckEndUser() error {
	_, filtered := q.Where[DimEndUser]
	if !filtered && !slices.Contains(q.GroupBy, DimEndUser) {
		return nil
	}
	if filtered && q.Where[DimEndUser] == "" {
		return errors.New("end-user reports count the requests that named an end user; filter on a non-empty end_user")
	}
	for _, d := range slices.Concat(q.GroupBy, slices.Collect(maps.Keys(q.Where))) {
		if d != DimHour && d != DimDay && d != DimMonth && !slices.Contains(EndUserDims, d) {
			return fmt.Errorf("by end user, reports group and filter by user, biz_line, model, hour, day and month only, not by %s", d)
		}
	}
	return nil
}

// Dims lists every dimension, for validation and help texts.
var Dims = []Dim{DimMinute, DimHour, DimDay, DimMonth, DimModel, DimServedModel, DimUpstream, DimBizLine, DimUser, DimKey, DimTemplate, DimEndUser}

// ReportQuery asks for totals over [From, To), grouped by GroupBy (in that
// order) and filtered by equality on dimensions. A zero From or To is
// unbounded. Day and month boundaries are the store's report time zone;
// From and To are rounded down to the hour (to the minute when grouped by
// minute).
type ReportQuery struct {
	From, To time.Time
	GroupBy  []Dim
	Where    map[Dim]string
	// Zone overrides the report time zone for day and month groups (for
	// example UTC days to match a provider's bill); hour rollups are then
	// folded in it.
	Zone *time.Location
	// Measures names the sums wanted (see Measures); the others are left
	// zero. Nil asks for all. Reading fewer is what keeps a wide report
	// fast: rollup rows are read column by column.
	Measures []string
}

// Totals are the sums a rollup keeps. Every request counts, failed and
// cancelled ones included.
type Totals struct {
	Requests     int64 // one per attempt
	Errors       int64 // error_type != ""
	Disconnects  int64 // client left first
	CacheHits    int64 // answered from the response cache
	Input        int64
	Cached       int64
	Output       int64
	Reasoning    int64
	CostNanos    int64
	FinishLength int64 // finish_reason = length: max_tokens too low
	UsageMissing int64 // the engine reported no usage (source none or chunks)
	// Reconciliation helpers (see internal/cost): a row with Retries > 0
	// had failed attempts before it; providers may have billed their
	// prompts, estimated as Retries × this row's input tokens.
	Retried         int64
	RetriedInputEst int64
	CutStreams      int64 // usage never arrived; output counted from what was streamed
	CutOutput       int64
	TokenizerInput  int64 // tokens counted by the tokenizer instead of the engine
	TokenizerOutput int64
	E2ESumNS        int64
	TTFTSumNS       int64
	TTFTCount       int64
	PromptBytes     int64
	Reached         int64 // attempts that reached an engine (it answered something)
	// For cut streams (usage never arrived): Σ max_tokens of those that
	// set it (the most the engine can have generated), how many did not,
	// and an input estimate (prompt bytes / 4) for those counted from
	// chunks, whose input is unknown.
	CutOutputLimit int64
	CutUnlimited   int64
	CutInputEst    int64
	// SegmentNS sums each latency segment, in record.SegmentNames order.
	SegmentNS [8]int64
	// InputUnknown counts the attempts that reached an engine and whose
	// input nobody counted (record.Usage.InputKnown false): Input holds
	// nothing for them.
	InputUnknown int64
}

// Measure is one sum of Totals under the name every backend stores it by.
type Measure struct {
	Name  string
	Field func(*Totals) *int64
}

// Measures are every field of Totals, in the order backends created their
// columns in: new measures are appended, never inserted.
var Measures = []Measure{
	{Name: "requests", Field: func(t *Totals) *int64 { return &t.Requests }},
	{Name: "errors", Field: func(t *Totals) *int64 { return &t.Errors }},
	{Name: "disconnects", Field: func(t *Totals) *int64 { return &t.Disconnects }},
	{Name: "cache_hits", Field: func(t *Totals) *int64 { return &t.CacheHits }},
	{Name: "input_tokens", Field: func(t *Totals) *int64 { return &t.Input }},
	{Name: "cached_input_tokens", Field: func(t *Totals) *int64 { return &t.Cached }},
	{Name: "output_tokens", Field: func(t *Totals) *int64 { return &t.Output }},
	{Name: "reasoning_tokens", Field: func(t *Totals) *int64 { return &t.Reasoning }},
	{Name: "cost_nanos", Field: func(t *Totals) *int64 { return &t.CostNanos }},
	{Name: "finish_length", Field: func(t *Totals) *int64 { return &t.FinishLength }},
	{Name: "usage_missing", Field: func(t *Totals) *int64 { return &t.UsageMissing }},
	{Name: "retried", Field: func(t *Totals) *int64 { return &t.Retried }},
	{Name: "retried_input_est", Field: func(t *Totals) *int64 { return &t.RetriedInputEst }},
	{Name: "cut_streams", Field: func(t *Totals) *int64 { return &t.CutStreams }},
	{Name: "cut_output", Field: func(t *Totals) *int64 { return &t.CutOutput }},
	{Name: "tokenizer_input", Field: func(t *Totals) *int64 { return &t.TokenizerInput }},
	{Name: "tokenizer_output", Field: func(t *Totals) *int64 { return &t.TokenizerOutput }},
	{Name: "e2e_sum_ns", Field: func(t *Totals) *int64 { return &t.E2ESumNS }},
	{Name: "ttft_sum_ns", Field: func(t *Totals) *int64 { return &t.TTFTSumNS }},
	{Name: "ttft_count", Field: func(t *Totals) *int64 { return &t.TTFTCount }},
	{Name: "prompt_bytes", Field: func(t *Totals) *int64 { return &t.PromptBytes }},
	// Added by migration 3.
	{Name: "reached", Field: func(t *Totals) *int64 { return &t.Reached }},
	{Name: "cut_output_limit", Field: func(t *Totals) *int64 { return &t.CutOutputLimit }},
	{Name: "cut_unlimited", Field: func(t *Totals) *int64 { return &t.CutUnlimited }},
	{Name: "cut_input_est", Field: func(t *Totals) *int64 { return &t.CutInputEst }},
	// Added by migration 4: latency segments, in record.SegmentNames order.
	{Name: "seg_gateway_queue_ns", Field: func(t *Totals) *int64 { return &t.SegmentNS[0] }},
	{Name: "seg_connect_ns", Field: func(t *Totals) *int64 { return &t.SegmentNS[1] }},
	{Name: "seg_engine_queue_ns", Field: func(t *Totals) *int64 { return &t.SegmentNS[2] }},
	{Name: "seg_prefill_ns", Field: func(t *Totals) *int64 { return &t.SegmentNS[3] }},
	{Name: "seg_decode_ns", Field: func(t *Totals) *int64 { return &t.SegmentNS[4] }},
	{Name: "seg_client_write_ns", Field: func(t *Totals) *int64 { return &t.SegmentNS[5] }},
	{Name: "seg_post_processing_ns", Field: func(t *Totals) *int64 { return &t.SegmentNS[6] }},
	{Name: "seg_unattributed_ns", Field: func(t *Totals) *int64 { return &t.SegmentNS[7] }},
	// Added by SQLite migration 12.
	{Name: "input_unknown", Field: func(t *Totals) *int64 { return &t.InputUnknown }},
}

// PromptMeasures are the Measures a PromptRow holds: what the waste
// report prices a duplicate prompt with.
var PromptMeasures = measuresNamed("requests", "input_tokens", "output_tokens", "cost_nanos")

// measuresNamed are the Measures called names, in that order.
func measuresNamed(names ...string) []Measure {
	out := make([]Measure, len(names))
	for i, n := range names {
		j := slices.IndexFunc(Measures, func(m Measure) bool { return m.Name == n })
		if j < 0 {
			panic("store: no measure " + n)
		}
		out[i] = Measures[j]
	}
	return out
}

// MeasureNames are the names of Measures, for validation and help texts.
func MeasureNames() []string {
	out := make([]string, len(Measures))
	for i, m := range Measures {
		out[i] = m.Name
	}
	return out
}

// Add adds o to t.
func (t *Totals) Add(o Totals) {
	t.Requests += o.Requests
	t.Errors += o.Errors
	t.Disconnects += o.Disconnects
	t.CacheHits += o.CacheHits
	t.Input += o.Input
	t.Cached += o.Cached
	t.Output += o.Output
	t.Reasoning += o.Reasoning
	t.CostNanos += o.CostNanos
	t.FinishLength += o.FinishLength
	t.UsageMissing += o.UsageMissing
	t.Retried += o.Retried
	t.RetriedInputEst += o.RetriedInputEst
	t.CutStreams += o.CutStreams
	t.CutOutput += o.CutOutput
	t.TokenizerInput += o.TokenizerInput
	t.TokenizerOutput += o.TokenizerOutput
	t.E2ESumNS += o.E2ESumNS
	t.TTFTSumNS += o.TTFTSumNS
	t.TTFTCount += o.TTFTCount
	t.PromptBytes += o.PromptBytes
	t.Reached += o.Reached
	t.CutOutputLimit += o.CutOutputLimit
	t.CutUnlimited += o.CutUnlimited
	t.CutInputEst += o.CutInputEst
	for i := range t.SegmentNS {
		t.SegmentNS[i] += o.SegmentNS[i]
	}
	t.InputUnknown += o.InputUnknown
}

// TotalsOf is what one Record adds to its rollups.
func TotalsOf(r *record.Record) Totals {
	u := r.Usage
	t := Totals{
		Requests: 1, Input: u.InputTokens, Cached: u.CachedInputTokens, Output: u.OutputTokens,
		Reasoning: u.ReasoningTokens, CostNanos: r.Cost.Nanos, E2ESumNS: int64(r.Derived.E2E),
		PromptBytes: r.PromptBytes, Retried: int64(r.Retries), RetriedInputEst: int64(r.Retries) * u.InputTokens,
	}
	if r.ErrorType != "" {
		t.Errors = 1
	}
	if r.UpstreamStatus != 0 {
		t.Reached = 1
	}
	if r.ClientDisconnect {
		t.Disconnects = 1
	}
	if r.CacheHit {
		t.CacheHits = 1
	}
	if r.FinishReason == "length" {
		t.FinishLength = 1
	}
	metered := record.MetersTokens(r.Endpoint)
	switch u.Source {
	case record.SourceEngine:
	case record.SourceTokenizer, record.SourceMerged:
		t.TokenizerInput, t.TokenizerOutput = u.InputTokens, u.OutputTokens
		if r.Upstream != "" && metered {
			t.UsageMissing = 1
		}
	default: // none, chunks
		if r.Upstream != "" && r.UpstreamStatus != 0 && metered {
			t.UsageMissing = 1
		}
	}
	if u.Source != record.SourceEngine && u.OutputTokens > 0 {
		t.CutStreams, t.CutOutput = 1, u.OutputTokens
		if r.MaxTokens != nil && *r.MaxTokens > 0 {
			t.CutOutputLimit = *r.MaxTokens
		} else {
			t.CutUnlimited = 1
		}
		if u.InputTokens == 0 {
			t.CutInputEst = r.PromptBytes / 4
		}
	}
	if r.Derived.TTFT != nil {
		t.TTFTSumNS, t.TTFTCount = int64(*r.Derived.TTFT), 1
	}
	if !u.InputKnown() && r.UpstreamStatus != 0 {
		t.InputUnknown = 1
	}
	for i, n := range record.SegmentNames {
		t.SegmentNS[i] = int64(r.Derived.Segments.Get(n))
	}
	return t
}

// ReportRow is one group of a report: Keys align with the query's GroupBy.
// Amounts in different currencies are never summed: each currency is its
// own row.
type ReportRow struct {
	Keys     []string
	Currency string
	Totals
}

// PromptRow is one prompt (by hash) seen more than once: the duplicate
// requests an exact-match cache could have answered. Of its Totals only
// PromptMeasures are set, the rest are zero: most prompts are new, so a
// prompt's row is written about once per request, and every measure it
// keeps costs every insert.
type PromptRow struct {
	PromptSHA256 string
	Model        string
	TemplateID   string
	Totals
}

// Event is something worth telling a person that is not a request: a
// quota warning, a tokenizer mismatch, an alert. Data is JSON.
type Event struct {
	At      time.Time
	Kind    string // e.g. quota_warning, quota_exceeded
	Subject string // e.g. user:alice
	Message string
	Data    string
}

// Retention says how long each kind of data is kept; zero keeps forever.
type Retention struct {
	Details  time.Duration // sampled token timelines (seed: 7–15 days)
	Ledger   time.Duration // per-request rows
	Minute   time.Duration // per-minute rollups
	Hour     time.Duration // per-hour rollups
	Day      time.Duration // per-day rollups and prompt statistics
	Events   time.Duration
	Captures time.Duration
	Engine   time.Duration // engine metric samples
}

// WindowDay is one closed local day of one series of the alerting
// windows: the merge of its hours, encoded like them.
type WindowDay struct {
	Start, End                         time.Time // the day's first instant and the next day's
	Model, BizLine, Upstream, Template string
	Data                               []byte
}

// WindowHour is one closed hour of one series of the alerting windows:
// the merge of that series' minutes of the hour, encoded like them.
type WindowHour struct {
	Hour                               time.Time // UTC, on the hour
	Model, BizLine, Upstream, Template string
	Data                               []byte
}

// WindowMinute is one minute of one series of the alerting windows
// (internal/window), its sums and sketches encoded by that package.
type WindowMinute struct {
	Minute                             time.Time // UTC, on the minute
	Model, BizLine, Upstream, Template string
	Data                               []byte
}

// EngineSample is one scrape of an engine's /metrics, normalised across
// engines. NaN means unknown (not reported, or no data in the interval).
type EngineSample struct {
	At                        time.Time
	Upstream, Model           string
	Up                        bool
	Running, Waiting          float64
	KVCacheUsage              float64 // 0–1
	PrefixCacheHitRate        float64 // 0–1 over the interval
	TTFTP50, TTFTP95, TTFTP99 float64 // seconds, over the interval
	PromptTokensPerS          float64
	GenerationTokensPerS      float64
}
