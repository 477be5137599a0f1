package scrape

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

const (
	// DefaultInterval is used when New is given none.
	DefaultInterval = 15 * time.Second
	// maxTimeout caps one scrape. A /metrics that needs longer is broken,
	// and a long interval should not mean a long wait on a dead engine.
	maxTimeout = 10 * time.Second
	// maxBodyBytes bounds one exposition. vLLM with a few models is well
	// under 1 MiB; more is a wrong URL or a runaway label.
	maxBodyBytes = 8 << 20
	// logEvery rate-limits the log line of a target that keeps failing.
	logEvery = time.Minute
)

// accept asks for the text format: the parser reads only that, and
// promhttp would otherwise answer a Prometheus-like Accept with protobuf.
const accept = "text/plain;version=0.0.4;q=1,*/*;q=0.1"

// Target is one upstream whose engine metrics are read.
type Target struct {
	Upstream string // upstream name, the label of its samples and metrics
	Engine   string // vllm | sglang | tgi | llamacpp | ollama | openai
	URL      string // metrics URL: see MetricsURL
	APIKey   string // sent as a bearer token when set
}

// MetricsURL is where an engine serves /metrics, given the OpenAI base URL
// of its upstream: the base without its trailing /v1, plus /metrics.
func MetricsURL(base string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("metrics URL of %q: %w", base, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return "", fmt.Errorf("metrics URL of %q: not an absolute http(s) URL", base)
	}
	p := strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/v1")
	u.Path, u.RawPath, u.RawQuery, u.Fragment = p+"/metrics", "", "", ""
	return u.String(), nil
}

// Scraper reads the engines' /metrics every interval and hands the
// normalised Samples to its sink. Create it with New and call Run once.
type Scraper struct {
	targets  []*target
	interval time.Duration
	timeout  time.Duration
	sink     func([]Sample)
	log      *slog.Logger
	client   *http.Client

	duration *prometheus.HistogramVec
	errors   *prometheus.CounterVec
}

// target is a Target with what the scraper remembers of it. Only the
// goroutine scraping it in a round touches it.
type target struct {
	Target
	state *State
	// Failure logging: one line when the target goes down, then at most
	// one per logEvery while it stays down, saying how many were skipped.
	down    bool
	logged  time.Time
	skipped int
}

// New returns a Scraper for the targets whose engine exposes metrics;
// others (ollama, openai, unknown) are left out with a log line. interval
// is the time between rounds (DefaultInterval if ≤ 0); each scrape times
// out after the interval or 10s, whichever is shorter. sink receives every
// round's Samples, failed targets included (Up false), from Run's
// goroutine: it must not block for long. The scraper's own metrics are
// registered on reg when it is not nil.
func New(targets []Target, interval time.Duration, sink func([]Sample), log *slog.Logger, reg prometheus.Registerer) *Scraper {
	if interval <= 0 {
		interval = DefaultInterval
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if sink == nil {
		sink = func([]Sample) {}
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = 1 // one scrape per target at a time
	s := &Scraper{
		interval: interval,
		timeout:  min(interval, maxTimeout),
		sink:     sink,
		log:      log,
		client:   &http.Client{Transport: transport},
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tollgate_scrape_duration_seconds",
			Help:    "Time to fetch, parse and normalise one upstream engine's /metrics, failed scrapes included.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}, []string{"upstream"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_scrape_errors_total",
			Help: "Failed scrapes of an upstream engine's /metrics: unreachable, timeout, non-200, too large, unparsable, or no engine metrics in it.",
		}, []string{"upstream"}),
	}
	for _, t := range targets {
		switch {
		case !Scrapable(t.Engine):
			log.Info("engine exposes no metrics; not scraped", "upstream", t.Upstream, "engine", t.Engine)
		case t.URL == "":
			log.Warn("no metrics URL; not scraped", "upstream", t.Upstream, "engine", t.Engine)
		default:
			s.targets = append(s.targets, &target{Target: t})
			s.errors.WithLabelValues(t.Upstream) // a zero series before the first failure
		}
	}
	if reg != nil {
		reg.MustRegister(s.duration, s.errors)
	}
	return s
}

// Run scrapes every target at once, then again every interval, until ctx
// is done; it then returns nil. Scrapes of one round run concurrently and
// the round ends when all have, so a slow engine delays no other and no
// goroutine outlives Run.
func (s *Scraper) Run(ctx context.Context) error {
	defer s.client.CloseIdleConnections()
	if len(s.targets) == 0 {
		return nil
	}
	ticker := time.NewTicker(s.interval)
	defer ticker.Stop()
	for {
		s.round(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// round scrapes every target once and hands the Samples to the sink,
// unless ctx ended meanwhile (its failures would be ours, not the engines').
func (s *Scraper) round(ctx context.Context) {
	got := make([][]Sample, len(s.targets))
	var wg sync.WaitGroup
	for i, t := range s.targets {
		wg.Go(func() { got[i] = s.scrape(ctx, t) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	s.sink(slices.Concat(got...))
}

// scrape reads one target and returns its Samples, or one Sample with Up
// false when it failed.
func (s *Scraper) scrape(ctx context.Context, t *target) []Sample {
	start := time.Now()
	families, err := s.fetch(ctx, t)
	now := time.Now()
	var samples []Sample
	if err == nil {
		samples, err = normalise(t, families, now)
	}
	s.duration.WithLabelValues(t.Upstream).Observe(time.Since(start).Seconds())
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		s.errors.WithLabelValues(t.Upstream).Inc()
		s.failed(t, err, now)
		return []Sample{downSample(t.Upstream, now)}
	}
	if t.down {
		t.down = false
		s.log.Info("engine metrics scrape recovered", "upstream", t.Upstream)
	}
	for i := range samples {
		samples[i].Upstream = t.Upstream
	}
	return samples
}

// fetch GETs the target's exposition and parses it.
func (s *Scraper) fetch(ctx context.Context, t *target) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("metrics request: %w", err)
	}
	req.Header.Set("Accept", accept)
	if t.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+t.APIKey)
	}
	resp, err := s.client.Do(req) // its errors carry the URL, password stripped
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", req.URL.Redacted(), resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBodyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", req.URL.Redacted(), err)
	}
	if len(body) > maxBodyBytes {
		return nil, fmt.Errorf("GET %s: exposition larger than %d bytes", req.URL.Redacted(), maxBodyBytes)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", req.URL.Redacted(), err)
	}
	return families, nil
}

// errNoMetrics is a reachable target whose exposition has none of its
// engine's names: metrics disabled, or the URL points at something else.
var errNoMetrics = errors.New("no engine metrics in the exposition")

// normalise runs Normalise for t, keeping its State. Normalise is fuzzed
// not to panic; the recover is there because this runs beside the gateway
// and one odd engine must not take the process down.
func normalise(t *target, families map[string]*dto.MetricFamily, now time.Time) (samples []Sample, err error) {
	defer func() {
		if p := recover(); p != nil {
			samples, err = nil, fmt.Errorf("normalise %s metrics: panic: %v", t.Engine, p)
		}
	}()
	samples, t.state = Normalise(t.Engine, families, t.state, now)
	if len(samples) == 0 {
		return nil, fmt.Errorf("%s: %w", t.Engine, errNoMetrics)
	}
	return samples, nil
}

func (s *Scraper) failed(t *target, err error, now time.Time) {
	if t.down && now.Sub(t.logged) < logEvery {
		t.skipped++
		return
	}
	s.log.Warn("engine metrics scrape failed", "upstream", t.Upstream, "engine", t.Engine,
		"err", err, "failures_not_logged", t.skipped)
	t.down, t.logged, t.skipped = true, now, 0
}

func downSample(upstream string, at time.Time) Sample {
	nan := math.NaN()
	return Sample{
		At: at, Upstream: upstream,
		Running: nan, Waiting: nan, KVCacheUsage: nan, PrefixCacheHitRate: nan,
		TTFTP50: nan, TTFTP95: nan, TTFTP99: nan,
		PromptTokensPerS: nan, GenerationTokensPerS: nan,
	}
}
