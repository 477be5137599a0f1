// Package record defines the Record: the health report tollgate writes for
// every request (one per upstream attempt). The gateway fills it while the
// request flows, Finish derives the figures defined in docs/metrics.md, and
// the store, the metrics and the CLI read it. It is the one thing that flows
// through the whole system, so it has no dependencies beyond the standard
// library.
package record

import (
	"encoding/json"
	"math"
	"time"
)

// Source says where a usage figure came from.
type Source string

const (
	SourceNone      Source = "none"      // nothing reported and nothing counted
	SourceEngine    Source = "engine"    // the engine's usage object: authoritative
	SourceTokenizer Source = "tokenizer" // counted with the served model's own tokenizer
	SourceMerged    Source = "merged"    // engine figures completed by the tokenizer
	// SourceChunks: the engine reported nothing and no tokenizer counted
	// (none for the model, not loaded in time, or the prompt could not be
	// rendered); output tokens are the content chunks streamed (exact on
	// vLLM and SGLang, which send one token per chunk), input tokens are
	// unknown: InputTokens holds 0 and InputKnown is false.
	SourceChunks Source = "chunks"
)

// Error types: how a request ended when it did not end well. The set is
// closed so that metrics labels stay bounded.
const (
	ErrNone              = ""
	ErrInvalidRequest    = "invalid_request"     // the client's request was malformed
	ErrBodyTimeout       = "body_timeout"        // the client's request body did not arrive within limits.body_timeout
	ErrAuth              = "authentication"      // missing or unknown API key
	ErrNoRoute           = "model_not_found"     // no upstream serves the model
	ErrRateLimited       = "rate_limited"        // refused at admission: a quota or rate limit
	ErrInputTooLong      = "input_too_long"      // refused at admission: over max_input_tokens
	ErrQueueTimeout      = "queue_timeout"       // waited too long in the gateway queue for an upstream slot
	ErrConnect           = "upstream_connect"    // could not connect to the upstream
	ErrConnectTimeout    = "connect_timeout"     // connecting took longer than allowed
	ErrFirstTokenTimeout = "first_token_timeout" // no first byte/token in time
	ErrIdleTimeout       = "idle_timeout"        // the stream stalled between chunks
	ErrTotalTimeout      = "total_timeout"       // the whole request took too long
	ErrUpstreamStatus    = "upstream_error"      // the upstream answered 4xx/5xx
	ErrUpstreamReset     = "upstream_reset"      // the upstream broke the stream
	ErrMalformed         = "malformed_response"  // the upstream sent something unparseable
	ErrBufferFull        = "buffer_full"         // a non-streamed answer found limits.max_buffered_bytes held by others
	ErrClientDisconnect  = "client_disconnect"   // the client left before the end
	ErrShutdown          = "shutdown"            // the gateway stopped before the end
	ErrInternal          = "internal"
)

// ErrUnsupported: the upstreams of the model do not speak the request's
// API (an Anthropic upstream asked for /v1/responses); tollgate does not
// translate between protocols.
const ErrUnsupported = "unsupported_endpoint"

// StatusClientClosed is recorded when the client went away before the
// response ended (nginx's convention; never sent on the wire).
const StatusClientClosed = 499

// Usage is the token count of one request. Invariants: Cached +
// CacheWrite ≤ Input, CacheWrite1h ≤ CacheWrite, Reasoning ≤ Output, and
// Total() = Input + Output: cache reads and writes are parts of Input,
// whatever the engine's own convention (Anthropic's input_tokens leaves
// them out; internal/usage adds them back).
type Usage struct {
	InputTokens       int64 `json:"input_tokens"`
	CachedInputTokens int64 `json:"cached_input_tokens"` // read from the prompt cache
	// CacheWriteTokens were written to the provider's prompt cache
	// (Anthropic's cache_creation_input_tokens, OpenAI's
	// cache_write_tokens), priced apart from plain input by some.
	CacheWriteTokens   int64 `json:"cache_write_tokens,omitempty"`
	CacheWrite1hTokens int64 `json:"cache_write_1h_tokens,omitempty"` // the part with a 1-hour lifetime (Anthropic), priced higher
	OutputTokens       int64 `json:"output_tokens"`
	ReasoningTokens    int64 `json:"reasoning_tokens"`
	// ToolCalls is the number of tool calls the model made in its answer,
	// those run by the client and those the provider ran itself (web
	// search, code interpreter): each is a step of an agent's loop.
	ToolCalls int    `json:"tool_calls,omitempty"`
	Source    Source `json:"source"`
}

// Total is input plus output tokens.
func (u Usage) Total() int64 { return u.InputTokens + u.OutputTokens }

// InputKnown reports whether InputTokens is a count: the engine reported
// it or the tokenizer counted it. Otherwise (sources chunks and none) the
// input is unknown and InputTokens holds 0, which readers show as unknown,
// never as a count of 0.
func (u Usage) InputKnown() bool {
	switch u.Source {
	case SourceEngine, SourceTokenizer, SourceMerged:
		return true
	}
	return false
}

// Cost is what a request cost, rated when it ended from the price table in
// force at its arrival. Amounts are integer nanos (1e-9) of Currency, so
// sums over months are exact.
type Cost struct {
	Nanos        int64
	Currency     string
	PriceVersion string // the price entry used; "" when no price applied
}

// Marks are the timing marks of one request as monotonic offsets from
// arrival; zero means "not reached". Wall-clock time of a mark is
// Timing.Arrival plus its offset, which keeps durations immune to clock
// steps while still aligning with other services' logs.
type Marks struct {
	AuthDone           time.Duration // identity resolved
	Admitted           time.Duration // left the gateway queue
	UpstreamSent       time.Duration // request written to the upstream
	UpstreamHeaders    time.Duration // upstream response headers received
	FirstUpstreamToken time.Duration // first content token read from the upstream
	FirstClientToken   time.Duration // first content token flushed to the client
	LastToken          time.Duration // last content token flushed to the client
	LastUpstreamToken  time.Duration // last content token read from the upstream
	End                time.Duration // response finished (or abandoned)
}

// Segments split a request's E2E into where the time went (seed 000 §4.1,
// seed 001 §4.1). They sum to E2E; what no signal explains is
// Unattributed, never hidden. See docs/metrics.md for each definition.
type Segments struct {
	Connect        time.Duration // getting a connection to the upstream, and network time the engine did not see
	GatewayQueue   time.Duration // arrival → request handed to the upstream: auth, reading the body, admission
	EngineQueue    time.Duration // waiting in the engine's scheduler
	Prefill        time.Duration // processing the prompt
	Decode         time.Duration // generating tokens after the first
	PostProcessing time.Duration // after the last token until the response ended, less client writes
	ClientWrite    time.Duration // blocked writing to a slow client
	Unattributed   time.Duration
	// Source says, per segment, where it came from: "engine:<signal>",
	// "gateway" (measured here) or "inferred:<how>".
	Source map[string]string
}

// Sum is the total of the segments.
func (s Segments) Sum() time.Duration {
	return s.Connect + s.GatewayQueue + s.EngineQueue + s.Prefill + s.Decode + s.PostProcessing + s.ClientWrite + s.Unattributed
}

// EngineTiming is what an engine reported about one request, in its own
// words: a vLLM span, vLLM's per-request metrics, llama.cpp's timings, TGI's
// headers. Zero means not reported.
type EngineTiming struct {
	Signal                                       string        // e.g. vllm-span, vllm-metrics, llamacpp-timings, tgi-headers
	Queue                                        time.Duration // time in the engine's queue
	TTFT                                         time.Duration // engine-side TTFT (from arrival at the engine)
	Prefill                                      time.Duration
	Decode                                       time.Duration
	Inference                                    time.Duration // prefill + decode, when only that is known
	E2E                                          time.Duration // engine-side end to end
	PromptTokens, CompletionTokens, CachedTokens int64
}

// Engine timing fields, for Reports.
const (
	EngineQueue = "queue"
	EngineE2E   = "e2e"
)

// Reports says whether the engine's signal carries field at all, so a
// figure it never reports is shown as absent rather than as zero:
// llama.cpp's timings have no queue and no end-to-end time, TGI's headers
// no end-to-end time. Other fields, and other signals, are reported.
func (e *EngineTiming) Reports(field string) bool {
	switch e.Signal {
	case "llamacpp-timings":
		return field != EngineQueue && field != EngineE2E
	case "tgi-headers":
		return field != EngineE2E
	}
	return true
}

// TimelinePoint is one sampled point of the token timeline: the index of a
// content chunk (0-based) and when it was flushed to the client.
type TimelinePoint struct {
	Index  int
	Offset time.Duration
}

// MarshalJSON writes the point as [index, offset_ms].
func (p TimelinePoint) MarshalJSON() ([]byte, error) {
	return json.Marshal([2]float64{float64(p.Index), ms(p.Offset)})
}

// UnmarshalJSON reads [index, offset_ms].
func (p *TimelinePoint) UnmarshalJSON(b []byte) error {
	var a [2]float64
	if err := json.Unmarshal(b, &a); err != nil {
		return err
	}
	p.Index, p.Offset = int(a[0]), fromMS(a[1])
	return nil
}

// Record is the health report of one upstream attempt of one request.
type Record struct {
	// Identity.
	RequestID        string            // unique per attempt, generated by tollgate: the ledger's key
	LogicalRequestID string            // shared by all attempts, generated by tollgate
	ClientRequestID  string            // the client's own X-Request-Id, if it sent a valid one; never a key
	Attempt          int               // 1-based
	TraceID          string            // W3C trace id (32 hex)
	SpanID           string            // the gateway's span, sent upstream as parent
	ParentSpanID     string            // the client's span from its traceparent, the gateway span's parent; "" when it sent none
	UserID           string            //
	KeyID            string            // short hash of the API key, never the key
	Team             string            //
	BizLine          string            //
	SessionID        string            //
	TemplateID       string            //
	Tags             map[string]string // feature/app tags from the tags header
	Endpoint         string            // chat | completions | embeddings | responses | messages | count_tokens | responses_item
	Model            string            // requested
	ServedModel      string            // as reported by the upstream
	Upstream         string            // upstream name from config
	Engine           string            // the upstream's engine kind
	EndUser          string            // the caller's end user from the body (user, safety_identifier, metadata.user_id), bounded; never a metric label

	// Input features (never the text).
	Stream       bool
	IncludeUsage bool // the client asked for the usage chunk itself
	MaxTokens    *int64
	Temperature  *float64
	TopP         *float64
	PromptSHA256 string // of the prompt part of the body (messages / prompt / input)
	PromptBytes  int64
	// SystemSHA256 is of the system prompt alone (chat's system and
	// developer messages, Responses' instructions, Messages' system);
	// SystemTokens its length in tokens (docs/metrics.md). Never the text.
	SystemSHA256 string
	SystemTokens int64
	Messages     int
	RequestBytes int64

	// Timing.
	Arrival  time.Time // wall clock at arrival
	Marks    Marks
	Timeline []TimelinePoint // first, every 10th, last content chunk

	// Result.
	Status           int // outcome status; 499 when the client left
	UpstreamStatus   int // what the upstream answered, 0 if nothing
	ErrorType        string
	ErrorMessage     string // gateway-written, never upstream text that could echo a prompt
	FinishReason     string
	NativeFinish     string // the API's own ending when FinishReason translates it: Anthropic's stop_reason, Responses' status[/reason]
	ResponseID       string // the engine's id of its answer (e.g. chatcmpl-…), as it sent it
	ResponseBytes    int64
	ContentChunks    int
	ClientDisconnect bool
	Retries          int // attempts made before this one
	Sampled          bool

	Usage Usage
	Cost  Cost

	// CacheHit: answered from tollgate's own response cache, without the
	// engine (zero engine cost). A prefix-cache hit inside the engine is
	// CachedInputTokens > 0 instead.
	CacheHit bool

	// FirstChunkBytes is the content length of the first content chunk,
	// kept to estimate first-packet merging.
	FirstChunkBytes int
	ContentBytes    int64

	// ConnectWait is the time to get a connection (dial, TLS, or a free
	// pooled connection); ClientWrite the time blocked writing to the client.
	ConnectWait     time.Duration
	ClientWrite     time.Duration
	ClientWriteTail time.Duration // the part of ClientWrite after the last upstream token

	// EngineTiming is what the engine said about its own timing, if anything.
	EngineTiming *EngineTiming
	// EngineTimingDue, when the engine's own timing is still expected
	// after the Record is finished (vLLM exports its span in batches,
	// seconds after the response), is the offset from Arrival until which
	// the gateway waits for it: End + otlp.join_window. Zero when none is
	// expected. See EngineTimingPending.
	EngineTimingDue time.Duration

	// Derived by Finish.
	Derived Derived
}

// Derived holds the figures computed from marks and usage, with the exact
// definitions of docs/metrics.md. A nil pointer means "not defined for this
// request" (e.g. TPOT with fewer than two output tokens).
type Derived struct {
	TTFT             *time.Duration // user-side: first content token flushed − arrival
	UpstreamTTFT     *time.Duration // first upstream content token − upstream request sent
	Queue            *time.Duration // user-side TTFT − upstream TTFT
	E2E              time.Duration  // end − arrival
	TPOT             *time.Duration // (E2E − TTFT)/(output − 1), output > 1
	DecodeRate       *float64       // output / (last − first token), tokens/s
	FirstPacketMerge bool           // the first chunk carried several tokens
	Segments         Segments       // E2E split by where the time went
}

// Finish computes the derived figures. Call it once, after the last mark.
func (r *Record) Finish() {
	m := r.Marks
	d := Derived{E2E: m.End}
	if m.FirstClientToken > 0 {
		t := m.FirstClientToken
		d.TTFT = &t
	}
	if m.FirstUpstreamToken > 0 && m.UpstreamSent > 0 {
		t := m.FirstUpstreamToken - m.UpstreamSent
		d.UpstreamTTFT = &t
		if d.TTFT != nil {
			q := *d.TTFT - t
			d.Queue = &q
		}
	}
	n := r.Usage.OutputTokens
	switch {
	case r.Stream && d.TTFT != nil && n > 1:
		t := (d.E2E - *d.TTFT) / time.Duration(n-1)
		d.TPOT = &t
	case !r.Stream && n > 1 && r.EngineTiming != nil && r.EngineTiming.Decode > 0:
		// A non-streamed answer shows no tokens as they come: its TPOT is
		// the engine's own decode time over the tokens after the first.
		t := r.EngineTiming.Decode / time.Duration(n-1)
		d.TPOT = &t
	}
	if r.Stream && n > 0 && m.LastToken > m.FirstClientToken && m.FirstClientToken > 0 {
		rate := float64(n) / (m.LastToken - m.FirstClientToken).Seconds()
		d.DecodeRate = &rate
	}
	// A chunk normally carries one token. When the engine reported more
	// tokens than chunks and the first chunk holds at least twice the
	// average bytes per token, the first packet was merged (seed 001 §5.3).
	if r.Stream && n > int64(r.ContentChunks) && r.ContentChunks > 0 && r.ContentBytes > 0 {
		avg := float64(r.ContentBytes) / float64(n)
		d.FirstPacketMerge = float64(r.FirstChunkBytes) >= 2*avg && r.FirstChunkBytes > 1
	}
	d.Segments = r.segments()
	r.Derived = d
}

// EngineTimingPending reports whether, at now, the engine's own timing
// may still arrive: it is expected (EngineTimingDue), has not arrived, and
// the wait is not over. Until then the segments the engine would split
// (engine queue, prefill) are inferred, and readers say so.
func (r *Record) EngineTimingPending(now time.Time) bool {
	return r.EngineTiming == nil && r.EngineTimingDue > 0 && now.Before(r.Arrival.Add(r.EngineTimingDue))
}

// OK reports whether the request ended successfully.
func (r *Record) OK() bool { return r.ErrorType == ErrNone && r.Status >= 200 && r.Status < 300 }

// WallTime returns the wall-clock time of a mark offset.
func (r *Record) WallTime(offset time.Duration) time.Time { return r.Arrival.Add(offset) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// fromMS rounds to the nanosecond, so ns → ms → ns is exact for any
// duration a request can have.
func fromMS(f float64) time.Duration { return time.Duration(math.Round(f * float64(time.Millisecond))) }
