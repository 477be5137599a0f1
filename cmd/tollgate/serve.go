package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/tollgate-dev/tollgate/internal/alert"
	"github.com/tollgate-dev/tollgate/internal/billing"
	"github.com/tollgate-dev/tollgate/internal/capture"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/cost"
	"github.com/tollgate-dev/tollgate/internal/fleet"
	"github.com/tollgate-dev/tollgate/internal/gateway"
	"github.com/tollgate-dev/tollgate/internal/label"
	"github.com/tollgate-dev/tollgate/internal/ledger"
	"github.com/tollgate-dev/tollgate/internal/metrics"
	"github.com/tollgate-dev/tollgate/internal/notify"
	"github.com/tollgate-dev/tollgate/internal/otlp"
	"github.com/tollgate-dev/tollgate/internal/quota"
	"github.com/tollgate-dev/tollgate/internal/quota/redisquota"
	"github.com/tollgate-dev/tollgate/internal/scrape"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/traceexport"
	"github.com/tollgate-dev/tollgate/internal/ui"
	"github.com/tollgate-dev/tollgate/internal/web"
	"github.com/tollgate-dev/tollgate/internal/window"
)

// newLimiter builds the quota limiter, or nil when no quota is configured:
// the in-process one, or the Redis one shared by every replica when
// quotas.redis.url is set (it implements io.Closer). Today's usage per
// scope is read from the ledger's rollups the first time a scope is seen
// each day (with Redis: the first time its day key is missing), so a
// restart does not reset quotas (and preloadQuotas reads it for every
// configured scope at start, in process). reg and log may be nil.
func newLimiter(cfg *config.Config, a store.Analytics, events *store.EventWriter, alerts *alert.Engine, reg prometheus.Registerer, log *slog.Logger) (quota.Limiter, error) {
	q, err := cfg.QuotaConfig()
	if err != nil {
		return nil, err
	}
	if len(q.Keys)+len(q.Users)+len(q.BizLines) == 0 && q.Default == (quota.Defaults{}) {
		return nil, nil
	}
	dims := map[quota.Kind]store.Dim{quota.KindKey: store.DimKey, quota.KindUser: store.DimUser, quota.KindBizLine: store.DimBizLine}
	seed := func(ctx context.Context, s quota.Scope, day time.Time) (int64, int64, error) {
		rows, err := a.Report(ctx, store.ReportQuery{From: day, To: day.AddDate(0, 0, 1), Where: map[store.Dim]string{dims[s.Kind]: s.Name},
			Measures: []string{"input_tokens", "output_tokens", "cost_nanos"}})
		if err != nil {
			return 0, 0, err
		}
		var tokens, nanos int64
		for _, r := range rows {
			tokens += r.Input + r.Output
			nanos += r.CostNanos
		}
		return tokens, nanos, nil
	}
	quotaLoc, err := time.LoadLocation(q.Timezone) // validated; "" is UTC
	if err != nil {
		return nil, err
	}
	onEvent := func(e quota.Event) {
		events.Send(store.Event{
			At: e.At, Kind: "quota_" + e.Kind, Subject: e.Scope, Message: alert.QuotaSummary(e),
			Data: fmt.Sprintf(`{"limit":%q,"used":%d,"quota":%d,"share":%g}`, e.Limit, e.Used, e.Quota, e.Share),
		})
		if alerts != nil {
			a, until := alert.FromQuota(e, quotaLoc)
			alerts.Raise(context.Background(), a, e.At, until)
		}
	}
	if q.Redis.URL != "" {
		if log == nil {
			log = slog.New(slog.DiscardHandler)
		}
		l, err := redisquota.New(q, redisquota.Options{Seed: seed, OnEvent: onEvent, Registerer: reg, Log: log})
		if err != nil {
			return nil, err
		}
		// Not fatal: a Redis that is down at start is an outage like any
		// other, handled by quotas.redis.on_error until it answers.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := l.Ping(ctx); err != nil {
			log.Warn("quotas: Redis does not answer; quotas.redis.on_error applies until it does", "err", err)
		} else {
			log.Info("quotas: counters shared in Redis", "timeout", q.Redis.TimeoutOrDefault())
		}
		return l, nil
	}
	l, err := quota.NewLocal(q, time.Now, seed, onEvent)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// quotaDaySeed reads today's usage of every subject of a kind from the
// ledger's rollups in one query, for quota.Local.Preload.
func quotaDaySeed(a store.Analytics) quota.DaySeedFunc {
	dims := map[quota.Kind]store.Dim{quota.KindKey: store.DimKey, quota.KindUser: store.DimUser, quota.KindBizLine: store.DimBizLine}
	return func(ctx context.Context, k quota.Kind, day time.Time) (map[string]quota.Used, error) {
		rows, err := a.Report(ctx, store.ReportQuery{From: day, To: day.AddDate(0, 0, 1), GroupBy: []store.Dim{dims[k]},
			Measures: []string{"input_tokens", "output_tokens", "cost_nanos"}})
		if err != nil {
			return nil, err
		}
		out := make(map[string]quota.Used, len(rows))
		for _, r := range rows {
			u := out[r.Keys[0]]
			u.Tokens += r.Input + r.Output
			u.CostNanos += r.CostNanos
			out[r.Keys[0]] = u
		}
		return out, nil
	}
}

// preloadQuotas loads today's usage of every configured daily quota in the
// background, so that the budget-burn view is right after a restart before
// each scope's first request. Requests do not wait for it: one whose scope
// is not loaded yet seeds that scope itself, as without a preload.
func preloadQuotas(ctx context.Context, l quota.Limiter, a store.Analytics, log *slog.Logger) {
	// quota.Local and redisquota.Limiter both preload.
	ql, ok := l.(interface {
		Preload(context.Context, quota.DaySeedFunc) error
	})
	if !ok {
		return
	}
	if err := ql.Preload(ctx, quotaDaySeed(a)); err != nil && ctx.Err() == nil {
		log.Warn("could not load today's quota usage at start; each scope loads it at its first request", "err", err)
	}
}

// allocateGPU spreads each closed hour's GPU cost over its requests, a
// few minutes after the hour (records of the hour have reached the store
// by then); at start it catches up on the last day. Idempotent.
func allocateGPU(ctx context.Context, l billing.Ledger, tbl *cost.Table, log *slog.Logger) {
	from := time.Now().UTC().Truncate(time.Hour).Add(-24 * time.Hour)
	repeat(ctx, func() time.Duration {
		to := time.Now().Add(-2 * time.Minute).UTC().Truncate(time.Hour)
		if to.After(from) {
			n, err := billing.AllocateGPUHours(ctx, l, tbl, from, to)
			if err != nil && ctx.Err() == nil {
				log.Warn("GPU-hour allocation failed", "err", err)
			} else {
				log.Debug("GPU-hour allocation", "from", from, "to", to, "changed", n)
				from = to
			}
		}
		return time.Until(time.Now().UTC().Truncate(time.Hour).Add(time.Hour + 5*time.Minute))
	})
}

// repeat runs pass a minute after start-up, then again after each wait
// pass returns, until ctx ends: serve's background passes.
func repeat(ctx context.Context, pass func() (wait time.Duration)) {
	t := time.NewTimer(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		t.Reset(pass())
	}
}

// startOTLP serves the receiver on its HTTP and gRPC addresses; receiving
// says whether either listens.
func startOTLP(c config.OTLP, recv *otlp.Receiver, log *slog.Logger) (stop func(), receiving bool) {
	var stops []func()
	if c.HTTPListen != "" {
		if ln, err := net.Listen("tcp", c.HTTPListen); err != nil {
			log.Warn("OTLP/HTTP receiver not started; engine spans will not be joined", "addr", c.HTTPListen, "err", err)
		} else {
			srv := &http.Server{Handler: recv.Handler(), ReadHeaderTimeout: 10 * time.Second}
			go func() { _ = srv.Serve(ln) }()
			log.Info("OTLP/HTTP receiver listening", "addr", ln.Addr().String(), "vllm_flag", "--otlp-traces-endpoint http://"+ln.Addr().String()+"/v1/traces")
			stops = append(stops, func() { _ = srv.Close() })
		}
	}
	if c.GRPCListen != "" {
		if ln, err := net.Listen("tcp", c.GRPCListen); err != nil {
			log.Warn("OTLP/gRPC receiver not started", "addr", c.GRPCListen, "err", err)
		} else {
			gs := grpc.NewServer()
			recv.RegisterGRPC(gs)
			go func() { _ = gs.Serve(ln) }()
			log.Info("OTLP/gRPC receiver listening", "addr", ln.Addr().String())
			stops = append(stops, gs.Stop)
		}
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}, len(stops) > 0
}

func retention(r config.Retention) store.Retention {
	return store.Retention{Details: r.Details, Ledger: r.Ledger, Minute: r.Minute, Hour: r.Hour, Day: r.Day, Events: r.Events, Engine: r.Minute}
}

// scrapeEngines reads each upstream's own /metrics into time series for
// the diagnostics view, off the request path.
func scrapeEngines(ctx context.Context, cfg *config.Config, a store.Analytics, log *slog.Logger, reg prometheus.Registerer) {
	var targets []scrape.Target
	for _, u := range cfg.Upstreams {
		if !scrape.Scrapable(u.Engine) {
			continue
		}
		url, err := scrape.MetricsURL(u.URL)
		if err != nil {
			log.Warn("no metrics URL for upstream", "upstream", u.Name, "err", err)
			continue
		}
		targets = append(targets, scrape.Target{Upstream: u.Name, Engine: u.Engine, URL: url, APIKey: u.APIKey})
	}
	sink := func(ss []scrape.Sample) {
		out := make([]store.EngineSample, len(ss))
		for i, s := range ss {
			out[i] = store.EngineSample{At: s.At, Upstream: s.Upstream, Model: s.Model, Up: s.Up, Running: s.Running, Waiting: s.Waiting,
				KVCacheUsage: s.KVCacheUsage, PrefixCacheHitRate: s.PrefixCacheHitRate, TTFTP50: s.TTFTP50, TTFTP95: s.TTFTP95, TTFTP99: s.TTFTP99,
				PromptTokensPerS: s.PromptTokensPerS, GenerationTokensPerS: s.GenerationTokensPerS}
		}
		if err := a.AddEngineSamples(ctx, out); err != nil && ctx.Err() == nil {
			log.Warn("could not store engine samples", "err", err)
		}
	}
	_ = scrape.New(targets, cfg.EngineMetrics.Interval, sink, log, reg).Run(ctx)
}

// prune enforces the retention hourly, starting a minute after start-up so
// it never competes with a burst of start-up traffic.
func prune(ctx context.Context, a store.Analytics, r store.Retention, log *slog.Logger) {
	repeat(ctx, func() time.Duration {
		n, err := a.Prune(ctx, time.Now(), r)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("retention pass failed", "err", err)
		case n > 0:
			log.Info("retention pass", "deleted_rows", n)
		}
		return time.Hour
	})
}

// roller is a store whose rollups are recomputed by a pass (ClickHouse).
type roller interface {
	RollUp(ctx context.Context) error
}

// rollUp runs the store's roll-up pass a minute after the previous one
// ended.
func rollUp(ctx context.Context, r roller, log *slog.Logger) {
	repeat(ctx, func() time.Duration {
		if err := r.RollUp(ctx); err != nil && ctx.Err() == nil {
			log.Warn("roll-up pass failed", "err", err)
		}
		return time.Minute
	})
}

// pruneCaptures deletes captures older than keep, on both backends (the
// retention pass above skips ClickHouse), every quarter of keep — at
// least a minute, at most an hour apart — so a capture outlives its
// retention by at most that. It runs whenever a retention is set, so
// captures taken before capture was turned off still go.
func pruneCaptures(ctx context.Context, c store.Captures, keep time.Duration, log *slog.Logger) {
	every := min(max(keep/4, time.Minute), time.Hour)
	repeat(ctx, func() time.Duration {
		n, err := c.PruneCaptures(ctx, time.Now().Add(-keep))
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("capture retention pass failed", "err", err)
		case n > 0:
			log.Info("capture retention pass", "deleted", n)
		}
		return every
	})
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", "serve [--config FILE] [--listen ADDR] [--upstream URL] [--db PATH]", stderr)
	cfgPath := fs.String("config", "", "YAML config `file`; without it the embedded defaults are used")
	listen := fs.String("listen", "", "listen `address` (overrides listen)")
	upstream := fs.String("upstream", "", "single upstream base `URL`, e.g. http://127.0.0.1:8000/v1 (replaces upstreams)")
	engine := fs.String("engine", "vllm", "engine `kind` of --upstream: vllm, sglang, tgi, llamacpp, ollama, openai, anthropic")
	db := fs.String("db", "", "SQLite ledger `path` (overrides store.sqlite.path)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath, *listen, *upstream, *engine, *db)
	if err != nil {
		return err
	}
	log := newLogger(cfg.Log, stderr)
	if *cfgPath == "" {
		log.Info("no config file: running on embedded defaults", "listen", cfg.Listen, "db", cfg.Store.SQLite.Path, "upstream", cfg.Upstreams[0].URL)
	}
	return serve(ctx, cfg, log, nil)
}

// loadConfig reads the file (or the defaults) and applies flag overrides,
// validating the result so a bad flag is reported like a bad key.
func loadConfig(path, listen, upstream, engine, db string) (*config.Config, error) {
	cfg := config.Default()
	if path != "" {
		var err error
		if cfg, err = config.Load(path); err != nil {
			return nil, err
		}
	}
	if listen != "" {
		cfg.Listen = listen
	}
	if upstream != "" {
		cfg.Upstreams = []config.Upstream{{Name: "default", URL: upstream, Engine: engine}}
	}
	if db != "" {
		cfg.Store.SQLite.Path = db
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid configuration: %w", err)
	}
	return cfg, nil
}

// With replicas, each aggregator persists a minute fleetGrace after it
// closes (requests are counted in the minute they finished, on the
// replica that served them, within milliseconds: a short grace loses
// none), at its next 10 s flush, and the leader evaluates the fleet
// fleetLag behind the clock, once every replica's rows of the minutes it
// reads are in the store: grace + flush period + 15 s for the write.
const (
	fleetGrace = 15 * time.Second
	fleetLag   = fleetGrace + 10*time.Second + 15*time.Second
)

// serve runs the gateway until ctx is done, then drains: in-flight requests
// get the grace period, then are cancelled and recorded as cut by shutdown;
// every Record is flushed to the store before serve returns. When started
// is non-nil it receives the listen address once the gateway accepts.
func serve(ctx context.Context, cfg *config.Config, log *slog.Logger, started chan<- string) error {
	// Metrics registry: passed to every component, never global.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// Store: the ledger (SQLite or ClickHouse), and the durable queue in
	// front of it, local in both cases. A ClickHouse that does not answer
	// does not stop the start: the store connects in the background and
	// the queue keeps the Records until it has (/readyz and
	// tollgate_store_connected say so).
	st, err := openServeStore(ctx, cfg, log.With("component", "store"))
	if err != nil {
		return err
	}
	defer st.Close()
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tollgate_store_connected",
		Help: "1 once the store has been reached and its schema checked; 0 while serve, started with ClickHouse unreachable, keeps connecting (finished requests wait in the write-ahead queue)."},
		func() float64 {
			if storeConnected(st) != nil {
				return 0
			}
			return 1
		}))
	lg, err := ledger.Open(ledgerConfig(cfg), st, log, reg)
	if err != nil {
		return err
	}
	ledgerCtx, stopLedger := context.WithCancel(context.Background())
	ledgerDone := make(chan error, 1)
	go func() { ledgerDone <- lg.Run(ledgerCtx) }()
	// stopWriter is called once the HTTP server has drained: the ledger
	// flushes everything, then returns.
	stopWriter := func() {
		stopLedger()
		if err := <-ledgerDone; err != nil {
			log.Error("ledger stopped with an error", "err", err)
		}
	}

	// Events (quota warnings, tokenizer mismatches) go to the store in
	// batches, off the request path.
	events := store.NewEventWriter(st, 4096, log.With("component", "events"))
	eventsCtx, stopEvents := context.WithCancel(context.Background())
	eventsDone := make(chan struct{})
	go func() { events.Run(eventsCtx); close(eventsDone) }()
	defer func() { stopEvents(); <-eventsDone }()

	// Prices and quotas: rating at the end of each request, admission at
	// its start.
	prices, err := cost.NewTable(cfg.CostConfig())
	if err != nil {
		stopWriter()
		return err
	}
	// Alerting: finished requests feed per-minute windows (persisted in
	// the store, reloaded after a restart); the engine evaluates the rules
	// and hands what fires to the notifiers, by severity. With replicas
	// (replicas.redis.url), only the holder of a lease in Redis evaluates,
	// over every replica's minutes read back from the shared store, and
	// each notification is sent once fleet-wide (internal/fleet).
	// One set of label bounds for the metrics and the windows, so both
	// fold a client's invented values the same way.
	labels := label.New(reg, cfg.LabelConfig())
	wcfg := window.Config{Labels: labels}
	if cfg.Replicas.Enabled() {
		wcfg.Grace = fleetGrace
	}
	win := window.New(wcfg, st, log.With("component", "window"), reg)
	if err := win.Load(ctx, time.Now()); err != nil {
		log.Warn("could not reload the alerting windows; they start empty", "err", err)
	}
	disp, err := notify.New(cfg.Notifiers, notify.Options{Log: log.With("component", "notify"), Registerer: reg, Location: cfg.Location()})
	if err != nil {
		stopWriter()
		return err
	}
	var (
		alertWin   alert.Windows  = win
		notifier   alert.Notifier = disp
		lease      *fleet.Lease
		fleetWin   *fleet.Windows
		dedup      *fleet.Dedup
		fleetState *fleet.State
		fleetRedis io.Closer
	)
	if rc := cfg.Replicas; rc.Enabled() {
		rdb, err := fleet.NewClient(rc.Redis.URL, 2*time.Second)
		if err != nil {
			_ = disp.Close()
			stopWriter()
			return fmt.Errorf("replicas.redis.url: %w", err)
		}
		fleetRedis = rdb
		flog := log.With("component", "fleet")
		lease = fleet.NewLease(rdb, fleet.LeaseOptions{Prefix: rc.PrefixOrDefault(), TTL: rc.LeaseOrDefault(), Log: flog, Registerer: reg})
		dedup = fleet.NewDedup(disp, rdb, fleet.DedupOptions{Prefix: rc.PrefixOrDefault(), Repeat: cfg.Alerts.Repeat, Log: flog, Registerer: reg})
		notifier = dedup
		fleetState = fleet.NewState(lease, flog)
		fleetWin = fleet.NewWindows(st, fleet.WindowsOptions{MinuteRetention: cfg.Store.Retention.Minute, Log: flog})
		alertWin = fleetWin
		log.Info("replicas: alerts are evaluated by the holder of the leader's lease in Redis, over the whole fleet's windows",
			"replica", lease.ID(), "lease", rc.LeaseOrDefault(), "lag", fleetLag, "redis", redactedURL(rc.Redis.URL))
	} else {
		lease = fleet.Local(reg)
		if cfg.Quotas.Redis.URL != "" {
			log.Warn("quotas are shared in Redis but replicas.redis.url is not set: if several replicas run, each evaluates alerts over its own traffic and each notifies")
		}
	}
	alerts := alert.NewEngine(cfg.Alerts, alertWin, alert.Options{Notifier: notifier, Events: events, Log: log.With("component", "alerts"), Registry: reg})
	alertCtx, stopAlerts := context.WithCancel(context.Background())
	var alertsDone sync.WaitGroup
	alertsDone.Go(func() { win.Run(alertCtx) })
	// Closed local days of the windows merged, for percentiles over weeks.
	alertsDone.Go(func() {
		window.NewCompactor(st, cfg.Location(), log.With("component", "window")).Run(alertCtx, 15*time.Minute)
	})
	if fleetWin != nil {
		alertsDone.Go(func() { lease.Run(alertCtx) }) // released at shutdown: another replica takes over at once
		alertsDone.Go(func() { dedup.Run(alertCtx) }) // drains before the notifiers close
		ev := &fleet.Evaluator{Lease: lease, Windows: fleetWin, Lag: fleetLag, Log: log.With("component", "alerts"),
			Eval: func(ctx context.Context, now time.Time) { alerts.Eval(ctx, now) }, State: fleetState, Engine: alerts}
		alertsDone.Go(func() { ev.Run(alertCtx, cfg.Alerts.Interval) })
	} else {
		alertsDone.Go(func() { alerts.Run(alertCtx, cfg.Alerts.Interval) })
	}
	defer func() {
		stopAlerts()
		alertsDone.Wait()
		_ = disp.Close()
		if fleetRedis != nil {
			_ = fleetRedis.Close()
		}
	}()

	limiter, err := newLimiter(cfg, st, events, alerts, reg, log.With("component", "quota"))
	if err != nil {
		stopWriter()
		return err
	}
	if c, ok := limiter.(io.Closer); ok {
		defer c.Close()
	}

	// OTLP receiver: engines' own spans (vLLM's llm_request), joined to
	// Records by trace id. A port in use is logged, not fatal: the gateway
	// works without engine spans.
	joiner := otlp.NewJoiner(cfg.OTLP.JoinWindow, 100000, reg)
	stopOTLP, receiving := startOTLP(cfg.OTLP, otlp.NewReceiver(joiner.Offer, log.With("component", "otlp"), reg), log.With("component", "otlp"))
	defer stopOTLP()
	if !receiving {
		// No span can arrive: the gateway expects none, and no Record
		// says its engine timing is pending.
		joiner = nil
	}

	// The Record's observers after the ledger, in flow order: the
	// alerting windows, then trace export (the gateway observes its own
	// metrics first).
	observers := []gateway.Observer{{Name: "windows", Observe: win.Observe}}
	// Trace export: a span per request, to any OTLP backend, when set;
	// the upstreams' URLs give the spans their server.address and port.
	if te := cfg.TraceExport; te.Endpoint != "" {
		ups := make(map[string]string, len(cfg.Upstreams))
		for _, u := range cfg.Upstreams {
			ups[u.Name] = u.URL
		}
		ex, err := traceexport.New(ctx, traceexport.Config{Endpoint: te.Endpoint, Headers: te.Headers, SampleRatio: te.SampleRatio, Upstreams: ups},
			log.With("component", "trace-export"))
		if err != nil {
			stopWriter()
			return err
		}
		observers = append(observers, gateway.Observer{Name: "trace_export", Observe: ex.Export})
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = ex.Shutdown(sctx)
		}()
	}

	// Capture (off by default): the redacted text of slow or failed
	// requests, written by the gateway's worker off the request path into
	// a table of its own, pruned by capture.retention, read by admin
	// tokens only.
	capStore, _ := st.(store.Captures)
	var captureSink func(context.Context, []*capture.Capture) error
	if cfg.Capture.Enabled {
		if capStore == nil {
			stopWriter()
			return fmt.Errorf("capture.enabled: store.backend %s keeps no captures", cfg.Store.Backend)
		}
		captureSink = capStore.AddCaptures
		log.Warn("capture is on: the redacted prompt and response of slow or failed requests are stored (admin API tokens read them)",
			"slow", cfg.Capture.Slow, "retention", cfg.Capture.Retention, "redact_rules", len(cfg.Capture.Redact))
	}

	// Gateway: the proxy, its metrics, and the writer as its sink.
	gw, err := gateway.New(gateway.Options{
		Config:         cfg,
		Log:            log.With("component", "gateway"),
		Metrics:        metrics.New(reg, labels),
		Sink:           lg.Append,
		CommitTimeout:  cfg.Store.Queue.CommitTimeout,
		MetricsHandler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}),
		Ready:          storeReady(cfg, st),
		Event:          events.Send,
		Prices:         prices,
		Limiter:        limiter,
		Joiner:         joiner,
		Amend:          lg.Amend,
		Observers:      observers,
		Registerer:     reg,
		Capture:        captureSink,
	})
	if err != nil {
		stopWriter()
		return err
	}
	defer gw.Close()
	if len(cfg.Auth.Keys) == 0 {
		log.Warn("no API keys configured: the gateway is open (any key or none is accepted; users are told apart by a hash of their key)")
	}

	// HTTP server: handlers are tracked so shutdown can wait for the last
	// Record even after cancelling the stragglers.
	baseCtx, cancelBase := context.WithCancelCause(context.Background())
	defer cancelBase(nil)
	// JSON API beside the proxy, and the retention pruner.
	apiOpts := web.Options{Store: st, Tokens: cfg.API.Tokens, Loc: cfg.Location(), Log: log.With("component", "api"),
		Alerts: activeAlerts(alerts, lease, fleetState), Notifiers: disp.Status, Windows: win, Quotas: quota.Reader(limiter), Captures: capStore}
	// Reconciliation runs kept by tollgate reconcile, in the ledger file.
	if cfg.Store.Backend == "clickhouse" {
		log.Info("reconciliation runs live in a SQLite ledger file, and store.backend is clickhouse: the dashboard lists none")
	} else if runs, err := billing.OpenRuns(ctx, cfg.Store.SQLite.Path); err != nil {
		log.Warn("reconciliation runs unavailable; the dashboard lists none", "err", err)
	} else {
		defer runs.Close()
		apiOpts.Reconciliations = runs
	}
	api := web.NewAPI(apiOpts)
	if len(cfg.API.Tokens) == 0 {
		log.Warn("no api.tokens configured: the JSON API (/api/v1/: users, keys, business lines, costs) answers any loopback client without a token. " +
			"A reverse proxy or sidecar on this host makes its clients loopback: requests carrying Forwarded, X-Forwarded-For, X-Real-IP, X-Forwarded-Host, " +
			"X-Forwarded-Proto or Via are refused, but a proxy that sets none of them opens the API to everyone behind it. Configure api.tokens before putting a proxy in front.")
	}
	pruneCtx, stopPrune := context.WithCancel(context.Background())
	defer stopPrune()
	go prune(pruneCtx, st, retention(cfg.Store.Retention), log.With("component", "retention"))
	if r, ok := st.(roller); ok {
		// ClickHouse recomputes its rollups in a pass (Report runs one
		// first); running it every minute keeps that pass short.
		go rollUp(pruneCtx, r, log.With("component", "rollup"))
	}
	if capStore != nil && cfg.Capture.Retention > 0 {
		go pruneCaptures(pruneCtx, capStore, cfg.Capture.Retention, log.With("component", "capture"))
	}
	if len(cfg.GPUHours) > 0 {
		go allocateGPU(pruneCtx, st, prices, log.With("component", "gpu-hours"))
	}
	go preloadQuotas(pruneCtx, limiter, st, log.With("component", "quota"))
	if cfg.EngineMetrics.Interval > 0 {
		go scrapeEngines(pruneCtx, cfg, st, log.With("component", "scrape"), reg)
	}

	var inflight sync.WaitGroup
	mux := http.NewServeMux()
	// Request bodies are bound by limits.body_timeout on every route (the
	// gateway's handler applies it itself): the API and the dashboard read
	// none, but the server reads what is sent before the next request.
	mux.Handle("/api/", gateway.BodyDeadline(cfg.Limits.BodyTimeout, api))
	mux.Handle("/ui/", gateway.BodyDeadline(cfg.Limits.BodyTimeout, ui.Handler("/ui/"))) // the dashboard, reading /api/
	mux.Handle("/", gw.Handler())
	handler := mux
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inflight.Add(1)
			defer inflight.Done()
			handler.ServeHTTP(w, r)
		}),
		BaseContext:       func(net.Listener) context.Context { return baseCtx },
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	// listen_tls: ServeTLS with the pair in TLSConfig (no file names) also
	// offers HTTP/2 by ALPN.
	if cfg.ListenTLS.Enabled() {
		if srv.TLSConfig, err = cfg.ListenTLS.Load("listen_tls"); err != nil {
			stopWriter()
			return err
		}
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		stopWriter()
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	// limits.max_conns_per_ip, counted per TCP peer at accept.
	limited, err := gateway.LimitConns(ln, cfg.Limits.MaxConnsPerIP, reg, log.With("component", "gateway"))
	if err != nil {
		_ = ln.Close()
		stopWriter()
		return err
	}
	ln = limited
	log.Info("gateway listening", "addr", ln.Addr().String(), "tls", srv.TLSConfig != nil, "upstreams", len(cfg.Upstreams), "db", cfg.Store.SQLite.Path)
	if started != nil {
		started <- ln.Addr().String()
	}
	serveErr := make(chan error, 1)
	go func() {
		if srv.TLSConfig != nil {
			serveErr <- srv.ServeTLS(ln, "", "")
			return
		}
		serveErr <- srv.Serve(ln)
	}()

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		stopWriter()
		return fmt.Errorf("http server: %w", err)
	}

	// Shutdown in flow order: stop accepting, drain requests, flush records.
	log.Info("shutting down: draining in-flight requests", "grace", cfg.ShutdownGrace)
	gw.Drain()
	graceCtx, cancelGrace := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	err = srv.Shutdown(graceCtx)
	cancelGrace()
	if errors.Is(err, context.DeadlineExceeded) {
		log.Warn("grace period over: cancelling the remaining requests")
		cancelBase(gateway.ErrShutdown)
		_ = srv.Close()
	}
	inflight.Wait()
	stopWriter()
	log.Info("stopped")
	return nil
}

// ledgerConfig is the ledger of cfg's store section.
func ledgerConfig(cfg *config.Config) ledger.Config {
	return ledger.Config{Durability: cfg.Store.Durability, QueueDir: cfg.QueueDir(), QueueMaxBytes: cfg.Store.Queue.MaxBytes,
		QueueSize: cfg.Store.QueueSize, BatchSize: cfg.Store.BatchSize, FlushInterval: cfg.Store.FlushInterval}
}

// storeReady is serve's /readyz check: the store's state as a detail
// line, never an error. A store not connected yet (ClickHouse down when
// serve started) leaves the replica ready: it serves and keeps the
// Records in its write-ahead queue, and ClickHouse is shared by the
// fleet, so answering 503 would take every replica out of the load
// balancer at once and turn a ledger outage into an inference outage
// (docs/operations.md, "ClickHouse down at start").
func storeReady(cfg *config.Config, st store.Store) func() ([]string, error) {
	backend := cfg.Store.Backend
	if backend == "" {
		backend = "sqlite"
	}
	wait := "the write-ahead queue"
	switch cfg.Store.Durability {
	case "memory":
		wait = "memory (store.durability: memory)"
	case "off":
		wait = "nowhere (store.durability: off)"
	}
	return func() ([]string, error) {
		if err := storeConnected(st); err != nil {
			return []string{err.Error() + "; finished requests wait in " + wait + " until it connects"}, nil
		}
		return []string{"store connected: " + backend}, nil
	}
}

// activeAlerts is what /api/v1/alerts lists: the engine's alerts on a
// single replica and on the fleet's leader; on the other replicas the
// state the leader saved in Redis, with the alerts they raised themselves,
// so that every replica shows the fleet's alerts.
func activeAlerts(e *alert.Engine, lease *fleet.Lease, st *fleet.State) func() []alert.Alert {
	if st == nil {
		return e.Active
	}
	return func() []alert.Alert {
		if lease.Held() {
			return e.Active()
		}
		return st.Active(context.Background(), e.Snapshot())
	}
}
