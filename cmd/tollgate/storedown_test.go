package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/sim"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/clickhouse"
	"github.com/tollgate-dev/tollgate/internal/store/clickhouse/chtest"
)

// TestServeStartsClickHouseDown: a replica started while ClickHouse is
// down (its real server stopped, its database never created). A report
// from the command line still fails at once. serve starts: /readyz
// answers 200 and says the store is not connected,
// tollgate_store_connected is 0, the API answers 503
// store_not_connected, and the proxy serves from 8 clients while the
// write-ahead queue keeps the Records. Then the server starts; serve
// connects by itself, creates the database and tables, and ships the
// backlog while the load goes on: in the end ClickHouse holds exactly one
// row per request a client saw complete — no more rows than that, before
// merges too — and the reports count each once.
func TestServeStartsClickHouseDown(t *testing.T) {
	ch := chtest.Dedicated(t)
	if err := ch.Stop(); err != nil {
		t.Fatal(err)
	}
	db := chtest.Database() // on a server of the test's own, removed with it
	up := startSimServer(t, sim.Config{DecodeBase: 2 * time.Millisecond})
	cfgPath, addr := clickHouseCrashConfig(t, ch.URL, db, up)

	// Commands that read the ledger do not wait for the server.
	began := time.Now()
	err := run(t.Context(), []string{"report", "users", "--config", cfgPath}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "open ClickHouse store") {
		t.Errorf("report with ClickHouse down: %v, want an error opening the ClickHouse store", err)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("report with ClickHouse down took %v to fail", took)
	}

	g := startGateway(t, cfgPath, addr) // waits for /readyz 200
	t.Cleanup(func() { _ = g.cmd.Process.Kill(); _ = g.cmd.Wait() })
	if body := readyz(t, addr); !strings.Contains(body, "store not connected") || !strings.Contains(body, "write-ahead queue") {
		t.Errorf("/readyz with ClickHouse down says %q; want the store not connected and the queue keeping the records", body)
	}
	if v := metric(t, addr, "tollgate_store_connected"); v != 0 {
		t.Errorf("tollgate_store_connected = %v with ClickHouse down, want 0", v)
	}
	for _, path := range []string{"/api/v1/requests", "/api/v1/reports/users", "/api/v1/overview"} {
		status, code := apiError(t, addr, path)
		if status != http.StatusServiceUnavailable || code != "store_not_connected" {
			t.Errorf("GET %s with ClickHouse down: %d %q, want 503 store_not_connected", path, status, code)
		}
	}

	stop := make(chan struct{})
	var completed atomic.Int64
	done := load(t, addr, stop, &completed)
	outage := time.Now()
	const during = 1000
	waitFor(t, "requests completed with ClickHouse down", func() bool { return completed.Load() >= during })
	if v := metric(t, addr, "tollgate_wal_unshipped_entries"); v < during {
		t.Errorf("tollgate_wal_unshipped_entries = %v after %d requests with ClickHouse down; want them all queued", v, during)
	}
	if v := metric(t, addr, "tollgate_store_connected"); v != 0 {
		t.Errorf("tollgate_store_connected = %v with ClickHouse down, want 0", v)
	}

	if err := ch.Start(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	served := completed.Load() // at least: the load goes on
	outageFor := back.Sub(outage)
	waitFor(t, "serve to connect to ClickHouse", func() bool { return metric(t, addr, "tollgate_store_connected") == 1 })
	connected := time.Since(back)
	if body := readyz(t, addr); !strings.Contains(body, "store connected: clickhouse") {
		t.Errorf("/readyz once connected says %q", body)
	}
	waitFor(t, "the requests served during the outage to reach ClickHouse", func() bool { return rowsIn(ch.URL, db) >= served })
	caughtUp := time.Since(back)

	close(stop)
	ids := <-done
	terminate(t, g) // the queue drained, then SIGTERM
	log := g.log.String()
	if !strings.Contains(log, "ClickHouse does not answer") {
		t.Errorf("the gateway's log does not say ClickHouse did not answer at start:\n%s", log)
	}

	st, err := clickhouse.Open(t.Context(), clickhouse.Config{HTTP: ch.URL, Database: db}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	recs := oneRowEach(t, st, ids)
	physical := rowsIn(ch.URL, db)
	if len(recs) != len(ids) || physical != int64(len(ids)) {
		t.Errorf("ClickHouse holds %d rows (%d before merges) for %d completed requests; want exactly one each", len(recs), physical, len(ids))
	}
	rep, err := st.Report(t.Context(), store.ReportQuery{From: time.Now().Add(-time.Hour), To: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	var reported int64
	for _, r := range rep {
		reported += r.Requests
	}
	if reported != int64(len(ids)) {
		t.Errorf("reports count %d requests, %d completed", reported, len(ids))
	}
	t.Logf("ClickHouse down at start: %d requests served in %.1f s of outage (all queued); connected %.1f s after the server was back, the outage's backlog in ClickHouse %.1f s after; %d requests in all, %d rows (%d before merges), reports count %d",
		served, outageFor.Seconds(), connected.Seconds(), caughtUp.Seconds(), len(ids), len(recs), physical, reported)
	if testing.Verbose() {
		t.Logf("the gateway's log:\n%s", log)
	}
}

// readyz returns /readyz's body, which must come with a 200.
func readyz(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz = %d %q, want 200", resp.StatusCode, b)
	}
	return string(b)
}

// apiError GETs path of the JSON API and returns the status and the
// error code of its answer.
func apiError(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second} // an answer, not a hang
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&e)
	return resp.StatusCode, e.Error.Code
}

// rowsIn counts the ledger's rows in ClickHouse before merges (no FINAL):
// 0 while the server or the database is not there.
func rowsIn(chURL, db string) int64 {
	out, err := chtest.Exec(context.Background(), chURL, "SELECT count() FROM "+db+".requests")
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	return n
}
