package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/sim"
)

// startServeLog is startServe with serve's log written to w.
func startServeLog(t *testing.T, cfg *config.Config, w io.Writer) (addr string, cancel func(), wait func() error) {
	t.Helper()
	ctx, cancelFn := context.WithCancel(context.Background())
	started := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, slog.New(slog.NewTextHandler(w, nil)), started) }()
	select {
	case addr = <-started:
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	return addr, cancelFn, func() error { return <-done }
}

// slowClient sends the headers of a chat request announcing an 8 MiB body,
// then one byte, then nothing more, and returns what the gateway answered
// (the status line, "" when it closed the connection without a word) and
// whether the connection was closed after it. A read deadline bounds the
// wait; it is not what is tested.
func slowClient(addr string) (status string, closed bool, err error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return "", false, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: tollgate\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", 8<<20); err != nil {
		return "", false, err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return "", false, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_, err = br.ReadByte()
	return resp.Status, errors.Is(err, io.EOF), nil
}

// TestServeSlowBodies: through serve, 40 clients that announce 8 MiB and
// send one byte each get 408 once limits.body_timeout has passed, and
// their connections are closed; each is in the ledger as body_timeout. A
// stream that lasts longer than the body timeout is not cut by it.
func TestServeSlowBodies(t *testing.T) {
	const clients = 40
	up := startSimServer(t, sim.Config{DecodeBase: 20 * time.Millisecond})
	cfg := quietConfig(t, up)
	cfg.Limits.BodyTimeout = 300 * time.Millisecond
	addr, cancel, waitServe := startServe(t, cfg)
	wait := sync.OnceValue(waitServe)
	defer func() { cancel(); _ = wait() }()

	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for range clients {
		wg.Go(func() {
			status, closed, err := slowClient(addr)
			switch {
			case err != nil:
				errs <- fmt.Errorf("no answer: %w", err)
			case status != "408 Request Timeout" || !closed:
				errs <- fmt.Errorf("answered %q, connection closed after it: %v; want 408, closed", status, closed)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// 50 tokens at 20 ms a step: a stream of a second or more, well past
	// the 300 ms body timeout.
	resp, br := openStream(t, addr, 50)
	rest, err := io.ReadAll(br)
	resp.Body.Close()
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Errorf("a stream longer than limits.body_timeout was cut (err %v): …%s", err, rest[max(0, len(rest)-100):])
	}

	cancel()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	timedOut, ok := 0, 0
	for _, r := range allRequests(t, cfg.Store.SQLite.Path) {
		switch {
		case r.Status == http.StatusRequestTimeout && r.ErrorType == record.ErrBodyTimeout && r.RequestBytes == 1:
			timedOut++
		case r.OK() && r.Stream && r.Usage.OutputTokens == 50 && r.Derived.E2E > cfg.Limits.BodyTimeout:
			ok++
		default:
			t.Errorf("ledger row %d %q, %d request bytes, E2E %v", r.Status, r.ErrorType, r.RequestBytes, r.Derived.E2E)
		}
	}
	if timedOut != clients || ok != 1 {
		t.Errorf("ledger: %d body_timeout rows (want %d), %d whole streams (want 1)", timedOut, clients, ok)
	}
}

// TestServeConnsPerIP: through serve, a client address gets
// limits.max_conns_per_ip connections; one more is closed unanswered and
// counted in /metrics, and a closed connection gives its place back.
func TestServeConnsPerIP(t *testing.T) {
	const max = 4
	cfg := quietConfig(t, "http://127.0.0.1:1/v1")
	cfg.Limits.MaxConnsPerIP = max
	var logs lockedBuffer
	addr, cancel, wait := startServeLog(t, cfg, &logs)
	defer func() { cancel(); _ = wait() }()

	// get sends GET path on c and returns the body, or "" when the
	// connection was closed unanswered. The connection stays open.
	get := func(c net.Conn, path string) string {
		t.Helper()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // bounds the test, asserts nothing
		if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: tollgate\r\n\r\n", path); err != nil {
			return ""
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	var open []net.Conn
	for i := range max {
		c := dial()
		if get(c, "/healthz") != "ok\n" {
			t.Fatalf("connection %d of %d not answered", i+1, max)
		}
		open = append(open, c)
	}
	if got := get(dial(), "/healthz"); got != "" {
		t.Fatalf("connection %d answered %q; limits.max_conns_per_ip is %d", max+1, got, max)
	}
	if m := get(open[0], "/metrics"); !strings.Contains(m, "tollgate_gateway_conns_refused_total 1\n") || !strings.Contains(m, fmt.Sprintf("tollgate_gateway_conns_open %d\n", max)) {
		t.Errorf("/metrics does not count the refusal and the %d open connections", max)
	}
	open[1].Close()
	deadline := time.Now().Add(30 * time.Second)
	for get(dial(), "/healthz") != "ok\n" { // polling: serve notices the close on its own
		if time.Now().After(deadline) {
			t.Fatal("a closed connection did not give its place back within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, want := range []string{"level=WARN msg=\"connection refused: its TCP peer has limits.max_conns_per_ip", "peer=127.0.0.1"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q", want)
		}
	}
}

// TestServeOpenAPIBehindProxy: with no api.tokens, serve warns at start
// that the API is open to local clients, and a request that came through
// a reverse proxy on the host (X-Forwarded-For) gets 401 naming
// api.tokens while a local one is answered.
func TestServeOpenAPIBehindProxy(t *testing.T) {
	cfg := quietConfig(t, "http://127.0.0.1:1/v1")
	var logs lockedBuffer
	addr, cancel, wait := startServeLog(t, cfg, &logs)
	defer func() { cancel(); _ = wait() }()
	if !strings.Contains(logs.String(), "level=WARN msg=\"no api.tokens configured: the JSON API") {
		t.Errorf("no warning that the API is open:\n%s", logs.String())
	}
	for _, tc := range []struct {
		xff  string
		want int
	}{{"", http.StatusOK}, {"203.0.113.9", http.StatusUnauthorized}} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/v1/requests", nil)
		if tc.xff != "" {
			req.Header.Set("X-Forwarded-For", tc.xff)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want || (tc.want == http.StatusUnauthorized && !strings.Contains(string(b), "api.tokens")) {
			t.Errorf("X-Forwarded-For %q: %d %s, want %d", tc.xff, resp.StatusCode, b, tc.want)
		}
	}
}

// TestServeSlowBodyHTTP2: over TLS and HTTP/2 the body deadline is the
// stream's own: a body that stops coming gets 408 body_timeout, and a
// streamed answer afterwards, longer than the timeout, is whole.
func TestServeSlowBodyHTTP2(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t, t.TempDir())
	cfg := quietConfig(t, startSimServer(t, sim.Config{DecodeBase: 20 * time.Millisecond}))
	cfg.ListenTLS = config.ListenTLS{CertFile: certFile, KeyFile: keyFile}
	cfg.Limits.BodyTimeout = 300 * time.Millisecond
	addr, cancel, wait := startServe(t, cfg)
	defer func() { cancel(); _ = wait() }()
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second} // bounds the test, asserts nothing

	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = io.WriteString(pw, `{"model":"Qwen/Qwen3-8B",`) }() // and nothing more
	req, _ := http.NewRequest(http.MethodPost, "https://"+addr+"/v1/chat/completions", pr)
	req.ContentLength = 8 << 20
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("no answer to a body that stopped: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), `"code":"body_timeout"`) {
		t.Fatalf("%s %d %s; want HTTP/2 408 body_timeout", resp.Proto, resp.StatusCode, b)
	}

	body := `{"model":"Qwen/Qwen3-8B","messages":[{"role":"user","content":"hi"}],"stream":true}`
	req, _ = http.NewRequest(http.MethodPost, "https://"+addr+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set(sim.OutputTokensHeader, "50") // a second or more, past the 300 ms
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
		t.Errorf("a stream after the timed-out one, over HTTP/2: err %v, …%s", err, b[max(0, len(b)-100):])
	}
}
