package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/memnet"
	"github.com/tollgate-dev/tollgate/internal/metrics"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/sim"
)

// TestResponseLimit: a non-streamed upstream answer larger than
// limits.max_response_bytes is not buffered whole nor relayed; the client
// gets 502 and the ledger says why. One within the limit passes.
func TestResponseLimit(t *testing.T) {
	up := newTranscriptUpstream(t, "")
	up.ctype, up.rawBody = "application/json", nonStreamBody
	cfg := testConfig(up.URL())
	cfg.Limits.MaxResponseBytes = int64(len(nonStreamBody))
	tg := newTestGateway(t, cfg)

	resp := post(t, tg.URL+"/v1/chat/completions", chatReq, nil)
	if b := readAll(t, resp); resp.StatusCode != 200 || !strings.Contains(string(b), "Hello there") {
		t.Fatalf("answer of exactly the limit: %d %s", resp.StatusCode, b)
	}
	tg.next(t)

	up.rawBody = nonStreamBody + " " // one byte over
	resp = post(t, tg.URL+"/v1/chat/completions", chatReq, nil)
	b := readAll(t, resp)
	if resp.StatusCode != 502 || strings.Contains(string(b), "Hello there") {
		t.Fatalf("answer over the limit: %d %s; want 502 without the answer", resp.StatusCode, b)
	}
	if e := decodeErr(t, b); !strings.Contains(e.Error.Message, "limits.max_response_bytes") {
		t.Errorf("message %q does not name the limit", e.Error.Message)
	}
	if r := tg.next(t); r.Status != 502 || r.ErrorType != record.ErrMalformed {
		t.Errorf("recorded %d %q", r.Status, r.ErrorType)
	}
}

// bubbleModel is served by the simulator in the bubble tests; it has no
// built-in tokenizer, so nothing loads in the background.
const bubbleModel = "acme/chat-8b"

// bubble is a gateway (at tollgate:8080, served by net/http as serve
// does) in front of the simulator (engine:8000) on an in-memory network,
// inside the caller's synctest bubble: timeouts of seconds or minutes
// pass on the bubble's clock. Cleanup stops everything.
type bubble struct {
	net     *memnet.Network
	client  *http.Client
	records chan *record.Record
	cfg     *config.Config
}

const bubbleURL = "http://tollgate:8080"

func startBubble(t *testing.T, simCfg sim.Config) *bubble {
	t.Helper()
	b := &bubble{net: memnet.New(), records: make(chan *record.Record, 64)}
	simCfg.Models = []string{bubbleModel}
	eng, err := sim.New(simCfg, discardLog(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stopEng := context.WithCancel(context.Background())
	engDone := make(chan struct{})
	go func() { _ = eng.Run(ctx); close(engDone) }()
	serveOn := func(addr string, h http.Handler) {
		ln, err := b.net.Listen(addr)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		done := make(chan struct{})
		go func() { _ = srv.Serve(ln); close(done) }()
		t.Cleanup(func() { _ = srv.Close(); <-done })
	}
	serveOn("engine:8000", eng.Handler())
	t.Cleanup(func() { stopEng(); <-engDone }) // after the gateway's server (cleanups run last first)

	b.cfg = config.Default()
	b.cfg.Upstreams = []config.Upstream{{Name: "sim", URL: "http://engine:8000/v1", Engine: "vllm", Models: []string{bubbleModel},
		Timeouts: config.Timeouts{Connect: time.Second, FirstToken: 5 * time.Minute, Idle: 30 * time.Second, Total: 30 * time.Minute}}}
	if err := b.cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	g, err := New(Options{Config: b.cfg, Log: discardLog(), Metrics: metrics.New(prometheus.NewRegistry(), []string{bubbleModel}, 8),
		Sink: func(r *record.Record) func(context.Context) error { b.records <- r; return nil }, Dial: b.net.DialContext})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	serveOn("tollgate:8080", g.Handler())
	tr := &http.Transport{DialContext: b.net.DialContext}
	b.client = &http.Client{Transport: tr}
	t.Cleanup(tr.CloseIdleConnections)
	return b
}

// TestBodyTimeout: a client that announces 8 MiB and sends a byte every
// 5 s gets 408 when limits.body_timeout (30 s by default) has passed since
// its request arrived, and the connection is closed: the handler and the
// connection end instead of waiting for ever. The request is recorded.
func TestBodyTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := startBubble(t, sim.Config{})
		c, err := b.net.DialContext(t.Context(), "tcp", "tollgate:8080")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		// The gateway before limits.body_timeout waited as long as bytes came.
		_ = c.SetReadDeadline(start.Add(3 * time.Minute))
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: tollgate\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", 8<<20)
		trickled := make(chan int, 1)
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			n := 0
			defer func() { trickled <- n }()
			wait := 2 * time.Second
			for {
				select {
				case <-stop:
					return
				case <-time.After(wait):
				}
				if _, err := c.Write([]byte{' '}); err != nil {
					return
				}
				n, wait = n+1, 5*time.Second
			}
		}()

		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("no answer to a body that never ends: %v", err)
		}
		if waited := time.Since(start); waited != b.cfg.Limits.BodyTimeout {
			t.Errorf("answered after %v, want limits.body_timeout (%v)", waited, b.cfg.Limits.BodyTimeout)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Fatalf("%d %s, want 408", resp.StatusCode, body)
		}
		if e := decodeErr(t, body); e.Error.Code == nil || *e.Error.Code != record.ErrBodyTimeout || !strings.Contains(e.Error.Message, "limits.body_timeout") {
			t.Errorf("error %s, want code %s naming limits.body_timeout", body, record.ErrBodyTimeout)
		}
		if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
			t.Errorf("after the 408 the connection reads %v, want EOF (closed by the gateway)", err)
		}
		if n := <-trickled; n != 6 {
			t.Errorf("the client sent %d bytes before its connection was closed, want 6 (at 2 s, 7 s, … 27 s)", n)
		}
		r := <-b.records
		if r.Status != http.StatusRequestTimeout || r.ErrorType != record.ErrBodyTimeout || r.RequestBytes != 6 || r.ClientDisconnect {
			t.Errorf("recorded %d %q, %d request bytes, disconnect %v; want 408 %q, the 6 bytes that came",
				r.Status, r.ErrorType, r.RequestBytes, r.ClientDisconnect, record.ErrBodyTimeout)
		}
	})
}

// slowBody sends its text in pieces, a pause before each: a client on a
// slow link.
type slowBody struct {
	pieces []string
	pause  time.Duration
}

func (s *slowBody) Read(p []byte) (int, error) {
	if len(s.pieces) == 0 {
		return 0, io.EOF
	}
	time.Sleep(s.pause)
	n := copy(p, s.pieces[0])
	if s.pieces[0] = s.pieces[0][n:]; s.pieces[0] == "" {
		s.pieces = s.pieces[1:]
	}
	return n, nil
}

// TestBodyDeadlineSparesResponse: limits.body_timeout bounds the body
// only. A body that takes 25 s of the 30 is read whole; a stream of 90 s
// and an answer that takes 45 s, after their bodies, complete: the
// deadline is lifted when the body ends and no write deadline is set.
func TestBodyDeadlineSparesResponse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := startBubble(t, sim.Config{DecodeBase: time.Second, DecodePerSeq: time.Nanosecond, PrefillBase: time.Millisecond, PrefillPerToken: time.Nanosecond})
		for _, tc := range []struct {
			stream bool
			tokens int
		}{{true, 90}, {false, 45}} {
			body := `{"model":"` + bubbleModel + `","messages":[{"role":"user","content":"hi"}],"stream":` + strconv.FormatBool(tc.stream) + `}`
			var pieces []string
			for i := 0; i < len(body); i += len(body)/5 + 1 {
				pieces = append(pieces, body[i:min(i+len(body)/5+1, len(body))])
			}
			req, _ := http.NewRequest(http.MethodPost, bubbleURL+"/v1/chat/completions", &slowBody{pieces: pieces, pause: 5 * time.Second})
			req.ContentLength = int64(len(body))
			req.Header.Set(sim.OutputTokensHeader, strconv.Itoa(tc.tokens))
			start := time.Now()
			resp, err := b.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("stream=%v: %d %v %s", tc.stream, resp.StatusCode, err, got)
			}
			if took := time.Since(start); took < 2*b.cfg.Limits.BodyTimeout {
				t.Errorf("stream=%v took %v; the test needs an exchange well past limits.body_timeout", tc.stream, took)
			}
			r := <-b.records
			if !r.OK() || r.Usage.OutputTokens != int64(tc.tokens) || r.RequestBytes != int64(len(body)) {
				t.Errorf("stream=%v: recorded %d %q, %d output tokens, %d request bytes; want a whole answer of %d tokens",
					tc.stream, r.Status, r.ErrorType, r.Usage.OutputTokens, r.RequestBytes, tc.tokens)
			}
			if tc.stream && !strings.HasSuffix(string(got), "data: [DONE]\n\n") {
				t.Errorf("stream cut: ends %q", got[max(0, len(got)-80):])
			}
		}
	})
}

// TestLimitConns: a TCP peer gets limits.max_conns_per_ip connections;
// the next is closed at once, unanswered, and counted. Another peer
// (127.0.0.2) is not held back by the first one's, and a connection
// closed gives its place back.
func TestLimitConns(t *testing.T) {
	const max = 3
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	lim, err := LimitConns(ln, max, reg, discardLog())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })}
	served := make(chan struct{})
	go func() { _ = srv.Serve(lim); close(served) }()
	defer func() { _ = srv.Close(); <-served }()

	// get sends a request on c, keeping the connection open; it returns
	// whether it was answered.
	get := func(c net.Conn) bool {
		t.Helper()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // bounds the test, asserts nothing
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"); err != nil {
			return false
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}
	dial := func(from string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	var open []net.Conn
	for i := range max {
		c := dial("127.0.0.1")
		if !get(c) {
			t.Fatalf("connection %d of %d not answered", i+1, max)
		}
		open = append(open, c)
	}
	if get(dial("127.0.0.1")) {
		t.Fatalf("connection %d from the same peer answered; limit %d", max+1, max)
	}
	if got := testutil.ToFloat64(lim.(*connLimiter).refused); got != 1 {
		t.Errorf("refused counter %v, want 1", got)
	}
	if !get(dial("127.0.0.2")) {
		t.Error("another peer refused because of the first one's connections")
	}

	open[0].Close()
	deadline := time.Now().Add(30 * time.Second)
	for !get(dial("127.0.0.1")) { // polling: the server notices the close on its own
		if time.Now().After(deadline) {
			t.Fatal("a closed connection did not give its place back within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n, err := testutil.GatherAndCount(reg, "tollgate_gateway_conns_refused_total", "tollgate_gateway_conns_open"); err != nil || n != 2 {
		t.Errorf("metrics: %d series, %v", n, err)
	}
}

// TestBufferBudget: answers held in memory by concurrent non-streamed
// requests, together, never exceed limits.max_buffered_bytes. Six
