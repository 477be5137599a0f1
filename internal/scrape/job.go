package scrape

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// SampleStore is where serve's scraping job keeps the samples: the
// store's engine series, read by the diagnostics view.
type SampleStore interface {
	AddEngineSamples(ctx context.Context, ss []store.EngineSample) error
}

// RunEngines is serve's scraping job: it reads the /metrics of every
// upstream whose engine exposes them, every interval, into st, off the
// request path, until ctx ends. An upstream without a metrics URL is
// logged and skipped.
func RunEngines(ctx context.Context, ups []config.Upstream, interval time.Duration, st SampleStore, log *slog.Logger, reg prometheus.Registerer) error {
	var targets []Target
	for _, u := range ups {
		if !Scrapable(u.Engine) {
			continue
		}
		url, err := MetricsURL(u.URL)
		if err != nil {
			log.Warn("no metrics URL for upstream", "upstream", u.Name, "err", err)
			continue
		}
		targets = append(targets, Target{Upstream: u.Name, Engine: u.Engine, URL: url, APIKey: u.APIKey})
	}
	sink := func(ss []Sample) {
		out := make([]store.EngineSample, len(ss))
		for i, s := range ss {
			out[i] = store.EngineSample{At: s.At, Upstream: s.Upstream, Model: s.Model, Up: s.Up, Running: s.Running, Waiting: s.Waiting,
				KVCacheUsage: s.KVCacheUsage, PrefixCacheHitRate: s.PrefixCacheHitRate, TTFTP50: s.TTFTP50, TTFTP95: s.TTFTP95, TTFTP99: s.TTFTP99,
				PromptTokensPerS: s.PromptTokensPerS, GenerationTokensPerS: s.GenerationTokensPerS}
		}
		if err := st.AddEngineSamples(ctx, out); err != nil && ctx.Err() == nil {
			log.Warn("could not store engine samples", "err", err)
		}
	}
	return New(targets, interval, sink, log, reg).Run(ctx)
}
