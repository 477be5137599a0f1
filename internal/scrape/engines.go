package scrape

// Engine kinds, as in the upstream configuration (config.Upstream.Engine).
const (
	EngineVLLM     = "vllm"
	EngineSGLang   = "sglang"
	EngineTGI      = "tgi"
	EngineLlamaCPP = "llamacpp"
	EngineOllama   = "ollama"
	EngineOpenAI   = "openai"
)

// spec says where one engine keeps each normalised signal. Every signal is
// a list of alternative family names, newest first: the first family the
// target exposes wins, so one spec reads several versions of an engine.
// Names are the family names of the text exposition, colons included.
type spec struct {
	// modelLabel carries the served model name; "" when the engine serves
	// one model and labels nothing.
	modelLabel string
	// Gauges. running and waiting are summed over the series of a model
	// (several engine cores or DP ranks); ratios are averaged.
	running, waiting, kvUsage []string
	// prefix lists hit/query counter pairs whose deltas give the hit rate;
	// prefixGauge is read as the rate when no pair is exposed.
	prefix      []counterPair
	prefixGauge []string
	// ttft is a histogram in seconds.
	ttft []string
	// Token counters; a histogram or summary stands in with its _sum.
	promptTokens, generationTokens []string
}

type counterPair struct{ hits, queries string }

// specs are the engines whose /metrics tollgate reads. Ollama and hosted
// OpenAI-compatible APIs expose no Prometheus metrics and are not scraped.
var specs = map[string]spec{
	// vLLM. V1 engine, vllm/v1/metrics/loggers.py (PrometheusStatLogger):
	// gauges vllm:num_requests_running, vllm:num_requests_waiting,
	// vllm:kv_cache_usage_perc; counters vllm:prefix_cache_queries,
	// vllm:prefix_cache_hits, vllm:prompt_tokens, vllm:generation_tokens
	// (prometheus_client exposes counters with a _total suffix); histogram
	// vllm:time_to_first_token_seconds; labels model_name and engine (the
	// engine-core index, so a data-parallel server has one series per core).
	// Deprecated in 0.9 and shown beside the new names until hidden:
	// vllm:gpu_cache_usage_perc, vllm:gpu_prefix_cache_queries,
	// vllm:gpu_prefix_cache_hits. V0 engine (<= 0.8), vllm/engine/metrics.py:
	// vllm:gpu_cache_usage_perc and the gauge vllm:gpu_prefix_cache_hit_rate
	// (block hit rate), label model_name only. Names as listed on
	// docs.vllm.ai "Production Metrics" (usage/metrics).
	EngineVLLM: {
		modelLabel: "model_name",
		running:    []string{"vllm:num_requests_running"},
		waiting:    []string{"vllm:num_requests_waiting"},
		kvUsage:    []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
		prefix: []counterPair{
			{"vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"},
			{"vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total"},
		},
		prefixGauge:      []string{"vllm:gpu_prefix_cache_hit_rate"},
		ttft:             []string{"vllm:time_to_first_token_seconds"},
		promptTokens:     []string{"vllm:prompt_tokens_total"},
		generationTokens: []string{"vllm:generation_tokens_total"},
	},
	// SGLang (--enable-metrics), python/sglang/srt/metrics/collector.py:
	// SchedulerMetricsCollector has the gauges sglang:num_running_reqs,
	// sglang:num_queue_reqs, sglang:token_usage (KV pool use, 0–1) and
	// sglang:cache_hit_rate; TokenizerMetricsCollector the counters
	// sglang:prompt_tokens_total, sglang:generation_tokens_total,
	// sglang:cached_tokens_total (cached prompt tokens, counted with the
	// prompt tokens when a request finishes) and the histogram
	// sglang:time_to_first_token_seconds. Label model_name, plus
	// engine_type/tp_rank/pp_rank/… depending on the version. Example
	// output: docs.sglang.io, references/production_metrics.
	EngineSGLang: {
		modelLabel:       "model_name",
		running:          []string{"sglang:num_running_reqs"},
		waiting:          []string{"sglang:num_queue_reqs"},
		kvUsage:          []string{"sglang:token_usage"},
		prefix:           []counterPair{{"sglang:cached_tokens_total", "sglang:prompt_tokens_total"}},
		prefixGauge:      []string{"sglang:cache_hit_rate"},
		ttft:             []string{"sglang:time_to_first_token_seconds"},
		promptTokens:     []string{"sglang:prompt_tokens_total"},
		generationTokens: []string{"sglang:generation_tokens_total"},
	},
	// llama.cpp server (--metrics), tools/server/README.md "GET /metrics"
	// and the metrics handler in tools/server (every name printed with the
	// "llamacpp:" prefix, no labels): counters llamacpp:prompt_tokens_total
	// (prompt tokens evaluated), llamacpp:tokens_predicted_total; gauges
	// llamacpp:requests_processing, llamacpp:requests_deferred. Older builds
	// also had the gauge llamacpp:kv_cache_usage_ratio, which the current
	// handler no longer emits. No TTFT histogram, no prefix-cache counters.
	EngineLlamaCPP: {
		running:          []string{"llamacpp:requests_processing"},
		waiting:          []string{"llamacpp:requests_deferred"},
		kvUsage:          []string{"llamacpp:kv_cache_usage_ratio"},
		promptTokens:     []string{"llamacpp:prompt_tokens_total"},
		generationTokens: []string{"llamacpp:tokens_predicted_total"},
	},
	// Text Generation Inference, docs/source/reference/metrics.md: gauges
	// tgi_batch_current_size (running) and tgi_queue_size (waiting);
	// histograms tgi_request_input_length and tgi_request_generated_tokens
	// per finished request, whose _sum counts tokens (so TGI's token rates
	// move when requests finish, not per step). No labels, no TTFT
	// histogram, no KV-cache or prefix-cache metric.
	EngineTGI: {
		running:          []string{"tgi_batch_current_size"},
		waiting:          []string{"tgi_queue_size"},
		promptTokens:     []string{"tgi_request_input_length"},
		generationTokens: []string{"tgi_request_generated_tokens"},
	},
}

// Scrapable reports whether tollgate knows where engine keeps its metrics.
func Scrapable(engine string) bool {
	_, ok := specs[engine]
	return ok
}
