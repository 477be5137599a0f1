package gateway

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/otlp"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/sim"
)

type amendment struct {
	id string
	et record.EngineTiming
}

// joinGateway is a gateway with a span joiner fed by a real OTLP receiver;
// late timings arrive on the returned channel.
func joinGateway(t *testing.T, upstreamURL string) (*testGateway, *otlp.Joiner, string, chan amendment) {
	t.Helper()
	joiner := otlp.NewJoiner(time.Minute, 1000, nil)
	recv := otlp.NewReceiver(joiner.Offer, slog.New(slog.DiscardHandler), nil)
	otlpSrv := httptest.NewServer(recv.Handler())
	t.Cleanup(otlpSrv.Close)
	amends := make(chan amendment, 64)
	tg := newTestGatewayWith(t, testConfig(upstreamURL), func(o *Options) {
		o.Joiner, o.Amend = joiner, func(id string, et record.EngineTiming) { amends <- amendment{id, et} }
	})
	return tg, joiner, otlpSrv.URL, amends
}

// TestJoinSpanBeforeResponseEnds: the engine's span arrives while the
// response is still streaming; the Record carries the engine's segments.
func TestJoinSpanBeforeResponseEnds(t *testing.T) {
	var joiner *otlp.Joiner
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		// traceparent: 00-<trace>-<gateway span>-01
		parts := strings.Split(r.Header.Get("Traceparent"), "-")
		joiner.Offer(otlp.Span{TraceID: parts[1], ParentSpanID: parts[2], Name: otlp.VLLMSpanName,
			Timing: record.EngineTiming{Signal: otlp.SignalVLLMSpan, Queue: time.Microsecond, Prefill: 2 * time.Microsecond, Decode: 3 * time.Microsecond}})
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	}))
	defer up.Close()
	tg, j, _, amends := joinGateway(t, up.URL+"/v1")
	joiner = j
	readAll(t, post(t, tg.URL+"/v1/chat/completions", streamReq, nil))
	r := tg.next(t)
	if r.EngineTiming == nil || r.EngineTiming.Signal != otlp.SignalVLLMSpan || r.Derived.Segments.Source[record.SegEngineQueue] != "engine:vllm-span" {
		t.Fatalf("record without the engine's span: %+v %v", r.EngineTiming, r.Derived.Segments.Source)
	}
	if r.EngineTimingDue != 0 {
		t.Errorf("EngineTimingDue = %s for a span already joined, want 0: nothing is pending", r.EngineTimingDue)
	}
	checkInvariants(t, r)
	select {
	case a := <-amends:
		t.Errorf("amendment for a span that arrived in time: %+v", a)
	default:
	}
}

// TestJoinSpanAfterResponseEnds: the simulator exports vLLM's own span
// through a real OTLP exporter, batched, after the response has ended; it
// arrives as an amendment carrying the engine's exact timings.
func TestJoinSpanAfterResponseEnds(t *testing.T) {
	tg, se, amends := joinGatewayWithSim(t)
	readAll(t, post(t, tg.URL+"/v1/chat/completions", `{"model":"`+simModel+`","messages":[{"role":"user","content":"hi"}],"stream":true}`, map[string]string{sim.OutputTokensHeader: "12"}))
	r := tg.next(t)
	// Until the span arrives the Record says it is expected, for the
	// join window after the response ended: engine timing pending.
	if r.EngineTiming != nil || r.EngineTimingDue != r.Marks.End+time.Minute || !r.EngineTimingPending(time.Now()) {
		t.Errorf("record as handed on: timing %+v, due %s (end %s); want none yet, due end + 1m, pending", r.EngineTiming, r.EngineTimingDue, r.Marks.End)
	}
	var a amendment
	select {
	case a = <-amends:
	case <-time.After(30 * time.Second):
		t.Fatal("no amendment within 30s: the span was not joined")
	}
	if a.id != r.RequestID {
		t.Fatalf("amendment for %q, want %q", a.id, r.RequestID)
	}
	st := se.statsFor(t, r)
	near := func(got, want time.Duration) bool {
		d := got - want
		return d < time.Microsecond && d > -time.Microsecond
	}
	if !near(a.et.Queue, st.Queue) || !near(a.et.Prefill, st.Prefill) || !near(a.et.Decode, st.Decode) || a.et.CompletionTokens != 12 {
		t.Errorf("joined timing %+v, engine's own %+v", a.et, st)
	}
	amended := *r
	amended.EngineTiming = &a.et
	amended.Finish()
	checkInvariants(t, &amended)
	if amended.Derived.Segments.Source[record.SegPrefill] != "engine:vllm-span" {
		t.Errorf("amended segments still inferred: %v", amended.Derived.Segments.Source)
	}
	if amended.EngineTimingPending(time.Now()) {
		t.Error("amended record still pending")
	}
}

func joinGatewayWithSim(t *testing.T) (*testGateway, *simEngine, chan amendment) {
	t.Helper()
	// The simulator needs the receiver's address before the gateway exists:
	// build the receiver side first, then point a gateway at the simulator.
	joiner := otlp.NewJoiner(time.Minute, 1000, nil)
	recv := otlp.NewReceiver(joiner.Offer, slog.New(slog.DiscardHandler), nil)
	otlpSrv := httptest.NewServer(recv.Handler())
	t.Cleanup(otlpSrv.Close)
	se := startSim(t, sim.Config{OTLPEndpoint: otlpSrv.URL, MaxRunning: 1, DecodeBase: time.Millisecond})
	cfg := testConfig(se.URL)
	cfg.Upstreams[0].Models = []string{simModel}
	amends := make(chan amendment, 64)
	tg := newTestGatewayWith(t, cfg, func(o *Options) {
		o.Joiner, o.Amend = joiner, func(id string, et record.EngineTiming) { amends <- amendment{id, et} }
	})
	return tg, se, amends
}

// TestScenarioEngineOverload: load beyond the engine's batch capacity
// (one running sequence) shows up as engine_queue, reported by the
// engine's own span — not as gateway queue, not as prefill.
func TestScenarioEngineOverload(t *testing.T) {
	tg, _, amends := joinGatewayWithSim(t)
	const n = 4
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			readAll(t, post(t, tg.URL+"/v1/chat/completions", `{"model":"`+simModel+`","messages":[{"role":"user","content":"hi"}],"stream":true}`, map[string]string{sim.OutputTokensHeader: "30"}))
		}()
	}
	wg.Wait()
	recs := map[string]*record.Record{}
	for range n {
		r := tg.next(t)
		recs[r.RequestID] = r
	}
	var maxQueue, maxGateway time.Duration
	for range n {
		var a amendment
		select {
		case a = <-amends:
		case <-time.After(30 * time.Second):
			t.Fatal("not every span was joined within 30s")
		}
		r := *recs[a.id]
		r.EngineTiming = &a.et
		r.Finish()
		checkInvariants(t, &r)
		maxQueue = max(maxQueue, r.Derived.Segments.EngineQueue)
		maxGateway = max(maxGateway, r.Derived.Segments.GatewayQueue)
	}
	// One at a time, 30 tokens at ≥1ms each: the last waited ≥ 90ms in the engine.
	if maxQueue < 60*time.Millisecond {
		t.Errorf("longest engine_queue = %v, want the engine's own queue to show (≥ 60ms)", maxQueue)
	}
	if maxGateway > 20*time.Millisecond {
		t.Errorf("gateway_queue %v: the wait was misattributed to the gateway", maxGateway)
	}
}
