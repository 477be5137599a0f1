package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/label"
	"github.com/tollgate-dev/tollgate/internal/memnet"
	"github.com/tollgate-dev/tollgate/internal/metrics"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/sim"
)

// TestResponseLimit: a non-streamed upstream answer larger than
// limits.max_response_bytes is not buffered whole nor relayed; the client
// gets 502 and the ledger says why. One within the limit passes. An
// answer that announces its length is refused before it is read; one that
// does not (chunked) is read up to the limit.
func TestResponseLimit(t *testing.T) {
	for _, chunked := range []bool{false, true} {
		t.Run(fmt.Sprintf("chunked=%v", chunked), func(t *testing.T) {
			answer := nonStreamBody
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				if !chunked {
					w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
				}
				_, _ = io.WriteString(w, answer[:10])
				_ = http.NewResponseController(w).Flush()
				_, _ = io.WriteString(w, answer[10:])
			}))
			defer up.Close()
			cfg := testConfig(up.URL + "/v1")
			cfg.Limits.MaxResponseBytes = int64(len(nonStreamBody))
			tg := newTestGateway(t, cfg)

			resp := post(t, tg.URL+"/v1/chat/completions", chatReq, nil)
			if b := readAll(t, resp); resp.StatusCode != 200 || !strings.Contains(string(b), "Hello there") {
				t.Fatalf("answer of exactly the limit: %d %s", resp.StatusCode, b)
			}
			tg.next(t)

			answer = nonStreamBody + " " // one byte over
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
			if used := tg.G.buffers.used.Load(); used != 0 {
				t.Errorf("%d bytes of the buffer budget still held after both answers", used)
			}
		})
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
	m := metrics.New(prometheus.NewRegistry(), label.New(nil, b.cfg.LabelConfig()))
	g, err := New(Options{Config: b.cfg, Log: discardLog(), Metrics: m, Observers: []Observer{{Name: "metrics", Observe: m.Observe}},
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
// answers of 900 KiB whose upstream pauses after 600 KiB, against a
// budget of 2 MiB: those that cannot grow their buffer get 503
// buffer_full at once (Retry-After, a Record with the error type, a
// counted refusal); the others complete when the upstream resumes. The
// budget is all given back at the end.
func TestBufferBudget(t *testing.T) {
	const (
		n       = 6
		size    = 900 << 10
		pauseAt = 600 << 10
	)
	answer := `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Repeat("x", size-150) + `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}`
	resume := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json") // no Content-Length: the length is learnt by reading
		_, _ = io.WriteString(w, answer[:pauseAt])
		_ = http.NewResponseController(w).Flush()
		select {
		case <-resume:
			_, _ = io.WriteString(w, answer[pauseAt:])
		case <-r.Context().Done():
		}
	}))
	defer up.Close()
	cfg := testConfig(up.URL + "/v1")
	cfg.Limits.MaxResponseBytes, cfg.Limits.MaxBufferedBytes = 1<<20, 2<<20
	reg := prometheus.NewRegistry()
	tg := newTestGatewayWith(t, cfg, func(o *Options) { o.Registerer = reg })
	gauge := func(name string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				m := mf.GetMetric()[0]
				if m.Gauge != nil {
					return m.Gauge.GetValue()
				}
				return m.Counter.GetValue()
			}
		}
		t.Fatalf("no metric %s", name)
		return 0
	}

	type answered struct {
		status     int
		body       []byte
		retryAfter string
	}
	results := make(chan answered, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			resp, err := http.Post(tg.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatReq))
			if err != nil {
				t.Error(err)
				results <- answered{}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			results <- answered{resp.StatusCode, b, resp.Header.Get("Retry-After")}
		})
	}
	// Every request ends up holding a whole 1 MiB buffer, paused, or
	// refused: wait for that, then let the upstream finish.
	refused := 0
	var got []answered
	deadline := time.After(60 * time.Second)
	for refused+int(gauge("tollgate_gateway_buffered_bytes"))/(1<<20) < n {
		select {
		case a := <-results:
			got = append(got, a)
			if a.status == http.StatusServiceUnavailable {
				refused++
			}
		case <-time.After(10 * time.Millisecond): // polling the gauge
		case <-deadline:
			t.Fatalf("after 60s: %d refused, %v bytes held", refused, gauge("tollgate_gateway_buffered_bytes"))
		}
	}
	close(resume)
	wg.Wait()
	close(results)
	for a := range results {
		got = append(got, a)
	}

	completed := 0
	for _, a := range got {
		switch a.status {
		case http.StatusOK:
			completed++
			if string(a.body) != answer {
				t.Errorf("a completed answer of %d bytes, want the %d sent", len(a.body), len(answer))
			}
		case http.StatusServiceUnavailable:
			e := decodeErr(t, a.body)
			if e.Error.Code == nil || *e.Error.Code != record.ErrBufferFull || !strings.Contains(e.Error.Message, "limits.max_buffered_bytes") || a.retryAfter != "1" {
				t.Errorf("refusal %s with Retry-After %q; want code %s naming limits.max_buffered_bytes, Retry-After 1", a.body, a.retryAfter, record.ErrBufferFull)
			}
		default:
			t.Errorf("answer %d %s", a.status, a.body)
		}
	}
	t.Logf("%d completed, %d refused", completed, refused)
	if completed+refused != n || refused < n-2 {
		t.Errorf("%d completed, %d refused; a budget of 2 MiB holds two 900 KiB answers at most", completed, refused)
	}
	if peak := gauge("tollgate_gateway_buffered_bytes_peak"); peak > float64(cfg.Limits.MaxBufferedBytes) || peak < 1<<20 {
		t.Errorf("peak of buffered bytes %v; want at most limits.max_buffered_bytes (%d)", peak, cfg.Limits.MaxBufferedBytes)
	}
	if c := gauge("tollgate_gateway_buffer_refused_total"); c != float64(refused) {
		t.Errorf("refusals counted %v, want %d", c, refused)
	}
	if held := gauge("tollgate_gateway_buffered_bytes"); held != 0 {
		t.Errorf("%v bytes still held after every answer ended", held)
	}
	for range n {
		r := tg.next(t)
		switch {
		case r.Status == http.StatusServiceUnavailable:
			if r.ErrorType != record.ErrBufferFull || r.UpstreamStatus != 200 {
				t.Errorf("refusal recorded as %q, upstream status %d", r.ErrorType, r.UpstreamStatus)
			}
		case !r.OK():
			t.Errorf("recorded %d %q", r.Status, r.ErrorType)
		}
	}
}

// TestBudgetRead: the buffer an answer is read into, and what it takes
// from the budget, for answers of known and unknown length, within and
// beyond the limit, read a byte at a time or failing midway.
func TestBudgetRead(t *testing.T) {
	data := strings.Repeat("a", 100<<10)
	for _, tc := range []struct {
		name        string
		n, limit    int
		size        int64 // announced; -1 unknown
		budget      int64
		oneByte     bool
		failAfter   bool
		wantErr     error
		wantHeld    int64 // at the end, before release
		wantMaxPeak int64
	}{
		{name: "announced", n: 50 << 10, limit: 64 << 10, size: 50 << 10, budget: 1 << 20, wantHeld: 50 << 10, wantMaxPeak: 50 << 10},
		{name: "announced empty", n: 0, limit: 64 << 10, size: 0, budget: 1 << 20},
		{name: "unknown, doubling", n: 50 << 10, limit: 64 << 10, size: -1, budget: 1 << 20, wantHeld: 64 << 10, wantMaxPeak: 96 << 10},
		{name: "unknown, exactly the limit", n: 64 << 10, limit: 64 << 10, size: -1, budget: 128 << 10, oneByte: true, wantHeld: 64 << 10, wantMaxPeak: 96 << 10},
		{name: "unknown, one byte over", n: 64<<10 + 1, limit: 64 << 10, size: -1, budget: 128 << 10, wantErr: errTooLarge, wantHeld: 64 << 10, wantMaxPeak: 96 << 10},
		{name: "budget too small to grow", n: 50 << 10, limit: 64 << 10, size: -1, budget: 40 << 10, wantErr: errBufferFull, wantHeld: 16 << 10, wantMaxPeak: 16 << 10},
		{name: "upstream fails midway", n: 20 << 10, limit: 64 << 10, size: -1, budget: 1 << 20, failAfter: true, wantErr: errReset, wantHeld: 32 << 10, wantMaxPeak: 48 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r io.Reader = strings.NewReader(data[:tc.n])
			if tc.oneByte {
				r = iotest.OneByteReader(r)
			}
			if tc.failAfter {
				r = io.MultiReader(r, iotest.ErrReader(errReset))
			}
			b := newBudget(tc.budget)
			h, err := b.read(r, int64(tc.limit), tc.size)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if err == nil && string(h.b) != data[:tc.n] {
				t.Errorf("read %d bytes, want the %d sent", len(h.b), tc.n)
			}
			if h.held != tc.wantHeld || b.used.Load() != tc.wantHeld {
				t.Errorf("holds %d (budget used %d), want %d", h.held, b.used.Load(), tc.wantHeld)
			}
			if p := b.peak.Load(); p != tc.wantMaxPeak {
				t.Errorf("peak %d, want %d", p, tc.wantMaxPeak)
			}
			h.release()
			if u := b.used.Load(); u != 0 {
				t.Errorf("%d still used after release", u)
			}
		})
	}
}

var errReset = errors.New("connection reset by peer")
