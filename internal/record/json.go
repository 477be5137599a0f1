package record

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The JSON form is an interface other tools script against (README,
// "tollgate requests --json"): snake_case, durations in milliseconds,
// arrival in RFC 3339 with nanoseconds. Keep it stable; add, don't rename.

type jsonRecord struct {
	RequestID        string            `json:"request_id"`
	LogicalRequestID string            `json:"logical_request_id"`
	ClientRequestID  string            `json:"client_request_id,omitempty"`
	Attempt          int               `json:"attempt"`
	TraceID          string            `json:"trace_id"`
	SpanID           string            `json:"span_id,omitempty"`
	ParentSpanID     string            `json:"parent_span_id,omitempty"`
	UserID           string            `json:"user_id"`
	KeyID            string            `json:"key_id,omitempty"`
	Team             string            `json:"team,omitempty"`
	BizLine          string            `json:"biz_line"`
	SessionID        string            `json:"session_id,omitempty"`
	TemplateID       string            `json:"template_id,omitempty"`
	Tags             map[string]string `json:"tags,omitempty"`
	Endpoint         string            `json:"endpoint"`
	EndUser          string            `json:"end_user,omitempty"`
	Model            string            `json:"model"`
	ServedModel      string            `json:"served_model,omitempty"`
	Upstream         string            `json:"upstream"`
	Engine           string            `json:"engine,omitempty"`

	Stream       bool     `json:"stream"`
	IncludeUsage bool     `json:"include_usage,omitempty"`
	MaxTokens    *int64   `json:"max_tokens,omitempty"`
	Temperature  *float64 `json:"temperature,omitempty"`
	TopP         *float64 `json:"top_p,omitempty"`
	PromptSHA256 string   `json:"prompt_sha256,omitempty"`
	PromptBytes  int64    `json:"prompt_bytes"`
	SystemSHA256 string   `json:"system_sha256,omitempty"`
	SystemTokens int64    `json:"system_tokens,omitempty"`
	Messages     int      `json:"messages,omitempty"`
	RequestBytes int64    `json:"request_bytes"`

	Status           int    `json:"status"`
	UpstreamStatus   int    `json:"upstream_status,omitempty"`
	ErrorType        string `json:"error_type"`
	ErrorMessage     string `json:"error_message,omitempty"`
	FinishReason     string `json:"finish_reason"`
	NativeFinish     string `json:"native_finish_reason,omitempty"`
	ResponseID       string `json:"response_id,omitempty"`
	ResponseBytes    int64  `json:"response_bytes"`
	ContentChunks    int    `json:"content_chunks,omitempty"`
	FirstChunkBytes  int    `json:"first_chunk_bytes,omitempty"`
	ContentBytes     int64  `json:"content_bytes,omitempty"`
	ClientDisconnect bool   `json:"client_disconnect,omitempty"`
	Retries          int    `json:"retries"`
	CacheHit         bool   `json:"cache_hit"`
	PrefixCacheHit   bool   `json:"prefix_cache_hit"`
	Sampled          bool   `json:"sampled"`

	Usage          jsonUsage          `json:"usage"`
	Cost           jsonCost           `json:"cost"`
	Segments       map[string]float64 `json:"segments"`
	SegmentsSource map[string]string  `json:"segments_source,omitempty"`
	EngineTiming   *jsonEngine        `json:"engine_timing,omitempty"`
	EngineDue      float64            `json:"engine_timing_due_ms,omitempty"`
	ConnectWait    float64            `json:"connect_wait_ms,omitempty"`
	ClientWrite    float64            `json:"client_write_ms,omitempty"`
	ClientTail     float64            `json:"client_write_tail_ms,omitempty"`
	Timing         jsonTiming         `json:"timing"`
	TokenTimeline  []TimelinePoint    `json:"token_timeline,omitempty"`
}

type jsonEngine struct {
	Signal           string  `json:"signal"`
	Queue            float64 `json:"queue_ms,omitempty"`
	TTFT             float64 `json:"ttft_ms,omitempty"`
	Prefill          float64 `json:"prefill_ms,omitempty"`
	Decode           float64 `json:"decode_ms,omitempty"`
	Inference        float64 `json:"inference_ms,omitempty"`
	E2E              float64 `json:"e2e_ms,omitempty"`
	PromptTokens     int64   `json:"prompt_tokens,omitempty"`
	CompletionTokens int64   `json:"completion_tokens,omitempty"`
	CachedTokens     int64   `json:"cached_tokens,omitempty"`
}

func engineJSON(e *EngineTiming) *jsonEngine {
	if e == nil {
		return nil
	}
	// omitempty leaves out what the signal does not report (Reports):
	// those fields are always zero.
	return &jsonEngine{e.Signal, ms(e.Queue), ms(e.TTFT), ms(e.Prefill), ms(e.Decode), ms(e.Inference), ms(e.E2E), e.PromptTokens, e.CompletionTokens, e.CachedTokens}
}

func (j *jsonEngine) timing() *EngineTiming {
	if j == nil {
		return nil
	}
	return &EngineTiming{j.Signal, fromMS(j.Queue), fromMS(j.TTFT), fromMS(j.Prefill), fromMS(j.Decode), fromMS(j.Inference), fromMS(j.E2E), j.PromptTokens, j.CompletionTokens, j.CachedTokens}
}

// jsonUsage adds input_unknown (see Usage.InputKnown), so that a script
// summing input_tokens can tell an unknown input from a count of 0. It is
// derived, never read back.
type jsonUsage struct {
	Usage
	InputUnknown bool `json:"input_unknown,omitempty"`
}

type jsonCost struct {
	Nanos        int64  `json:"nanos"`
	Amount       string `json:"amount"`
	Currency     string `json:"currency"`
	PriceVersion string `json:"price_version"`
}

// Amount renders nanos as a decimal amount with nine places, trailing
// zeros trimmed ("0.00123"); exact, with no float on the way.
func (c Cost) Amount() string {
	n := c.Nanos
	sign := ""
	if n < 0 {
		sign, n = "-", -n
	}
	whole, frac := n/1e9, n%1e9
	s := strconv.FormatInt(whole, 10)
	if frac == 0 {
		return sign + s
	}
	f := strings.TrimRight(fmt.Sprintf("%09d", frac), "0")
	return sign + s + "." + f
}

type jsonTiming struct {
	Arrival          string    `json:"arrival"`
	TTFT             *float64  `json:"ttft_ms"`
	UpstreamTTFT     *float64  `json:"upstream_ttft_ms"`
	Queue            *float64  `json:"queue_ms"`
	E2E              float64   `json:"e2e_ms"`
	TPOT             *float64  `json:"tpot_ms"`
	DecodeRate       *float64  `json:"decode_tokens_per_s"`
	FirstPacketMerge bool      `json:"first_packet_merge"`
	Marks            jsonMarks `json:"marks_ms"`
}

type jsonMarks struct {
	AuthDone           *float64 `json:"auth_done,omitempty"`
	Admitted           *float64 `json:"admitted,omitempty"`
	UpstreamSent       *float64 `json:"upstream_sent,omitempty"`
	UpstreamHeaders    *float64 `json:"upstream_headers,omitempty"`
	FirstUpstreamToken *float64 `json:"first_upstream_token,omitempty"`
	FirstClientToken   *float64 `json:"first_client_token,omitempty"`
	LastToken          *float64 `json:"last_token,omitempty"`
	LastUpstreamToken  *float64 `json:"last_upstream_token,omitempty"`
	End                *float64 `json:"end,omitempty"`
}

func optMS(d time.Duration) *float64 {
	if d == 0 {
		return nil
	}
	f := ms(d)
	return &f
}

func optDurMS(d *time.Duration) *float64 {
	if d == nil {
		return nil
	}
	f := ms(*d)
	return &f
}

func fromOptMS(f *float64) time.Duration {
	if f == nil {
		return 0
	}
	return fromMS(*f)
}

// segmentsJSON is every segment in ms, zeros included, so a reader can
// sum them without knowing which are absent.
func segmentsJSON(s Segments) map[string]float64 {
	m := make(map[string]float64, len(SegmentNames))
	for _, n := range SegmentNames {
		m[n] = ms(s.Get(n))
	}
	return m
}

// MarshalJSON writes the stable JSON form of the record.
func (r *Record) MarshalJSON() ([]byte, error) {
	d := r.Derived
	j := jsonRecord{
		RequestID: r.RequestID, LogicalRequestID: r.LogicalRequestID, ClientRequestID: r.ClientRequestID, Attempt: r.Attempt,
		TraceID: r.TraceID, SpanID: r.SpanID, ParentSpanID: r.ParentSpanID, UserID: r.UserID, KeyID: r.KeyID, Team: r.Team,
		BizLine: r.BizLine, SessionID: r.SessionID, TemplateID: r.TemplateID, Tags: r.Tags,
		Endpoint: r.Endpoint, EndUser: r.EndUser, Model: r.Model, ServedModel: r.ServedModel, Upstream: r.Upstream, Engine: r.Engine,
		Stream: r.Stream, IncludeUsage: r.IncludeUsage, MaxTokens: r.MaxTokens, Temperature: r.Temperature,
		TopP: r.TopP, PromptSHA256: r.PromptSHA256, PromptBytes: r.PromptBytes, SystemSHA256: r.SystemSHA256, SystemTokens: r.SystemTokens, Messages: r.Messages,
		RequestBytes: r.RequestBytes,
		Status:       r.Status, UpstreamStatus: r.UpstreamStatus, ErrorType: r.ErrorType, ErrorMessage: r.ErrorMessage,
		FinishReason: r.FinishReason, NativeFinish: r.NativeFinish, ResponseID: r.ResponseID, ResponseBytes: r.ResponseBytes, ContentChunks: r.ContentChunks,
		FirstChunkBytes: r.FirstChunkBytes, ContentBytes: r.ContentBytes,
		ClientDisconnect: r.ClientDisconnect, Retries: r.Retries, CacheHit: r.CacheHit,
		PrefixCacheHit: r.Usage.CachedInputTokens > 0,
		Sampled:        r.Sampled, Usage: jsonUsage{Usage: r.Usage}, TokenTimeline: r.Timeline,
		Cost:     jsonCost{Nanos: r.Cost.Nanos, Amount: r.Cost.Amount(), Currency: r.Cost.Currency, PriceVersion: r.Cost.PriceVersion},
		Segments: segmentsJSON(d.Segments), SegmentsSource: d.Segments.Source, EngineTiming: engineJSON(r.EngineTiming),
		ConnectWait: ms(r.ConnectWait), ClientWrite: ms(r.ClientWrite), ClientTail: ms(r.ClientWriteTail),
		EngineDue: ms(r.EngineTimingDue),
		Timing: jsonTiming{
			Arrival:      r.Arrival.UTC().Format(time.RFC3339Nano),
			TTFT:         optDurMS(d.TTFT),
			UpstreamTTFT: optDurMS(d.UpstreamTTFT),
			Queue:        optDurMS(d.Queue),
			E2E:          ms(d.E2E),
			TPOT:         optDurMS(d.TPOT),
			DecodeRate:   d.DecodeRate, FirstPacketMerge: d.FirstPacketMerge,
			Marks: jsonMarks{
				AuthDone: optMS(r.Marks.AuthDone), Admitted: optMS(r.Marks.Admitted),
				UpstreamSent: optMS(r.Marks.UpstreamSent), UpstreamHeaders: optMS(r.Marks.UpstreamHeaders),
				FirstUpstreamToken: optMS(r.Marks.FirstUpstreamToken), FirstClientToken: optMS(r.Marks.FirstClientToken),
				LastToken: optMS(r.Marks.LastToken), LastUpstreamToken: optMS(r.Marks.LastUpstreamToken), End: optMS(r.Marks.End),
			},
		},
	}
	if j.Usage.Source == "" {
		j.Usage.Source = SourceNone
	}
	j.Usage.InputUnknown = !j.Usage.InputKnown()
	return json.Marshal(j)
}

// UnmarshalJSON reads the JSON form back; derived figures are recomputed
// from the marks, so a stored record and a live one agree by construction.
func (r *Record) UnmarshalJSON(b []byte) error {
	var j jsonRecord
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	arrival, err := time.Parse(time.RFC3339Nano, j.Timing.Arrival)
	if err != nil && j.Timing.Arrival != "" {
		return err
	}
	m := j.Timing.Marks
	*r = Record{
		RequestID: j.RequestID, LogicalRequestID: j.LogicalRequestID, ClientRequestID: j.ClientRequestID, Attempt: j.Attempt,
		TraceID: j.TraceID, SpanID: j.SpanID, ParentSpanID: j.ParentSpanID, UserID: j.UserID, KeyID: j.KeyID, Team: j.Team,
		BizLine: j.BizLine, SessionID: j.SessionID, TemplateID: j.TemplateID, Tags: j.Tags,
		Endpoint: j.Endpoint, EndUser: j.EndUser, Model: j.Model, ServedModel: j.ServedModel, Upstream: j.Upstream, Engine: j.Engine,
		Stream: j.Stream, IncludeUsage: j.IncludeUsage, MaxTokens: j.MaxTokens, Temperature: j.Temperature,
		TopP: j.TopP, PromptSHA256: j.PromptSHA256, PromptBytes: j.PromptBytes, SystemSHA256: j.SystemSHA256, SystemTokens: j.SystemTokens, Messages: j.Messages,
		RequestBytes: j.RequestBytes,
		Status:       j.Status, UpstreamStatus: j.UpstreamStatus, ErrorType: j.ErrorType, ErrorMessage: j.ErrorMessage,
		FinishReason: j.FinishReason, NativeFinish: j.NativeFinish, ResponseID: j.ResponseID, ResponseBytes: j.ResponseBytes, ContentChunks: j.ContentChunks,
		FirstChunkBytes: j.FirstChunkBytes, ContentBytes: j.ContentBytes,
		ClientDisconnect: j.ClientDisconnect, Retries: j.Retries, Sampled: j.Sampled, CacheHit: j.CacheHit,
		Usage: j.Usage.Usage, Timeline: j.TokenTimeline,
		Cost:    Cost{Nanos: j.Cost.Nanos, Currency: j.Cost.Currency, PriceVersion: j.Cost.PriceVersion},
		Arrival: arrival,
		// Read back too, since they change the segments Finish derives:
		// a record exported and imported must attribute its time the same.
		ConnectWait: fromMS(j.ConnectWait), ClientWrite: fromMS(j.ClientWrite), ClientWriteTail: fromMS(j.ClientTail),
		EngineTiming: j.EngineTiming.timing(), EngineTimingDue: fromMS(j.EngineDue),
		Marks: Marks{
			AuthDone: fromOptMS(m.AuthDone), Admitted: fromOptMS(m.Admitted),
			UpstreamSent: fromOptMS(m.UpstreamSent), UpstreamHeaders: fromOptMS(m.UpstreamHeaders),
			FirstUpstreamToken: fromOptMS(m.FirstUpstreamToken), FirstClientToken: fromOptMS(m.FirstClientToken),
			LastToken: fromOptMS(m.LastToken), LastUpstreamToken: fromOptMS(m.LastUpstreamToken), End: fromOptMS(m.End),
		},
	}
	r.Finish()
	return nil
}
