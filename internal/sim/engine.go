package sim

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const (
	finishStop   = "stop"
	finishLength = "length"
	finishAbort  = "abort"
)

// errShutdown fails the sequences still in the engine when Run returns.
var errShutdown = errors.New("the engine is shutting down")

// Engine is a simulated continuous-batching inference engine. Serve its
// Handler and call Run; requests that arrive before Run starts wait in the
// queue.
type Engine struct {
	cfg      Config
	log      *slog.Logger
	metrics  *metrics
	gatherer prometheus.Gatherer
	models   map[string]bool
	created  time.Time
	wake     chan struct{}  // cap 1: "the queue changed"
	tracing  *tracing       // nil unless Config.OTLPEndpoint is set
	stored   *responseStore // finished /v1/responses answers

	mu      sync.Mutex
	rng     *rand.Rand
	state   runState
	waiting []*seq // FIFO
	running []*seq
	cache   *prefixCache
	prompts *promptCache // explicit (Anthropic) prompt caching
	obs     []tokenObs   // scratch for step, reused
}

type runState int

const (
	stateNew runState = iota
	stateRunning
	stateStopped
)

// seq is one sequence in the engine: one prompt of one request. The
// scheduler owns it while it is in the engine; the handler watches
// generated, notify and done.
type seq struct {
	ctx                    context.Context // the request's; done means the client left
	id, model, traceParent string
	stream                 bool
	prompt                 []uint32
	target                 int    // output tokens to generate
	reason                 string // finish reason once target is reached
	arrival                time.Time
	notify                 chan struct{} // cap 1, shared by the sequences of one request
	// cache, if set, is looked up in the engine's explicit prompt cache
	// when the sequence is scheduled and written at its first token.
	cache *cacheReq

	generated atomic.Int64
	done      chan struct{} // closed when the sequence left the engine and was reported
	err       error         // set before done is closed
	stats     RequestStats  // set before done is closed

	// Scheduler state, guarded by Engine.mu.
	scheduled, first, last time.Time
	cached                 int
	held                   []*kvBlock
	private                int // KV blocks held outside the prefix cache
}

// New validates cfg, applies its defaults and registers the engine's
// vLLM-named metrics with reg. If reg is nil, or cannot be gathered, the
// metrics live in a private registry served at /metrics.
func New(cfg Config, log *slog.Logger, reg prometheus.Registerer) (*Engine, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := newMetrics(cfg.Models)
	own := prometheus.NewRegistry()
	if err := m.register(own); err != nil {
		return nil, err
	}
	tr, err := newTracing(cfg.OTLPEndpoint, log)
	if err != nil {
		return nil, err
	}
	gatherer := prometheus.Gatherer(own)
	if reg != nil {
		if err := m.register(reg); err != nil {
			return nil, err
		}
		// Serving the caller's registry lets a demo expose everything it
		// registered there next to the engine's series, as one target.
		if g, ok := reg.(prometheus.Gatherer); ok {
			gatherer = g
		}
	}
	e := &Engine{
		cfg:      cfg,
		log:      log,
		metrics:  m,
		gatherer: gatherer,
		models:   make(map[string]bool, len(cfg.Models)),
		created:  time.Now(),
		wake:     make(chan struct{}, 1),
		tracing:  tr,
		stored:   newResponseStore(),
		rng:      rand.New(rand.NewPCG(uint64(cfg.Seed), 0x7011_6a7e)),
		cache:    newPrefixCache(cfg.CacheBlocks),
		prompts:  newPromptCache(),
	}
	for _, name := range cfg.Models {
		e.models[name] = true
	}
	return e, nil
}

// requestRand returns the private random source of one request. Taking a
// fixed number of draws from the engine's source per request keeps the
// outputs of a request sequence independent of what each request does.
func (e *Engine) requestRand() *rand.Rand {
	e.mu.Lock()
	defer e.mu.Unlock()
	return rand.New(rand.NewPCG(e.rng.Uint64(), e.rng.Uint64()))
}

// submit queues the sequences of one request, all or none.
func (e *Engine) submit(seqs ...*seq) error {
	e.mu.Lock()
	if e.state == stateStopped {
		e.mu.Unlock()
		return errShutdown
	}
	for _, s := range seqs {
		e.waiting = append(e.waiting, s)
		e.metrics.waiting.WithLabelValues(s.model).Inc()
	}
	e.mu.Unlock()
	wake(e.wake)
	return nil
}

// Run is the scheduler loop. It returns nil when ctx is done, after every
// sequence still queued or running has been failed with a shutdown error,
// which the handlers turn into a clean error response.
func (e *Engine) Run(ctx context.Context) error {
	e.mu.Lock()
	if e.state != stateNew {
		e.mu.Unlock()
		return errors.New("sim: Run called more than once")
	}
	e.state = stateRunning
	e.mu.Unlock()
	if e.tracing != nil {
		// Started here, not in New, so that an engine never run leaks no
		// goroutine; stopped after stop below has reported (and so traced)
		// the sequences still in the engine.
		e.tracing.start()
		defer e.tracing.stop(ctx, e.log)
	}
	defer e.stop()

	// One timer per step, not a sleep per request: a step's length depends
	// on the whole batch, which is what makes the sim behave like an engine.
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		d, busy := e.admit(time.Now())
		if !busy {
			select {
			case <-ctx.Done():
				return nil
			case <-e.wake:
				continue
			}
		}
		timer.Reset(d)
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		e.step(time.Now())
	}
}

// admit starts a step: it drops sequences whose clients left, moves waiting
// sequences into free slots and returns how long the step takes (their
// prefill plus one decode of the whole batch). busy is false when there is
// nothing to run.
func (e *Engine) admit(now time.Time) (d time.Duration, busy bool) {
	var ended []*seq
	e.mu.Lock()
	e.waiting = e.dropCancelled(e.waiting, now, &ended)
	e.running = e.dropCancelled(e.running, now, &ended)
	for len(e.running) < e.cfg.MaxRunning && len(e.waiting) > 0 {
		s := e.waiting[0]
		e.waiting[0] = nil
		e.waiting = e.waiting[1:]
		d += e.schedule(s, now)
		e.running = append(e.running, s)
	}
	n := len(e.running)
	e.setUsage()
	e.mu.Unlock()
	e.report(ended)
	if n == 0 {
		return 0, false
	}
	return d + e.cfg.DecodeBase + time.Duration(n)*e.cfg.DecodePerSeq, true
}

// schedule moves s from waiting to running and returns its prefill cost,
// which only the prompt tokens missing from the prefix cache pay.
func (e *Engine) schedule(s *seq, now time.Time) time.Duration {
	bs := e.cfg.PrefixBlockTokens
	s.scheduled = now
	// The last prompt token is always computed (it yields the first
	// output), so lookups stop at the last full block before it.
	lookup := max(0, len(s.prompt)-1) / bs
	hits, held := e.cache.acquire(blockHashes(s.model, s.prompt, bs), lookup)
	s.held, s.cached = held, hits*bs
	e.updatePrivate(s)
	if s.cache != nil {
		e.prompts.lookup(s.cache, now)
	}

	e.metrics.waiting.WithLabelValues(s.model).Dec()
	e.metrics.running.WithLabelValues(s.model).Inc()
	e.metrics.promptTokens.WithLabelValues(s.model).Add(float64(len(s.prompt)))
	e.metrics.prefixQueries.WithLabelValues(s.model).Add(float64(len(s.prompt)))
	e.metrics.prefixHits.WithLabelValues(s.model).Add(float64(s.cached))
	return e.cfg.PrefillBase + time.Duration(len(s.prompt)-s.cached)*e.cfg.PrefillPerToken
}

// step ends a step: every running sequence gets one token.
func (e *Engine) step(now time.Time) {
	var ended []*seq
	e.mu.Lock()
	obs := e.obs[:0]
	kept := e.running[:0]
	for _, s := range e.running {
		if s.ctx.Err() != nil {
			ended = append(ended, e.finish(s, now, finishAbort, nil))
			continue
		}
		n := int(s.generated.Add(1))
		o := tokenObs{model: s.model, first: n == 1}
		if o.first {
			s.first = now
			o.d = now.Sub(s.arrival)
			if s.cache != nil {
				e.prompts.store(s.cache, now)
			}
		} else {
			o.d = now.Sub(s.last)
		}
		s.last = now
		obs = append(obs, o)
		e.updatePrivate(s)
		if n >= s.target {
			ended = append(ended, e.finish(s, now, s.reason, nil))
			continue
		}
		kept = append(kept, s)
	}
	clear(e.running[len(kept):])
	e.running = kept
	e.obs = obs
	e.setUsage()
	e.mu.Unlock()
	// Metrics first, then the handlers: whoever has seen a token also sees
	// it counted. Only this goroutine changes running, so kept stays valid.
	for _, o := range obs {
		e.metrics.token(o)
	}
	for _, s := range kept {
		wake(s.notify)
	}
	e.report(ended)
}

// stop fails everything still in the engine; called once, when Run ends.
func (e *Engine) stop() {
	var ended []*seq
	now := time.Now()
	e.mu.Lock()
	e.state = stateStopped
	for _, s := range e.waiting {
		ended = append(ended, e.finish(s, now, finishAbort, errShutdown))
	}
	for _, s := range e.running {
		ended = append(ended, e.finish(s, now, finishAbort, errShutdown))
	}
	e.waiting, e.running = nil, nil
	e.setUsage()
	e.mu.Unlock()
	e.report(ended)
}

// dropCancelled removes the sequences whose request context is done.
func (e *Engine) dropCancelled(list []*seq, now time.Time, ended *[]*seq) []*seq {
	kept := list[:0]
	for _, s := range list {
		if s.ctx.Err() != nil {
			*ended = append(*ended, e.finish(s, now, finishAbort, nil))
			continue
		}
		kept = append(kept, s)
	}
	clear(list[len(kept):])
	return kept
}

// finish takes s out of the engine's accounting and computes its stats;
// report publishes them. The caller removes s from its list.
func (e *Engine) finish(s *seq, now time.Time, reason string, err error) *seq {
	e.cache.release(s.held)
	e.cache.private -= s.private
	s.held, s.private = nil, 0
	st := RequestStats{
		RequestID:    s.id,
		TraceParent:  s.traceParent,
		Model:        s.model,
		Arrival:      s.arrival,
		E2E:          now.Sub(s.arrival),
		PromptTokens: len(s.prompt),
		CachedTokens: s.cached,
		OutputTokens: int(s.generated.Load()),
		FinishReason: reason,
		Stream:       s.stream,
	}
	if s.scheduled.IsZero() {
		e.metrics.waiting.WithLabelValues(s.model).Dec()
		st.Queue = st.E2E
	} else {
		e.metrics.running.WithLabelValues(s.model).Dec()
		st.Queue = s.scheduled.Sub(s.arrival)
		st.Prefill = now.Sub(s.scheduled)
	}
	if !s.first.IsZero() {
		st.Prefill = s.first.Sub(s.scheduled)
		st.Decode = s.last.Sub(s.first)
		st.TTFT = s.first.Sub(s.arrival)
	}
	s.stats, s.err = st, err
	return s
}

// updatePrivate keeps the count of KV blocks a sequence holds beyond its
// cached prompt blocks: the partial prompt tail and the generated tokens.
func (e *Engine) updatePrivate(s *seq) {
	bs := e.cfg.PrefixBlockTokens
	tokens := len(s.prompt) + int(s.generated.Load())
	need := max(0, (tokens+bs-1)/bs-len(s.held))
	e.cache.private += need - s.private
	s.private = need
}

func (e *Engine) setUsage() {
	u := e.cache.usage()
	for _, m := range e.cfg.Models {
		e.metrics.kvUsage.WithLabelValues(m).Set(u)
	}
}

// report publishes finished sequences outside the lock, so that OnFinish
// may call into the engine. The span and OnFinish come before the handler
// learns that the sequence ended: once a client has read a whole response,
// its stats have been reported and its span queued for export.
func (e *Engine) report(ended []*seq) {
	for _, s := range ended {
		st := s.stats
		e.metrics.finished(st)
		e.log.Debug("sequence finished", "request_id", st.RequestID, "model", st.Model,
			"finish_reason", st.FinishReason, "prompt_tokens", st.PromptTokens,
			"cached_tokens", st.CachedTokens, "output_tokens", st.OutputTokens,
			"queue", st.Queue, "ttft", st.TTFT, "e2e", st.E2E)
		if e.tracing != nil {
			e.tracing.emit(st)
		}
		if e.cfg.OnFinish != nil {
			e.cfg.OnFinish(st)
		}
		close(s.done)
		wake(s.notify)
	}
}

func wake(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
