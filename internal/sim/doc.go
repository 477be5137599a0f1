// Package sim is a simulated OpenAI-compatible inference engine. It stands in
// for the engine behind the gateway (vLLM) in tests, demos and benchmarks:
//
//	apps ──▶ tollgate gateway ──▶ sim.Engine (instead of vLLM)
//
// It speaks vLLM's HTTP dialect (/v1/chat/completions, /v1/completions,
// /v1/embeddings, /v1/models, /health, vLLM-named /metrics), and the two
// agent APIs vLLM also serves: OpenAI's Responses API (/v1/responses) and
// Anthropic's Messages API (/v1/messages). It behaves like a
// continuous-batching engine on the wall clock, so that everything the
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
// The agent APIs lay their prompt out the same way: their tools (one
// message of one block per tool: name, description and compact schema),
// then the system prompt or instructions, then the conversation, each
// message counting like a chat message. A tool call counts its name and
// arguments, a tool result its text; images and earlier thinking count
// nothing.
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
// # Agent APIs
//
// POST /v1/responses and POST /v1/messages go through the same scheduler,
// faults, OnFinish and spans as chat; their bodies and events follow
// OpenAI's and Anthropic's APIs. Config.Dialect and PerRequestMetrics
// shape chat and completions only.
//
// An answer is one assistant turn whose output tokens are, in order:
// reasoning when asked (a Responses reasoning.effort other than "none", a
// Messages thinking "enabled" or "adaptive"), then either text or one tool
// call's JSON arguments, then, with Config.EOS, the end-of-sequence token.
// Each is one scheduler token: reasoning and arguments cost decode time
// and count as output like text. X-Sim-Output-Tokens pins the whole turn.
// Reasoning takes a share of it — by effort minimal 10%, low 25%, medium
// 50% (the default), high 75%, xhigh 90%; thinking 50%, at most
// budget_tokens — or the X-Sim-Reasoning-Tokens header's count; at least
// one answer token follows. A call's arguments are {"KEY":"WORDS"}, KEY
// being the schema's first required property, else its first, else
// "input": three tokens at least. max_output_tokens and max_tokens count
// all of it and cut the turn where they fall, inside reasoning or
// arguments too; a turn that ends exactly at the limit ends normally. A
// turn is at most 2^20 tokens, as a model's output is bounded.
//
// The model calls a function (custom) tool when tool_choice forces one
// ("required" or a named function; "any" or "tool"), or when it is left to
// the model ("auto", the default) and the last input is the user's
// message, not a tool's result — so an agent loop asks, gets a call, sends
// the result back and gets text. It calls the named tool, else the first.
// The X-Sim-Tool-Call header overrides all of that: a tool's name, or
// "none". Built-in and server tools count as prompt, and are never called.
//
// Responses. usage.input_tokens is the whole prompt,
// input_tokens_details.cached_tokens its prefix-cache hits (as in chat),
// output_tokens_details.reasoning_tokens the reasoning. Reasoning is a
// reasoning item; its tokens stream as reasoning summary deltas when
// reasoning.summary is set, else its summary stays empty and they pass
// unseen, as with OpenAI. A cut turn is "incomplete" (incomplete_details
// reason "max_output_tokens") and its stream ends with response.incomplete
// instead of response.completed. The stream opens at once with
// response.created and response.in_progress, as vLLM's does, so its first
// byte is not its first token; every event carries its sequence_number.
// Finished responses are kept, the last 1000 unless store is false, for
// GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items
// and previous_response_id (which puts the stored conversation before the
// input). POST /v1/responses/{id}/cancel answers as vLLM does for a
// response not made in the background (400): the sim has no background
// mode.
//
// Messages. As with vLLM nothing is sent before the first token; then
// message_start (input and cache counts, output_tokens 1); per content
// block (thinking, text or tool_use) content_block_start, one delta per
// token (a thinking block ends with a signature_delta) and
// content_block_stop, with one ping after the first block starts; then
// message_delta (stop_reason and the cumulative usage) and message_stop.
// stop_reason is end_turn, tool_use, max_tokens, or stop_sequence when a
// generated token contains one of stop_sequences (that token is counted,
// not shown). max_tokens is required. Errors take Anthropic's JSON and
// types (400 invalid_request_error, 429 rate_limit_error, 529
// overloaded_error, other 5xx api_error); anthropic-version and
// anthropic-beta are accepted and ignored, as vLLM does.
// /v1/messages/count_tokens returns the prompt's input_tokens without
// queueing anything.
//
// # Prompt caching (Messages)
//
// /v1/messages reports caching as Anthropic does, from cache_control
// breakpoints, not from the engine's block cache (which still sets what
// prefill costs, as it would under vLLM). Each content block of the
// prompt (tools, system, messages, in that order) ends at a boundary. A
// request whose breakpoint closes a prefix of at least 1024 tokens writes
// it for its ttl (5m or 1h), from its first token on — requests scheduled
// before then miss. A later request reads the longest written prefix
// found at one of its breakpoints or up to 20 blocks before one, which
// refreshes that entry. Usage splits the prompt into
// cache_read_input_tokens (the prefix read), cache_creation_input_tokens
// (from there to its last breakpoint long enough to cache, split by TTL in
// cache_creation) and input_tokens, the rest: the three add up to the
// prompt. At most 4 breakpoints; the cache keeps 4096 prefixes.
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
// In the agent APIs the content tokens are the deltas the client sees
// (text, arguments, shown reasoning), and a fault's status is rendered in
// the API's own error JSON.
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
