package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/sim"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
)

// closeGuard wraps the real SQLite store and reports any call that is in
// flight when Close starts, or made after it.
type closeGuard struct {
	*sqlite.Store
	mu         sync.Mutex
	closed     bool
	inflight   map[string]int
	violations []string
	pruning    chan struct{} // closed when Prune is first entered
	pruneOnce  sync.Once
	closing    chan struct{} // closed when Close starts
}

func (g *closeGuard) enter(op string) func() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		g.violations = append(g.violations, op+" called after Close")
	}
	g.inflight[op]++
	return func() {
		g.mu.Lock()
		g.inflight[op]--
		g.mu.Unlock()
	}
}

// Prune stands for a slow store call that does not end the moment its
// context does: once the context is done it holds on until Close starts
// or two seconds pass. A serve that closes the store without waiting for
// its jobs closes it under this call.
func (g *closeGuard) Prune(ctx context.Context, now time.Time, r store.Retention) (int64, error) {
	defer g.enter("Prune")()
	g.pruneOnce.Do(func() { close(g.pruning) })
	<-ctx.Done()
	select {
	case <-g.closing:
	case <-time.After(2 * time.Second):
	}
	return 0, ctx.Err()
}

func (g *closeGuard) Insert(ctx context.Context, b store.Batch) error {
	defer g.enter("Insert")()
	return g.Store.Insert(ctx, b)
}

func (g *closeGuard) AddEvents(ctx context.Context, evs []store.Event) error {
	defer g.enter("AddEvents")()
	return g.Store.AddEvents(ctx, evs)
}

func (g *closeGuard) AddWindowMinutes(ctx context.Context, ms []store.WindowMinute) error {
	defer g.enter("AddWindowMinutes")()
	return g.Store.AddWindowMinutes(ctx, ms)
}

func (g *closeGuard) AddWindowHours(ctx context.Context, hs []store.WindowHour) error {
	defer g.enter("AddWindowHours")()
	return g.Store.AddWindowHours(ctx, hs)
}

func (g *closeGuard) Report(ctx context.Context, q store.ReportQuery) ([]store.ReportRow, error) {
	defer g.enter("Report")()
	return g.Store.Report(ctx, q)
}

func (g *closeGuard) Close() error {
	g.mu.Lock()
	g.closed = true
	for op, n := range g.inflight {
		if n > 0 {
			g.violations = append(g.violations, op+" in flight at Close")
		}
	}
	g.mu.Unlock()
	close(g.closing)
	return g.Store.Close()
}

// TestShutdownOrder: serve stops its stages in reverse order — ingress,
// background jobs, sinks, store — each waited for, so nothing uses the
// store once it is being closed, and the request served before the stop
// is in the ledger.
func TestShutdownOrder(t *testing.T) {
	// A model no built-in tokenizer is for: the gateway is ready at once
	// (a Qwen3 tokenizer takes 30 s to load under the race detector).
	up := startSimServer(t, sim.Config{Models: []string{"shutdown-probe"}})
	cfg := shutdownConfig(t, up, 5*time.Second)
	guard := &closeGuard{inflight: map[string]int{}, pruning: make(chan struct{}), closing: make(chan struct{})}
	opts := serveOptions{
		wrapStore: func(st store.Backend) store.Backend {
			guard.Store = st.(*sqlite.Store)
			return guard
		},
		firstPass: time.Millisecond, // the retention job is in Prune when the stop comes
	}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- serveWith(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), started, opts) }()
	var addr string
	select {
	case addr = <-started:
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	// Ready: the tokenizers have loaded, so nothing but the stages
	// themselves takes time in the stop below.
	waitFor(t, "the gateway to be ready", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	body := `{"model":"shutdown-probe","messages":[{"role":"user","content":"hi"}]}`
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	<-guard.pruning
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve returned %v", err)
	}
	guard.mu.Lock()
	defer guard.mu.Unlock()
	if !guard.closed {
		t.Fatal("serve returned without closing the store")
	}
	if len(guard.violations) > 0 {
		t.Errorf("store used while or after it closed: %q", guard.violations)
	}
	st, err := sqlite.Open(context.Background(), cfg.Store.SQLite.Path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rows, err := st.Requests(context.Background(), store.Filter{Limit: 10})
	if err != nil || len(rows) != 1 {
		t.Fatalf("ledger after shutdown: %d rows (err %v), want the one request", len(rows), err)
	}
}
