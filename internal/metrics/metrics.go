// Package metrics turns finished Records into Prometheus series. It sits
// beside the store at the end of the request flow: the gateway calls
// Observe once per Record. Names follow the OpenTelemetry GenAI semantic
// conventions in Prometheus form where they exist (gen_ai_*), tollgate_*
// otherwise; docs/metrics.md is the one place that defines them.
//
// Labels are bounded by construction: model names outside a fixed-size
// learned set fold into "other", and no user, key or prompt is ever a label.
package metrics

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
const OtherModel = "other"

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

	models *modelSet
}

// New registers the collectors on reg. known are model names always given
// their own label (the configured ones); up to maxModels more are learned
// from successful responses before new names fold into "other".
func New(reg prometheus.Registerer, known []string, maxModels int) *Metrics {
	base := []string{"model", "upstream", "biz_line"}
	withStatus := append(append([]string{}, base...), "status")
	m := &Metrics{
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_server_time_to_first_token_seconds",
			Help:    "User-side time to first token: first content token flushed to the client minus arrival at the gateway (successful streamed requests).",
			Buckets: TTFTBuckets,
		}, base),
		tpot: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_server_time_per_output_token_seconds",
			Help:    "Time per output token after the first: (E2E - TTFT) / (output_tokens - 1), for successful streamed requests with more than one output token.",
			Buckets: TPOTBuckets,
		}, base),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_server_request_duration_seconds",
			Help:    "End-to-end request duration at the gateway: response end minus arrival, every request.",
			Buckets: DurationBuckets,
		}, withStatus),
		tokenUsage: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_client_token_usage",
			Help:    "Tokens used per request, by gen_ai_token_type (input or output).",
			Buckets: TokenBuckets,
		}, append(append([]string{}, base...), "gen_ai_token_type")),
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
		models: newModelSet(known, maxModels),
	}
	if reg != nil {
		reg.MustRegister(m.ttft, m.tpot, m.duration, m.tokenUsage, m.upTTFT, m.tokens, m.requests, m.inFlight, m.phases, m.quotaErrs, m.commitTO, m.tokChecks, m.tokMiss)
	}
	return m
}

// InFlight is the gauge the gateway moves as requests start and end.
func (m *Metrics) InFlight() prometheus.Gauge { return m.inFlight }

// Observe records one finished Record.
func (m *Metrics) Observe(r *record.Record) {
	model := m.models.label(r.Model, r.OK())
	biz := r.BizLine
	if biz == "" {
		biz = "none"
	}
	up := r.Upstream
	if up == "" {
		up = "none"
	}
	status := strconv.Itoa(r.Status)
	d := r.Derived

	m.duration.WithLabelValues(model, up, biz, status).Observe(d.E2E.Seconds())
	m.requests.WithLabelValues(model, up, biz, status, r.ErrorType, r.FinishReason).Inc()

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
	if u.Source != record.SourceNone && u.Source != "" {
		m.tokenUsage.WithLabelValues(model, up, biz, "input").Observe(float64(u.InputTokens))
		m.tokenUsage.WithLabelValues(model, up, biz, "output").Observe(float64(u.OutputTokens))
	}
	if !r.Stream {
		return
	}
	if d.TTFT != nil {
		m.ttft.WithLabelValues(model, up, biz).Observe(seconds(*d.TTFT))
	}
	if d.UpstreamTTFT != nil {
		m.upTTFT.WithLabelValues(model, up, biz).Observe(seconds(*d.UpstreamTTFT))
	}
	if d.TPOT != nil {
		m.tpot.WithLabelValues(model, up, biz).Observe(seconds(*d.TPOT))
	}
}

// CommitTimeout counts a durability wait that timed out.
func (m *Metrics) CommitTimeout() { m.commitTO.Inc() }

// QuotaError counts a quota check that could not be made.
func (m *Metrics) QuotaError() { m.quotaErrs.Inc() }

// TokenizerCheck counts one sampled comparison of prompt counts.
func (m *Metrics) TokenizerCheck(model string, mismatch bool) {
	label := m.models.label(model, true)
	m.tokChecks.WithLabelValues(label).Inc()
	if mismatch {
		m.tokMiss.WithLabelValues(label).Inc()
	}
}

func seconds(d time.Duration) float64 { return d.Seconds() }

// modelSet bounds the model label. Configured names always pass; other
// names are learned only from successful responses (so a client inventing
// names cannot blow up cardinality) and only up to a limit.
type modelSet struct {
	mu    sync.RWMutex
	names map[string]struct{}
	limit int
}

func newModelSet(known []string, extra int) *modelSet {
	s := &modelSet{names: make(map[string]struct{}, len(known)), limit: len(known) + extra}
	for _, k := range known {
		s.names[k] = struct{}{}
	}
	if len(s.names) > s.limit {
		s.limit = len(s.names)
	}
	return s
}

func (s *modelSet) label(model string, ok bool) string {
	if model == "" {
		return OtherModel
	}
	s.mu.RLock()
	_, found := s.names[model]
	s.mu.RUnlock()
	if found {
		return model
	}
	if !ok {
		return OtherModel
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, found := s.names[model]; found {
		return model
	}
	if len(s.names) >= s.limit {
		return OtherModel
	}
	s.names[model] = struct{}{}
	return model
}
