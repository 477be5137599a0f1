package main

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/sim"
)

// TestDemoAgentTraffic: the demo's mix, sent through the real serve
// wiring in front of the simulator, puts chat, Responses and Messages
// rows in the SQLite ledger — with tokens, end users, tool calls and
// Anthropic cache writes or reads — and `tollgate requests --endpoint`
// lists each API's rows.
func TestDemoAgentTraffic(t *testing.T) {
	up := startSimServer(t, sim.Config{Models: []string{demoModel}, Seed: 3})
	cfg := shutdownConfig(t, up, 0)
	cfg.Upstreams[0].Models = []string{demoModel}
	cfg.Prices = demoPrices()
	addr, cancel, wait := startServe(t, cfg)
	rng := rand.New(rand.NewPCG(7, 42))
	system := "You are a helpful assistant for an online shop."
	questions := []string{"Where is my order?", "Can I return these shoes?"}
	paths := map[string]int{}
	for range 40 {
		path, body, hdr := demoRequest(rng, system, questions)
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(sim.OutputTokensHeader, "12")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || bytes.Contains(out, []byte(`"error":{`)) {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, out)
		}
		paths[path]++
	}
	cancel()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/v1/chat/completions", "/v1/responses", "/v1/messages"} {
		if paths[p] == 0 {
			t.Errorf("the demo's mix sent no %s in 40 requests: %v", p, paths)
		}
	}
	for _, ep := range []string{"responses", "messages"} {
		var stdout, stderr bytes.Buffer
		if err := run(t.Context(), []string{"requests", "--db", cfg.Store.SQLite.Path, "--endpoint", ep, "--json", "--limit", "100"}, &stdout, &stderr); err != nil {
			t.Fatalf("requests --endpoint %s: %v\n%s", ep, err, stderr.String())
		}
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		if len(lines) != paths["/v1/"+ep] {
			t.Errorf("requests --endpoint %s: %d rows, %d sent", ep, len(lines), paths["/v1/"+ep])
		}
		var cache, tools int64
		for _, l := range lines {
			var r struct {
				Endpoint string `json:"endpoint"`
				EndUser  string `json:"end_user"`
				Cost     struct {
					Nanos    int64  `json:"nanos"`
					Currency string `json:"currency"`
				} `json:"cost"`
				Usage struct {
					Input      int64 `json:"input_tokens"`
					Output     int64 `json:"output_tokens"`
					Cached     int64 `json:"cached_input_tokens"`
					CacheWrite int64 `json:"cache_write_tokens"`
					ToolCalls  int64 `json:"tool_calls"`
				} `json:"usage"`
			}
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatalf("%v: %s", err, l)
			}
			if r.Endpoint != ep || r.Usage.Input == 0 || r.Usage.Output == 0 || !strings.HasPrefix(r.EndUser, "shopper-") || r.Cost.Nanos <= 0 || r.Cost.Currency != "USD" {
				t.Errorf("row %s", l)
			}
			cache += r.Usage.Cached + r.Usage.CacheWrite
			tools += r.Usage.ToolCalls
		}
		if ep == "messages" && cache == 0 {
			t.Error("no Anthropic cache write or read in the demo's Messages rows")
		}
		if tools == 0 {
			t.Errorf("no tool call in the demo's %s rows", ep)
		}
	}
}
