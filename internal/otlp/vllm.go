package otlp

import (
	"encoding/json"
	"math"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// VLLMSpanName is the name of vLLM's per-request span.
const VLLMSpanName = "llm_request"

// Signals, as recorded in record.EngineTiming.Signal.
const (
	SignalVLLMSpan    = "vllm-span"
	SignalVLLMMetrics = "vllm-metrics"
)

// vLLM's span attribute names (vllm/tracing/utils.py, SpanAttributes).
const (
	attrQueue            = "gen_ai.latency.time_in_queue"
	attrTTFT             = "gen_ai.latency.time_to_first_token"
	attrPrefill          = "gen_ai.latency.time_in_model_prefill"
	attrDecode           = "gen_ai.latency.time_in_model_decode"
	attrInference        = "gen_ai.latency.time_in_model_inference"
	attrE2E              = "gen_ai.latency.e2e"
	attrPromptTokens     = "gen_ai.usage.prompt_tokens"
	attrCompletionTokens = "gen_ai.usage.completion_tokens"
	attrCachedTokens     = "gen_ai.usage.cached_tokens"
	attrRequestID        = "gen_ai.request.id"
	attrFinishReasons    = "gen_ai.response.finish_reasons"
)

// Span is an engine's span reduced to what the gateway joins: the ids that
// tie it to a Record and the timing it reports. Ids are lowercase hex, ""
// when absent.
type Span struct {
	TraceID, SpanID, ParentSpanID string
	Name                          string
	RequestID                     string // gen_ai.request.id: the engine's request id
	Timing                        record.EngineTiming
	FinishReasons                 []string
	Received                      time.Time // when the receiver decoded it
}

// SpanFromVLLM reads a vLLM llm_request span. Attributes that are missing,
// of an unexpected type or out of range (negative, NaN, absurdly large)
// are left at zero, "not reported", rather than failing the span: one odd
// attribute should not cost the others.
func SpanFromVLLM(s ptrace.Span, received time.Time) Span {
	a := s.Attributes()
	out := Span{
		TraceID:       traceID(s.TraceID()),
		SpanID:        spanID(s.SpanID()),
		ParentSpanID:  spanID(s.ParentSpanID()),
		Name:          s.Name(),
		FinishReasons: finishReasons(a),
		Received:      received,
		Timing: record.EngineTiming{
			Signal:           SignalVLLMSpan,
			Queue:            secondsAttr(a, attrQueue),
			TTFT:             secondsAttr(a, attrTTFT),
			Prefill:          secondsAttr(a, attrPrefill),
			Decode:           secondsAttr(a, attrDecode),
			Inference:        secondsAttr(a, attrInference),
			E2E:              secondsAttr(a, attrE2E),
			PromptTokens:     countAttr(a, attrPromptTokens),
			CompletionTokens: countAttr(a, attrCompletionTokens),
			CachedTokens:     countAttr(a, attrCachedTokens),
		},
	}
	if v, ok := a.Get(attrRequestID); ok && v.Type() == pcommon.ValueTypeStr {
		out.RequestID = v.Str()
	}
	return out
}

func traceID(id pcommon.TraceID) string {
	if id.IsEmpty() {
		return ""
	}
	return id.String()
}

func spanID(id pcommon.SpanID) string {
	if id.IsEmpty() {
		return ""
	}
	return id.String()
}

// maxSeconds bounds a reported duration: past it (about 97 days) the value
// is garbage, and time.Duration would overflow not far beyond.
const maxSeconds = 1 << 23

// duration converts v units of unit, rounding to the nanosecond so that a
// duration sent as Duration.Seconds() (or milliseconds) comes back exactly.
func duration(v float64, unit time.Duration) (time.Duration, bool) {
	ns := v * float64(unit)
	// The negated form also rejects NaN.
	if !(ns >= 0 && ns <= maxSeconds*1e9) {
		return 0, false
	}
	return time.Duration(math.Round(ns)), true
}

func secondsAttr(a pcommon.Map, key string) time.Duration {
	v, ok := a.Get(key)
	if !ok {
		return 0
	}
	var f float64
	switch v.Type() {
	case pcommon.ValueTypeDouble:
		f = v.Double()
	case pcommon.ValueTypeInt:
		f = float64(v.Int())
	default:
		return 0
	}
	d, _ := duration(f, time.Second)
	return d
}

func countAttr(a pcommon.Map, key string) int64 {
	v, ok := a.Get(key)
	if !ok {
		return 0
	}
	switch v.Type() {
	case pcommon.ValueTypeInt:
		return max(0, v.Int())
	case pcommon.ValueTypeDouble:
		// Python ints stay ints on the wire; a double is tolerated when
		// it is a whole, sane number.
		if f := v.Double(); f >= 0 && f <= 1<<53 && f == math.Trunc(f) {
			return int64(f)
		}
	}
	return 0
}

// finishReasons reads vLLM's JSON-encoded string, or the semantic
// conventions' string array that other engines send under the same name.
func finishReasons(a pcommon.Map) []string {
	v, ok := a.Get(attrFinishReasons)
	if !ok {
		return nil
	}
	switch v.Type() {
	case pcommon.ValueTypeStr:
		var rs []string
		if json.Unmarshal([]byte(v.Str()), &rs) != nil || len(rs) == 0 {
			return nil
		}
		return rs
	case pcommon.ValueTypeSlice:
		var rs []string
		for i, s := 0, v.Slice(); i < s.Len(); i++ {
			if e := s.At(i); e.Type() == pcommon.ValueTypeStr {
				rs = append(rs, e.Str())
			}
		}
		return rs
	}
	return nil
}

// perRequestMetrics is vLLM's PerRequestTimingMetrics; every field may be
// null or absent.
type perRequestMetrics struct {
	TimeToFirstTokenMs *float64 `json:"time_to_first_token_ms"`
	GenerationTimeMs   *float64 `json:"generation_time_ms"`
	QueueTimeMs        *float64 `json:"queue_time_ms"`
	MeanITLMs          *float64 `json:"mean_itl_ms"`
	TokensPerSecond    *float64 `json:"tokens_per_second"`
}

// ParsePerRequestMetrics reads the "metrics" object vLLM adds to a response
// with --enable-per-request-metrics (see the package doc for where it
// appears). It reports false when raw is absent, null, not an object, or
// has none of the timing fields.
//
// vLLM's time_to_first_token_ms runs from scheduling, not from arrival, so
// it is the span's prefill interval and becomes Prefill. TTFT is set to
// Queue + Prefill, which is from entering the engine's queue: unlike the
// span's TTFT it leaves out the API server's own work (tokenizing, chat
// template) before that. Inference is Prefill + Decode, as in the span.
// Token counts are not in the object; the usage object has them.
func ParsePerRequestMetrics(raw json.RawMessage) (record.EngineTiming, bool) {
	var m perRequestMetrics
	if len(raw) == 0 || json.Unmarshal(raw, &m) != nil {
		return record.EngineTiming{}, false
	}
	queue, hasQueue := millis(m.QueueTimeMs)
	prefill, hasPrefill := millis(m.TimeToFirstTokenMs)
	decode, hasDecode := millis(m.GenerationTimeMs)
	if !hasQueue && !hasPrefill && !hasDecode {
		return record.EngineTiming{}, false
	}
	t := record.EngineTiming{Signal: SignalVLLMMetrics, Queue: queue, Prefill: prefill, Decode: decode}
	if hasQueue && hasPrefill {
		t.TTFT = queue + prefill
	}
	if hasPrefill && hasDecode {
		t.Inference = prefill + decode
	}
	return t, true
}

func millis(p *float64) (time.Duration, bool) {
	if p == nil {
		return 0, false
	}
	return duration(*p, time.Millisecond)
}
