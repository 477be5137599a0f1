package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/tollgate-dev/tollgate/internal/otlp"
	"github.com/tollgate-dev/tollgate/internal/record"
)

// Engines report their own timing in different places; each adapter turns
// one dialect into a record.EngineTiming. A span from vLLM arrives apart,
// through the OTLP receiver, and is joined by trace id.

var (
	timingsKey = []byte(`"timings"`)
	metricsKey = []byte(`"metrics"`)
)

// llamaTimings is llama.cpp server's timings object: top level in a
// non-streamed answer, on the last chunk of a stream.
type llamaTimings struct {
	Timings *struct {
		PromptN     int64   `json:"prompt_n"`
		PromptMS    float64 `json:"prompt_ms"`
		PredictedN  int64   `json:"predicted_n"`
		PredictedMS float64 `json:"predicted_ms"`
		CacheN      int64   `json:"cache_n"`
	} `json:"timings"`
}

// engineFromBody reads llama.cpp's timings, or newer vLLM's per-request
// metrics (--enable-per-request-metrics), from a body or chunk; nil when
// absent (checked cheaply first, since most chunks carry neither).
func engineFromBody(data []byte) *record.EngineTiming {
	if bytes.Contains(data, metricsKey) {
		var v struct {
			Metrics json.RawMessage `json:"metrics"`
		}
		if json.Unmarshal(data, &v) == nil && len(v.Metrics) > 0 {
			if et, ok := otlp.ParsePerRequestMetrics(v.Metrics); ok {
				return &et
			}
		}
	}
	if !bytes.Contains(data, timingsKey) {
		return nil
	}
	var lt llamaTimings
	if json.Unmarshal(data, &lt) != nil || lt.Timings == nil {
		return nil
	}
	t := lt.Timings
	pf, dec := msDur(t.PromptMS), msDur(t.PredictedMS)
	return &record.EngineTiming{Signal: "llamacpp-timings", Prefill: pf, Decode: dec, Inference: pf + dec, TTFT: pf,
		PromptTokens: t.PromptN, CompletionTokens: t.PredictedN, CachedTokens: t.CacheN}
}

// engineFromTGI reads TGI's timing headers (non-streamed answers only):
// x-queue-time, x-inference-time, x-time-per-token in ms, and the token
// counts. TGI reports the decode pace, so prefill is what inference time
// leaves after generated−1 tokens at that pace.
func engineFromTGI(h http.Header) *record.EngineTiming {
	q, okQ := headerMS(h, "X-Queue-Time")
	inf, okI := headerMS(h, "X-Inference-Time")
	if !okQ && !okI {
		return nil
	}
	tpt, _ := headerMS(h, "X-Time-Per-Token")
	gen, _ := strconv.ParseInt(h.Get("X-Generated-Tokens"), 10, 64)
	prompt, _ := strconv.ParseInt(h.Get("X-Prompt-Tokens"), 10, 64)
	dec := time.Duration(max(gen-1, 0)) * tpt
	dec = min(dec, inf)
	return &record.EngineTiming{Signal: "tgi-headers", Queue: q, Inference: inf, Decode: dec, Prefill: inf - dec, TTFT: q + inf - dec,
		PromptTokens: prompt, CompletionTokens: gen}
}

func headerMS(h http.Header, name string) (time.Duration, bool) {
	v := h.Get(name)
	if v == "" {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 {
		return 0, false
	}
	return msDur(f), true
}

func msDur(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }
