// Package gateway is tollgate's HTTP front: it authenticates a request,
// routes it to an upstream engine by model, proxies it (streaming events
// through as they arrive while reading the same bytes on the side), and
// turns what it saw into a Record handed to the metrics and the store.
// The request path reads top to bottom: handleInference → attempt →
// streamResponse or bufferedResponse → finish.
package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/internal/capture"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/cost"
	"github.com/tollgate-dev/tollgate/internal/metrics"
	"github.com/tollgate-dev/tollgate/internal/otlp"
	"github.com/tollgate-dev/tollgate/internal/quota"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/tokenizer"
	"github.com/tollgate-dev/tollgate/internal/usage"
)

// Options wire a Gateway.
type Options struct {
	Config  *config.Config
	Log     *slog.Logger
	Metrics *metrics.Metrics
	// Sink receives every finished Record and must not block. It may
	// return a wait function that returns once the Record is durable (the
	// write-ahead queue's group commit): the gateway calls it, bounded by
	// CommitTimeout, before sending a successful response's final bytes,
	// so a client that saw a whole answer implies a durable ledger row.
	Sink func(*record.Record) (wait func(context.Context) error)
	// CommitTimeout bounds that wait (default 1s); past it the response
	// completes anyway and the wait is counted as timed out.
	CommitTimeout time.Duration
	// MetricsHandler serves /metrics.
	MetricsHandler http.Handler
	// Ready reports on dependencies (the store) for /readyz: an error
	// answers 503, which takes the replica out of the load balancer;
	// detail lines go in the body either way (a store not connected yet
	// while the write-ahead queue keeps its Records is detail, not an
	// error: see docs/operations.md). Nil: ready.
	Ready func() (detail []string, err error)
	// Event receives events worth a person's attention (a tokenizer
	// mismatch); it must not block. Nil drops them.
	Event func(store.Event)
	// Prices rates every request; nil leaves costs at zero.
	Prices *cost.Table
	// Limiter enforces quotas at admission; nil means none.
	Limiter quota.Limiter
	// Joiner pairs vLLM's own span for a request (arriving through the
	// OTLP receiver) with its Record; Amend receives timings that arrive
	// after the Record was handed on. Nil: no span join.
	Joiner *otlp.Joiner
	Amend  func(requestID string, et record.EngineTiming)
	// Observers receive every finished Record after the Sink, in order
	// (serve's: Metrics.Observe, the alerting windows, trace export): each
	// must not block, and each
	// runs isolated — a panic in one is logged and counted, and neither
	// the Record's row nor the observers after it are lost to it.
	Observers []Observer
	// Registerer, when set, gets the gateway's own collectors: the
	// upstream queues and slots (tollgate_gateway_queue_*,
	// tollgate_gateway_slots_in_use).
	Registerer prometheus.Registerer
	// Dial, when set, opens every upstream connection in place of the
	// network dialer (it becomes the upstream transports' DialContext):
	// for tests and embedding, such as an in-memory network. The
	// upstreams' connect timeout is then Dial's own business. Nil: the
	// normal TCP dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Capture writes the captures of slow or failed requests (the store's
	// AddCaptures), from a worker off the request path; required when
	// Config.Capture is enabled, unused otherwise.
	Capture func(context.Context, []*capture.Capture) error
}

// Gateway is the proxy.
type Gateway struct {
	cfg      *config.Config
	log      *slog.Logger
	metrics  *metrics.Metrics
	sink     func(*record.Record) func(context.Context) error
	commitTO time.Duration
	// live is what a reload replaces (reload.go): keys, upstreams and
	// the priorities that name keys. A request reads it without a lock.
	live     atomic.Pointer[live]
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	mux      http.Handler
	ready    func() ([]string, error)
	draining atomic.Bool
	sampleN  uint32 // normal requests kept per 10,000
	checkN   uint32 // tokenizer checks per 10,000 requests
	counters *counters
	systems  systemCounts // system prompts' token counts, by model and hash
	event    func(store.Event)
	prices   atomic.Pointer[priceBook] // nil book: no prices
	limiter  quota.Limiter
	cache    *responseCache // nil when disabled
	joiner   *otlp.Joiner
	amend    func(string, record.EngineTiming)
	// observers run after the sink: the gateway's own metrics first, then
	// Options.Observers.
	observers []Observer
	checks    chan tokenCheck // bounded: checks are dropped, never queued without end
	capture   *capturer       // nil unless capture.enabled
	buffers   *budget         // limits.max_buffered_bytes, shared by every non-streamed answer
	pass      *passthrough    // every other path under /v1/ (passthrough.go)
	stop      chan struct{}
	stopOnce  sync.Once
}

// tokenCheck is one sampled comparison, done off the request path.
type tokenCheck struct {
	rec  *record.Record
	ct   *tokenizer.Counter
	body []byte
}

// TollgateRequestIDHeader carries tollgate's own id of the request (the
// ledger's key, what `tollgate requests show` takes) on every response;
// X-Request-Id echoes the client's id when it sent one.
const TollgateRequestIDHeader = "X-Tollgate-Request-Id"

// ErrShutdown is the cancellation cause main gives in-flight requests when
// the shutdown grace period runs out.
var ErrShutdown = errors.New("gateway shutting down")

// New builds a Gateway from its options.
func New(o Options) (*Gateway, error) {
	if o.Config == nil || o.Metrics == nil || o.Sink == nil || o.Log == nil {
		return nil, errors.New("gateway: Config, Log, Metrics and Sink are required")
	}
	g := &Gateway{
		cfg:      o.Config,
		log:      o.Log,
		metrics:  o.Metrics,
		sink:     o.Sink,
		commitTO: cmp.Or(o.CommitTimeout, time.Second),
		dial:     o.Dial,
		ready:    o.Ready,
		sampleN:  uint32(o.Config.Sampling.Normal * 10000),
		checkN:   uint32(o.Config.Sampling.TokenizerCheck * 10000),
		event:    o.Event,
		limiter:  o.Limiter,
		joiner:   o.Joiner,
		amend:    o.Amend,
		checks:   make(chan tokenCheck, 64),
		buffers:  newBudget(o.Config.Limits.MaxBufferedBytes),
		stop:     make(chan struct{}),
	}
	g.observers = o.Observers
	g.live.Store(&live{auth: newAuth(o.Config.Auth.Keys), routes: newRouter(o.Config.Upstreams, nil, o.Dial), prio: newPriorities(o.Config)})
	g.prices.Store(&priceBook{t: o.Prices})
	if rc := o.Config.ResponseCache; rc.Enabled {
		g.cache = newResponseCache(rc.TTL, rc.MaxBytes)
	}
	g.pass = newPassthrough(o.Config.Passthrough)
	if o.Registerer != nil {
		for _, c := range append(g.buffers.collectors(), newAdmissionCollector(g.routes), g.pass.requests) {
			if err := o.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("gateway: register metrics: %w", err)
			}
		}
	}
	if o.Config.Capture.Enabled {
		c, err := newCapturer(o.Config.Capture, o.Capture, o.Registerer, o.Log.With("part", "capture"))
		if err != nil {
			return nil, err
		}
		g.capture = c
		go c.run(g.stop)
	}
	g.counters = newCounters(o.Config.Tokenizers, o.Config.TokenizerWait, o.Log)
	g.counters.preload()
	go g.runChecks()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { g.handleInference(w, r, "chat") })
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { g.handleInference(w, r, "completions") })
	mux.HandleFunc("POST /v1/embeddings", func(w http.ResponseWriter, r *http.Request) { g.handleInference(w, r, "embeddings") })
	mux.HandleFunc("GET /v1/models", g.handleModels)
	g.agentRoutes(mux)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", g.handleReady)
	if o.MetricsHandler != nil {
		mux.Handle("GET /metrics", o.MetricsHandler)
	}
	// Every other path: passed through under /v1/, else 404 — recorded either way.
	mux.HandleFunc("/", g.handleOther)
	g.mux = BodyDeadline(o.Config.Limits.BodyTimeout, mux)
	return g, nil
}

// Handler is the gateway's HTTP handler, request bodies bound by
// limits.body_timeout.
func (g *Gateway) Handler() http.Handler { return g.mux }

// Drain marks the gateway as shutting down: /readyz fails so load
// balancers stop sending, while in-flight requests finish.
func (g *Gateway) Drain() { g.draining.Store(true) }

// Close releases idle upstream connections and stops background checks;
// captures still queued are written and tokenizer loads finished before
// it returns.
func (g *Gateway) Close() {
	g.routes().closeIdle()
	g.stopOnce.Do(func() { close(g.stop) })
	if g.capture != nil {
		<-g.capture.done
	}
	g.counters.wait()
}

func (g *Gateway) handleReady(w http.ResponseWriter, r *http.Request) {
	if g.draining.Load() {
		http.Error(w, "draining", http.StatusServiceUnavailable)
		return
	}
	status, body := http.StatusOK, "ready\n"
	var detail []string
	// The configured tokenizers first: a request the engine reports no
	// usage for is counted with them, and one arriving before they are
	// loaded would wait for them as it finishes (tokenizer_wait).
	loading, failed := g.counters.unready()
	if len(loading) > 0 {
		status, body = http.StatusServiceUnavailable, "not ready: tokenizers still loading: "+strings.Join(loading, ", ")+"\n"
	}
	for _, f := range failed {
		detail = append(detail, "tokenizer failed to load, inputs the engine does not report are recorded unknown: "+f)
	}
	if g.ready != nil {
		d, err := g.ready()
		if err != nil && status == http.StatusOK {
			status, body = http.StatusServiceUnavailable, "not ready: "+err.Error()+"\n"
		} else if err != nil {
			detail = append(detail, "not ready: "+err.Error())
		}
		detail = append(detail, d...)
	}
	for _, d := range detail {
		body += d + "\n"
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// handleInference serves chat, completions and embeddings: one logical
// request, one Record per upstream attempt.
func (g *Gateway) handleInference(w http.ResponseWriter, r *http.Request, endpoint string) {
	g.metrics.InFlight().Inc()
	defer g.metrics.InFlight().Dec()
	if anthropicAPI(endpoint) {
		w = anthropicErrors{w}
	}
	rec, ident, tc, since, aerr := g.begin(w, r, endpoint)
	if aerr != nil {
		g.reject(w, rec, aerr, since)
		return
	}

	body, aerr := g.readBody(w, r)
	if aerr != nil {
		rec.RequestBytes = int64(len(body)) // what arrived of it
		rec.ClientDisconnect = aerr.Status == record.StatusClientClosed
		g.reject(w, rec, aerr, since)
		return
	}
	cr, aerr := parseRequest(body, endpoint, rec)
	if aerr != nil {
		g.reject(w, rec, aerr, since)
		return
	}
	cands := g.routes().candidates(rec.Model)
	if len(cands) == 0 {
		g.reject(w, rec, &apiError{Kind: record.ErrNoRoute, Status: http.StatusNotFound, Type: "invalid_request_error", Code: record.ErrNoRoute, Param: "model",
			Message: "The model `" + echo(rec.Model) + "` does not exist or no upstream serves it."}, since)
		return
	}
	if cands, aerr = speaking(endpoint, cands); aerr != nil {
		g.reject(w, rec, aerr, since)
		return
	}
	var ck [32]byte
	if g.cache != nil && !rec.Stream && !agentAPI(endpoint) {
		scope := rec.KeyID
		if g.cfg.ResponseCache.Scope == "global" {
			scope = ""
		}
		ck = cacheKey(scope, endpoint, body)
		if e, hit := g.cache.get(ck); hit {
			g.answerFromCache(w, rec, e, since)
			return
		}
	}
	// The tokenizer, if loaded. Admission does not wait for one still
	// loading: its estimate is then the prompt's bytes / 4 (quotas settle
	// on the real count).
	ct, loading := g.counters.lookup(rec.Model)
	g.systems.count(rec, ct, cr.system)
	var in int64 // the input estimate, when quotas or a long-input lane need it
	if g.limiter != nil || g.routes().longLanes {
		in = inputEstimate(rec, ct, body)
	}
	adm, ok := g.admit(w, r, rec, in, ident.BizLine, since)
	if !ok {
		return
	}
	rec.Marks.Admitted = since()

	upBody := body
	injected := false
	if rec.Stream && !rec.IncludeUsage && !agentAPI(endpoint) {
		if b, err := withIncludeUsage(body, cr); err == nil {
			upBody, injected = b, true
		}
	}

	ex := &exchange{g: g, w: w, r: r, body: upBody, clientBody: body, ct: ct, counting: (ct != nil || loading) && endpoint != endpointMessages, injected: injected, trace: tc, since: since, cacheKey: ck,
		prio: g.live.Load().prio.of(rec.KeyID, g.trustedBiz(rec, ident.BizLine)), inTokens: in}
	if adm != nil {
		ex.rate = adm.rate
	}
	if g.capture != nil {
		ex.capBuf = g.capture.buf()
	}
	attempts := min(len(cands), g.cfg.Retry.Attempts)
	var done []*record.Record
	defer func() { adm.settle(done) }()
	for i := range attempts {
		cur := rec
		if i > 0 {
			cur = retryRecord(rec, i)
		}
		cur.Upstream, cur.Engine = cands[i].cfg.Name, cands[i].cfg.Engine
		retry := ex.attempt(cur, cands[i], i < attempts-1)
		if !ex.finished {
			ex.countUsage(cur)
			g.finish(cur)
		}
		ex.finished = false
		done = append(done, cur)
		if ex.capBuf != nil {
			g.capture.offer(cur, body, ex.capBuf, ex.secrets(cands[i]))
		}
		if !retry {
			g.maybeCheck(cur, ct, body)
			return
		}
	}
}

// answerFromCache serves an exact repeat: no engine, no tokens, no cost.
func (g *Gateway) answerFromCache(w http.ResponseWriter, rec *record.Record, e *cacheEntry, since func() time.Duration) {
	rec.Marks.Admitted = since()
	rec.CacheHit, rec.Upstream, rec.ServedModel = true, "cache", rec.Model
	h := w.Header()
	h.Set("Content-Type", e.ctype)
	h.Set("Content-Length", strconv.Itoa(len(e.body)))
	h.Set("X-Tollgate-Cache", "hit")
	w.WriteHeader(http.StatusOK)
	n, err := w.Write(e.body)
	rec.ResponseBytes = int64(n)
	if pr, perr := usage.ParseResponse(e.body); perr == nil {
		rec.FinishReason, rec.ResponseID = pr.FinishReason, responseID(pr.ID)
	}
	at := since()
	rec.Marks.FirstClientToken, rec.Marks.LastToken, rec.Marks.End = at, at, at
	rec.Status, rec.Usage.Source = http.StatusOK, record.SourceNone
	if err != nil {
		rec.Status, rec.ErrorType, rec.ClientDisconnect = record.StatusClientClosed, record.ErrClientDisconnect, true
	}
	g.finish(rec)
}

// retryRecord starts the Record of attempt i+1 from the first attempt's
// identity and input features; marks before the upstream are shared.
func retryRecord(first *record.Record, i int) *record.Record {
	n := &record.Record{
		LogicalRequestID: first.LogicalRequestID, ClientRequestID: first.ClientRequestID, Attempt: i + 1, Retries: i,
		TraceID: first.TraceID, SpanID: newSpanID(), ParentSpanID: first.ParentSpanID,
		UserID: first.UserID, KeyID: first.KeyID, Team: first.Team, BizLine: first.BizLine,
		SessionID: first.SessionID, TemplateID: first.TemplateID, Tags: first.Tags,
		Endpoint: first.Endpoint, Model: first.Model, EndUser: first.EndUser,
		Stream: first.Stream, IncludeUsage: first.IncludeUsage, MaxTokens: first.MaxTokens,
		Temperature: first.Temperature, TopP: first.TopP, PromptSHA256: first.PromptSHA256,
		PromptBytes: first.PromptBytes, Messages: first.Messages, RequestBytes: first.RequestBytes,
		Arrival: first.Arrival,
	}
	n.RequestID = first.LogicalRequestID + ".a" + strconv.Itoa(i+1)
	n.Marks.AuthDone, n.Marks.Admitted = first.Marks.AuthDone, first.Marks.Admitted
	return n
}

// reject answers a request the gateway refuses itself, and records it:
// the ledger holds every request, refused ones included.
func (g *Gateway) reject(w http.ResponseWriter, rec *record.Record, e *apiError, since func() time.Duration) {
	if e.Status != record.StatusClientClosed {
		rec.ResponseBytes = int64(writeError(w, e))
	}
	rec.Status = e.Status
	rec.ErrorType = e.Kind
	rec.ErrorMessage = e.Message
	rec.Marks.End = since()
	g.finish(rec)
}

// Observer is one consumer of finished Records after the ledger.
type Observer struct {
	Name    string // for the log and tollgate_observer_panics_total
	Observe func(*record.Record)
}

// finish derives the figures, decides sampling, and hands the Record to
// the ledger first, then to each observer; it returns the sink's
// durability wait (nil when there is none). Every step is isolated: a
// panic in one (a bad label value, a bug in a derivation) is logged and
// counted, and the Record still reaches the ledger and the steps after.
func (g *Gateway) finish(rec *record.Record) func(context.Context) error {
	if rec.Usage.Source == "" {
		rec.Usage.Source = record.SourceNone
	}
	g.guard("derive", rec, func() {
		g.joinEngine(rec)
		rec.Finish()
		g.rate(rec)
	})
	rec.Sampled = !rec.OK() || rec.Derived.E2E >= g.cfg.Sampling.Slow || g.sampleHit(rec.RequestID)
	if !rec.Sampled {
		rec.Timeline = nil
	}
	var wait func(context.Context) error
	g.guard("ledger", rec, func() { wait = g.sink(rec) })
	for _, o := range g.observers {
		g.guard(o.Name, rec, func() { o.Observe(rec) })
	}
	return wait
}

// guard runs one step of finish, turning a panic into a log line and a
// count instead of a lost Record and a cut response.
func (g *Gateway) guard(step string, rec *record.Record, f func()) {
	defer func() {
		if p := recover(); p != nil {
			g.metrics.ObserverPanic(step)
			g.log.Error("a step of finishing a request panicked; the request's record goes on without it",
				"step", step, "request_id", rec.RequestID, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	f()
}

// joinEngine asks for vLLM's own span of this attempt (keyed by the trace
// and the span id the gateway sent upstream). A span that already arrived
// goes into the Record now; one that arrives later — vLLM batches its
// exports — becomes an amendment of the stored row, and until then the
// Record says it is expected (EngineTimingDue: readers show "engine
// timing pending").
func (g *Gateway) joinEngine(rec *record.Record) {
	if g.joiner == nil || rec.EngineTiming != nil || rec.UpstreamStatus == 0 || rec.Engine != "vllm" {
		return
	}
	var (
		mu     sync.Mutex
		sealed bool
		early  *record.EngineTiming
	)
	id := rec.RequestID
	g.joiner.Expect(rec.TraceID, rec.SpanID, func(et record.EngineTiming) {
		mu.Lock()
		late := sealed
		if !late {
			early = &et
		}
		mu.Unlock()
		if late && g.amend != nil {
			g.amend(id, et)
		}
	})
	mu.Lock()
	sealed = true
	if early != nil {
		rec.EngineTiming = early
	} else {
		rec.EngineTimingDue = rec.Marks.End + g.joiner.Window()
	}
	mu.Unlock()
}

// commit finishes rec and waits, bounded, until it is durable: called
// just before the final bytes of a successful response.
func (g *Gateway) commit(rec *record.Record) {
	wait := g.finish(rec)
	if wait == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.commitTO)
	defer cancel()
	if err := wait(ctx); err != nil {
		g.metrics.CommitTimeout()
		g.log.Warn("ledger commit not confirmed before the response ended", "request_id", rec.RequestID, "err", err)
	}
}

// sampleHit is deterministic per request id, so every replica and every
// replay makes the same decision.
func (g *Gateway) sampleHit(id string) bool {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return h.Sum32()%10000 < g.sampleN
}

// maybeCheck samples requests whose prompt count came from the engine and
// compares it with the local count, off the request path.
func (g *Gateway) maybeCheck(rec *record.Record, ct *tokenizer.Counter, body []byte) {
	if ct == nil || rec.Usage.Source != record.SourceEngine || rec.Usage.InputTokens == 0 || rec.Endpoint != "chat" {
		return
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte("check:" + rec.RequestID))
	if h.Sum32()%10000 >= g.checkN {
		return
	}
	select {
	case g.checks <- tokenCheck{rec: rec, ct: ct, body: body}:
	default: // a busy gateway skips checks rather than queueing them
	}
}

func (g *Gateway) runChecks() {
	for {
		var c tokenCheck
		select {
		case <-g.stop:
			return
		case c = <-g.checks:
		}
		local, ok := promptTokens(c.ct, c.rec.Endpoint, c.body)
		if !ok {
			continue
		}
		miss := mismatch(c.rec.Usage.InputTokens, local)
		g.metrics.TokenizerCheck(c.rec.Model, miss)
		if miss && g.event != nil {
			g.event(store.Event{
				At: time.Now(), Kind: "tokenizer_mismatch", Subject: "model:" + c.rec.Model,
				Message: fmt.Sprintf("engine counted %d prompt tokens, tollgate's tokenizer %d: the tokenizer, the chat template or the model version changed (request %s)",
					c.rec.Usage.InputTokens, local, c.rec.RequestID),
				Data: fmt.Sprintf(`{"model":%q,"served_model":%q,"request_id":%q,"engine":%d,"local":%d}`, c.rec.Model, c.rec.ServedModel, c.rec.RequestID, c.rec.Usage.InputTokens, local),
			})
		}
	}
}

func (g *Gateway) handleModels(w http.ResponseWriter, r *http.Request) {
	if _, aerr := g.auth().identify(r); aerr != nil {
		writeError(w, aerr)
		return
	}
	rt := g.routes()
	if u := rt.wildcard; u != nil {
		// One upstream serving every model: its own list is the truth.
		g.forwardModels(w, r, u)
		return
	}
	writeModelList(w, rt.modelNames())
}

// isDialError reports a failure to connect: safe to retry elsewhere, since
// the upstream never saw the request.
func isDialError(err error) (dial, timeout bool) {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true, op.Timeout()
	}
	return false, false
}
