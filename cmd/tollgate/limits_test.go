package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/sim"
)

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
