package gateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/sim"
)

// Scenario tests: each reproduces a situation from the seeds with the
// simulator and asserts that the right segment grows — the point of
// attribution is telling these apart.

func medianSeg(rs []*record.Record, name string) time.Duration {
	var ds []time.Duration
	for _, r := range rs {
		ds = append(ds, r.Derived.Segments.Get(name))
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// chatWithSystem is a streamed chat request whose system prompt is about n
// simulator tokens, starting with a unique word so the prefix cache misses.
func chatWithSystem(n, salt int) string {
	return fmt.Sprintf(`{"model":%q,"messages":[{"role":"system","content":"u%d %s"},{"role":"user","content":"hi"}],"stream":true}`,
		simModel, salt, strings.Repeat("word ", n))
}

// TestScenarioPromptInflation: seed 000 §1.1 — a system prompt grown from
// 200 to 3000 tokens shows up as prefill, while decode stays put.
func TestScenarioPromptInflation(t *testing.T) {
	se := startSim(t, sim.Config{PrefillPerToken: 40 * time.Microsecond, DecodeBase: time.Millisecond})
	tg := simGateway(t, se)
	run := func(tokens int) []*record.Record {
		var rs []*record.Record
		for i := range 5 {
			readAll(t, post(t, tg.URL+"/v1/chat/completions", chatWithSystem(tokens, tokens*10+i), map[string]string{sim.OutputTokensHeader: "20"}))
			r := tg.next(t)
			checkInvariants(t, r)
			rs = append(rs, r)
		}
		return rs
	}
	small, big := run(200), run(3000)
	grew := medianSeg(big, record.SegPrefill) - medianSeg(small, record.SegPrefill)
	// 2800 more uncached tokens at 40µs each: 112ms more prefill.
	if grew < 90*time.Millisecond {
		t.Errorf("prefill grew by %v, want about 112ms (2800 tokens × 40µs)", grew)
	}
	if d := medianSeg(big, record.SegDecode) - medianSeg(small, record.SegDecode); d > 30*time.Millisecond {
		t.Errorf("decode grew by %v although the output did not change", d)
	}
}

// TestScenarioGatewayQueue: an upstream at its concurrency limit makes
// requests wait in the gateway: gateway_queue grows, prefill does not.
func TestScenarioGatewayQueue(t *testing.T) {
	se := startSim(t, sim.Config{DecodeBase: 2 * time.Millisecond})
	cfg := testConfig(se.URL)
	cfg.Upstreams[0].Models = []string{simModel}
	cfg.Upstreams[0].MaxConcurrency = 1
	tg := newTestGateway(t, cfg)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			readAll(t, post(t, tg.URL+"/v1/chat/completions", chatWithSystem(10, i), map[string]string{sim.OutputTokensHeader: "25"}))
		}()
	}
	wg.Wait()
	var rs []*record.Record
	for range 4 {
		r := tg.next(t)
		checkInvariants(t, r)
		rs = append(rs, r)
	}
	slices.SortFunc(rs, func(a, b *record.Record) int {
		return int(a.Derived.Segments.GatewayQueue - b.Derived.Segments.GatewayQueue)
	})
	// One at a time, each ~50ms (25 tokens × 2ms): the last waited for three.
	if q := rs[3].Derived.Segments.GatewayQueue; q < 100*time.Millisecond {
		t.Errorf("longest gateway_queue = %v, want ≥ 100ms (it waited behind three requests)", q)
	}
	if q := rs[0].Derived.Segments.GatewayQueue; q > 20*time.Millisecond {
		t.Errorf("first request queued %v at the gateway, want ~0", q)
	}
	if p := rs[3].Derived.Segments.Prefill; p > 50*time.Millisecond {
		t.Errorf("queued request's prefill = %v: the wait was misattributed to the engine", p)
	}
}

// TestScenarioSlowClient: a client that stops reading mid-stream shows up
// as client_write, not as engine decode. The gateway's socket has a small
// fixed send buffer (as a busy host would) and the client's a small
// receive buffer, so the pause is felt at once rather than absorbed by
// megabytes of kernel buffers.
func TestScenarioSlowClient(t *testing.T) {
	se := startSim(t, sim.Config{DecodeBase: 100 * time.Microsecond})
	tg := simGateway(t, se)
	lc := net.ListenConfig{Control: sockBuf(syscall.SO_SNDBUF, 4096)}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: tg.G.Handler()}}
	srv.Start()
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{Control: sockBuf(syscall.SO_RCVBUF, 2048)}).DialContext}}

	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(chatWithSystem(5, 1)))
	req.Header.Set(sim.OutputTokensHeader, "1500")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1024)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	const pause = time.Second
	time.Sleep(pause) // the client stops reading: this is the scenario, not synchronisation
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	r := tg.next(t)
	checkInvariants(t, r)
	seg := r.Derived.Segments
	if seg.ClientWrite < pause*8/10 {
		t.Errorf("client_write = %v, want about the client's %v pause; segments %+v", seg.ClientWrite, pause, seg)
	}
	if seg.Decode > r.Derived.E2E-pause*8/10 {
		t.Errorf("decode = %v of E2E %v: the client's pause leaked into decode", seg.Decode, r.Derived.E2E)
	}
}

func sockBuf(opt, size int) func(_, _ string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, opt, size) }); cerr != nil {
			return cerr
		}
		return err
	}
}
