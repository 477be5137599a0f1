//go:build !race

// The 10k-connection test (issue 10) is built without the race detector:
// a race-built process may hold at most 8128 live goroutines, and this test
// holds 10,000 streams — tens of thousands of goroutines — in the test
// process (the clients) and in its children, the simulator and the
// gateways, which are this test binary (TOLLGATE_TEST_AS_MAIN runs it as
// tollgate, see crash_test.go).
// scripts/test.sh runs it in a step of its own after `go test -race ./...`.

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/internal/sim"
)

// TestTenThousandStreams holds 10,000 streamed chat completions open at
// once through real `tollgate serve` processes to the simulator, then lets
// them all finish: every one must end with [DONE], none may fail, and the
// ledger must have one row for each.
//
// The streams are held by a gate in front of the simulator, not by time:
// each stream's first content token goes through the gateway to its
// client, then the simulator's handler waits at the gate. The gate opens
// only once the simulator holds all 10,000, every client has its first
// token and the gateways' own tollgate_requests_in_flight add up to 10,000
// — so "all open at once" is observed from all three sides, however slow
// the machine is.
//
// A gateway holds two sockets per stream (client and upstream). Where the
// hard RLIMIT_NOFILE cannot give one process 20,000 of them (this machine:
// hard limit 20,000 and no CAP_SYS_RESOURCE to raise it), the streams are
// spread over the fewest replicas that fit — as tollgate scales out — and
// the test logs how many it used. Each role is its own process for the
// same reason: the clients here, the simulator and each gateway children.
func TestTenThousandStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("the 10k-connection test holds 10,000 streams; -short skips it")
	}
	const n = 10_000
	const margin = 1024 // listeners, the ledger, pipes, the runtime
	lim := raiseNoFile(t)
	if lim < n+margin {
		t.Skipf("needs %d open files for the clients and the simulator and RLIMIT_NOFILE's hard limit is %d: raise it (ulimit -Hn, as root)", n+margin, lim)
	}
	perGateway := int(lim-margin) / 2
	replicas := (n + perGateway - 1) / perGateway
	t.Logf("RLIMIT_NOFILE %d: a gateway process can hold %d streams; %d streams over %d gateway process(es)", lim, perGateway, n, replicas)

	// The simulator, gated, in a child process.
	simAddr := freePort(t)
	simProc := exec.Command(os.Args[0], "-test.run=^TestGatedSimProcess$", "-test.v")
	simProc.Env = append(os.Environ(), "TOLLGATE_GATED_SIM="+simAddr)
	simLog := &lockedBuffer{}
	simProc.Stdout, simProc.Stderr = simLog, simLog
	if err := simProc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = simProc.Process.Signal(syscall.SIGTERM)
		if err := simProc.Wait(); err != nil {
			t.Errorf("gated simulator: %v\n%s", err, simLog)
		}
	})
	ctl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	opened := false
	open := func() {
		if opened {
			return
		}
		resp, err := ctl.Post("http://"+simAddr+"/gate/open", "", nil)
		if err != nil {
			t.Errorf("open the gate: %v", err)
			return
		}
		resp.Body.Close()
		opened = true
	}
	held := func() int64 {
		resp, err := ctl.Get("http://" + simAddr + "/gate")
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		var v int64
		if _, err := fmt.Fscan(resp.Body, &v); err != nil {
			return -1
		}
		return v
	}
	waitFor(t, "the gated simulator", func() bool { return held() == 0 })
	t.Cleanup(open)

	// The gateways: this binary as `tollgate serve`. Long upstream idle
	// and first-token timeouts, since a held stream is silent until the
	// gate opens.
	type gateway struct {
		addr, db string
		proc     *gatewayProc
		ids      []string
	}
	gws := make([]*gateway, replicas)
	for r := range gws {
		dir := t.TempDir()
		g := &gateway{addr: freePort(t), db: filepath.Join(dir, "ledger.db")}
		cfg := filepath.Join(dir, "tollgate.yml")
		yml := fmt.Sprintf(`listen: %s
shutdown_grace: 60s
log: {level: warn}
store:
  sqlite: {path: %s}
  queue: {commit_timeout: 60s}
upstreams:
  - {name: sim, url: "http://%s/v1", engine: vllm, timeouts: {first_token: 5m, idle: 5m, total: 10m}}
otlp: {http_listen: "", grpc_listen: ""}
engine_metrics: {interval: 0s}
limits: {max_conns_per_ip: 0}  # every client of the test is 127.0.0.1, thousands at once
`, g.addr, g.db, simAddr)
		if err := os.WriteFile(cfg, []byte(yml), 0o644); err != nil {
			t.Fatal(err)
		}
		g.proc = startGateway(t, cfg, g.addr)
		t.Cleanup(func() {
			if g.proc.cmd.ProcessState == nil {
				_ = g.proc.cmd.Process.Kill()
				_ = g.proc.cmd.Wait()
			}
		})
		gws[r] = g
	}

	// The clients: one goroutine and one connection per stream. The
	// semaphore bounds requests between dial and response headers, so
	// connection bursts stay under the listen backlog (somaxconn).
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DisableCompression: true}}
	var (
		firstTokens, done atomic.Int64
		failed            atomic.Int64
		errMu             sync.Mutex
		firstErr          error
		wg                sync.WaitGroup
	)
	fail := func(err error) {
		failed.Add(1)
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
	}
	sem := make(chan struct{}, 512)
	sendStart := time.Now()
	for i := range n {
		g := gws[i%replicas]
		id := fmt.Sprintf("load-%05d", i)
		g.ids = append(g.ids, id)
		wg.Go(func() {
			if err := stream(client, sem, g.addr, id, &firstTokens); err != nil {
				fail(fmt.Errorf("stream %s: %w", id, err))
				return
			}
			done.Add(1)
		})
	}

	// All 10,000 open at once, seen from the simulator, the clients and
	// the gateways.
	var inFlight, maxInFlight int64
	deadline := time.Now().Add(100 * time.Second)
	for {
		inFlight = 0
		for _, g := range gws {
			v, err := gaugeValue(g.addr, "tollgate_requests_in_flight")
			if err != nil {
				open()
				t.Fatalf("read the gateway's metrics: %v", err)
			}
			inFlight += int64(v)
		}
		maxInFlight = max(maxInFlight, inFlight)
		h := held()
		if h == n && firstTokens.Load() == n && inFlight == n {
			break
		}
		if failed.Load() > 0 || time.Now().After(deadline) {
			open()
			wg.Wait()
			t.Fatalf("not all %d streams open at once: simulator holds %d, clients have the first token on %d, gateways in flight %d (max seen %d); %d failed, first: %v",
				n, h, firstTokens.Load(), inFlight, maxInFlight, failed.Load(), firstErr)
		}
		time.Sleep(200 * time.Millisecond) // polling with a deadline
	}
	t.Logf("all %d streams open at once after %s: the simulator holds %d, the clients have the first token on %d, tollgate_requests_in_flight adds up to %d",
		n, time.Since(sendStart).Round(100*time.Millisecond), held(), firstTokens.Load(), inFlight)
	for r, g := range gws {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", g.proc.cmd.Process.Pid)); err == nil {
			for line := range strings.SplitSeq(string(b), "\n") {
				if strings.HasPrefix(line, "VmRSS:") || strings.HasPrefix(line, "Threads:") {
					t.Logf("gateway %d holding %d streams: %s", r, len(g.ids), strings.Join(strings.Fields(line), " "))
				}
			}
		}
	}

	open()
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(2 * time.Minute):
		t.Fatalf("streams not finished 2 minutes after the gate opened: %d done, %d failed", done.Load(), failed.Load())
	}
	if failed.Load() > 0 || done.Load() != n {
		t.Fatalf("%d of %d streams ended with [DONE], %d failed; first error: %v", done.Load(), n, failed.Load(), firstErr)
	}

	// Stop the gateways (each flushes its ledger on SIGTERM): one row per
	// stream.
	rows := 0
	for _, g := range gws {
		if err := g.proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := g.proc.cmd.Wait(); err != nil {
			t.Fatalf("gateway exit after SIGTERM: %v\n%s", err, g.proc.log)
		}
		rows += checkLedger(t, g.db, g.ids)
	}
	if rows != n {
		t.Errorf("ledgers have %d rows, want %d", rows, n)
	}
}

// TestGatedSimProcess is not a test: TestTenThousandStreams runs this
// binary with TOLLGATE_GATED_SIM=ADDR to serve the simulator, behind a gate,
// in a process of its own (it holds 10,000 sockets). GET /gate answers how
// many streams wait at the gate; POST /gate/open lets them go. It serves
// until SIGTERM.
func TestGatedSimProcess(t *testing.T) {
	addr := os.Getenv("TOLLGATE_GATED_SIM")
	if addr == "" {
		t.Skip("helper process of TestTenThousandStreams")
	}
	// Prefill and decode costs near zero: 10,000 admissions must not
	// queue in the engine.
	eng, err := sim.New(sim.Config{
		MaxRunning: 20_000, PrefillBase: time.Nanosecond, PrefillPerToken: time.Nanosecond,
		DecodeBase: 5 * time.Millisecond, DecodePerSeq: time.Nanosecond,
	}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	runCtx, cancel := context.WithCancel(ctx)
	engDone := make(chan error, 1)
	go func() { engDone <- eng.Run(runCtx) }()
	g := &gate{release: make(chan struct{})}
	var once sync.Once
	mux := http.NewServeMux()
	mux.HandleFunc("GET /gate", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, g.held.Load()) })
	mux.HandleFunc("POST /gate/open", func(http.ResponseWriter, *http.Request) { once.Do(func() { close(g.release) }) })
	mux.Handle("/", g.wrap(eng.Handler()))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: time.Minute}
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Serve(ln) }()
	<-ctx.Done()
	once.Do(func() { close(g.release) })
	_ = srv.Close()
	<-srvDone
	cancel()
	if err := <-engDone; err != nil {
		t.Errorf("engine: %v", err)
	}
}

// stream sends one streamed chat completion to the gateway at addr and
// reads it to the end, counting its first content token in firstTokens.
// It fails unless the answer is 200 and ends with data: [DONE].
func stream(c *http.Client, sem chan struct{}, addr, id string, firstTokens *atomic.Int64) error {
	body := `{"model":"Qwen/Qwen3-8B","messages":[{"role":"user","content":"hold this stream"}],"stream":true}`
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	req.Header.Set(sim.OutputTokensHeader, "3")
	sem <- struct{}{}
	resp, err := c.Do(req)
	<-sem
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("status %s: %s", resp.Status, b)
	}
	br := bufio.NewReader(resp.Body)
	content, sawDone := 0, false
	for {
		line, err := br.ReadString('\n')
		if data, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "data: "); ok {
			if data == "[DONE]" {
				sawDone = true
			} else {
				var ev struct {
					Choices []struct {
						Delta struct{ Content string } `json:"delta"`
					} `json:"choices"`
				}
				if jerr := json.Unmarshal([]byte(data), &ev); jerr != nil {
					return fmt.Errorf("event %q: %w", data, jerr)
				}
				if len(ev.Choices) > 0 && ev.Choices[0].Delta.Content != "" {
					if content++; content == 1 {
						firstTokens.Add(1)
					}
				}
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	if !sawDone || content != 3 {
		return fmt.Errorf("stream ended after %d content tokens (want 3), [DONE] seen: %v", content, sawDone)
	}
	return nil
}

// gate holds each simulated stream after its first content token until
// release is closed, counting the streams it holds.
type gate struct {
	held    atomic.Int64
	release chan struct{}
}

func (g *gate) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			h.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(&gatedWriter{ResponseWriter: w, g: g, ctx: r.Context()}, r)
	})
}

// gatedWriter waits at the gate before the first write after its second
// flush: the simulator flushes every event, and a chat stream's first two
// events are the assistant role and the first content token.
type gatedWriter struct {
	http.ResponseWriter
	g       *gate
	ctx     context.Context
	flushes int
	held    bool
}

func (w *gatedWriter) Write(b []byte) (int, error) {
	if w.flushes >= 2 && !w.held {
		w.held = true
		w.g.held.Add(1)
		select {
		case <-w.g.release:
		case <-w.ctx.Done():
			return 0, w.ctx.Err()
		}
	}
	return w.ResponseWriter.Write(b)
}

func (w *gatedWriter) FlushError() error {
	w.flushes++
	return http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *gatedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// gaugeValue reads one unlabelled sample from the gateway's /metrics.
func gaugeValue(addr, name string) (float64, error) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err != nil {
				return 0, fmt.Errorf("%s: %q: %w", name, v, err)
			}
			return f, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s not in /metrics", name)
}

// raiseNoFile raises the soft RLIMIT_NOFILE to the hard limit for this
// process and the children it starts afterwards (Go passes a limit set
// with syscall.Setrlimit on to them), restores it when the test ends, and
// returns the limit.
func raiseNoFile(t *testing.T) uint64 {
	t.Helper()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	lim := syscall.Rlimit{Cur: old.Max, Max: old.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatalf("raise RLIMIT_NOFILE to its hard limit %d: %v", old.Max, err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
	return lim.Cur
}
