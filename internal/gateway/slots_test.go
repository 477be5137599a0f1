package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/record"
)

// Upstream admission tests: real HTTP through the gateway to an upstream
// that holds every request until the test lets it go, so which request
// the upstream sees next is the admission order. Nothing waits on a
// sleep: the tests poll the queues (with deadlines) or read channels.

// gateUpstream answers a request only when the test finishes it (by its
// X-Test-Id), and reports every arrival.
type gateUpstream struct {
	srv     *httptest.Server
	arrived chan string
	mu      sync.Mutex
	gates   map[string]chan struct{}
	open    bool // finishAll was called: answer at once
}

func newGateUpstream(t *testing.T) *gateUpstream {
	gu := &gateUpstream{arrived: make(chan string, 64), gates: map[string]chan struct{}{}}
	gu.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		id := r.Header.Get("X-Test-Id")
		gate := gu.gate(id)
		gu.arrived <- id
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, nonStreamBody)
	}))
	t.Cleanup(func() {
		gu.finishAll()
		gu.srv.CloseClientConnections()
		gu.srv.Close()
	})
	return gu
}

func (gu *gateUpstream) gate(id string) chan struct{} {
	gu.mu.Lock()
	defer gu.mu.Unlock()
	ch, ok := gu.gates[id]
	if !ok {
		ch = make(chan struct{})
		if gu.open {
			close(ch)
		}
		gu.gates[id] = ch
	}
	return ch
}

// finish lets request id answer (once it arrives, or now).
func (gu *gateUpstream) finish(id string) { close(gu.gate(id)) }

// finishAll lets every request, present and future, answer.
func (gu *gateUpstream) finishAll() {
	gu.mu.Lock()
	defer gu.mu.Unlock()
	if gu.open {
		return
	}
	gu.open = true
	for _, ch := range gu.gates {
		select {
		case <-ch:
		default:
			close(ch)
		}
	}
}

func (gu *gateUpstream) URL() string { return gu.srv.URL + "/v1" }

// next is the id of the next request to reach the upstream.
func (gu *gateUpstream) next(t *testing.T) string {
	t.Helper()
	select {
	case id := <-gu.arrived:
		return id
	case <-time.After(10 * time.Second):
		t.Fatal("no request reached the upstream within 10s")
		return ""
	}
}

// none asserts that no request is on its way to the upstream: the
// gateway answers its own requests (a record for each) before that.
func (gu *gateUpstream) none(t *testing.T) {
	t.Helper()
	select {
	case id := <-gu.arrived:
		t.Fatalf("request %s reached the upstream; want it queued", id)
	default:
	}
}

type result struct {
	id     string
	status int
	header http.Header
	body   []byte
	err    error
}

// send posts a chat request in the background; its result arrives on out.
func send(ctx context.Context, url, id, key, content string, out chan<- result) {
	go func() {
		body := `{"model":"m","messages":[{"role":"user","content":"` + content + `"}]}`
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Test-Id", id)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- result{id: id, err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		out <- result{id: id, status: resp.StatusCode, header: resp.Header, body: b, err: err}
	}()
}

func recv(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("request %s: %v", r.id, r.err)
		}
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no response within 10s")
		return result{}
	}
}

// waitFor polls cond until it holds, failing after a deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond) // polling with a deadline
	}
}

func queuedIs(s *slots, l lane, n int) func() bool {
	return func() bool { return s.queued(l) == n }
}

// longContent is a prompt of ~500 estimated tokens (2000 bytes / 4).
var longContent = strings.Repeat("long ", 400)

func admissionGateway(t *testing.T, up *gateUpstream, tune func(*config.Config)) (*testGateway, *slots) {
	t.Helper()
	cfg := testConfig(up.URL())
	tune(cfg)
	tg := newTestGatewayWith(t, cfg, func(o *Options) { o.Registerer = prometheus.NewRegistry() })
	return tg, tg.G.routes().all[0].slots
}

// TestQueuePriorityOrder: with the only slot held, requests queued in the
// order low, low, default, low, mid, high are admitted high, mid,
// default, then the lows in arrival order. A request's priority is the
// highest that applies (gold's key priority beats its line's).
func TestQueuePriorityOrder(t *testing.T) {
	up := newGateUpstream(t)
	tg, s := admissionGateway(t, up, func(c *config.Config) {
		c.Upstreams[0].MaxConcurrency = 1
		c.Auth.Keys = []config.Key{
			{Name: "gold", Key: "sk-gold", UserID: "g", BizLine: "batch"},
			{Name: "plain", Key: "sk-plain", UserID: "p", BizLine: "batch"},
			{Name: "search", Key: "sk-search", UserID: "s", BizLine: "search"},
			{Name: "other", Key: "sk-other", UserID: "o"},
		}
		c.Admission = config.Admission{DefaultPriority: 0, Priorities: config.Priorities{
			Keys:     map[string]int{"gold": 10},
			BizLines: map[string]int{"search": 5, "batch": -1},
		}}
	})
	out := make(chan result, 16)
	send(t.Context(), tg.URL, "holder", "sk-plain", "x", out)
	if id := up.next(t); id != "holder" {
		t.Fatalf("first at the upstream: %s", id)
	}
	queue := []struct{ id, key string }{
		{"low1", "sk-plain"}, {"low2", "sk-plain"}, {"default", "sk-other"}, {"low3", "sk-plain"}, {"mid", "sk-search"}, {"high", "sk-gold"},
	}
	for i, q := range queue {
		send(t.Context(), tg.URL, q.id, q.key, "x", out)
		waitFor(t, q.id+" is queued", queuedIs(s, laneDefault, i+1))
	}
	up.none(t)
	want := []string{"high", "mid", "default", "low1", "low2", "low3"}
	at := "holder"
	for _, w := range want {
		up.finish(at) // the request at the upstream ends; its slot goes to the best waiter
		if at = up.next(t); at != w {
			t.Fatalf("admitted %s, want %s (order %v)", at, w, want)
		}
	}
	up.finish(at)
	for range len(queue) + 1 {
		if r := recv(t, out); r.status != 200 {
			t.Errorf("%s: status %d %s", r.id, r.status, r.body)
		}
	}
	waitFor(t, "every slot is free", func() bool { return s.inUse(laneDefault) == 0 })
}

// TestQueueTimeoutLeaves: a request that waits queue_timeout gets 503
// with Retry-After and leaves the queue; its wait is the record's
// gateway_queue, and the slot it never got is not lost.
func TestQueueTimeoutLeaves(t *testing.T) {
	up := newGateUpstream(t)
	tg, s := admissionGateway(t, up, func(c *config.Config) {
		c.Upstreams[0].MaxConcurrency = 1
		c.Upstreams[0].QueueTimeout = 100 * time.Millisecond
	})
	out := make(chan result, 4)
	send(t.Context(), tg.URL, "holder", "", "x", out)
	up.next(t)
	send(t.Context(), tg.URL, "waiter", "", "x", out)
	r := recv(t, out)
	if r.id != "waiter" || r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "1" {
		t.Fatalf("%s: status %d, Retry-After %q; want waiter 503 with Retry-After 1", r.id, r.status, r.header.Get("Retry-After"))
	}
	e := decodeErr(t, r.body)
	if e.Error.Type != "server_error" || e.Error.Code == nil || *e.Error.Code != record.ErrQueueTimeout || e.Error.Param != nil {
		t.Errorf("error body %s", r.body)
	}
	if q, n := s.queued(laneDefault), s.inUse(laneDefault); q != 0 || n != 1 {
		t.Errorf("after the timeout: %d queued, %d in use; want 0 and 1 (the holder)", q, n)
	}
	rec := tg.next(t)
	if rec.Status != 503 || rec.ErrorType != record.ErrQueueTimeout || rec.Marks.UpstreamSent != 0 {
		t.Errorf("record: status %d, error %q, upstream_sent %v", rec.Status, rec.ErrorType, rec.Marks.UpstreamSent)
	}
	if q := rec.Derived.Segments.GatewayQueue; q < 100*time.Millisecond || q != rec.Derived.E2E {
		t.Errorf("gateway_queue %v of E2E %v; want all of it, at least the 100ms queue_timeout", q, rec.Derived.E2E)
	}
	if w := rec.Marks.Admitted - rec.Marks.AuthDone; w < 100*time.Millisecond {
		t.Errorf("admitted − auth_done = %v, want at least the 100ms waited", w)
	}

	up.finish("holder")
	if r := recv(t, out); r.id != "holder" || r.status != 200 {
		t.Fatalf("%s: %d", r.id, r.status)
	}
	send(t.Context(), tg.URL, "after", "", "x", out)
	if id := up.next(t); id != "after" {
		t.Fatalf("next at the upstream: %s", id)
	}
	up.finish("after")
	if r := recv(t, out); r.status != 200 {
		t.Fatalf("after: %d %s", r.status, r.body)
	}
	waitFor(t, "every slot is free", func() bool { return s.inUse(laneDefault) == 0 })
}

// TestQueueCancelLeaves: a client that gives up while queued leaves the
// queue at once (no waiting for queue_timeout) and is recorded as 499.
func TestQueueCancelLeaves(t *testing.T) {
	up := newGateUpstream(t)
	tg, s := admissionGateway(t, up, func(c *config.Config) {
		c.Upstreams[0].MaxConcurrency = 1
		c.Upstreams[0].QueueTimeout = time.Hour
	})
	out := make(chan result, 4)
	send(t.Context(), tg.URL, "holder", "", "x", out)
	up.next(t)
	ctx, cancel := context.WithCancel(t.Context())
	send(ctx, tg.URL, "quitter", "", "x", out)
	waitFor(t, "the quitter is queued", queuedIs(s, laneDefault, 1))
	cancel()
	waitFor(t, "the quitter left the queue", queuedIs(s, laneDefault, 0))
	if r := <-out; !errors.Is(r.err, context.Canceled) {
		t.Errorf("quitter: %+v", r)
	}
	rec := tg.next(t)
	if rec.Status != record.StatusClientClosed || rec.ErrorType != record.ErrClientDisconnect || rec.Derived.E2E > 10*time.Second {
		t.Errorf("record: status %d, error %q, E2E %v", rec.Status, rec.ErrorType, rec.Derived.E2E)
	}
	send(t.Context(), tg.URL, "next", "", "x", out)
	waitFor(t, "next is queued", queuedIs(s, laneDefault, 1))
	up.finish("holder")
	if id := up.next(t); id != "next" {
		t.Fatalf("next at the upstream: %s, want next (the quitter must not hold a slot)", id)
	}
	up.finish("next")
	for range 2 {
		if r := recv(t, out); r.status != 200 {
			t.Errorf("%s: %d", r.id, r.status)
		}
	}
}

// TestLongLaneIsolation: long requests fill their lane and queue there;
// short requests still get a slot at once, up to max_concurrency.
func TestLongLaneIsolation(t *testing.T) {
	up := newGateUpstream(t)
	tg, s := admissionGateway(t, up, func(c *config.Config) {
		c.Upstreams[0].MaxConcurrency = 4
		c.Upstreams[0].LongInputTokens = 100
		c.Upstreams[0].LongMaxConcurrency = 2
	})
	out := make(chan result, 16)
	for i := range 5 {
		send(t.Context(), tg.URL, "long"+string(rune('1'+i)), "", longContent, out)
	}
	got := map[string]bool{up.next(t): true, up.next(t): true}
	waitFor(t, "three long requests queue in their lane", queuedIs(s, laneLong, 3))
	up.none(t)
	if n := s.inUse(laneLong); n != 2 {
		t.Fatalf("long slots in use: %d, want 2", n)
	}
	// The lane is full; shorts take the other two slots at once.
	for _, id := range []string{"short1", "short2"} {
		send(t.Context(), tg.URL, id, "", "x", out)
		if a := up.next(t); a != id {
			t.Fatalf("at the upstream: %s, want %s", a, id)
		}
	}
	// Now the upstream is full: the next short waits too.
	send(t.Context(), tg.URL, "short3", "", "x", out)
	waitFor(t, "short3 queues", queuedIs(s, laneDefault, 1))
	up.none(t)
	if len(got) != 2 {
		t.Fatalf("two distinct long requests should have been admitted: %v", got)
	}
	// A short request ends: its slot goes to the queued short request,
	// not to a long one (their lane is still full).
	up.finish("short1")
	if a := up.next(t); a != "short3" {
		t.Fatalf("at the upstream: %s, want short3", a)
	}
	// Release everything: every request ends well, nothing stays queued.
	up.finishAll()
	for range 8 {
		if r := recv(t, out); r.status != 200 {
			t.Errorf("%s: %d %s", r.id, r.status, r.body)
		}
	}
	for range 3 {
		up.next(t) // the queued long requests
	}
	waitFor(t, "nothing is queued or held", func() bool {
		return s.queued(laneLong)+s.queued(laneDefault)+s.inUse(laneLong)+s.inUse(laneDefault) == 0
	})
}

// TestQueueRefusals: a long request that times out while its lane is
// full gets 429 (its own class is at its limit); one that times out while
// the upstream is full and its lane is not gets 503, as a short one
// does. Both are OpenAI-style errors with Retry-After.
func TestQueueRefusals(t *testing.T) {
	up := newGateUpstream(t)
	tg, s := admissionGateway(t, up, func(c *config.Config) {
		c.Upstreams[0].MaxConcurrency = 2
		c.Upstreams[0].QueueTimeout = 50 * time.Millisecond
		c.Upstreams[0].LongInputTokens = 100
		c.Upstreams[0].LongMaxConcurrency = 1
	})
	out := make(chan result, 8)
	check := func(id string, status int, typ string) {
		t.Helper()
		r := recv(t, out)
		if r.id != id || r.status != status || r.header.Get("Retry-After") != "1" || r.header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s: status %d, headers %v; want %s %d with Retry-After", r.id, r.status, r.header, id, status)
		}
		var body map[string]map[string]any
		if err := json.Unmarshal(r.body, &body); err != nil {
			t.Fatalf("%s: %v", r.body, err)
		}
		e := body["error"]
		if e["type"] != typ || e["code"] != record.ErrQueueTimeout || e["param"] != nil || e["message"] == "" || len(e) != 4 {
			t.Errorf("%s: error body %s", id, r.body)
		}
		rec := tg.next(t)
		if rec.Status != status || rec.ErrorType != record.ErrQueueTimeout {
			t.Errorf("%s: record status %d error %q", id, rec.Status, rec.ErrorType)
		}
	}

	send(t.Context(), tg.URL, "long-holder", "", longContent, out)
	up.next(t)
	send(t.Context(), tg.URL, "long-waiter", "", longContent, out)
	check("long-waiter", http.StatusTooManyRequests, "requests")

	send(t.Context(), tg.URL, "short-holder", "", "x", out)
	up.next(t)
	send(t.Context(), tg.URL, "short-waiter", "", "x", out)
	check("short-waiter", http.StatusServiceUnavailable, "server_error")

	// The long request ends: its lane is free but the upstream is still
	// full (a short request took the slot), so a long waiter gets 503.
	up.finish("long-holder")
	r := recv(t, out)
	tg.next(t)
	send(t.Context(), tg.URL, "short-holder2", "", "x", out)
	up.next(t)
	send(t.Context(), tg.URL, "long-waiter2", "", longContent, out)
	check("long-waiter2", http.StatusServiceUnavailable, "server_error")
	if s.queued(laneLong)+s.queued(laneDefault) != 0 || r.status != 200 {
		t.Errorf("queued after refusals: %d/%d; %s ended %d", s.queued(laneDefault), s.queued(laneLong), r.id, r.status)
	}
	up.finishAll()
	for range 2 {
		recv(t, out)
	}
}

// TestQueueMetrics: the queue length and slots per lane are gauges, read
// at scrape time; waits are a histogram.
func TestQueueMetrics(t *testing.T) {
	up := newGateUpstream(t)
	reg := prometheus.NewRegistry()
	cfg := testConfig(up.URL())
	cfg.Upstreams[0].MaxConcurrency = 2
	cfg.Upstreams[0].LongInputTokens = 100
	cfg.Upstreams[0].LongMaxConcurrency = 1
	tg := newTestGatewayWith(t, cfg, func(o *Options) { o.Registerer = reg })
	s := tg.G.routes().all[0].slots
	out := make(chan result, 8)
	send(t.Context(), tg.URL, "l1", "", longContent, out)
	up.next(t)
	send(t.Context(), tg.URL, "l2", "", longContent, out)
	waitFor(t, "l2 queues", queuedIs(s, laneLong, 1))
	send(t.Context(), tg.URL, "s1", "", "x", out)
	up.next(t)
	send(t.Context(), tg.URL, "s2", "", "x", out)
	waitFor(t, "s2 queues", queuedIs(s, laneDefault, 1))

	want := map[string]float64{
		`tollgate_gateway_queue_length{lane="default",upstream="up"}`: 1,
		`tollgate_gateway_queue_length{lane="long",upstream="up"}`:    1,
		`tollgate_gateway_slots_in_use{lane="default",upstream="up"}`: 1,
		`tollgate_gateway_slots_in_use{lane="long",upstream="up"}`:    1,
	}
	got := gather(t, reg)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	up.finishAll()
	for range 4 {
		recv(t, out)
	}
	for range 2 {
		up.next(t)
	}
	waitFor(t, "every slot is free", func() bool { return s.inUse(laneDefault)+s.inUse(laneLong) == 0 })
	got = gather(t, reg)
	if got[`tollgate_gateway_queue_wait_seconds_count{lane="long",upstream="up"}`] != 2 || got[`tollgate_gateway_queue_wait_seconds_count{lane="default",upstream="up"}`] != 2 {
		t.Errorf("wait histogram counts: %v", got)
	}
	if got[`tollgate_gateway_queue_length{lane="long",upstream="up"}`] != 0 || got[`tollgate_gateway_slots_in_use{lane="default",upstream="up"}`] != 0 {
		t.Errorf("gauges after the end: %v", got)
	}
}

// gather flattens a registry into "name{labels}" → value (histograms as
// name_count).
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+`="`+l.GetValue()+`"`)
			}
			key := "{" + strings.Join(ls, ",") + "}"
			switch mf.GetType() {
			case dto.MetricType_GAUGE:
				out[mf.GetName()+key] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[mf.GetName()+"_count"+key] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// The slots themselves, in synctest bubbles: fake time makes the
// timeouts exact, and synctest.Wait says when every goroutine is blocked
// (queued).

func newTestSlots(max, longMax int, timeout time.Duration) *slots {
	c := config.Upstream{Name: "u", MaxConcurrency: max, QueueTimeout: timeout, LongMaxConcurrency: longMax}
	if longMax > 0 {
		c.LongInputTokens = 100
	}
	return newSlots(c, newWaitHistogram())
}

// acquireAsync queues a request and reports its slot (or error) on a channel.
func acquireAsync(ctx context.Context, s *slots, prio int, l lane) <-chan error {
	ch := make(chan error, 1)
	go func() {
		sl, err := s.acquire(ctx, prio, l)
		if err == nil {
			ch <- nil
			<-ctx.Done() // hold the slot until the test ends this context
			sl.release()
			return
		}
		ch <- err
	}()
	return ch
}

func TestSlotsTimeoutExact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestSlots(1, 0, 5*time.Second)
		held, err := s.acquire(t.Context(), 0, laneDefault)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		ch := acquireAsync(t.Context(), s, 0, laneDefault)
		synctest.Wait()
		if s.queued(laneDefault) != 1 {
			t.Fatal("not queued")
		}
		err = <-ch
		if !errors.Is(err, errQueueTimeout) || time.Since(start) != 5*time.Second {
			t.Errorf("err %v after %v; want errQueueTimeout after exactly 5s", err, time.Since(start))
		}
		if s.queued(laneDefault) != 0 || s.used != 1 {
			t.Errorf("queued %d used %d after the timeout", s.queued(laneDefault), s.used)
		}
		held.release()
		if s.used != 0 {
			t.Errorf("used %d after release", s.used)
		}
	})
}

// TestSlotsAcrossLanes: a waiter blocked by its lane does not hold up
// the other queue, and between the heads of both queues priority wins.
func TestSlotsAcrossLanes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestSlots(2, 1, time.Hour)
		ctxLong, endLong := context.WithCancel(t.Context())
		ctxShort, endShort := context.WithCancel(t.Context())
		if err := <-acquireAsync(ctxLong, s, 0, laneLong); err != nil {
			t.Fatal(err)
		}
		if err := <-acquireAsync(ctxShort, s, 0, laneDefault); err != nil {
			t.Fatal(err)
		}
		// Full. A high-priority long request waits for its lane; a short
		// one of lower priority queued after it gets the next free slot.
		longWaiter := acquireAsync(t.Context(), s, 9, laneLong)
		synctest.Wait()
		shortWaiter := acquireAsync(t.Context(), s, 0, laneDefault)
		synctest.Wait()
		endShort()
		if err := <-shortWaiter; err != nil {
			t.Fatal(err)
		}
		select {
		case <-longWaiter:
			t.Fatal("the long waiter got a slot while its lane was full")
		default:
		}
		// The long request ends: its lane frees, and a short request of
		// lower priority queued meanwhile waits behind the long waiter.
		lowShort := acquireAsync(t.Context(), s, 1, laneDefault)
		synctest.Wait()
		endLong()
		if err := <-longWaiter; err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if s.queued(laneDefault) != 1 || s.longUsed != 1 || s.used != 2 {
			t.Errorf("queued %d, long used %d, used %d", s.queued(laneDefault), s.longUsed, s.used)
		}
		select {
		case <-lowShort:
			t.Fatal("the low short waiter got a slot before the higher long one")
		default:
		}
	})
}

// TestSlotsManyWaiters: under churn, with timeouts and cancellations
// racing grants, every slot comes back and no waiter is left queued.
func TestSlotsManyWaiters(t *testing.T) {
	s := newTestSlots(3, 1, 20*time.Millisecond)
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if i%7 == 0 {
				cancel()
			}
			l := lane(i % 2)
			sl, err := s.acquire(ctx, i%3, l)
			if err == nil {
				if sl.s == nil || sl.lane != l {
					t.Errorf("slot %+v for lane %d", sl, l)
				}
				time.Sleep(time.Duration(i%5) * time.Millisecond) // holding the slot is the workload here
				sl.release()
			}
		})
	}
	wg.Wait()
	if s.used != 0 || s.longUsed != 0 || s.queued(laneDefault) != 0 || s.queued(laneLong) != 0 {
		t.Errorf("after churn: used %d, long %d, queued %d/%d", s.used, s.longUsed, s.queued(laneDefault), s.queued(laneLong))
	}
}

func TestPriorities(t *testing.T) {
	cfg := config.Default()
	cfg.Auth.Keys = []config.Key{{Name: "gold", Key: "sk-gold", UserID: "g"}}
	cfg.Admission = config.Admission{DefaultPriority: 2, Priorities: config.Priorities{
		Keys: map[string]int{"gold": 10}, BizLines: map[string]int{"search": 5, "batch": -1, "vip": 20},
	}}
	p := newPriorities(cfg)
	gold := config.HashKey("sk-gold")[:12]
	for _, c := range []struct {
		key, biz string
		want     int
	}{
		{"", "", 2}, {"other", "none", 2}, {gold, "", 10}, {gold, "batch", 10}, {gold, "vip", 20}, {"", "batch", -1}, {"", "search", 5},
	} {
		if got := p.of(c.key, c.biz); got != c.want {
			t.Errorf("priority(%q, %q) = %d, want %d", c.key, c.biz, got, c.want)
		}
	}
}
