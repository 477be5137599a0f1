package traceexport

import (
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// operation maps the gateway's endpoint to gen_ai.operation.name.
func operation(endpoint string) string {
	switch endpoint {
	case "chat", "responses", "messages": // the agent APIs are chat turns too
		return semconv.GenAIOperationNameChat.Value.AsString()
	case "completions":
		return semconv.GenAIOperationNameTextCompletion.Value.AsString()
	case "embeddings":
		return semconv.GenAIOperationNameEmbeddings.Value.AsString()
	}
	return endpoint
}

// provider maps the upstream's engine kind to gen_ai.provider.name. Only
// "openai" and "anthropic" are values the conventions define; for self-hosted engines they
// have none, so the engine kind itself is used, as in tollgate's metrics
// labels ("vllm", "sglang", "tgi", "llamacpp", "ollama").
func provider(engine string) string {
	switch engine {
	case "openai":
		return semconv.GenAIProviderNameOpenAI.Value.AsString()
	case "anthropic":
		return semconv.GenAIProviderNameAnthropic.Value.AsString()
	}
	return engine
}

// requestAttributes are the request span's attributes beyond those given
// at its start. Never the user id, the key (or its hash), the prompt or its
// hash, nor free-form tags: a trace backend is readable by more people
// than the ledger. The session id is kept, as gen_ai.conversation.id: it
// is what ties a conversation's requests together, which is what a trace
// backend is for.
//
// Cache writes (gen_ai.usage.cache_creation.input_tokens) are not set: the
// Record counts cache reads only.
func requestAttributes(r *record.Record) []attribute.KeyValue {
	a := make([]attribute.KeyValue, 0, 40)
	str := func(k, v string) {
		if v != "" {
			a = append(a, attribute.String(k, v))
		}
	}
	msOpt := func(k string, d *time.Duration) {
		if d != nil {
			a = append(a, attribute.Float64(k, msOf(*d)))
		}
	}

	// GenAI conventions.
	if r.ServedModel != "" {
		a = append(a, semconv.GenAIResponseModel(r.ServedModel))
	}
	if r.ResponseID != "" {
		a = append(a, semconv.GenAIResponseID(r.ResponseID))
	}
	if r.SessionID != "" {
		a = append(a, semconv.GenAIConversationID(r.SessionID))
	}
	if r.FinishReason != "" {
		a = append(a, semconv.GenAIResponseFinishReasons(r.FinishReason))
	}
	u := r.Usage
	if known := u.Source != "" && u.Source != record.SourceNone; known {
		// Counting chunks gives output tokens only; the input is unknown.
		if u.InputKnown() {
			a = append(a, semconv.GenAIUsageInputTokens(int(u.InputTokens)),
				semconv.GenAIUsageCacheReadInputTokens(int(u.CachedInputTokens)))
		}
		a = append(a, semconv.GenAIUsageOutputTokens(int(u.OutputTokens)))
		if u.ReasoningTokens > 0 {
			a = append(a, semconv.GenAIUsageReasoningOutputTokens(int(u.ReasoningTokens)))
		}
	}
	if r.Stream && r.Derived.TTFT != nil {
		// The conventions measure it from the caller's issue of the request:
		// for the gateway's caller that is user-side TTFT, in seconds.
		a = append(a, semconv.GenAIResponseTimeToFirstChunk(r.Derived.TTFT.Seconds()))
	}
	if r.MaxTokens != nil {
		a = append(a, semconv.GenAIRequestMaxTokens(int(*r.MaxTokens)))
	}
	if r.Temperature != nil {
		a = append(a, semconv.GenAIRequestTemperature(*r.Temperature))
	}
	if r.TopP != nil {
		a = append(a, semconv.GenAIRequestTopP(*r.TopP))
	}

	// tollgate's own, named as in the Record's JSON form.
	str("tollgate.request_id", r.RequestID)
	if r.LogicalRequestID != r.RequestID {
		str("tollgate.logical_request_id", r.LogicalRequestID)
	}
	a = append(a, attribute.Int("tollgate.attempt", r.Attempt), attribute.Int("tollgate.retries", r.Retries))
	str("tollgate.biz_line", r.BizLine)
	str("tollgate.team", r.Team)
	str("tollgate.template_id", r.TemplateID)
	str("tollgate.endpoint", r.Endpoint)
	str("tollgate.upstream", r.Upstream)
	str("tollgate.engine", r.Engine)
	a = append(a, attribute.Bool("tollgate.stream", r.Stream), attribute.Int("tollgate.status", r.Status))
	if r.UpstreamStatus != 0 {
		a = append(a, attribute.Int("tollgate.upstream_status", r.UpstreamStatus))
	}
	str("tollgate.error_type", r.ErrorType)
	src := u.Source
	if src == "" {
		src = record.SourceNone
	}
	a = append(a, attribute.String("tollgate.usage_source", string(src)))

	d := r.Derived
	a = append(a, attribute.Float64("tollgate.e2e_ms", msOf(d.E2E)))
	msOpt("tollgate.ttft_ms", d.TTFT)
	msOpt("tollgate.upstream_ttft_ms", d.UpstreamTTFT)
	msOpt("tollgate.queue_ms", d.Queue)
	msOpt("tollgate.tpot_ms", d.TPOT)
	if d.DecodeRate != nil {
		a = append(a, attribute.Float64("tollgate.decode_tokens_per_s", *d.DecodeRate))
	}
	if d.FirstPacketMerge {
		a = append(a, attribute.Bool("tollgate.first_packet_merge", true))
	}
	if r.EngineTiming != nil && r.EngineTiming.Signal != "" {
		str("tollgate.engine_signal", r.EngineTiming.Signal)
	}

	a = append(a,
		attribute.Int64("tollgate.prompt_bytes", r.PromptBytes),
		attribute.Int64("tollgate.response_bytes", r.ResponseBytes))
	if r.ContentChunks > 0 {
		a = append(a, attribute.Int("tollgate.content_chunks", r.ContentChunks))
	}
	if r.CacheHit {
		a = append(a, attribute.Bool("tollgate.cache_hit", true))
	}
	if r.ClientDisconnect {
		a = append(a, attribute.Bool("tollgate.client_disconnect", true))
	}
	if r.Cost.Currency != "" {
		a = append(a, attribute.Int64("tollgate.cost_nanos", r.Cost.Nanos),
			attribute.String("tollgate.cost_currency", r.Cost.Currency))
	}
	return a
}

// errorType is error.type: tollgate's closed set of error types, or the
// status code when a failure carries no type.
func errorType(r *record.Record) string {
	if r.ErrorType != "" {
		return r.ErrorType
	}
	return strconv.Itoa(r.Status)
}

// statusMessage is the span status description. The gateway writes
// ErrorMessage itself and never copies upstream text into it, so it cannot
// echo a prompt.
func statusMessage(r *record.Record) string {
	if r.ErrorMessage != "" {
		return r.ErrorMessage
	}
	return errorType(r)
}

type mark struct {
	name string
	at   time.Duration
}

// marks are the request's timing marks that were reached, as span events
// named as in the Record's JSON form, so a backend shows them on the span.
func marks(r *record.Record) []mark {
	m := r.Marks
	all := [...]mark{
		{"auth_done", m.AuthDone},
		{"admitted", m.Admitted},
		{"upstream_sent", m.UpstreamSent},
		{"upstream_headers", m.UpstreamHeaders},
		{"first_upstream_token", m.FirstUpstreamToken},
		{"first_client_token", m.FirstClientToken},
		{"last_upstream_token", m.LastUpstreamToken},
		{"last_token", m.LastToken},
	}
	out := make([]mark, 0, len(all))
	for _, x := range all {
		if x.at > 0 {
			out = append(out, x)
		}
	}
	return out
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
