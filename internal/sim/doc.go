// Package sim is a simulated OpenAI-compatible inference engine. It stands in
// for the engine behind the gateway (vLLM) in tests, demos and benchmarks:
//
//	apps ──▶ tollgate gateway ──▶ sim.Engine (instead of vLLM)
//
// It speaks vLLM's HTTP dialect (/v1/chat/completions, /v1/completions,
// /v1/embeddings, /v1/models, /health, vLLM-named /metrics) and behaves like
// a continuous-batching engine on the wall clock, so that everything the
// gateway measures — queueing, prefill, decode, prefix-cache hits, broken
// streams — shows up with realistic causes rather than canned delays.
//
// # Scheduling
//
// Run is the scheduler loop. Up to Config.MaxRunning sequences run at once;
// the rest wait in a FIFO queue. Each step admits waiting sequences (paying
// PrefillBase + PrefillPerToken × uncached prompt tokens for each), then
// decodes one token for every running sequence, which costs DecodeBase +
// DecodePerSeq × running. A step is one timer, so a bigger batch makes every
// token slower and overload turns into queue time, as on a real GPU. Per
// request times follow vLLM's span definitions: queue = arrival → scheduled,
// prefill = scheduled → first token, decode = first → last token.
// There is no preemption: KV blocks are accounted for metrics and the prefix
// cache, never used to refuse or evict a running sequence.
//
// # Tokens
//
// The sim has its own deterministic tokenizer, so counts are reproducible
// without model files. Text is split into words (maximal runs of characters
// that are neither white space nor punctuation/symbols); a word of at most
// 4 bytes is 1 token, a longer one ceil(len/4) tokens; every punctuation or
// symbol character is 1 token. A chat prompt counts, like a ChatML template,
// (content tokens + 4) per message plus 3 for the assistant turn. Text parts
// of array content count; other parts (images…) count nothing.
//
// Output tokens are drawn, seeded, from a fixed vocabulary of common short
// English words with a leading space (" the", " of", …). Each is a single
// token in real BPE vocabularies (Qwen3, o200k), so a tokenizer-based count of
// the output agrees with the sim's usage, and each streamed content chunk
// carries exactly one token.
//
// # Output length
//
// The length the model "wants" (the position of its EOS) is, in order of
// precedence, the X-Sim-Output-Tokens header, else a draw from an exponential
// distribution with mean OutputMean clamped to [1, OutputMax]. min_tokens
// raises it; ignore_eos with max_tokens makes it max_tokens. If the result
// reaches max_tokens (or max_completion_tokens) the output is cut there with
// finish_reason "length", otherwise it ends with "stop". As in vLLM,
// /v1/completions defaults max_tokens to 16.
//
// # Prefix cache
//
// Prompt token ids are hashed in blocks of PrefixBlockTokens, each hash
// chained to the previous one, like vLLM's automatic prefix caching. Leading
// blocks found in the cache are not prefilled again. As in vLLM the last
// prompt token is always computed, so cached_tokens < prompt_tokens. Blocks
// freed by finished sequences stay cached until evicted (LRU, tail blocks
// first). vllm:kv_cache_usage_perc counts the blocks held by running
// sequences, as vLLM does; cached but unreferenced blocks count as free.
//
// # Faults
//
// Faults come from Config.Faults (probabilities drawn with the seed) or, for
// one request, from the X-Sim-Fault header, a comma-separated list of:
//
//	none               no fault (overrides Config.Faults)
//	error              HTTP 500 before any byte, vLLM-style error JSON
//	error=503          the same with another status
//	status=429         an error with that status (429 is a RateLimitError)
//	reset-after=N      N content tokens, then the connection is aborted
//	stall-after=N      N content tokens, then nothing for Faults.StallFor
//	stall-after=N:2s   the same with its own duration
//	malformed-after=N  N content tokens, then `data: {"id": broken`, then the rest
//
// A fault "after N" fires once N content tokens have been sent, before the
// next event; when the output is shorter it fires before the finish chunk.
// Non-streamed responses reset before writing the body, stall before it, or
// get a broken body. The header, when present, replaces the configured faults.
//
// # Engine signals
//
// With Config.OTLPEndpoint the engine sends, for every sequence that leaves
// it, the span vLLM sends with --otlp-traces-endpoint: "llm_request", kind
// SERVER, parented by the request's traceparent, with the gen_ai.latency.*
// durations of RequestStats in float seconds, the token counts and the
// finish reason as a JSON list. It goes through the OpenTelemetry SDK's
// batch processor and OTLP/HTTP exporter, as vLLM's does (with
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf), so spans may reach the
// collector after their responses end; Run flushes them before returning.
// With Config.PerRequestMetrics responses carry vLLM's per-request
// "metrics" object (--enable-per-request-metrics). internal/otlp reads both
// and documents the fields.
//
// # Determinism
//
// Every accepted request takes a fixed number of draws from the engine's seeded source and
// derives all its randomness (id, length, faults, words) from it, so the same
// seed and the same sequence of requests give the same responses. Concurrent
// requests get their draws in arrival order. A request with a "seed" field
// gets its answer (length and words) from that seed, the engine's own seed
// (standing for its weights), the model and the prompt only, whatever came
// before it — as a seeded or greedy real engine answers the same prompt the
// same way; baseline regression (internal/baseline) relies on it.
package sim
