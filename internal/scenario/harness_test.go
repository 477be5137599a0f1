package scenario

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/tollgate-dev/tollgate/internal/alert"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/gateway"
	"github.com/tollgate-dev/tollgate/internal/label"
	"github.com/tollgate-dev/tollgate/internal/memnet"
	"github.com/tollgate-dev/tollgate/internal/metrics"
	"github.com/tollgate-dev/tollgate/internal/quota"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/sim"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/window"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// model is what the simulator serves and the clients ask for. It is no
// model family with a built-in tokenizer: the engine reports usage, and
// loading a real vocabulary would cost seconds under the race detector for
// nothing the rules look at.
const model = "acme/chat-8b"

// upstreamName is the simulator's upstream in the gateway's config.
const upstreamName = "gpu-a"

// setup shapes one scenario's system; zero values are the defaults.
type setup struct {
	// engine is the simulator's config (Models and PerRequestMetrics are
	// set by the harness).
	engine sim.Config
	// config adjusts the gateway's config (keys, quotas, the upstream)
	// before it is validated.
	config func(*config.Config)
}

// env is one scenario's running system, inside a synctest bubble.
type env struct {
	t      *testing.T
	start  time.Time
	net    *memnet.Network
	gwURL  string
	client *http.Client
	alerts *alert.Engine
	notes  *notes

	handler atomic.Pointer[http.Handler] // the engine the upstream address serves now
	engines sync.WaitGroup               // the engines' Run loops
	engCtx  context.Context              // the engines' Run context

	stops []func() // teardown, run in reverse order
}

// newEnv starts the system: simulator, gateway, windows, rule engine,
// each on its own goroutines inside the caller's bubble. Cleanup stops
// them all, so that the bubble ends with no goroutine left.
func newEnv(t *testing.T, s setup) *env {
	t.Helper()
	e := &env{t: t, start: time.Now(), net: memnet.New(), notes: &notes{start: time.Now()}}
	t.Cleanup(e.close)

	// The engine, behind a switch so that a scenario can deploy a new one
	// on the same address (a new model version).
	engCtx, stopEng := context.WithCancel(context.Background())
	e.engCtx = engCtx
	e.stops = append(e.stops, func() { stopEng(); e.engines.Wait() })
	e.deploy(s.engine)
	simLn, err := e.net.Listen(upstreamName + ":8000")
	if err != nil {
		t.Fatal(err)
	}
	e.serve(simLn, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*e.handler.Load()).ServeHTTP(w, r) }))

	cfg := config.Default()
	cfg.Upstreams = []config.Upstream{{Name: upstreamName, URL: simLn.URL() + "/v1", Engine: "vllm", Models: []string{model}}}
	if s.config != nil {
		s.config(cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("scenario config: %v", err)
	}

	// Alerting as serve wires it: windows fed from the gateway's sink (on
	// a persister, so baselines older than the windows' memory are read
	// back as closed hours), the rule engine on its ticker.
	bg, stopBG := context.WithCancel(context.Background())
	var bgDone sync.WaitGroup
	e.stops = append(e.stops, func() { stopBG(); bgDone.Wait() })
	win := window.New(window.Config{}, &minutes{}, nil, nil)
	e.alerts = alert.NewEngine(cfg.Alerts, win, alert.Options{Notifier: e.notes})
	bgDone.Go(func() { win.Run(bg) })
	bgDone.Go(func() { e.alerts.Run(bg, cfg.Alerts.Interval) })

	o := gateway.Options{
		Config:  cfg,
		Log:     slog.New(slog.DiscardHandler),
		Metrics: metrics.New(prometheus.NewRegistry(), label.New(nil, label.Config{Models: []string{model}, MaxModels: cfg.Metrics.MaxModels})),
		Sink:    func(r *record.Record) func(context.Context) error { win.Observe(r); return nil },
		Dial:    e.net.DialContext,
	}
	if l := e.limiter(cfg); l != nil {
		o.Limiter = l
	}
	o.Observers = []gateway.Observer{{Name: "metrics", Observe: o.Metrics.Observe}}
	gw, err := gateway.New(o)
	if err != nil {
		t.Fatal(err)
	}
	e.stops = append(e.stops, gw.Close)
	gwLn, err := e.net.Listen("tollgate:8080")
	if err != nil {
		t.Fatal(err)
	}
	e.serve(gwLn, gw.Handler())
	e.gwURL = gwLn.URL()

	tr := &http.Transport{DialContext: e.net.DialContext, MaxIdleConnsPerHost: 256, DisableCompression: true}
	e.client = &http.Client{Transport: tr}
	e.stops = append(e.stops, tr.CloseIdleConnections)
	return e
}

// limiter is the quota limiter of cfg, nil when there are no quotas; its
// events raise alerts as in serve.
func (e *env) limiter(cfg *config.Config) *quota.Local {
	q, err := cfg.QuotaConfig()
	if err != nil {
		e.t.Fatal(err)
	}
	if len(q.Keys)+len(q.Users)+len(q.BizLines) == 0 && q.Default == (quota.Defaults{}) {
		return nil
	}
	loc, err := time.LoadLocation(q.Timezone)
	if err != nil {
		e.t.Fatal(err)
	}
	l, err := quota.NewLocal(q, time.Now, nil, func(ev quota.Event) {
		a, until := alert.FromQuota(ev, loc)
		e.alerts.Raise(context.Background(), a, ev.At, until)
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

// deploy starts an engine with cfg and makes the upstream address serve
// it from now on; requests already in an older engine finish there, and
// every engine runs until teardown.
func (e *env) deploy(cfg sim.Config) {
	cfg.Models = []string{model}
	cfg.PerRequestMetrics = true // the engine's own queue and prefill times, as vLLM --enable-per-request-metrics
	eng, err := sim.New(cfg, nil, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	e.engines.Go(func() { _ = eng.Run(e.engCtx) })
	h := eng.Handler()
	e.handler.Store(&h)
}

// serve serves h on ln until teardown.
func (e *env) serve(ln *memnet.Listener, h http.Handler) {
	srv := &http.Server{Handler: h}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(done) }()
	e.stops = append(e.stops, func() { _ = srv.Close(); <-done })
}

func (e *env) close() {
	for _, stop := range slices.Backward(e.stops) {
		stop()
	}
	e.stops = nil
}

// now is the scenario's clock: fake time since it started.
func (e *env) now() time.Duration { return time.Since(e.start) }

// app is one client application of the gateway and what it sends.
type app struct {
	name string
	key  string // API key; empty: none
	// biz and template attribute its requests (X-Tollgate-Biz,
	// X-Tollgate-Template).
	biz, template string
	// rate is its mean requests per second, arriving as a Poisson process;
	// with workers > 0 it is a closed loop instead: that many clients, each
	// sending its next request think after the previous one succeeded, or
	// backoff after it failed.
	rate           float64
	workers        int
	think, backoff time.Duration
	stream         bool
	// system is the system prompt's size in tokens; dynamic starts it with
	// per-request text (a timestamp and a session id), which a prefix cache
	// cannot reuse.
	system  int
	dynamic bool
	// user is the range of the user message's size in tokens.
	user [2]int
	// maxTokens is sent as max_tokens when > 0.
	maxTokens int

	mu       sync.Mutex
	rng      *rand.Rand
	statuses map[int]int
	failures int // transport errors
}

func newApp(name string, seed uint64) *app {
	return &app{name: name, rng: rand.New(rand.NewPCG(seed, 0x5ce7a210)), statuses: map[int]int{}}
}

// change changes what a sends from now on.
func (a *app) change(f func(*app)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f(a)
}

// words are one simulator token each (at most 4 bytes, no punctuation).
var words = strings.Fields("the of and to in is that for it as with was on be at by this have from or one had not but what all were when we there can an your which their said if do will each about how up out them then she many some so")

func (a *app) text(b *strings.Builder, n int) {
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[a.rng.IntN(len(words))])
	}
}

// body draws the next request, under a.mu.
func (a *app) body(seq int) []byte {
	var sys strings.Builder
	n := a.system
	if a.dynamic {
		// "session 1234 at 2000 01 01 00 05": 9 tokens of per-request text.
		fmt.Fprintf(&sys, "session %d at %s ", seq, time.Now().UTC().Format("2006 01 02 15 04"))
		n -= 9
	}
	a.text(&sys, max(n, 1))
	var user strings.Builder
	a.text(&user, a.user[0]+a.rng.IntN(a.user[1]-a.user[0]+1))
	req := map[string]any{
		"model": model,
		"messages": []map[string]string{
			{"role": "system", "content": sys.String()},
			{"role": "user", "content": user.String()},
		},
		"stream": a.stream,
	}
	if a.stream {
		req["stream_options"] = map[string]bool{"include_usage": true}
	}
	if a.maxTokens > 0 {
		req["max_tokens"] = a.maxTokens
	}
	b, _ := json.Marshal(req)
	return b
}

// send posts one chat completion through the gateway and reads the whole
// answer, as an OpenAI client would; it returns the status (0: no answer).
func (e *env) send(ctx context.Context, a *app, seq int) int {
	a.mu.Lock()
	body := a.body(seq)
	a.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.gwURL+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		e.t.Error(err)
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	if a.key != "" {
		req.Header.Set("Authorization", "Bearer "+a.key)
	}
	if a.biz != "" {
		req.Header.Set("X-Tollgate-Biz", a.biz)
	}
	if a.template != "" {
		req.Header.Set("X-Tollgate-Template", a.template)
	}
	resp, err := e.client.Do(req)
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		a.failures++
		return 0
	}
	a.statuses[resp.StatusCode]++
	return resp.StatusCode
}

// run sends a's traffic until ctx ends, then waits for its requests.
func (e *env) run(ctx context.Context, a *app) {
	var inflight sync.WaitGroup
	defer inflight.Wait()
	// Requests outlive the phase that sent them: a client does not hang up
	// because the next phase begins.
	reqCtx := context.WithoutCancel(ctx)
	seq := 0
	next := func() int { seq++; return seq }
	if a.workers > 0 {
		if a.backoff <= 0 {
			// A refused request takes no fake time: without a pause the
			// loop would spin at one instant forever.
			e.t.Errorf("%s: a closed loop needs a backoff", a.name)
			return
		}
		var mu sync.Mutex
		for range a.workers {
			inflight.Go(func() {
				for ctx.Err() == nil {
					mu.Lock()
					n := next()
					mu.Unlock()
					pause := a.think
					if code := e.send(reqCtx, a, n); code < 200 || code > 299 {
						pause = a.backoff
					}
					sleep(ctx, pause)
				}
			})
		}
		return
	}
	for {
		a.mu.Lock()
		gap := time.Duration(a.rng.ExpFloat64() / a.rate * float64(time.Second))
		a.mu.Unlock()
		if !sleep(ctx, gap) {
			return
		}
		n := next()
		inflight.Go(func() { e.send(reqCtx, a, n) })
	}
}

// traffic runs the apps for d of fake time.
func (e *env) traffic(d time.Duration, apps ...*app) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for _, a := range apps {
		wg.Go(func() { e.run(ctx, a) })
	}
	wg.Wait()
}

// sleep waits d unless ctx ends first; false when it did.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// summary is an app's outcome, for the log.
func (a *app) summary() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	codes := slices.Sorted(maps.Keys(a.statuses))
	parts := make([]string, 0, len(codes)+1)
	for _, c := range codes {
		parts = append(parts, fmt.Sprintf("%d×%d", a.statuses[c], c))
	}
	if a.failures > 0 {
		parts = append(parts, fmt.Sprintf("%d transport errors", a.failures))
	}
	return a.name + ": " + strings.Join(parts, " ")
}

// notes is the recording Notifier: every notification with its fake time.
type notes struct {
	start time.Time
	mu    sync.Mutex
	list  []note
}

type note struct {
	at time.Duration // since the scenario started
	a  alert.Alert
}

func (n *notes) Notify(_ context.Context, a alert.Alert) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.list = append(n.list, note{time.Since(n.start), a})
}

func (n *notes) all() []note {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.list)
}

func (nt note) String() string {
	a := nt.a
	keys := slices.Sorted(maps.Keys(a.Labels))
	var ls []string
	for _, k := range keys {
		ls = append(ls, k+"="+a.Labels[k])
	}
	return fmt.Sprintf("%-8v %-20s %-8s %-8s {%s} value %.4g threshold %.4g baseline %.4g",
		nt.at.Round(time.Second), a.Rule, a.State, a.Severity, strings.Join(ls, ","), a.Value, a.Threshold, a.Baseline)
}

// report logs every notification.
func (e *env) report(apps ...*app) {
	e.t.Helper()
	for _, a := range apps {
		e.t.Log(a.summary())
	}
	list := e.notes.all()
	if len(list) == 0 {
		e.t.Log("no notification")
	}
	for _, nt := range list {
		e.t.Log(nt)
	}
}

// expect is one alert a scenario must notify: rule firing for a group
// (labels is a subset of the alert's) at severity sev or severer (any when
// empty), first notified so within [after, before] of the scenario's start.
// A warning is met by a critical notification: when the value has already
// passed the critical level by the time `for` has elapsed, the engine
// tells the severer level only, and the operator has been told no later.
type expect struct {
	rule          string
	labels        map[string]string
	sev           alert.Severity
	after, before time.Duration
}

func (x expect) match(a alert.Alert) bool {
	if a.Rule != x.rule || a.State != alert.Firing {
		return false
	}
	for k, v := range x.labels {
		if a.Labels[k] != v {
			return false
		}
	}
	return x.sev == "" || a.Severity == x.sev || (x.sev == alert.Warning && a.Severity == alert.Critical)
}

// check asserts the expected alerts, that nothing was notified before
// since (the change the scenario makes), and that nothing else was
// notified except rules listed in also (alerts that may rightly come with
// the expected ones, each with the reason why).
func (e *env) check(since time.Duration, want []expect, also map[string]string) {
	e.t.Helper()
	e.t.Logf("the change came at %v", since.Round(time.Second))
	list := e.notes.all()
	for _, nt := range list {
		if nt.at < since {
			e.t.Errorf("notified before the change at %v: %v", since.Round(time.Second), nt)
		}
	}
	for _, x := range want {
		i := slices.IndexFunc(list, func(nt note) bool { return x.match(nt.a) })
		switch {
		case i < 0:
			e.t.Errorf("%s %v: not notified at %s", x.rule, x.labels, x.sev)
		case list[i].at < x.after || list[i].at > x.before:
			e.t.Errorf("%s %v: notified at %s at %v, want within [%v, %v]", x.rule, x.labels, x.sev, list[i].at, x.after, x.before)
		}
	}
	var unexpected []string
	for _, nt := range list {
		if slices.ContainsFunc(want, func(x expect) bool { return x.rule == nt.a.Rule }) {
			continue
		}
		if _, ok := also[nt.a.Rule]; ok {
			continue
		}
		unexpected = append(unexpected, nt.String())
	}
	if len(unexpected) > 0 {
		e.t.Errorf("unexpected notifications:\n%s", strings.Join(unexpected, "\n"))
	}
}

// quiet asserts that nothing was notified and nothing is pending.
func (e *env) quiet() {
	e.t.Helper()
	for _, nt := range e.notes.all() {
		e.t.Errorf("notified: %v", nt)
	}
	for _, a := range e.alerts.Active() {
		e.t.Errorf("active: %s %s %s %v value %.4g threshold %.4g", a.Rule, a.State, a.Severity, a.Labels, a.Value, a.Threshold)
	}
}

// minutes is an in-memory window persister (the store's role in serve):
// closed minutes older than the windows' memory come back from it as
// whole hours for long baselines.
type minutes struct {
	mu    sync.Mutex
	rows  []store.WindowMinute
	hours []store.WindowHour
}

func (m *minutes) AddWindowMinutes(_ context.Context, ms []store.WindowMinute) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rows = append(m.rows, ms...)
	return nil
}

func (m *minutes) WindowMinutes(_ context.Context, from, to time.Time) ([]store.WindowMinute, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.WindowMinute
	for _, r := range m.rows {
		if !r.Minute.Before(from) && r.Minute.Before(to) {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Minute.Before(out[j].Minute) })
	return out, nil
}

func (m *minutes) AddWindowHours(_ context.Context, hs []store.WindowHour) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.hours = append(m.hours, hs...)
	return nil
}

func (m *minutes) WindowHours(_ context.Context, from, to time.Time) ([]store.WindowHour, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.WindowHour
	for _, h := range m.hours {
		if !h.Hour.Before(from) && h.Hour.Before(to) {
			out = append(out, h)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Hour.Before(out[j].Hour) })
	return out, nil
}
