package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/tollgate-dev/tollgate/internal/alert"
	"github.com/tollgate-dev/tollgate/internal/billing"
	"github.com/tollgate-dev/tollgate/internal/buildinfo"
	"github.com/tollgate-dev/tollgate/internal/capture"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/cost"
	"github.com/tollgate-dev/tollgate/internal/fleet"
	"github.com/tollgate-dev/tollgate/internal/gateway"
	"github.com/tollgate-dev/tollgate/internal/label"
	"github.com/tollgate-dev/tollgate/internal/ledger"
	"github.com/tollgate-dev/tollgate/internal/lifecycle"
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
	"github.com/tollgate-dev/tollgate/internal/why"
	"github.com/tollgate-dev/tollgate/internal/window"
)

// newLimiter builds the quota limiter, or nil when no quota is configured:
// the in-process one, or the Redis one shared by every replica when
// quotas.redis.url is set (it implements io.Closer). Today's usage per
// scope is read from the ledger's rollups the first time a scope is seen
// each day (with Redis: the first time its day key is missing), so a
// restart does not reset quotas (and quota.RunPreload reads it for every
// configured scope at start). reg and log may be nil.
func newLimiter(cfg *config.Config, a store.Reports, events *store.EventWriter, alerts *alert.Engine, reg prometheus.Registerer, log *slog.Logger) (quota.Limiter, error) {
	q, err := cfg.QuotaConfig()
	if err != nil {
		return nil, err
	}
	if len(q.Keys)+len(q.Users)+len(q.BizLines) == 0 && q.Default == (quota.Defaults{}) {
		return nil, nil
	}
	seed := func(ctx context.Context, s quota.Scope, day time.Time) (int64, int64, error) {
		used, err := quotaDayUsage(ctx, a, s.Kind, day, s.Name)
		u := used[s.Name]
		return u.Tokens, u.CostNanos, err
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
// ledger's rollups in one query, for the limiters' Preload.
func quotaDaySeed(a store.Reports) quota.DaySeedFunc {
	return func(ctx context.Context, k quota.Kind, day time.Time) (map[string]quota.Used, error) {
		return quotaDayUsage(ctx, a, k, day, "")
	}
}

// quotaDayUsage reads the usage recorded on the quota day that starts at
// day from the ledger's rollups, by subject of kind k: name's alone when
// set, else every subject's.
func quotaDayUsage(ctx context.Context, a store.Reports, k quota.Kind, day time.Time, name string) (map[string]quota.Used, error) {
	dim := map[quota.Kind]store.Dim{quota.KindKey: store.DimKey, quota.KindUser: store.DimUser, quota.KindBizLine: store.DimBizLine}[k]
	q := store.ReportQuery{From: day, To: day.AddDate(0, 0, 1), GroupBy: []store.Dim{dim}, Measures: []string{"input_tokens", "output_tokens", "cost_nanos"}}
	if name != "" {
		q.Where = map[store.Dim]string{dim: name}
	}
	rows, err := a.Report(ctx, q)
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

// startOTLP serves the receiver on its HTTP and gRPC addresses in the
// ingress stage; receiving says whether either listens. A port in use is
// logged, not fatal: the gateway works without engine spans.
func startOTLP(stage *lifecycle.Stage, c config.OTLP, recv *otlp.Receiver, log *slog.Logger) (receiving bool) {
	if c.HTTPListen != "" {
		if ln, err := net.Listen("tcp", c.HTTPListen); err != nil {
			log.Warn("OTLP/HTTP receiver not started; engine spans will not be joined", "addr", c.HTTPListen, "err", err)
		} else {
			srv := &http.Server{Handler: recv.Handler(), ReadHeaderTimeout: 10 * time.Second}
			log.Info("OTLP/HTTP receiver listening", "addr", ln.Addr().String(), "vllm_flag", "--otlp-traces-endpoint http://"+ln.Addr().String()+"/v1/traces")
			stage.Go("otlp-http", func(ctx context.Context) error {
				return serveUntil(ctx, func() error { return srv.Serve(ln) }, func() { _ = srv.Close() })
			})
			receiving = true
		}
	}
	if c.GRPCListen != "" {
		if ln, err := net.Listen("tcp", c.GRPCListen); err != nil {
			log.Warn("OTLP/gRPC receiver not started", "addr", c.GRPCListen, "err", err)
		} else {
			gs := grpc.NewServer()
			recv.RegisterGRPC(gs)
			log.Info("OTLP/gRPC receiver listening", "addr", ln.Addr().String())
			stage.Go("otlp-grpc", func(ctx context.Context) error { return serveUntil(ctx, func() error { return gs.Serve(ln) }, gs.Stop) })
			receiving = true
		}
	}
	return receiving
}

// serveUntil runs a server's serve loop until ctx ends, then stops it and
// waits for the loop; an error of the loop before then is returned.
func serveUntil(ctx context.Context, serve func() error, stop func()) error {
	errc := make(chan error, 1)
	go func() { errc <- serve() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	stop()
	<-errc
	return nil
}

func retention(r config.Retention) store.Retention {
	return store.Retention{Details: r.Details, Ledger: r.Ledger, Minute: r.Minute, Hour: r.Hour, Day: r.Day, Events: r.Events, Engine: r.Minute}
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
	// SIGHUP reloads the file (systemd's ExecReload sends it).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	opts := serveOptions{hup: hup}
	if *cfgPath != "" {
		opts.load = func() (*config.Config, error) { return loadConfig(*cfgPath, *listen, *upstream, *engine, *db) }
	}
	return serveWith(ctx, cfg, log, nil, opts)
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

// serveOptions are serve's test hooks; the zero value is production.
type serveOptions struct {
	// wrapStore wraps the store serve opens, to watch how it is used.
	wrapStore func(store.Backend) store.Backend
	// firstPass is when the background jobs' first pass runs: a minute
	// after start when zero, so it never competes with start-up traffic.
	firstPass time.Duration
	// load reads the configuration again for a live reload (the file and
	// the flags); nil: serve cannot reload (no config file).
	load func() (*config.Config, error)
	// hup triggers a reload at each value (SIGHUP in production).
	hup <-chan os.Signal
}

// serve runs the gateway until ctx is done, then drains: in-flight requests
// get the grace period, then are cancelled and recorded as cut by shutdown;
// every Record is flushed to the store before serve returns. When started
// is non-nil it receives the listen address once the gateway accepts.
func serve(ctx context.Context, cfg *config.Config, log *slog.Logger, started chan<- string) error {
	return serveWith(ctx, cfg, log, started, serveOptions{})
}

// serveWith is serve in four stages, started in flow order and stopped in
// reverse (internal/lifecycle): the store; the sinks that write to it (the
// ledger, the event writer); the background jobs (windows, alerts,
// retention, roll-ups, GPU hours, quota preload, scraping); the ingress
// (the HTTP server, the OTLP receiver). Each stage's goroutines have
// returned before what they use is closed.
func serveWith(ctx context.Context, cfg *config.Config, log *slog.Logger, started chan<- string, opts serveOptions) (err error) {
	// Metrics registry: passed to every component, never global.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildinfo.Metric(buildinfo.Read()))
	rt := lifecycle.New(log)
	defer func() {
		if serr := rt.Stop(); serr != nil {
			log.Error("stopped with errors", "err", serr)
			err = cmp.Or(err, serr)
		}
	}()

	// Store: the ledger (SQLite or ClickHouse). A ClickHouse that does not
	// answer does not stop the start: the store connects in the
	// background and the write-ahead queue keeps the Records until it has
	// (/readyz and tollgate_store_connected say so).
	st, err := openServeStore(ctx, cfg, log.With("component", "store"))
	if err != nil {
		return err
	}
	if opts.wrapStore != nil {
		st = opts.wrapStore(st)
	}
	rt.Stage("store").Defer(func() { _ = st.Close() })
	registerStoreConnected(reg, st)

	// Sinks: the durable ledger in front of the store, and the events
	// (quota warnings, tokenizer mismatches) written in batches. Both
	// flush everything when they stop.
	sinks := rt.Stage("sinks")
	lg, err := ledger.Open(ledgerConfig(cfg), st, log, reg)
	if err != nil {
		return err
	}
	sinks.Go("ledger", lg.Run)
	events := store.NewEventWriter(st, 4096, log.With("component", "events"))
	sinks.Go("events", events.Run)

	// Background: the alerting windows and engine, quotas, and the jobs
	// that read or maintain the store.
	bg := rt.Stage("background")
	prices, err := cost.NewTable(cfg.CostConfig())
	if err != nil {
		return err
	}
	// One set of label bounds for the metrics and the windows, so both
	// fold a client's invented values the same way.
	labels := label.New(reg, cfg.LabelConfig())
	al, err := startAlerting(ctx, bg, cfg, st, labels, events, reg, log)
	if err != nil {
		return err
	}
	limiter, err := newLimiter(cfg, st, events, al.engine, reg, log.With("component", "quota"))
	if err != nil {
		return err
	}
	if c, ok := limiter.(io.Closer); ok {
		bg.Defer(func() { _ = c.Close() })
	}
	startJobs(bg, cfg, st, prices, limiter, reg, log, cmp.Or(opts.firstPass, time.Minute))
	// Budgets: months and rolling windows beside the quota day, read
	// from the store; those that enforce go in front of the quotas.
	budgets, admission := startBudgets(bg, cfg, st, al.engine, limiter, reg, log.With("component", "budget"))
	gwMetrics := metrics.New(reg, labels)
	observers, err := recordObservers(ctx, bg, cfg, gwMetrics, al.win, events, log)
	if err != nil {
		return err
	}

	// Ingress: OTLP spans in, requests in.
	ingress := rt.Stage("ingress")
	// OTLP receiver: engines' own spans (vLLM's llm_request), joined to
	// Records by trace id.
	joiner := otlp.NewJoiner(cfg.OTLP.JoinWindow, 100000, reg)
	if !startOTLP(ingress, cfg.OTLP, otlp.NewReceiver(joiner.Offer, log.With("component", "otlp"), reg), log.With("component", "otlp")) {
		// No span can arrive: the gateway expects none, and no Record
		// says its engine timing is pending.
		joiner = nil
	}
	captureSink := captureSink(cfg, st, log)
	// Gateway: the proxy. Every finished Record goes to the ledger first
	// (its Sink), then to the observers in flow order.
	gw, err := gateway.New(gateway.Options{
		Config:        cfg,
		Log:           log.With("component", "gateway"),
		Metrics:       gwMetrics,
		Sink:          lg.Append,
		CommitTimeout: cfg.Store.Queue.CommitTimeout,
		// OpenMetrics when the scraper asks for it (Prometheus does): the
		// latency histograms' exemplars are only in that format.
		MetricsHandler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true}),
		Ready:          storeReady(cfg, st),
		Event:          events.Send,
		Prices:         prices,
		Limiter:        admission,
		Joiner:         joiner,
		Amend:          lg.Amend,
		Observers:      observers,
		Registerer:     reg,
		Capture:        captureSink,
	})
	if err != nil {
		return err
	}
	ingress.Defer(gw.Close)
	if len(cfg.Auth.Keys) == 0 {
		log.Warn("no API keys configured: the gateway is open (any key or none is accepted; users are told apart by a hash of their key)")
	}
	// Live reload: SIGHUP and POST /api/v1/admin/reload put keys,
	// upstreams, prices, quotas, alert rules and notifiers in force.
	reloadTotal, reloadLast := newReloadMetrics(reg)
	rl := &reloader{load: opts.load, started: cfg, log: log.With("component", "reload"), gw: gw, limiter: limiter,
		engine: al.engine, notifiers: al.disp, newDisp: al.newDisp, total: reloadTotal, last: reloadLast}
	if opts.hup != nil {
		ingress.Go("reload", func(ctx context.Context) error {
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-opts.hup:
					_, _ = rl.Reload() // logged and counted
				}
			}
		})
	}
	// JSON API beside the proxy.
	apiOpts := web.Options{Store: st, Tokens: cfg.API.Tokens, Loc: cfg.Location(), Log: log.With("component", "api"),
		Alerts: al.active(), Notifiers: al.disp.Status, Windows: al.win, Quotas: quota.Reader(limiter), Captures: st}
	if opts.load != nil {
		apiOpts.Reload = rl.Reload
	}
	if budgets != nil {
		apiOpts.Budgets = budgets.Statuses
	}
	// Reconciliation runs kept by tollgate reconcile, in the ledger file.
	if cfg.Store.Backend == "clickhouse" {
		log.Info("reconciliation runs live in a SQLite ledger file, and store.backend is clickhouse: the dashboard lists none")
	} else if runs, err := billing.OpenRuns(ctx, cfg.Store.SQLite.Path); err != nil {
		log.Warn("reconciliation runs unavailable; the dashboard lists none", "err", err)
	} else {
		bg.Defer(func() { _ = runs.Close() })
		apiOpts.Reconciliations = runs
	}
	if len(cfg.API.Tokens) == 0 {
		log.Warn("no api.tokens configured: the JSON API (/api/v1/: users, keys, business lines, costs) answers any loopback client without a token. " +
			"A reverse proxy or sidecar on this host makes its clients loopback: requests carrying Forwarded, X-Forwarded-For, X-Real-IP, X-Forwarded-Host, " +
			"X-Forwarded-Proto or Via are refused, but a proxy that sets none of them opens the API to everyone behind it. Configure api.tokens before putting a proxy in front.")
	}
	if err := startHTTP(ingress, cfg, gw, web.NewAPI(apiOpts), reg, log, started); err != nil {
		return err
	}

	select {
	case <-ctx.Done():
		log.Info("shutting down: draining in-flight requests", "grace", cfg.ShutdownGrace)
	case err := <-rt.Failed():
		return err
	}
	if err := rt.Stop(); err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

// startHTTP listens and serves the gateway, the API and the dashboard in
// the ingress stage. When the stage stops, the server drains: requests in
// flight get the grace period, then are cancelled and recorded as cut by
// shutdown; the stage waits for the last handler (and so the last Record)
// even after cancelling the stragglers.
func startHTTP(ingress *lifecycle.Stage, cfg *config.Config, gw *gateway.Gateway, api http.Handler, reg prometheus.Registerer, log *slog.Logger, started chan<- string) error {
	baseCtx, cancelBase := context.WithCancelCause(context.Background())
	ingress.Defer(func() { cancelBase(nil) })
	var inflight sync.WaitGroup
	mux := http.NewServeMux()
	// Request bodies are bound by limits.body_timeout on every route (the
	// gateway's handler applies it itself): the API and the dashboard read
	// none, but the server reads what is sent before the next request.
	mux.Handle("/api/", gateway.BodyDeadline(cfg.Limits.BodyTimeout, api))
	mux.Handle("/ui/", gateway.BodyDeadline(cfg.Limits.BodyTimeout, ui.Handler("/ui/", buildinfo.Read().Short()))) // the dashboard, reading /api/
	mux.Handle("/", gw.Handler())
	// A browser pointed at the gateway itself lands on the dashboard; any
	// other path at the root stays the gateway's (an OpenAI-style 404).
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		to := "/ui/"
		if r.URL.RawQuery != "" {
			to += "?" + r.URL.RawQuery // e.g. ?lang=zh
		}
		http.Redirect(w, r, to, http.StatusFound)
	})
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inflight.Add(1)
			defer inflight.Done()
			mux.ServeHTTP(w, r)
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
		var err error
		if srv.TLSConfig, err = cfg.ListenTLS.Load("listen_tls"); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	// limits.max_conns_per_ip, counted per TCP peer at accept.
	limited, err := gateway.LimitConns(ln, cfg.Limits.MaxConnsPerIP, reg, log.With("component", "gateway"))
	if err != nil {
		_ = ln.Close()
		return err
	}
	ln = limited
	log.Info("gateway listening", "addr", ln.Addr().String(), "tls", srv.TLSConfig != nil, "upstreams", len(cfg.Upstreams), "db", cfg.Store.SQLite.Path)
	ingress.Go("http", func(ctx context.Context) error {
		err := serveUntil(ctx, func() error {
			if srv.TLSConfig != nil {
				return srv.ServeTLS(ln, "", "")
			}
			return srv.Serve(ln)
		}, func() {
			// Shutdown in flow order: stop accepting, drain requests.
			gw.Drain()
			graceCtx, cancelGrace := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
			defer cancelGrace()
			if err := srv.Shutdown(graceCtx); errors.Is(err, context.DeadlineExceeded) {
				log.Warn("grace period over: cancelling the remaining requests")
				cancelBase(gateway.ErrShutdown)
				_ = srv.Close()
			}
		})
		inflight.Wait()
		if err != nil {
			return fmt.Errorf("http server: %w", err)
		}
		return nil
	})
	if started != nil {
		started <- ln.Addr().String()
	}
	return nil
}

// alerting is the alerting block of serve: the windows finished requests
// feed (persisted in the store, reloaded after a restart), the engine that
// evaluates the rules and the dispatcher that notifies, by severity. With
// replicas (replicas.redis.url), only the holder of a lease in Redis
// evaluates, over every replica's minutes read back from the shared store,
// and each notification is sent once fleet-wide (internal/fleet).
type alerting struct {
	win        *window.Aggregator
	engine     *alert.Engine
	disp       *notifierSwitch
	newDisp    func(notify.Config) (*notify.Dispatcher, error) // a reload's dispatcher
	lease      *fleet.Lease
	fleetState *fleet.State
}

// active is what /api/v1/alerts lists (activeAlerts).
func (a *alerting) active() func() []alert.Alert {
	return activeAlerts(a.engine, a.lease, a.fleetState)
}

// startAlerting builds the alerting block and runs it in stage.
func startAlerting(ctx context.Context, stage *lifecycle.Stage, cfg *config.Config, st store.Backend, labels *label.Bounds, events *store.EventWriter,
	reg *prometheus.Registry, log *slog.Logger) (*alerting, error) {
	wcfg := window.Config{Labels: labels}
	if cfg.Replicas.Enabled() {
		wcfg.Grace = fleetGrace
	}
	win := window.New(wcfg, st, log.With("component", "window"), reg)
	if err := win.Load(ctx, time.Now()); err != nil {
		log.Warn("could not reload the alerting windows; they start empty", "err", err)
	}
	newDisp := func(c notify.Config) (*notify.Dispatcher, error) {
		return notify.New(c, notify.Options{Log: log.With("component", "notify"), Registerer: reg, Location: cfg.Location()})
	}
	d, err := newDisp(cfg.Notifiers)
	if err != nil {
		return nil, err
	}
	disp := &notifierSwitch{d: d, cfg: cfg.Notifiers}
	stage.Defer(func() { _ = disp.Close() }) // after dedup has drained into it
	a := &alerting{win: win, disp: disp, newDisp: newDisp}
	var (
		alertWin alert.Windows  = win
		notifier alert.Notifier = disp
		fleetWin *fleet.Windows
		dedup    *fleet.Dedup
	)
	if rc := cfg.Replicas; rc.Enabled() {
		rdb, err := fleet.NewClient(rc.Redis.URL, 2*time.Second)
		if err != nil {
			return nil, fmt.Errorf("replicas.redis.url: %w", err)
		}
		stage.Defer(func() { _ = rdb.Close() })
		flog := log.With("component", "fleet")
		a.lease = fleet.NewLease(rdb, fleet.LeaseOptions{Prefix: rc.PrefixOrDefault(), TTL: rc.LeaseOrDefault(), Log: flog, Registerer: reg})
		dedup = fleet.NewDedup(disp, rdb, fleet.DedupOptions{Prefix: rc.PrefixOrDefault(), Repeat: cfg.Alerts.Repeat, Log: flog, Registerer: reg})
		notifier = dedup
		a.fleetState = fleet.NewState(a.lease, flog)
		fleetWin = fleet.NewWindows(st, fleet.WindowsOptions{MinuteRetention: cfg.Store.Retention.Minute, Log: flog})
		alertWin = fleetWin
		log.Info("replicas: alerts are evaluated by the holder of the leader's lease in Redis, over the whole fleet's windows",
			"replica", a.lease.ID(), "lease", rc.LeaseOrDefault(), "lag", fleetLag, "redis", redactedURL(rc.Redis.URL))
	} else {
		a.lease = fleet.Local(reg)
		if cfg.Quotas.Redis.URL != "" {
			log.Warn("quotas are shared in Redis but replicas.redis.url is not set: if several replicas run, each evaluates alerts over its own traffic and each notifies")
		}
	}
	// Each latency or tokens alert says what changed, read from the ledger.
	a.engine = alert.NewEngine(cfg.Alerts, alertWin, alert.Options{Notifier: notifier, Events: events, Log: log.With("component", "alerts"), Registry: reg,
		Explain: why.Explainer(st, 10*time.Second)})
	stage.Go("windows", win.Run)
	// Closed local days of the windows merged, for percentiles over weeks.
	compactor := window.NewCompactor(st, cfg.Location(), log.With("component", "window"))
	stage.Go("window-days", func(ctx context.Context) error { return compactor.Run(ctx, 15*time.Minute) })
	if fleetWin == nil {
		stage.Go("alerts", func(ctx context.Context) error { return a.engine.Run(ctx, cfg.Alerts.Interval) })
		return a, nil
	}
	stage.Go("lease", a.lease.Run) // released at shutdown: another replica takes over at once
	stage.Go("dedup", dedup.Run)   // drains before the notifiers close
	ev := &fleet.Evaluator{Lease: a.lease, Windows: fleetWin, Lag: fleetLag, Log: log.With("component", "alerts"),
		Eval: func(ctx context.Context, now time.Time) { a.engine.Eval(ctx, now) }, State: a.fleetState, Engine: a.engine}
	stage.Go("alerts", func(ctx context.Context) error { return ev.Run(ctx, cfg.Alerts.Interval) })
	return a, nil
}

// startJobs runs the background jobs that maintain the store or read it,
// each from the package that owns it; their first pass comes after first.
func startJobs(stage *lifecycle.Stage, cfg *config.Config, st store.Backend, prices *cost.Table, limiter quota.Limiter,
	reg prometheus.Registerer, log *slog.Logger, first time.Duration) {
	stage.Go("retention", func(ctx context.Context) error {
		return store.RunRetention(ctx, st, retention(cfg.Store.Retention), first, log.With("component", "retention"))
	})
	if r, ok := st.(store.RollUpper); ok {
		stage.Go("rollups", func(ctx context.Context) error {
			return store.RunRollUps(ctx, r, first, log.With("component", "rollup"))
		})
	}
	if cfg.Capture.Retention > 0 {
		stage.Go("capture-retention", func(ctx context.Context) error {
			return store.RunCaptureRetention(ctx, st, cfg.Capture.Retention, first, log.With("component", "capture"))
		})
	}
	if len(cfg.GPUHours) > 0 {
		stage.Go("gpu-hours", func(ctx context.Context) error {
			return billing.RunGPUAllocation(ctx, st, prices, first, log.With("component", "gpu-hours"))
		})
	}
	stage.Go("quota-preload", func(ctx context.Context) error {
		return quota.RunPreload(ctx, limiter, quotaDaySeed(st), log.With("component", "quota"))
	})
	if cfg.EngineMetrics.Interval > 0 {
		stage.Go("scrape", func(ctx context.Context) error {
			return scrape.RunEngines(ctx, cfg.Upstreams, cfg.EngineMetrics.Interval, st, log.With("component", "scrape"), reg)
		})
	}
}

// recordObservers are the Record's observers after the ledger, in flow
// order: the Prometheus metrics, the alerting windows, the system-prompt
// watch (its changes are events), then trace export.
// The trace exporter flushes when stage stops.
func recordObservers(ctx context.Context, stage *lifecycle.Stage, cfg *config.Config, m *metrics.Metrics, win *window.Aggregator, events why.Events, log *slog.Logger) ([]gateway.Observer, error) {
	observers := []gateway.Observer{{Name: "metrics", Observe: m.Observe}, {Name: "windows", Observe: win.Observe},
		{Name: "prompt_changes", Observe: why.NewWatch(events).Observe}}
	te := cfg.TraceExport
	if te.Endpoint == "" {
		return observers, nil
	}
	// A span per request, to any OTLP backend; the upstreams' URLs give
	// the spans their server.address and port.
	ups := make(map[string]string, len(cfg.Upstreams))
	for _, u := range cfg.Upstreams {
		ups[u.Name] = u.URL
	}
	ex, err := traceexport.New(ctx, traceexport.Config{Endpoint: te.Endpoint, Headers: te.Headers, SampleRatio: te.SampleRatio, Upstreams: ups},
		log.With("component", "trace-export"))
	if err != nil {
		return nil, err
	}
	stage.Defer(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = ex.Shutdown(sctx)
	})
	return append(observers, gateway.Observer{Name: "trace_export", Observe: ex.Export}), nil
}

// captureSink is where the gateway's capture worker writes (capture is
// off by default): the redacted text of slow or failed requests, in a
// table of their own, pruned by capture.retention, read by admin tokens
// only. nil when capture is off.
func captureSink(cfg *config.Config, capStore store.Captures, log *slog.Logger) func(context.Context, []*capture.Capture) error {
	if !cfg.Capture.Enabled {
		return nil
	}
	log.Warn("capture is on: the redacted prompt and response of slow or failed requests are stored (admin API tokens read them)",
		"slow", cfg.Capture.Slow, "retention", cfg.Capture.Retention, "redact_rules", len(cfg.Capture.Redact))
	return capStore.AddCaptures
}

// registerStoreConnected exports tollgate_store_connected.
func registerStoreConnected(reg prometheus.Registerer, st store.Store) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tollgate_store_connected",
		Help: "1 once the store has been reached and its schema checked; 0 while serve, started with ClickHouse unreachable, keeps connecting (finished requests wait in the write-ahead queue)."},
		func() float64 {
			if storeConnected(st) != nil {
				return 0
			}
			return 1
		}))
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
