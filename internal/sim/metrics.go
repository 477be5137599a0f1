package sim

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the vLLM-named series a scraper of a real vLLM would see, so
// that dashboards and the gateway's engine collector can be tested against
// the sim unchanged.
type metrics struct {
	running, waiting, kvUsage              *prometheus.GaugeVec
	promptTokens, generationTokens         *prometheus.CounterVec
	prefixQueries, prefixHits              *prometheus.CounterVec
	success                                *prometheus.CounterVec
	ttft, itl, e2e, queue, prefill, decode *prometheus.HistogramVec
}

// Bucket layouts close to vLLM's, so histogram_quantile gives comparable
// answers on the sim and on a real engine.
var (
	ttftBuckets    = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}
	itlBuckets     = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}
	requestBuckets = []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680}
)

func newMetrics(models []string) *metrics {
	label := []string{"model_name"}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, label)
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, label)
	}
	hist := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, label)
	}
	m := &metrics{
		running:          gauge("vllm:num_requests_running", "Number of requests in model execution batches."),
		waiting:          gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
		kvUsage:          gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
		promptTokens:     counter("vllm:prompt_tokens_total", "Number of prefill tokens processed."),
		generationTokens: counter("vllm:generation_tokens_total", "Number of generation tokens processed."),
		prefixQueries:    counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens."),
		prefixHits:       counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens."),
		success: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vllm:request_success_total", Help: "Count of successfully processed requests.",
		}, []string{"model_name", "finished_reason"}),
		ttft:    hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets),
		itl:     hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets),
		e2e:     hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", requestBuckets),
		queue:   hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", requestBuckets),
		prefill: hist("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", requestBuckets),
		decode:  hist("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", requestBuckets),
	}
	// Create every series up front: a scraper sees zeros instead of absent
	// series before the first request, as with vLLM.
	for _, model := range models {
		for _, v := range []*prometheus.GaugeVec{m.running, m.waiting, m.kvUsage} {
			v.WithLabelValues(model)
		}
		for _, v := range []*prometheus.CounterVec{m.promptTokens, m.generationTokens, m.prefixQueries, m.prefixHits} {
			v.WithLabelValues(model)
		}
		for _, reason := range []string{finishStop, finishLength} {
			m.success.WithLabelValues(model, reason)
		}
		for _, v := range m.histograms() {
			v.WithLabelValues(model)
		}
	}
	return m
}

func (m *metrics) histograms() []*prometheus.HistogramVec {
	return []*prometheus.HistogramVec{m.ttft, m.itl, m.e2e, m.queue, m.prefill, m.decode}
}

func (m *metrics) register(reg prometheus.Registerer) error {
	cs := []prometheus.Collector{
		m.running, m.waiting, m.kvUsage, m.promptTokens, m.generationTokens,
		m.prefixQueries, m.prefixHits, m.success,
	}
	for _, h := range m.histograms() {
		cs = append(cs, h)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register sim metrics: %w", err)
		}
	}
	return nil
}

// finished records a sequence that left the engine. Aborted sequences are
// left out of the request histograms and success counts, as in vLLM; their
// generated tokens were already counted step by step.
func (m *metrics) finished(s RequestStats) {
	if s.FinishReason == finishAbort {
		return
	}
	m.success.WithLabelValues(s.Model, s.FinishReason).Inc()
	m.e2e.WithLabelValues(s.Model).Observe(s.E2E.Seconds())
	m.queue.WithLabelValues(s.Model).Observe(s.Queue.Seconds())
	m.prefill.WithLabelValues(s.Model).Observe(s.Prefill.Seconds())
	m.decode.WithLabelValues(s.Model).Observe(s.Decode.Seconds())
}

// tokenObs is one emitted token, collected while the scheduler holds its
// lock and observed after, so that scrapes never wait on a step.
type tokenObs struct {
	model string
	first bool          // d is the TTFT; otherwise the inter-token latency
	d     time.Duration //
}

func (m *metrics) token(o tokenObs) {
	m.generationTokens.WithLabelValues(o.model).Inc()
	if o.first {
		m.ttft.WithLabelValues(o.model).Observe(o.d.Seconds())
	} else {
		m.itl.WithLabelValues(o.model).Observe(o.d.Seconds())
	}
}
