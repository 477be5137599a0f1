package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the store's own driver, for the connection that locks the ledger

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/sim"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/clickhouse"
	"github.com/tollgate-dev/tollgate/internal/store/clickhouse/chtest"
)

// Store trouble, then a crash: the store stops taking rows while the
// gateway is under load, the gateway keeps answering and spills into its
// write-ahead queue (saying so on /metrics and in its log), is SIGKILLed,
// and is restarted once the store is back — every request a client saw
// complete then has exactly one row. One test per store: SQLite locked
// by another connection (SQLITE_BUSY), ClickHouse's server stopped.

// metric reads one unlabelled sample from the gateway's /metrics.
func metric(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape /metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), name+" ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("metric %s: %v", name, err)
		}
		return f
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("scrape /metrics: %v", err)
	}
	t.Fatalf("metric %s not on /metrics", name)
	return 0
}

// spillUntilShipFails keeps the load going until, with the store out,
// another 200 requests have completed (the proxy still serves) and the
// gateway's metrics show the spill: failed ship attempts and a backlog.
func spillUntilShipFails(t *testing.T, addr string, completed *atomic.Int64) (backlog float64) {
	t.Helper()
	before := completed.Load()
	waitFor(t, "200 more completed requests, failed shipping and a backlog on /metrics", func() bool {
		if completed.Load() < before+200 {
			return false
		}
		backlog = metric(t, addr, "tollgate_wal_unshipped_entries")
		return metric(t, addr, "tollgate_wal_ship_errors_total") >= 1 && backlog >= 200
	})
	return backlog
}

// kill SIGKILLs the gateway and stops the load; it returns the ids the
// clients saw complete and the gateway's log, whole now that it exited.
func kill(t *testing.T, g *gatewayProc, stop chan struct{}, done <-chan []string) ([]string, string) {
	t.Helper()
	if err := g.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = g.cmd.Wait()
	close(stop)
	return <-done, g.log.String()
}

// terminate stops a gateway the way an operator does and checks that the
// write-ahead queue was empty by then: everything replayed.
func terminate(t *testing.T, g *gatewayProc) {
	t.Helper()
	waitFor(t, "the replayed backlog to drain", func() bool {
		return metric(t, g.addr, "tollgate_wal_unshipped_entries") == 0
	})
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := g.cmd.Wait(); err != nil {
		t.Fatalf("gateway exited with %v:\n%s", err, g.log)
	}
}

const shipFailedLog = "wal: shipping failed, retrying the same batch"

// TestSpillSQLiteLocked: another process's connection holds the ledger's
// write lock (BEGIN EXCLUSIVE: every insert of the gateway ends in
// SQLITE_BUSY after the busy timeout) while clients keep sending; the
// gateway is SIGKILLed with the lock still held and restarted after it is
// released. Every completed request is then in the ledger exactly once,
// and the rollups count each once.
func TestSpillSQLiteLocked(t *testing.T) {
	up := startSimServer(t, sim.Config{DecodeBase: 2 * time.Millisecond})
	cfgPath, db, addr := crashConfig(t, up)
	g := startGateway(t, cfgPath, addr)
	stop := make(chan struct{})
	var completed atomic.Int64
	done := load(t, addr, stop, &completed)
	waitFor(t, "50 completed requests", func() bool { return completed.Load() >= 50 })

	// The lock, from a connection of the test's own: a second writer
	// process on the same file, as a backup tool or a stray sqlite3 shell
	// would be.
	conn, err := sql.Open("sqlite", db+"?_busy_timeout=30000")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetMaxOpenConns(1)
	if _, err := conn.Exec("BEGIN EXCLUSIVE"); err != nil {
		t.Fatalf("take the ledger's write lock: %v", err)
	}
	backlog := spillUntilShipFails(t, addr, &completed)
	ids, log := kill(t, g, stop, done)
	if !strings.Contains(log, shipFailedLog) {
		t.Errorf("the gateway's log does not say that shipping failed (%q):\n%s", shipFailedLog, log)
	}

	// Still under the lock: the completed requests not in the ledger yet
	// are the ones the queue alone holds.
	inLedger := map[string]bool{}
	rows, err := conn.Query("SELECT client_request_id FROM requests")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		inLedger[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	spilled := 0
	for _, id := range ids {
		if !inLedger[id] {
			spilled++
		}
	}
	if spilled < 200 {
		t.Fatalf("only %d of %d completed requests were missing from the locked ledger; the test means to replay at least 200", spilled, len(ids))
	}
	if _, err := conn.Exec("ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	conn.Close()

	g2 := startGateway(t, cfgPath, addr)
	terminate(t, g2)
	n := checkLedger(t, db, ids)
	t.Logf("%d requests completed; %d of them spilled while the ledger was locked (backlog %.0f entries on /metrics) and replayed after SIGKILL and restart; %d rows in all",
		len(ids), spilled, backlog, n)
}

// TestSpillClickHouseDown: the same with ClickHouse, whose real server is
// stopped mid-load and started again (same data, same port) only after
// the gateway was SIGKILLed; the restarted gateway replays the queue.
func TestSpillClickHouseDown(t *testing.T) {
	ch := chtest.Dedicated(t)
	db := chtest.Database()
	up := startSimServer(t, sim.Config{DecodeBase: 2 * time.Millisecond})
	cfgPath, addr := clickHouseCrashConfig(t, ch.URL, db, up)

	g := startGateway(t, cfgPath, addr)
	stop := make(chan struct{})
	var completed atomic.Int64
	done := load(t, addr, stop, &completed)
	waitFor(t, "50 completed requests", func() bool { return completed.Load() >= 50 })
	if err := ch.Stop(); err != nil {
		t.Fatal(err)
	}
	backlog := spillUntilShipFails(t, addr, &completed)
	ids, log := kill(t, g, stop, done)
	if !strings.Contains(log, shipFailedLog) {
		t.Errorf("the gateway's log does not say that shipping failed (%q):\n%s", shipFailedLog, log)
	}

	if err := ch.Start(); err != nil {
		t.Fatal(err)
	}
	st, err := clickhouse.Open(t.Context(), clickhouse.Config{HTTP: ch.URL, Database: db}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	before, err := st.Requests(t.Context(), store.Filter{Limit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if missing := len(ids) - len(before); missing < 200 {
		t.Fatalf("ClickHouse already holds %d rows of %d completed requests; the test means to replay at least 200", len(before), len(ids))
	}

	g2 := startGateway(t, cfgPath, addr)
	terminate(t, g2)
	recs := oneRowEach(t, st, ids)
	rep, err := st.Report(t.Context(), store.ReportQuery{From: time.Now().Add(-time.Hour), To: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	var reported int64
	for _, r := range rep {
		reported += r.Requests
	}
	if reported != int64(len(recs)) {
		t.Errorf("reports count %d requests, ClickHouse holds %d rows", reported, len(recs))
	}
	stored, _ := chtest.Exec(t.Context(), ch.URL, "SELECT count() FROM "+db+".requests")
	t.Logf("%d requests completed; %d in ClickHouse before the outage, %d spilled (backlog %.0f entries on /metrics) and replayed after SIGKILL and restart; %d rows read, %s stored before merges",
		len(ids), len(before), len(ids)-len(before), backlog, len(recs), stored)
	if _, err := chtest.Exec(context.Background(), ch.URL, "DROP DATABASE IF EXISTS "+db); err != nil {
		t.Errorf("drop %s: %v", db, err)
	}
}

// clickHouseCrashConfig is crashConfig on ClickHouse: the server at chURL,
// database db, a queue of the test's own.
func clickHouseCrashConfig(t *testing.T, chURL, db, upstream string) (cfgPath, addr string) {
	t.Helper()
	dir := t.TempDir()
	addr = freePort(t)
	cfgPath = filepath.Join(dir, "tollgate.yml")
	yml := fmt.Sprintf(`listen: %s
shutdown_grace: 20s
log: {level: warn}
store:
  backend: clickhouse
  clickhouse: {url: %q, database: %s, timeout: 5s}
  sqlite: {path: %s}
  queue: {dir: %s, commit_timeout: 60s}
upstreams:
  - {name: sim, url: %q, engine: vllm}
`, addr, chURL, db, filepath.Join(dir, "unused.db"), filepath.Join(dir, "queue"), upstream)
	if err := os.WriteFile(cfgPath, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfgPath, addr
}

// tmpfs mounts a file system of size bytes on a new directory, unmounted
// at the end of t, and skips t when that is not allowed (not root, or no
// mount in this container).
func tmpfs(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs to fill needs root (CI runs as root)")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("mount -t tmpfs not permitted here: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fill writes a file until the file system it is on is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v, want ENOSPC", path, err)
			}
			return
		}
	}
}

// TestSpillDiskFull: the write-ahead queue's file system fills up under
// load (the ledger itself, on another disk, is fine). The proxy keeps
// serving; the queue's failure is on /metrics and in the log; the Records
// finished meanwhile are held in memory, and once space is freed the queue
// is reopened and they reach the ledger: every request a client saw
// complete has exactly one row, without a restart.
func TestSpillDiskFull(t *testing.T) {
	qdir := tmpfs(t, 8<<20)
	up := startSimServer(t, sim.Config{DecodeBase: 2 * time.Millisecond})
	dir := t.TempDir()
	db, addr := filepath.Join(dir, "ledger.db"), freePort(t)
	cfgPath := filepath.Join(dir, "tollgate.yml")
	yml := fmt.Sprintf("listen: %s\nshutdown_grace: 20s\nlog: {level: warn}\nstore:\n  sqlite: {path: %s}\n  queue: {dir: %s, commit_timeout: 60s}\nupstreams:\n  - {name: sim, url: %q, engine: vllm}\n",
		addr, db, filepath.Join(qdir, "queue"), up)
	if err := os.WriteFile(cfgPath, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, cfgPath, addr)
	// Before the unmount, even when the test fails half way.
	t.Cleanup(func() { _ = g.cmd.Process.Kill(); _ = g.cmd.Wait() })
	stop := make(chan struct{})
	var completed atomic.Int64
	done := load(t, addr, stop, &completed)
	waitFor(t, "50 completed requests", func() bool { return completed.Load() >= 50 })

	filler := filepath.Join(qdir, "filler")
	fill(t, filler)
	before := completed.Load()
	waitFor(t, "200 more completed requests and the queue failure on /metrics", func() bool {
		return completed.Load() >= before+200 && metric(t, addr, "tollgate_ledger_queue_failures_total") >= 1 &&
			metric(t, addr, "tollgate_ledger_spilled_records") >= 1
	})
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the spilled records to be queued again", func() bool {
		return metric(t, addr, "tollgate_ledger_spilled_records") == 0
	})
	close(stop)
	ids := <-done
	if d := metric(t, addr, "tollgate_ledger_dropped_records_total"); d != 0 {
		t.Errorf("tollgate_ledger_dropped_records_total = %v, want 0", d)
	}
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := g.cmd.Wait(); err != nil {
		t.Fatalf("gateway exited with %v:\n%s", err, g.log)
	}
	log := g.log.String()
	for _, want := range []string{"write-ahead queue failed", "no space left on device", "write-ahead queue working again"} {
		if !strings.Contains(log, want) {
			t.Errorf("the gateway's log does not say %q:\n%s", want, log)
		}
	}
	if testing.Verbose() {
		t.Logf("the gateway's log:\n%s", log)
	}
	n := checkLedger(t, db, ids)
	t.Logf("%d requests completed (%d before the disk filled), %d rows", len(ids), before, n)
}

// oneRowEach asserts that every request the client saw complete (by the
// id it sent) has exactly one row in st; it returns the rows.
func oneRowEach(t *testing.T, st store.Store, ids []string) []*record.Record {
	t.Helper()
	recs, err := st.Requests(t.Context(), store.Filter{Limit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, r := range recs {
		got[clientID(r)]++
	}
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("request %s the client saw complete has %d rows in ClickHouse, want 1", id, got[id])
		}
	}
	return recs
}
