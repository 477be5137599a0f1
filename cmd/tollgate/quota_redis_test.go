package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/quota"
	"github.com/tollgate-dev/tollgate/internal/quota/redisquota"
	"github.com/tollgate-dev/tollgate/internal/quota/redisquota/redistest"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/sim"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
)

// With quotas.redis.url set, serve's limiter is the Redis one: two
// replicas built from the same config file share one daily quota (the
// ledger's usage today seeded once), and their metrics are registered.
func TestQuotaRedisSharedByReplicas(t *testing.T) {
	srv := redistest.Start(t, false)
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "q.db")
	yml := fmt.Sprintf(`store: {sqlite: {path: %s}}
upstreams:
  - {name: sim, url: "http://127.0.0.1:1", engine: vllm}
quotas:
  users:
    alice: {daily_tokens: 1000}
  redis:
    url: redis://%s
    key_prefix: %s
    timeout: 5s
    on_error: {daily_tokens: closed}
`, path, srv.Addr, srv.Prefix(t))
	cfgPath := filepath.Join(dir, "tollgate.yml")
	if err := os.WriteFile(cfgPath, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(ctx, path, slog.New(slog.DiscardHandler), sqlite.WithLocation(cfg.Location()))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now().UTC()
	if now.Add(time.Minute).Day() != now.Day() {
		t.Skip("a minute before midnight UTC: today's rows would be yesterday's by the time the limiter reads them")
	}
	if err := st.Insert(ctx, store.Batch{Records: []*record.Record{{RequestID: "a1", UserID: "alice", Model: "m", Arrival: now, Status: 200,
		Usage: record.Usage{InputTokens: 200, OutputTokens: 100}}}}); err != nil {
		t.Fatal(err)
	}

	var ls []quota.Limiter
	for range 2 {
		reg := prometheus.NewRegistry()
		events := store.NewEventWriter(st, 64, slog.New(slog.DiscardHandler)) // queued, not written: enough here
		l, err := newLimiter(cfg, st, events, nil, reg, nil)
		if err != nil {
			t.Fatal(err)
		}
		rl, ok := l.(*redisquota.Limiter)
		if !ok {
			t.Fatalf("limiter is %T, want *redisquota.Limiter", l)
		}
		defer rl.Close()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, mf := range mfs {
			names = append(names, mf.GetName())
		}
		if got := strings.Join(names, " "); !strings.Contains(got, "tollgate_quota_fail_open_total") || !strings.Contains(got, "tollgate_quota_backend_errors_total") {
			t.Errorf("metrics registered: %s", got)
		}
		ls = append(ls, l)
	}
	// The ledger's 300 installed at start by one replica, seen by the other.
	_ = quota.RunPreload(ctx, ls[0], quotaDaySeed(st), slog.New(slog.DiscardHandler))
	if us := quota.Reader(ls[1]).Usage(time.Now()); len(us) != 1 || us[0].Used != 300 {
		t.Fatalf("usage after one replica's preload: %+v", us)
	}
	// 300 in the ledger; 7 × 100 more fit, alternating replicas; the 8th
	// is refused by whichever replica gets it.
	admitted := 0
	for i := range 10 {
		d, tk, err := ls[i%2].Admit(ctx, quota.Request{Subject: quota.Subject{UserID: "alice"}, EstInputTokens: 100})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
			tk.Commit(100, 0)
		} else if d.Limit != quota.LimitDailyTokens {
			t.Fatalf("refused by %s: %s", d.Limit, d.Message)
		}
	}
	if admitted != 7 {
		t.Errorf("admitted %d over two replicas, want 7 (1000 − 300 in the ledger, 100 each)", admitted)
	}
	if us := quota.Reader(ls[1]).Usage(time.Now()); len(us) != 1 || us[0].Used != 1000 {
		t.Errorf("usage seen by the other replica: %+v", us)
	}
}

// Two tollgate gateways (the real serve wiring, each with its own ledger)
// over one Redis and one engine: a business line's requests_per_minute of
// 5 admits 5 requests in total, whichever gateway they reach. Then Redis
// is killed: that limit, configured to fail closed, makes both gateways
// answer 503 quota_unavailable, while another line's daily_tokens fails
// open and is served, both counted in /metrics; Redis back, requests flow
// again.
func TestTwoGatewaysShareRedisQuota(t *testing.T) {
	srv := redistest.Start(t, true)
	up := startSimServer(t, sim.Config{})
	prefix := srv.Prefix(t)
	var addrs []string
	for range 2 {
		cfg := shutdownConfig(t, up, time.Second)
		cfg.Quotas = quota.Config{
			BizLines: map[string]quota.Limits{"search": {RequestsPerMinute: 5}, "chat": {DailyTokens: 1_000_000}},
			Redis: quota.Redis{URL: "redis://" + srv.Addr, KeyPrefix: prefix, Timeout: 5 * time.Second, Backoff: 20 * time.Millisecond,
				OnError: map[string]string{quota.LimitRequestsPerMinute: quota.FailClosed}},
		}
		addr, cancel, wait := startServe(t, cfg)
		t.Cleanup(func() { cancel(); _ = wait() })
		addrs = append(addrs, addr)
	}
	sendAs := func(addr, biz string) (int, string) {
		t.Helper()
		body := `{"model":"Qwen/Qwen3-8B","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("X-Tollgate-Biz", biz)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	send := func(addr string) (int, string) { return sendAs(addr, "search") }
	codes := map[int]int{}
	began := time.Now()
	for i := range 12 {
		code, body := send(addrs[i%2])
		codes[code]++
		if code == http.StatusTooManyRequests && !strings.Contains(body, "requests per min") {
			t.Errorf("429 without the RPM message: %s", body)
		}
	}
	// The bucket refills one request every 12 s: a slow machine may see
	// one more per 12 s of the loop, never more (exactness under a still
	// clock is internal/quota/redisquota's TestReplicasShareLimitsExactly).
	refilled := int(time.Since(began) / (12 * time.Second))
	if codes[200] < 5 || codes[200] > 5+refilled || codes[200]+codes[429] != 12 {
		t.Fatalf("status counts over two gateways %v, want 5 × 200 (+%d refilled) and the rest 429", codes, refilled)
	}

	srv.Kill(t)
	for _, addr := range addrs {
		code, body := send(addr)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "quota_unavailable") {
			t.Errorf("Redis down, fail closed: %d %s", code, body)
		}
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		m, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(m), `tollgate_quota_fail_closed_total{limit="requests_per_minute"} 1`) {
			t.Errorf("%s /metrics lacks the fail-closed count", addr)
		}
		// daily_tokens fails open (the default): served, and counted.
		if code, body := sendAs(addr, "chat"); code != http.StatusOK {
			t.Errorf("Redis down, fail open: %d %s", code, body)
		}
		resp, err = http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		m, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(m), `tollgate_quota_fail_open_total{limit="daily_tokens"} 1`) {
			t.Errorf("%s /metrics lacks the fail-open count", addr)
		}
	}

	srv.Restart(t) // empty: a fresh bucket
	redistest.WaitFor(t, "gateways serving again", 10*time.Second, func() bool {
		c0, _ := send(addrs[0])
		c1, _ := send(addrs[1])
		return c0 == 200 && c1 == 200
	})
}
