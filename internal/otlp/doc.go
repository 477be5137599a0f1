// Package otlp takes in the engines' own account of a request — vLLM's
// OpenTelemetry span and its per-request metrics object — and joins it to
// the gateway's Record. It sits beside the gateway:
//
//	apps ──▶ gateway ──traceparent──▶ vLLM (--otlp-traces-endpoint)
//	           │  ▲                     │
//	           │  └── Joiner ◀─ Receiver ◀── OTLP span "llm_request"
//	           └──▶ Record.EngineTiming
//
// The gateway sends each upstream attempt a traceparent whose parent span id
// is the Record's SpanID; vLLM parents its span by it. The Receiver decodes
// OTLP/HTTP (protobuf or JSON, optionally gzip) and OTLP/gRPC export
// requests and hands every llm_request span to a callback, normally
// Joiner.Offer. The gateway calls Joiner.Expect when a response ends;
// whichever of the two comes second delivers the timing, so a span that
// arrives after the response (vLLM batches its exports, 5 s by default) is
// still joined.
//
// # What vLLM sends (checked against vLLM's source)
//
// Span (vllm/v1/engine/output_processor.py, OutputProcessor.do_tracing;
// names in vllm/tracing/utils.py, SpanAttributes): one span per finished
// sequence, named "llm_request", kind SERVER, started at the request's
// arrival at the API server and ended when emitted, parented by the
// request's W3C traceparent (TraceContextTextMapPropagator). The exporter is
// a BatchSpanProcessor with the SDK's default sampler, ParentBased(AlwaysOn):
// a traceparent with the sampled flag off yields no span. Attributes (floats
// in seconds unless noted):
//
//	gen_ai.latency.time_in_queue            scheduled_ts − queued_ts (engine core)
//	gen_ai.latency.time_to_first_token      first token − arrival (API server)
//	gen_ai.latency.time_in_model_prefill    first_token_ts − scheduled_ts
//	gen_ai.latency.time_in_model_decode     last_token_ts − first_token_ts
//	gen_ai.latency.time_in_model_inference  last_token_ts − scheduled_ts
//	gen_ai.latency.e2e                      finish − arrival (API server)
//	gen_ai.usage.prompt_tokens              int
//	gen_ai.usage.completion_tokens          int
//	gen_ai.request.id                       string, vLLM's request id
//	gen_ai.response.finish_reasons          string: json.dumps([reason]), e.g. ["stop"]
//	gen_ai.request.max_tokens/top_p/temperature/n  only when set
//
// The finish_reasons attribute is newer than the others (older releases
// lack it; SpanAttributes names it GEN_AI_RESPONSE_FINISH_REASON). vLLM's
// SpanAttributes also declares gen_ai.usage.cached_tokens, which SGLang
// sets; it is read when present. vLLM's exporter speaks OTLP/gRPC unless
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf, and then posts to the
// endpoint URL exactly as given, so the Receiver serves both /v1/traces and /.
//
// Per-request metrics (vLLM --enable-per-request-metrics; built by
// build_per_request_timing_metrics in vllm/entrypoints/openai/engine/serving.py,
// attached in chat_completion/serving.py and completion/serving.py): a
// "metrics" object on the response, only for single-sequence requests
// (n = 1, one prompt), with five nullable fields:
//
//	queue_time_ms           (scheduled_ts − queued_ts) × 1000
//	time_to_first_token_ms  (first_token_ts − scheduled_ts) × 1000: from scheduling, queue excluded
//	generation_time_ms      (last_token_ts − first_token_ts) × 1000: decode only
//	mean_itl_ms             generation_time / (tokens − 1), tokens > 1
//	tokens_per_second       tokens / (last_token_ts − scheduled_ts)
//
// A non-streamed response carries it at the top level (fields null when
// unknown). A stream carries it only on the final usage chunk (choices []),
// which exists only with stream_options.include_usage or
// --enable-force-include-usage; null fields are left out there.
package otlp
