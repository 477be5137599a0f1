package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/cost"
	"github.com/tollgate-dev/tollgate/internal/sim"
)

// demoUsers are the demo's API keys: a few users over a few business
// lines, so the reports have something to tell apart.
var demoUsers = []struct{ key, user, biz string }{
	{"sk-demo-alice", "alice", "search"},
	{"sk-demo-bob", "bob", "search"},
	{"sk-demo-carol", "carol", "ads"},
	{"sk-demo-dave", "dave", "support"},
}

const demoModel = "Qwen/Qwen3-8B"

// demoPriceText says the demo's prices are made up, and what they are.
func demoPriceText() string {
	p := demoPrices()[0]
	return fmt.Sprintf("demo figures, %s per 1M tokens: %s input, %s cached, %s cache write, %s output",
		p.Currency, p.Input, p.CachedInput, p.CacheWrite, p.Output)
}

// demoPrices are the demo's price table, in USD per 1M tokens: DEMO
// FIGURES, of the order hosted 8B models are sold at, so that the cost
// views show amounts rather than 0 or "—". They are no quote of any
// provider; a real deployment sets its own under prices: in its config.
func demoPrices() []cost.Price {
	usd := func(s string) *cost.Decimal { d := cost.MustDecimal(s); return &d }
	return []cost.Price{{Model: demoModel, Currency: "USD",
		Input: usd("0.20"), CachedInput: usd("0.05"), CacheWrite: usd("0.25"), Output: usd("0.80")}}
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", "demo [--duration D] [--rate R] [--db PATH] [--listen ADDR] [--sim-listen ADDR]", stderr)
	duration := fs.Duration("duration", 0, "stop after this `duration` (default: run until Ctrl-C)")
	rate := fs.Float64("rate", 4, "requests per second of sample traffic")
	db := fs.String("db", "./tollgate.db", "SQLite ledger `path`")
	listen := fs.String("listen", "127.0.0.1:8080", "gateway listen `address`")
	simListen := fs.String("sim-listen", "127.0.0.1:8000", "simulator listen `address`")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *rate <= 0 {
		fmt.Fprintln(stderr, "tollgate demo: --rate must be positive")
		return errUsage
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	// 1. The simulated engine (a vLLM stand-in), on vLLM's port if free.
	simAddr := make(chan string, 1)
	simCtx, stopSim := context.WithCancel(context.Background())
	simDone := make(chan error, 1)
	// The simulator sends vLLM's span for every request to the gateway's
	// OTLP receiver, so the demo's records carry engine-side segments.
	otlpAddr := freeAddr()
	simCfg := sim.Config{Models: []string{demoModel}, Seed: 42, MaxRunning: 16, Faults: sim.Faults{ErrorRate: 0.01, ResetRate: 0.01},
		OTLPEndpoint: "http://" + otlpAddr}
	go func() { simDone <- runSimServer(simCtx, simCfg, freeOr(*simListen), log, simAddr) }()
	sa, ok := <-simAddr
	if !ok {
		stopSim()
		return <-simDone
	}
	var simErr error
	stopSimWait := sync.OnceFunc(func() { stopSim(); simErr = <-simDone })
	defer stopSimWait()

	// 2. The gateway in front of it, with the demo's keys.
	cfg := config.Default()
	cfg.Listen = freeOr(*listen)
	cfg.Store.SQLite.Path = *db
	cfg.Upstreams = []config.Upstream{{Name: "sim", URL: "http://" + sa + "/v1", Engine: "vllm", Models: []string{demoModel}}}
	cfg.ShutdownGrace = 5 * time.Second
	cfg.OTLP.HTTPListen, cfg.OTLP.GRPCListen = otlpAddr, ""
	cfg.Prices = demoPrices()
	for _, u := range demoUsers {
		cfg.Auth.Keys = append(cfg.Auth.Keys, config.Key{KeySHA256: config.HashKey(u.key), UserID: u.user, BizLine: u.biz})
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	gwCtx, stopGW := context.WithCancel(context.Background())
	gwAddr := make(chan string, 1)
	gwDone := make(chan error, 1)
	go func() { gwDone <- serve(gwCtx, cfg, log, gwAddr) }()
	var ga string
	select {
	case ga = <-gwAddr:
	case err := <-gwDone:
		stopGW()
		return err
	}

	fmt.Fprintf(stdout, `tollgate demo is running — Ctrl-C stops it.

  simulated engine   http://%[1]s/v1   (stands in for vLLM)
  gateway            http://%[2]s/v1   (point OpenAI SDKs here)
  metrics            http://%[2]s/metrics
  dashboard          http://%[2]s/ui/
  ledger             %[3]s
  prices             %[5]s

Try, in another terminal:
  go run ./cmd/tollgate requests --db %[3]s
  go run ./cmd/tollgate requests show --db %[3]s <REQUEST ID>
  curl -s http://%[2]s/v1/chat/completions -H 'Authorization: Bearer sk-demo-alice' \
    -d '{"model":"%[4]s","messages":[{"role":"user","content":"hello"}]}'

`, sa, ga, *db, demoModel, demoPriceText())

	// 3. Sample traffic until the demo is stopped; --duration counts from
	// here, so a slow start-up does not eat it.
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	sent, failed := demoTraffic(ctx, "http://"+ga, *rate, stdout)
	// The engine stops first: its last spans reach the gateway, which then
	// drains and flushes every record.
	stopSimWait()
	if simErr != nil {
		log.Warn("simulated engine stopped with an error", "err", simErr)
	}
	stopGW()
	if err := <-gwDone; err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\ndemo stopped: %d requests sent (%d failed as injected faults or cancelled); every one is in %s\n", sent, failed, *db)
	return nil
}

// freeOr returns addr if it can be bound now, else a free loopback port,
// so the demo still starts when vLLM or another gateway runs here.
func freeOr(addr string) string {
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		ln.Close()
		return addr
	}
	return "127.0.0.1:0"
}

// freeAddr is a loopback address free at the time of the call.
func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "127.0.0.1:4318"
	}
	defer ln.Close()
	return ln.Addr().String()
}

// demoTraffic sends a mix of requests: a shared system prompt (prefix
// cache hits), streamed and not, short max_tokens (finish_reason=length),
// several templates, and the agent APIs (demoRequest). It returns how many were sent and how many failed.
func demoTraffic(ctx context.Context, base string, rate float64, stdout io.Writer) (sent, failed int64) {
	var wg sync.WaitGroup
	var nSent, nFailed atomic.Int64
	client := &http.Client{Timeout: 2 * time.Minute}
	rng := rand.New(rand.NewPCG(7, 42))
	system := "You are a helpful assistant for an online shop. Answer briefly and politely. " + strings.Repeat("Follow the shop's policies. ", 20)
	questions := []string{"Where is my order?", "Can I return these shoes?", "What sizes do you have?", "Write a short ad for summer shoes.", "Summarise this support ticket."}
	templates := []string{"faq-v1", "faq-v2", "ad-copy", "ticket-summary"}
	sem := make(chan struct{}, 32)
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	report := time.NewTicker(5 * time.Second)
	defer report.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-report.C:
			fmt.Fprintf(stdout, "  %d requests sent, %d failed so far\n", nSent.Load(), nFailed.Load())
			continue
		case <-tick.C:
		}
		u := demoUsers[rng.IntN(len(demoUsers))]
		path, b, hdr := demoRequest(rng, system, questions)
		tmpl := templates[rng.IntN(len(templates))]
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			break loop
		}
		wg.Add(1)
		nSent.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			// Requests in flight are let finish: a demo stop is not a crash.
			req, _ := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodPost, base+path, bytes.NewReader(b))
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			req.Header.Set("Authorization", "Bearer "+u.key)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Tollgate-Template", tmpl)
			resp, err := client.Do(req)
			if err != nil {
				nFailed.Add(1)
				return
			}
			out, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			// An error object, not the "error":null every Responses answer carries.
			if err != nil || resp.StatusCode != 200 || bytes.Contains(out, []byte(`"error":{`)) {
				nFailed.Add(1)
			}
		}()
	}
	wg.Wait()
	return nSent.Load(), nFailed.Load()
}

// demoRequest is one request of the demo's mix: chat mostly, and a fifth
// each of OpenAI's Responses API and Anthropic's Messages API, as agents
// send them — an end user named in the body, a tool the model may call,
// sometimes reasoning, and for Messages a system prompt marked for the
// prompt cache, so the ledger shows cache writes and reads.
func demoRequest(rng *rand.Rand, system string, questions []string) (path string, body []byte, hdr map[string]string) {
	q := questions[rng.IntN(len(questions))]
	stream := rng.IntN(4) != 0
	endUser := fmt.Sprintf("shopper-%d", rng.IntN(12))
	switch n := rng.IntN(10); {
	case n < 2:
		b := map[string]any{"model": demoModel, "instructions": system, "input": q, "stream": stream, "safety_identifier": endUser,
			"tools": []any{map[string]any{"type": "function", "name": "track_order", "description": "Where an order is",
				"parameters": map[string]any{"type": "object", "required": []string{"order_id"}, "properties": map[string]any{"order_id": map[string]any{"type": "string"}}}}}}
		if rng.IntN(3) == 0 {
			b["reasoning"] = map[string]any{"effort": "low", "summary": "auto"}
		}
		body, _ = json.Marshal(b)
		return "/v1/responses", body, nil
	case n < 4:
		b := map[string]any{"model": demoModel, "max_tokens": 512, "stream": stream, "metadata": map[string]any{"user_id": endUser},
			"system": []any{map[string]any{"type": "text", "text": demoCachedSystem, "cache_control": map[string]any{"type": "ephemeral"}}},
			"tools": []any{map[string]any{"name": "track_order", "description": "Where an order is",
				"input_schema": map[string]any{"type": "object", "required": []string{"order_id"}, "properties": map[string]any{"order_id": map[string]any{"type": "string"}}}}},
			"messages": []any{map[string]any{"role": "user", "content": q}}}
		if rng.IntN(3) == 0 {
			b["thinking"], b["max_tokens"] = map[string]any{"type": "enabled", "budget_tokens": 1024}, 2048
		}
		body, _ = json.Marshal(b)
		return "/v1/messages", body, map[string]string{"Anthropic-Version": "2023-06-01"}
	}
	b := map[string]any{
		"model":    demoModel,
		"messages": []map[string]string{{"role": "system", "content": system}, {"role": "user", "content": q + strings.Repeat(" Please add detail.", rng.IntN(20))}},
		"stream":   stream,
		"user":     endUser,
	}
	if rng.IntN(6) == 0 {
		b["max_tokens"] = 16
	}
	body, _ = json.Marshal(b)
	return "/v1/chat/completions", body, nil
}

// demoCachedSystem is long enough (over 1024 tokens) for Anthropic's
// prompt cache.
var demoCachedSystem = "You are the shop's order assistant. " + strings.Repeat("Check the order, the policy and the stock before you answer. ", 120)
