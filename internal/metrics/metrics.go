// Package metrics turns finished Records into Prometheus series. It sits
// beside the store at the end of the request flow: the gateway calls
// Observe once per Record. Names follow the OpenTelemetry GenAI semantic
// conventions in Prometheus form where they exist (gen_ai_*), tollgate_*
// otherwise; docs/metrics.md is the one place that defines them.
//
// Labels are bounded by construction: model, business line and finish
// reason go through internal/label's bounded sets (values past a bound
// fold into "other"), and no user, key or prompt is ever a label.
//
// The gen_ai_* metrics carry the GenAI conventions' attributes as labels
// (gen_ai_operation_name, gen_ai_provider_name, gen_ai_request_model,
// gen_ai_response_model, and error_type on durations) beside tollgate's
// own (model, upstream, biz_line), so that dashboards written for the
// conventions and tollgate's rules both read them. The latency
// histograms carry exemplars (trace_id, request_id) in the OpenMetrics
// exposition, which lead from a slow bucket to the request's page and
// trace.
package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/internal/label"
	"github.com/tollgate-dev/tollgate/internal/record"
)

// Bucket boundaries recommended by the GenAI semantic conventions.
var (
	TTFTBuckets     = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}
	TPOTBuckets     = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}
	DurationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	TokenBuckets    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
)

// OtherModel is the label value for models outside the learned set.
const OtherModel = label.Other

// Metrics holds tollgate's request-level collectors.
type Metrics struct {
	ttft       *prometheus.HistogramVec
	tpot       *prometheus.HistogramVec
	duration   *prometheus.HistogramVec
	tokenUsage *prometheus.HistogramVec
	upTTFT     *prometheus.HistogramVec
	tokens     *prometheus.CounterVec
	requests   *prometheus.CounterVec
	inFlight   prometheus.Gauge
	phases     *prometheus.HistogramVec
	quotaErrs  prometheus.Counter
	commitTO   prometheus.Counter
	tokChecks  *prometheus.CounterVec
	tokMiss    *prometheus.CounterVec
	panics     *prometheus.CounterVec
	cost       *prometheus.CounterVec

	labels *label.Bounds
}

// New registers the collectors on reg. lb bounds the label values (shared
// with the alerting windows); nil gives default bounds with no configured
// values.
func New(reg prometheus.Registerer, lb *label.Bounds) *Metrics {
	if lb == nil {
		lb = label.New(nil, label.Config{MaxModels: 64, MaxBizLines: 64})
	}
	base := []string{"model", "upstream", "biz_line"}
	withStatus := append(append([]string{}, base...), "status")
	// The GenAI conventions' attributes, in Prometheus form.
	genai := append(append([]string{}, base...), "gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model", "gen_ai_response_model")
	genaiDur := append(append([]string{}, genai...), "status", "error_type")
	m := &Metrics{
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_server_time_to_first_token_seconds",
			Help:    "User-side time to first token: first content token flushed to the client minus arrival at the gateway (successful streamed requests).",
			Buckets: TTFTBuckets,
		}, genai),
		tpot: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_server_time_per_output_token_seconds",
			Help:    "Time per output token after the first: (E2E - TTFT) / (output_tokens - 1), for successful streamed requests with more than one output token.",
			Buckets: TPOTBuckets,
		}, genai),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_server_request_duration_seconds",
			Help:    "End-to-end request duration at the gateway: response end minus arrival, every request.",
			Buckets: DurationBuckets,
		}, genaiDur),
		tokenUsage: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_client_token_usage",
			Help:    "Tokens used per request, by gen_ai_token_type (input or output).",
			Buckets: TokenBuckets,
		}, append(append([]string{}, genai...), "gen_ai_token_type")),
		upTTFT: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tollgate_upstream_time_to_first_token_seconds",
			Help:    "Upstream time to first token: first content token read from the upstream minus request sent to it (successful streamed requests).",
			Buckets: TTFTBuckets,
		}, base),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_tokens_total",
			Help: "Tokens by type (input, cached, output, reasoning), every request including failed and cancelled ones. cached is part of input; reasoning is part of output.",
		}, append(append([]string{}, base...), "type")),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_requests_total",
			Help: "Requests (one per upstream attempt) by outcome status, error type and finish reason.",
		}, append(append([]string{}, withStatus...), "error_type", "finish_reason")),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_requests_in_flight",
			Help: "Requests currently being served by the gateway.",
		}),
		phases: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tollgate_phase_seconds",
			Help:    "Where each request's time went: its E2E split into phases (gateway_queue, connect, engine_queue, prefill, decode, client_write, post_processing, unattributed); see docs/metrics.md.",
			Buckets: DurationBuckets,
		}, []string{"model", "upstream", "phase"}),
		quotaErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_quota_errors_total",
			Help: "Quota checks that could not be made (limiter unavailable); those requests were admitted (fail open).",
		}),
		commitTO: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_ledger_commit_timeouts_total",
			Help: "Successful responses completed before their ledger row was confirmed durable (the write-ahead queue was slower than store.queue.commit_timeout).",
		}),
		tokChecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_tokenizer_checks_total",
			Help: "Sampled comparisons of the engine's prompt_tokens with tollgate's own count (model's tokenizer and chat template).",
		}, []string{"model"}),
		tokMiss: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_tokenizer_mismatch_total",
			Help: "Sampled comparisons that differ beyond tolerance: the tokenizer, the chat template or the model version changed.",
		}, []string{"model"}),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_observer_panics_total",
			Help: "Panics caught while finishing a request, by step (derive, ledger, metrics, windows, trace_export): the Record went on to the ledger and the other steps; the log has the stack.",
		}, []string{"step"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_cost_total",
			Help: "What requests cost, in units of currency (e.g. USD), as rated by the price table in force at each request's arrival; unrated requests add nothing.",
		}, []string{"currency", "model", "biz_line"}),
		labels: lb,
	}
	if reg != nil {
		reg.MustRegister(m.ttft, m.tpot, m.duration, m.tokenUsage, m.upTTFT, m.tokens, m.requests, m.inFlight, m.phases, m.quotaErrs, m.commitTO, m.tokChecks, m.tokMiss, m.panics, m.cost)
	}
	return m
}

// InFlight is the gauge the gateway moves as requests start and end.
func (m *Metrics) InFlight() prometheus.Gauge { return m.inFlight }

// Observe records one finished Record.
func (m *Metrics) Observe(r *record.Record) {
	// A model name is learned from a request its upstream took, failing
	// ones included; a client inventing models on requests the gateway or
	// the engine refused cannot fill the set.
	sent := r.Marks.UpstreamSent > 0
	model := m.labels.Model.Value(r.Model, label.LearnModel(sent, r.UpstreamStatus))
	if model == "" {
		model = OtherModel
	}
	// A business line is learned from any request sent upstream, failing
	// ones included (error rates by business line need them).
	biz := m.labels.BizLine.Value(r.BizLine, sent)
	if biz == "" {
		biz = "none"
	}
	finish := m.labels.FinishReason.Value(r.FinishReason, false)
	up := r.Upstream
	if up == "" {
		up = "none"
	}
	status := strconv.Itoa(r.Status)
	d := r.Derived
	// The served model is learned like the requested one: from requests
	// an upstream took.
	// An answer that named no model (a failure, an engine that does not
	// say) leaves gen_ai_response_model empty: absent, as the conventions
	// want it.
	served := ""
	if r.ServedModel != "" {
		if served = m.labels.Model.Value(r.ServedModel, label.LearnModel(sent, r.UpstreamStatus)); served == "" {
			served = OtherModel
		}
	}
	g := []string{model, up, biz, operation(r.Endpoint), provider(r.Engine), model, served}
	ex := exemplar(r)

	observe(m.duration.WithLabelValues(append(g, status, r.ErrorType)...), d.E2E.Seconds(), ex)
	m.requests.WithLabelValues(model, up, biz, status, r.ErrorType, finish).Inc()
	if c := r.Cost; c.Nanos > 0 && c.Currency != "" {
		// Currencies come from the price table (validated ISO codes):
		// bounded by the configuration.
		m.cost.WithLabelValues(c.Currency, model, biz).Add(float64(c.Nanos) / 1e9)
	}

	u := r.Usage
	if u.InputTokens > 0 {
		m.tokens.WithLabelValues(model, up, biz, "input").Add(float64(u.InputTokens))
	}
	if u.CachedInputTokens > 0 {
		m.tokens.WithLabelValues(model, up, biz, "cached").Add(float64(u.CachedInputTokens))
	}
	if u.OutputTokens > 0 {
		m.tokens.WithLabelValues(model, up, biz, "output").Add(float64(u.OutputTokens))
	}
	if u.ReasoningTokens > 0 {
		m.tokens.WithLabelValues(model, up, biz, "reasoning").Add(float64(u.ReasoningTokens))
	}
	for _, name := range record.SegmentNames {
		if d := r.Derived.Segments.Get(name); d > 0 {
			m.phases.WithLabelValues(model, up, name).Observe(d.Seconds())
		}
	}
	if !r.OK() {
		return
	}
	// An input nobody counted is left out, not observed as 0 tokens.
	if u.InputKnown() {
		m.tokenUsage.WithLabelValues(append(g, "input")...).Observe(float64(u.InputTokens))
	}
	if u.Source != record.SourceNone && u.Source != "" {
		m.tokenUsage.WithLabelValues(append(g, "output")...).Observe(float64(u.OutputTokens))
	}
	if !r.Stream {
		return
	}
	if d.TTFT != nil {
		observe(m.ttft.WithLabelValues(g...), seconds(*d.TTFT), ex)
	}
	if d.UpstreamTTFT != nil {
		m.upTTFT.WithLabelValues(model, up, biz).Observe(seconds(*d.UpstreamTTFT))
	}
	if d.TPOT != nil {
		observe(m.tpot.WithLabelValues(g...), seconds(*d.TPOT), ex)
	}
}

// ObserverPanic counts a panic caught in one step of finishing a request.
func (m *Metrics) ObserverPanic(step string) { m.panics.WithLabelValues(step).Inc() }

// PanicsOf is the panic counter of one step (for tests).
func (m *Metrics) PanicsOf(step string) prometheus.Counter { return m.panics.WithLabelValues(step) }

// CommitTimeout counts a durability wait that timed out.
func (m *Metrics) CommitTimeout() { m.commitTO.Inc() }

// QuotaError counts a quota check that could not be made.
func (m *Metrics) QuotaError() { m.quotaErrs.Inc() }

// TokenizerCheck counts one sampled comparison of prompt counts.
func (m *Metrics) TokenizerCheck(model string, mismatch bool) {
	l := m.labels.Model.Value(model, true)
	m.tokChecks.WithLabelValues(l).Inc()
	if mismatch {
		m.tokMiss.WithLabelValues(l).Inc()
	}
}

func seconds(d time.Duration) float64 { return d.Seconds() }

// exemplar links an observation to its request: the trace id (for a
// tracing backend) and tollgate's request id (for /ui/ and `tollgate
// requests show`). Both are tollgate's own, never a client's: bounded in
// length, and exemplars are not series, so they add no cardinality.
func exemplar(r *record.Record) prometheus.Labels {
	l := prometheus.Labels{"request_id": r.RequestID}
	if r.TraceID != "" {
		l["trace_id"] = r.TraceID
	}
	if r.RequestID == "" && r.TraceID == "" {
		return nil
	}
	return l
}

// observe records v with its exemplar when the histogram takes one.
func observe(o prometheus.Observer, v float64, ex prometheus.Labels) {
	if eo, ok := o.(prometheus.ExemplarObserver); ok && ex != nil {
		eo.ObserveWithExemplar(v, ex)
		return
	}
	o.Observe(v)
}

// operation is gen_ai_operation_name for an endpoint, in the
// conventions' well-known values; bounded.
func operation(endpoint string) string {
	switch endpoint {
	case "chat", "responses", "messages", "":
		return "chat"
	case "completions":
		return "text_completion"
	case "embeddings":
		return "embeddings"
	}
	return "other"
}

// provider is gen_ai_provider_name for an engine kind: the conventions'
// well-known value for hosted APIs (openai, anthropic), the engine's
// name for a self-hosted one (vllm, sglang, tgi, llamacpp, ollama), which
// the conventions leave to the instrumentation. Engine kinds are
// validated by the config: bounded.
func provider(engine string) string {
	if engine == "" {
		return "none"
	}
	return engine
}
