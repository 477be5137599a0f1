// Package scrape reads the engines' own Prometheus metrics. It sits beside
// the gateway, off the request path:
//
//	apps ──▶ gateway ──▶ engines (vLLM, SGLang, TGI, llama.cpp)
//	                        ▲ GET /metrics every interval
//	         scrape.Scraper ┘──▶ sink([]Sample) ──▶ diagnostics view, alerts
//
// Every interval a Scraper fetches each upstream's /metrics, parses the text
// exposition and Normalise turns the engine's own names (vllm:*, sglang:*,
// llamacpp:*, tgi_*) into one Sample per upstream and served model: running
// and waiting requests, KV-cache use, prefix-cache hit rate, engine-side TTFT
// percentiles and token throughput. Those are the engine's view of the same
// requests the gateway times, so the diagnostics view can tell "the engine is
// saturated" (waiting grows, KV cache full) from "the gateway is slow".
//
// Gauges are read as they are. Everything over the interval — hit rate, TTFT
// percentiles, token rates — comes from the difference between two scrapes,
// so the first scrape of a target yields gauges only. A counter that went
// down means the engine restarted; its new value is then the interval's
// delta. Percentiles are interpolated linearly inside the histogram bucket,
// as PromQL's histogram_quantile does, over the bucket deltas.
//
// Unknown values are NaN, never 0: an engine that does not expose a signal
// (llama.cpp has no TTFT histogram; current llama.cpp builds no KV-cache
// gauge), a quiet interval (no TTFT observed, no prefix-cache query), or a
// target that is down. Consumers that encode Samples as JSON must map NaN to
// null themselves (encoding/json refuses NaN).
//
// The scraper has its own HTTP client and goroutine; a slow or dead engine
// costs it at most one timeout per interval and never touches a request.
package scrape
