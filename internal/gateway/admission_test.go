package gateway

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/cost"
	"github.com/tollgate-dev/tollgate/internal/quota"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/sim"
)

// gatewayWith is the test gateway with prices and a limiter.
func gatewayWith(t *testing.T, cfg *config.Config, prices *cost.Table, lim quota.Limiter) *testGateway {
	t.Helper()
	return newTestGatewayWith(t, cfg, func(o *Options) { o.Prices, o.Limiter = prices, lim })
}

func mustTable(t *testing.T, yml string) *cost.Table {
	t.Helper()
	cfg, err := config.Parse([]byte(yml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := cost.NewTable(cfg.CostConfig())
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// TestRatedThroughSim: every request is rated with the hand-computable
// formula (input − cached)·p_in + cached·p_cached + output·p_out, failed and
// cut ones on what they consumed.
func TestRatedThroughSim(t *testing.T) {
	se := startSim(t, sim.Config{})
	cfg := testConfig(se.URL)
	cfg.Upstreams[0].Models = []string{simModel}
	// Per 1M tokens: 0.5 / 0.1 / 2 CNY = 500 / 100 / 2000 nanos per token.
	prices := mustTable(t, "prices:\n  - {model: "+simModel+", currency: CNY, input: 0.5, cached_input: 0.1, output: 2}\n")
	tg := gatewayWith(t, cfg, prices, nil)
	long := `{"model":"` + simModel + `","messages":[{"role":"system","content":"` + repeat("Policy text that repeats. ", 40) + `"},{"role":"user","content":"hi"}],"stream":true}`
	for i, fault := range []string{"none", "none", "reset-after=3"} {
		readAll(t, post(t, tg.URL+"/v1/chat/completions", long, map[string]string{sim.OutputTokensHeader: "9", sim.FaultHeader: fault}))
		r := tg.next(t)
		u := r.Usage
		want := (u.InputTokens-u.CachedInputTokens)*500 + u.CachedInputTokens*100 + u.OutputTokens*2000
		if r.Cost.Nanos != want || r.Cost.Currency != "CNY" || r.Cost.PriceVersion == "" {
			t.Errorf("request %d (%s): cost %+v for usage %+v, want %d nanos CNY", i, fault, r.Cost, u, want)
		}
		if i == 1 && u.CachedInputTokens == 0 {
			t.Error("second request had no cached tokens; the test does not cover cached pricing")
		}
		if i == 2 && (r.ErrorType == "" || u.OutputTokens != 3 || r.Cost.Nanos == 0) {
			t.Errorf("cut stream: %q %+v cost %+v; want it rated on its 3 tokens", r.ErrorType, u, r.Cost)
		}
	}
}

func repeat(s string, n int) string {
	out := ""
	for range n {
		out += s
	}
	return out
}

// TestQuotaUnderConcurrency: many goroutines against one key with a
// 10 requests/minute limit: at most one more than the limit is admitted
// (the bucket refills continuously during the test), the rest get 429
// with Retry-After, OpenAI's x-ratelimit headers and an OpenAI error.
func TestQuotaUnderConcurrency(t *testing.T) {
	up := newTranscriptUpstream(t, "")
	up.ctype, up.rawBody = "application/json", nonStreamBody
	cfg := testConfig(up.URL())
	cfg.Auth.Keys = []config.Key{{Name: "bot", KeySHA256: config.HashKey("sk-bot"), UserID: "bot"}}
	cfg.Quotas.Keys = map[string]quota.Limits{"bot": {RequestsPerMinute: 10}}
	qc, err := cfg.QuotaConfig()
	if err != nil {
		t.Fatal(err)
	}
	lim, err := quota.NewLocal(qc, time.Now, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tg := gatewayWith(t, cfg, nil, lim)
	stop := make(chan struct{})
	defer close(stop)
	go func() { // the upstream remembers bodies; nobody reads them here
		for {
			select {
			case <-up.bodies:
			case <-up.headers:
			case <-stop:
				return
			}
		}
	}()

	const n = 40
	var wg sync.WaitGroup
	codes := make(chan *http.Response, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := post(t, tg.URL+"/v1/chat/completions", chatReq, map[string]string{"Authorization": "Bearer sk-bot"})
			readAll(t, resp)
			codes <- resp
		}()
	}
	wg.Wait()
	close(codes)
	ok, limited := 0, 0
	for resp := range codes {
		switch resp.StatusCode {
		case 200:
			ok++
			if resp.Header.Get("X-Ratelimit-Limit-Requests") != "10" {
				t.Errorf("admitted response lacks x-ratelimit-limit-requests: %v", resp.Header)
			}
		case 429:
			limited++
			if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 {
				t.Errorf("429 Retry-After = %q", resp.Header.Get("Retry-After"))
			}
			if resp.Header.Get("X-Ratelimit-Remaining-Requests") != "0" {
				t.Errorf("429 x-ratelimit-remaining-requests = %q", resp.Header.Get("X-Ratelimit-Remaining-Requests"))
			}
		default:
			t.Errorf("status %d", resp.StatusCode)
		}
	}
	if ok < 10 || ok > 11 || ok+limited != n {
		t.Errorf("admitted %d of %d with a limit of 10 (refused %d); want 10, or 11 if the bucket refilled", ok, n, limited)
	}
	refused := 0
	for range n {
		if r := tg.next(t); r.ErrorType == record.ErrRateLimited {
			refused++
			if r.Status != 429 || r.UpstreamStatus != 0 {
				t.Errorf("refused record: %d upstream %d", r.Status, r.UpstreamStatus)
			}
		}
	}
	if refused != limited {
		t.Errorf("%d refusals recorded, %d seen by clients", refused, limited)
	}
}

// TestDailyTokenQuota: tokens actually used are committed; the request
// after the quota is used up is refused, and 80 % raised a warning.
func TestDailyTokenQuota(t *testing.T) {
	up := newTranscriptUpstream(t, "")
	up.ctype, up.rawBody = "application/json", nonStreamBody // 12 tokens each
	cfg := testConfig(up.URL())
	cfg.Auth.Keys = []config.Key{{Name: "bot", KeySHA256: config.HashKey("sk-bot"), UserID: "bot"}}
	cfg.Quotas.Users = map[string]quota.Limits{"bot": {DailyTokens: 60}}
	qc, _ := cfg.QuotaConfig()
	events := make(chan quota.Event, 16)
	lim, err := quota.NewLocal(qc, time.Now, nil, func(e quota.Event) { events <- e })
	if err != nil {
		t.Fatal(err)
	}
	tg := gatewayWith(t, cfg, nil, lim)
	var statuses []int
	for range 6 {
		resp := post(t, tg.URL+"/v1/chat/completions", chatReq, map[string]string{"Authorization": "Bearer sk-bot"})
		readAll(t, resp)
		statuses = append(statuses, resp.StatusCode)
		tg.next(t)
		if resp.StatusCode == 200 {
			<-up.bodies
			<-up.headers
		}
	}
	// 5 × 12 = 60 tokens reach the quota; the sixth is refused.
	if want := []int{200, 200, 200, 200, 200, 429}; !equalInts(statuses, want) {
		t.Errorf("statuses = %v, want %v", statuses, want)
	}
	var kinds []string
	for len(events) > 0 {
		kinds = append(kinds, (<-events).Kind)
	}
	if len(kinds) < 2 || kinds[0] != "warning" {
		t.Errorf("events = %v, want a warning at 80%% then exceeded", kinds)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestMaxInputRecordedAsInputTooLong: a request over max_input_tokens is
// answered 400 with OpenAI's code and recorded with the Record's own kind,
// input_too_long — the kind set where the refusal is made, not remapped.
func TestMaxInputRecordedAsInputTooLong(t *testing.T) {
	up := newTranscriptUpstream(t, "")
	cfg := testConfig(up.URL())
	cfg.Auth.Keys = []config.Key{{Name: "bot", KeySHA256: config.HashKey("sk-bot"), UserID: "bot"}}
	cfg.Quotas.Users = map[string]quota.Limits{"bot": {MaxInputTokens: 1}}
	qc, _ := cfg.QuotaConfig()
	lim, err := quota.NewLocal(qc, time.Now, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tg := gatewayWith(t, cfg, nil, lim)
	resp := post(t, tg.URL+"/v1/chat/completions", chatReq, map[string]string{"Authorization": "Bearer sk-bot"})
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"code":"max_input_tokens_exceeded"`) {
		t.Fatalf("answer %d %s, want 400 max_input_tokens_exceeded", resp.StatusCode, body)
	}
	if r := tg.next(t); r.Status != http.StatusBadRequest || r.ErrorType != record.ErrInputTooLong {
		t.Errorf("record %d %q, want 400 %q", r.Status, r.ErrorType, record.ErrInputTooLong)
	}
}
