package memnet

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestHTTPInBubble: an HTTP server and client over memnet inside a
// synctest bubble; a handler that sleeps an hour takes no wall time, and
// every goroutine ends once the server and the client's idle connections
// are closed.
func TestHTTPInBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New()
		ln, err := n.Listen("engine:8000")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(time.Hour)
			io.WriteString(w, "slept "+r.RemoteAddr)
		})}
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		tr := &http.Transport{DialContext: n.DialContext}
		client := &http.Client{Transport: tr}

		start := time.Now()
		for range 2 { // the second request reuses the connection
			resp, err := client.Get(ln.URL() + "/")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.HasPrefix(string(b), "slept client-") {
				t.Errorf("body %q", b)
			}
		}
		if d := time.Since(start); d != 2*time.Hour {
			t.Errorf("two requests took %v of fake time, want 2h", d)
		}
		tr.CloseIdleConnections()
		if err := srv.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
	})
}

func TestDialErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New()
		if _, err := n.DialContext(context.Background(), "tcp", "nobody:1"); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("dial without a listener: %v, want connection refused", err)
		}
		ln, err := n.Listen("a:1")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.Listen("a:1"); !errors.Is(err, syscall.EADDRINUSE) {
			t.Errorf("second listen: %v, want address in use", err)
		}
		// Nobody accepts: the dial waits for its context.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := n.DialContext(ctx, "tcp", "a:1"); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("dial nobody accepts: %v, want the context's deadline", err)
		}
		// A dial waiting when the listener closes is refused.
		dialed := make(chan error, 1)
		go func() {
			_, err := n.DialContext(context.Background(), "tcp", "a:1")
			dialed <- err
		}()
		synctest.Wait()
		if err := ln.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-dialed; !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("dial while closing: %v, want connection refused", err)
		}
		if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("accept after close: %v", err)
		}
		if err := ln.Close(); err == nil {
			t.Error("second close: no error")
		}
		// The address is free again.
		ln2, err := n.Listen("a:1")
		if err != nil {
			t.Fatal(err)
		}
		ln2.Close()
	})
}
