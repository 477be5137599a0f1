package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/tollgate-dev/tollgate/internal/alert"
	"github.com/tollgate-dev/tollgate/internal/quota/redisquota/redistest"
	"github.com/tollgate-dev/tollgate/internal/sim"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/clickhouse"
	"github.com/tollgate-dev/tollgate/internal/store/clickhouse/chtest"
)

// TestThreeReplicas is issue 9's multi-replica test: three `tollgate serve`
// processes on loopback sharing one ClickHouse database and one Redis, the
// simulator behind them, OpenAI SDK clients spreading their requests
// round-robin over the three.
//
//   - Reports read from the shared store count exactly the requests and
//     tokens the clients were told.
//   - A 100 requests/minute limit on one key holds across the three.
//   - An error-rate alert needing 25 failed requests, of which each replica
//     saw only 10, fires (the leader reads the whole fleet's windows) and
//     is sent exactly once, and every replica lists it; killing the
//     leader, another takes the lease and the alert state the last one
//     saved in Redis, finds the same alert firing and does not send it
//     again.
func TestThreeReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts three gateways, ClickHouse and Redis, and waits for a window minute to close (about 2 minutes)")
	}
	chURL := chtest.Server(t)
	rds := redistest.Start(t, false)
	db := chtest.Database()
	t.Cleanup(func() {
		if _, err := chtest.Exec(context.Background(), chURL, "DROP DATABASE IF EXISTS "+db); err != nil {
			t.Errorf("drop %s: %v", db, err)
		}
	})
	prefix := rds.Prefix(t)
	upstream := startSimServer(t, sim.Config{Seed: 9, DecodeBase: time.Millisecond})

	// The webhook every replica is configured to notify.
	var hookMu sync.Mutex
	var hooked []alert.Alert
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a alert.Alert
		if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
			t.Errorf("webhook body: %v", err)
		}
		hookMu.Lock()
		hooked = append(hooked, a)
		hookMu.Unlock()
	}))
	defer hook.Close()
	// notifications are those of one rule.
	notifications := func(rule string) []alert.Alert {
		hookMu.Lock()
		defer hookMu.Unlock()
		var out []alert.Alert
		for _, a := range hooked {
			if a.Rule == rule {
				out = append(out, a)
			}
		}
		return out
	}

	dir := t.TempDir()
	var procs []*gatewayProc
	for i := range 3 {
		addr := freePort(t)
		yml := fmt.Sprintf(`listen: %s
shutdown_grace: 5s
log: {level: info}
store:
  backend: clickhouse
  clickhouse: {url: %q, database: %s, timeout: 10s}
  queue: {dir: %q}
  flush_interval: 200ms
upstreams:
  - {name: sim, url: %q, engine: vllm}
otlp: {http_listen: "", grpc_listen: ""}
auth:
  keys:
    - {name: app, key: sk-app, user_id: app}
    - {name: limited, key: sk-limited, user_id: bot}
quotas:
  keys: {limited: {requests_per_minute: 100}}
  redis: {url: "redis://%s", key_prefix: %s, timeout: 2s}
replicas:
  redis: {url: "redis://%s", key_prefix: %s}
  lease: 3s
alerts:
  defaults: false
  interval: 1s
  rules:
    - name: fleet_errors
      signal: error_rate
      by: [model]
      where: {biz_line: errs}
      windows: [5m]
      threshold: {warning: 0.5}
      min_requests: 25
      for: 0s
notifiers:
  - {name: hook, type: webhook, url: %q}
`, addr, chURL, db, filepath.Join(dir, fmt.Sprint("queue", i)), upstream, rds.Addr, prefix, rds.Addr, prefix, hook.URL)
		cfgPath := filepath.Join(dir, fmt.Sprintf("tollgate%d.yml", i))
		if err := os.WriteFile(cfgPath, []byte(yml), 0o644); err != nil {
			t.Fatal(err)
		}
		p := startGateway(t, cfgPath, addr)
		t.Cleanup(func() {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			_ = p.cmd.Wait()
			if t.Failed() {
				t.Logf("replica %d log:\n%s", i, p.log)
			}
		})
		procs = append(procs, p)
	}
	leaders := func(ps []*gatewayProc) []int {
		var out []int
		for i, p := range ps {
			if p != nil && metricOf(t, p.addr, "tollgate_alert_leader") == 1 {
				out = append(out, i)
			}
		}
		return out
	}
	waitFor(t, "one leader among the three", func() bool { return len(leaders(procs)) == 1 })

	clients := make([]openai.Client, 3)
	limited := make([]openai.Client, 3)
	for i, p := range procs {
		clients[i] = openai.NewClient(option.WithBaseURL("http://"+p.addr+"/v1"), option.WithAPIKey("sk-app"), option.WithMaxRetries(0))
		limited[i] = openai.NewClient(option.WithBaseURL("http://"+p.addr+"/v1"), option.WithAPIKey("sk-limited"), option.WithMaxRetries(0))
	}
	chat := func(c openai.Client, ctx context.Context, biz string, i int, stream bool, opts ...option.RequestOption) (in, out int64, err error) {
		opts = append(opts, option.WithHeader("X-Tollgate-Biz", biz), option.WithHeader(sim.OutputTokensHeader, strconv.Itoa(2+i%9)))
		params := openai.ChatCompletionNewParams{
			Model:    "Qwen/Qwen3-8B",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("%s request %d of the three-replica test", biz, i))},
		}
		if !stream {
			resp, err := c.Chat.Completions.New(ctx, params, opts...)
			if err != nil {
				return 0, 0, err
			}
			return resp.Usage.PromptTokens, resp.Usage.CompletionTokens, nil
		}
		params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		s := c.Chat.Completions.NewStreaming(ctx, params, opts...)
		for s.Next() {
			if u := s.Current().Usage; u.CompletionTokens > 0 {
				in, out = u.PromptTokens, u.CompletionTokens
			}
		}
		if err := s.Err(); err != nil {
			return 0, 0, err
		}
		if out == 0 {
			return 0, 0, errors.New("stream without a usage chunk")
		}
		return in, out, nil
	}
	// parallel runs f(i) for i < n on workers goroutines.
	parallel := func(n, workers int, f func(i int)) {
		var wg sync.WaitGroup
		next := make(chan int)
		for range workers {
			wg.Go(func() {
				for i := range next {
					f(i)
				}
			})
		}
		for i := range n {
			next <- i
		}
		close(next)
		wg.Wait()
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	testStart := time.Now()

	// 1. Failures first, so their minute closes while the rest runs: 30
	// requests the simulator fails, 10 per replica.
	const nErr = 30
	var errMu sync.Mutex
	failed := 0
	parallel(nErr, 6, func(i int) {
		_, _, err := chat(clients[i%3], ctx, "errs", i, false, option.WithHeader(sim.FaultHeader, "error"))
		var ae *openai.Error
		if errors.As(err, &ae) && ae.StatusCode >= 500 {
			errMu.Lock()
			failed++
			errMu.Unlock()
		} else {
			t.Errorf("errs request %d: %v, want a 5xx", i, err)
		}
	})

	// 2. Load: plain and streamed, round-robin over the replicas.
	const nLoad = 90
	var loadMu sync.Mutex
	var wantIn, wantOut int64
	parallel(nLoad, 6, func(i int) {
		in, out, err := chat(clients[i%3], ctx, "load", i, i%2 == 0)
		if err != nil {
			t.Errorf("load request %d: %v", i, err)
			return
		}
		loadMu.Lock()
		wantIn, wantOut = wantIn+in, wantOut+out
		loadMu.Unlock()
	})

	// 3. 150 requests at once (one goroutine each, so that admission
	// decisions fall in as short a span as the machine allows) with the
	// key limited to 100 a minute. The limit is a token bucket: full at
	// first, refilled at 100/60 per second, so within the burst's span at
	// most 100 + refill (+1 for a token refilled during the last request)
	// pass; with the burst under 0.6 s that is the 100 (+1).
	const nRate = 150
	var rateMu sync.Mutex
	admitted, refused := 0, 0
	burstStart := time.Now()
	parallel(nRate, nRate, func(i int) {
		_, _, err := chat(limited[i%3], ctx, "rate", i, false)
		var ae *openai.Error
		rateMu.Lock()
		defer rateMu.Unlock()
		switch {
		case err == nil:
			admitted++
		case errors.As(err, &ae) && ae.StatusCode == http.StatusTooManyRequests:
			refused++
		default:
			t.Errorf("rate request %d: %v", i, err)
		}
	})
	burst := time.Since(burstStart)
	refill := int(burst.Seconds() * 100 / 60)
	t.Logf("rate limit: %d admitted, %d refused across three replicas in a burst of %v (bucket 100, refill in that span %d)", admitted, refused, burst, refill)
	if admitted < 100 || admitted > 100+refill+1 || admitted+refused != nRate {
		t.Errorf("100 requests/minute across three replicas: %d admitted, %d refused in %v; want 100 to %d admitted", admitted, refused, burst, 100+refill+1)
	}

	// (a) Reports from the shared store equal what the clients saw.
	st, err := clickhouse.Open(ctx, clickhouse.Config{HTTP: chURL, Database: db}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	totals := func(biz string) store.Totals {
		rows, err := st.Report(ctx, store.ReportQuery{From: testStart.Add(-time.Hour), To: time.Now().Add(time.Hour), Where: map[store.Dim]string{store.DimBizLine: biz}})
		if err != nil {
			t.Fatalf("Report: %v", err)
		}
		var tot store.Totals
		for _, r := range rows {
			tot.Requests, tot.Errors, tot.Input, tot.Output = tot.Requests+r.Requests, tot.Errors+r.Errors, tot.Input+r.Input, tot.Output+r.Output
		}
		return tot
	}
	var load, errs, rate store.Totals
	waitFor(t, "every replica's records in ClickHouse", func() bool {
		load, errs, rate = totals("load"), totals("errs"), totals("rate")
		return load.Requests >= nLoad && errs.Requests >= nErr && rate.Requests >= nRate
	})
	if load.Requests != nLoad || load.Errors != 0 || load.Input != wantIn || load.Output != wantOut {
		t.Errorf("report of the load: %d requests (%d errors), %d input + %d output tokens; the clients saw %d requests, %d + %d tokens",
			load.Requests, load.Errors, load.Input, load.Output, nLoad, wantIn, wantOut)
	}
	if errs.Requests != nErr || errs.Errors != int64(failed) {
		t.Errorf("report of the failures: %d requests, %d errors; the clients saw %d, %d failed", errs.Requests, errs.Errors, nErr, failed)
	}
	if rate.Requests != nRate || rate.Errors != int64(refused) {
		t.Errorf("report of the burst: %d requests, %d errors; the clients saw %d, %d refused", rate.Requests, rate.Errors, nRate, refused)
	}
	t.Logf("report: load %d requests, %d + %d tokens (clients: same); failures %d; burst %d (%d refused)", load.Requests, load.Input, load.Output, errs.Requests, rate.Requests, rate.Errors)

	// (c) The alert: the fleet's 30 failures breach a rule no replica's
	// own 10 could. Its minute must close and be written by every replica
	// before the leader, evaluating fleetLag behind, reads it.
	deadline := time.Now().Add(3 * time.Minute)
	for len(notifications("fleet_errors")) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no notification within 3 minutes of the failures; leaders: %v", leaders(procs))
		}
		time.Sleep(200 * time.Millisecond) // polling with a deadline
	}
	fired := time.Since(testStart)
	first := notifications("fleet_errors")[0]
	if first.Rule != "fleet_errors" || first.State != alert.Firing || first.Labels["model"] != "Qwen/Qwen3-8B" {
		t.Fatalf("notification: %+v", first)
	}
	t.Logf("alert fired %v after the first failure: %s", fired.Round(time.Second), first.Summary)
	if first.Value != 1 {
		t.Errorf("error rate notified = %v, want 1 (30 failed of 30, all three replicas' requests)", first.Value)
	}

	// Every replica lists the fleet's alert, not only the leader.
	ls := leaders(procs)
	if len(ls) != 1 {
		t.Fatalf("leaders %v, want one", ls)
	}
	old := ls[0]
	for i, p := range procs {
		if i != old && !listsAlert(t, p.addr, "fleet_errors") {
			t.Errorf("replica %d (not the leader) does not list the fleet's alert in /api/v1/alerts", i)
		}
	}

	// Kill the leader: another takes the lease, takes over the alert
	// state the last leader saved in Redis (so it knows the alert fired
	// and was sent), evaluates it as firing, and does not send it again.
	dropped := map[int]float64{} // each survivor's deduplicated sends before the kill
	for i, p := range procs {
		if i != old {
			dropped[i] = metricOf(t, p.addr, "tollgate_alert_notifications_deduplicated_total")
		}
	}
	if err := procs[old].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = procs[old].cmd.Wait()
	rest := append([]*gatewayProc(nil), procs...)
	rest[old] = nil
	var took float64
	newLeader := -1
	waitFor(t, "a new leader with the alert firing", func() bool {
		l := leaders(rest)
		if len(l) != 1 {
			return false
		}
		addr := rest[l[0]].addr
		newLeader, took = l[0], metricOf(t, addr, "tollgate_alert_evaluations_total")
		return metricOf(t, addr, `tollgate_alerts{rule="fleet_errors",severity="warning",state="firing"}`) == 1
	})
	// Three more evaluations (interval 1 s) of the firing alert by the new
	// leader: none sends it, and none even tries (the dedup in Redis would
	// stop a try: the leader knows from the state that it was sent).
	waitFor(t, "three evaluations by the new leader", func() bool {
		return metricOf(t, rest[newLeader].addr, "tollgate_alert_evaluations_total") >= took+3
	})
	if n := notifications("fleet_errors"); len(n) != 1 {
		t.Errorf("%d notifications of the error alert across three replicas and a leader change, want 1: %+v", len(n), n)
	}
	if d := metricOf(t, rest[newLeader].addr, "tollgate_alert_notifications_deduplicated_total"); d != dropped[newLeader] {
		t.Errorf("the new leader tried to send again (%v notifications deduplicated, %v before the leader was killed): it did not take over the alert state", d, dropped[newLeader])
	}
	// The burst's quota alert is raised by whichever replica refuses first
	// (not by the leader): sent once too.
	if n := notifications("quota"); len(n) != 1 || n[0].Labels["limit"] != "requests_per_minute" {
		t.Errorf("quota notifications: %+v, want one of requests_per_minute", n)
	}
	for i, p := range rest {
		if p != nil && metricOf(t, p.addr, "tollgate_alert_dedup_errors_total") != 0 {
			t.Errorf("replica %d sent without the dedup (Redis errors)", i)
		}
	}
}

// listsAlert reports whether a replica's GET /api/v1/alerts lists an
// active alert of rule.
func listsAlert(t *testing.T, addr, rule string) bool {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/api/v1/alerts")
	if err != nil {
		t.Errorf("GET /api/v1/alerts: %v", err)
		return false
	}
	defer resp.Body.Close()
	var body struct {
		Active []alert.Alert `json:"active"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Errorf("GET /api/v1/alerts of %s: %s: %v", addr, resp.Status, err)
		return false
	}
	return slices.ContainsFunc(body.Active, func(a alert.Alert) bool { return a.Rule == rule && a.State == alert.Firing })
}

// metricOf reads one sample of a replica's /metrics (name with its labels,
// as exposed); -1 when absent.
func metricOf(t *testing.T, addr, sample string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s: %v", line, err)
			}
			return f
		}
	}
	return -1
}
