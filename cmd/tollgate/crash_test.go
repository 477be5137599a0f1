package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/sim"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
)

// TestMain lets the test binary act as the tollgate binary, so crash tests
// can start, SIGKILL and restart real gateway processes without a build.
// As a test binary it fails when a test leaves a goroutine behind: serve,
// demo and the commands run the gateway, the stores, the write-ahead queue
// and the quota limiters in this process.
func TestMain(m *testing.M) {
	if os.Getenv("TOLLGATE_TEST_AS_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

type gatewayProc struct {
	cmd  *exec.Cmd
	addr string
	log  *bytes.Buffer
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startGateway runs `tollgate serve --config cfg` as a child process and
// waits until it answers /readyz.
func startGateway(t *testing.T, cfgPath, addr string) *gatewayProc {
	t.Helper()
	p := &gatewayProc{addr: addr, log: &bytes.Buffer{}}
	p.cmd = exec.Command(os.Args[0], "serve", "--config", cfgPath)
	p.cmd.Env = append(os.Environ(), "TOLLGATE_TEST_AS_MAIN=1")
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
		}
		if time.Now().After(deadline) {
			_ = p.cmd.Process.Kill()
			t.Fatalf("gateway not ready within 30s:\n%s", p.log)
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
}

// load sends requests from several clients until stop is closed, and
// returns the ids of the requests whose response the client saw whole.
func load(t *testing.T, addr string, stop <-chan struct{}, completed *atomic.Int64) <-chan []string {
	out := make(chan []string, 1)
	var mu sync.Mutex
	var ids []string
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 30 * time.Second}
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("c%d-%d", w, i)
				stream := i%2 == 0
				body := fmt.Sprintf(`{"model":"Qwen/Qwen3-8B","messages":[{"role":"user","content":"crash test %d"}],"stream":%v}`, i, stream)
				req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("X-Request-Id", id)
				req.Header.Set(sim.OutputTokensHeader, "20")
				resp, err := client.Do(req)
				if err != nil {
					continue
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 {
					continue
				}
				whole := stream && bytes.HasSuffix(b, []byte("data: [DONE]\n\n"))
				if !stream {
					whole = json.Valid(b)
				}
				if whole {
					mu.Lock()
					ids = append(ids, id)
					mu.Unlock()
					completed.Add(1)
				}
			}
		}()
	}
	go func() { wg.Wait(); out <- ids }()
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
}

func crashConfig(t *testing.T, upstream string) (cfgPath, db, addr string) {
	dir := t.TempDir()
	db = filepath.Join(dir, "ledger.db")
	addr = freePort(t)
	cfgPath = filepath.Join(dir, "tollgate.yml")
	// A generous commit timeout: the test checks the guarantee itself, not
	// the degradation when the disk is slower than the timeout (which is
	// counted in tollgate_ledger_commit_timeouts_total).
	yml := fmt.Sprintf("listen: %s\nshutdown_grace: 20s\nlog: {level: warn}\nstore:\n  sqlite: {path: %s}\n  queue: {commit_timeout: 60s}\nupstreams:\n  - {name: sim, url: %q, engine: vllm}\n", addr, db, upstream)
	if err := os.WriteFile(cfgPath, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfgPath, db, addr
}

// clientID is the id a test client sent in X-Request-Id, by which it
// knows the requests it saw complete: tollgate keeps it beside its own key.
func clientID(r *record.Record) string { return r.ClientRequestID }

// ledgerIDs reads the ledger: the set of the clients' request ids, and the
// total the rollups count (which must equal the rows: nothing counted twice).
func ledgerIDs(t *testing.T, db string) (map[string]int, int64) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), db, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	recs, err := st.Requests(context.Background(), store.Filter{Limit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int{}
	for _, r := range recs {
		ids[clientID(r)]++
	}
	rows, err := st.Report(context.Background(), store.ReportQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var rolled int64
	for _, r := range rows {
		rolled += r.Requests
	}
	return ids, rolled
}

// checkLedger asserts that every request the client saw complete has
// exactly one ledger row and that the rollups count the rows, nothing
// twice; it returns the number of rows.
func checkLedger(t *testing.T, db string, ids []string) int {
	t.Helper()
	got, rolled := ledgerIDs(t, db)
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("request %s the client saw complete has %d ledger rows, want 1", id, got[id])
		}
	}
	if int64(len(got)) != rolled {
		t.Errorf("ledger has %d rows, rollups count %d requests", len(got), rolled)
	}
	return len(got)
}

// TestCrashSIGKILL: load through a gateway process, SIGKILL it mid-run,
// restart it: every request the client saw complete has exactly one ledger
// row — none lost, none doubled — and the rollups agree with the rows.
func TestCrashSIGKILL(t *testing.T) {
	up := startSimServer(t, sim.Config{DecodeBase: 2 * time.Millisecond})
	cfgPath, db, addr := crashConfig(t, up)
	g := startGateway(t, cfgPath, addr)

	stop := make(chan struct{})
	var completed atomic.Int64
	done := load(t, addr, stop, &completed)
	waitFor(t, "200 completed requests", func() bool { return completed.Load() >= 200 })
	ids, _ := kill(t, g, stop, done)

	// Restart on the same ledger and queue: the queue replays into SQLite.
	g2 := startGateway(t, cfgPath, addr)
	missing := 0
	waitFor(t, "the restarted gateway to ship every completed request", func() bool {
		got, _ := ledgerIDs(t, db)
		missing = 0
		for _, id := range ids {
			if got[id] == 0 {
				missing++
			}
		}
		if missing > 0 {
			t.Logf("%d of %d completed requests not in the ledger yet", missing, len(ids))
		}
		return missing == 0
	})
	if err := g2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := g2.cmd.Wait(); err != nil {
		t.Fatalf("restarted gateway exited with %v:\n%s", err, g2.log)
	}
	n := checkLedger(t, db, ids)
	t.Logf("%d requests completed before SIGKILL, all in the ledger after restart (%d rows in all)", len(ids), n)
}

// TestShutdownSIGTERM: SIGTERM under load drains in-flight requests and
// flushes: every request the client saw complete is in the ledger, with no
// restart, and the process exits cleanly.
func TestShutdownSIGTERM(t *testing.T) {
	up := startSimServer(t, sim.Config{DecodeBase: 2 * time.Millisecond})
	cfgPath, db, addr := crashConfig(t, up)
	g := startGateway(t, cfgPath, addr)
	stop := make(chan struct{})
	var completed atomic.Int64
	done := load(t, addr, stop, &completed)
	waitFor(t, "100 completed requests", func() bool { return completed.Load() >= 100 })
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := g.cmd.Wait()
	close(stop)
	ids := <-done
	if err != nil {
		t.Fatalf("gateway exited with %v:\n%s", err, g.log)
	}
	n := checkLedger(t, db, ids)
	t.Logf("%d requests completed; %d ledger rows after SIGTERM", len(ids), n)
}
