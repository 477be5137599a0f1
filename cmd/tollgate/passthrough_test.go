package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/cost"
	"github.com/tollgate-dev/tollgate/internal/sim"
)

// TestServePassthrough: through the real serve wiring and its SQLite
// ledger, an image generation passed through is stored with its usage
// and rated, a denied and an unknown path are stored too, and /metrics
// counts all three by endpoint.
func TestServePassthrough(t *testing.T) {
	up := startSimServer(t, sim.Config{Models: []string{"gpt-image-1"}})
	cfg := shutdownConfig(t, up, 5*time.Second)
	cfg.Upstreams[0].Models = []string{"gpt-image-1"}
	one, per := cost.One, 8*cost.One
	cfg.Prices = []cost.Price{{Model: "gpt-image-1", Currency: "USD", Input: &one, Output: &per}}
	addr, cancel, wait := startServe(t, cfg)
	base := "http://" + addr

	do := func(method, path, body string) int {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := do("POST", "/v1/images/generations", `{"model":"gpt-image-1","prompt":"a lighthouse"}`); s != 200 {
		t.Fatalf("image generation: %d", s)
	}
	if s := do("GET", "/v1/organization/users", ""); s != 403 {
		t.Errorf("denied path: %d", s)
	}
	if s := do("GET", "/robots.txt", ""); s != 404 {
		t.Errorf("unknown path: %d", s)
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`tollgate_passthrough_requests_total{code="200",endpoint="images_generations"} 1`,
		`tollgate_passthrough_requests_total{code="403",endpoint="organization"} 1`,
		`tollgate_passthrough_requests_total{code="404",endpoint="other"} 1`,
	} {
		if !strings.Contains(string(m), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	cancel()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	byEndpoint := map[string]int{}
	for _, r := range allRequests(t, cfg.Store.SQLite.Path) {
		byEndpoint[r.Endpoint]++
		switch r.Endpoint {
		case "images_generations":
			// input at 1 USD/M and 1056 output tokens at 8 USD/M.
			want := r.Usage.InputTokens*1000 + sim.ImageTokens*8000
			if r.Status != 200 || r.Usage.OutputTokens != sim.ImageTokens || r.Usage.InputTokens == 0 || r.Cost.Nanos != want {
				t.Errorf("image row: status %d usage %+v cost %+v (want %d nanos)", r.Status, r.Usage, r.Cost, want)
			}
		case "organization":
			if r.Status != 403 || r.ErrorType != "path_denied" {
				t.Errorf("denied row: %d %q", r.Status, r.ErrorType)
			}
		case "other":
			if r.Status != 404 || r.ErrorType != "unknown_url" {
				t.Errorf("404 row: %d %q", r.Status, r.ErrorType)
			}
		}
	}
	if byEndpoint["images_generations"] != 1 || byEndpoint["organization"] != 1 || byEndpoint["other"] != 1 {
		t.Errorf("ledger rows by endpoint: %v", byEndpoint)
	}
}
