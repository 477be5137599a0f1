package gateway

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/config"
)

// answering is an upstream that answers every chat request whole.
func answering(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`))
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

// TestReloadKeysAndUpstreams: after Reload a removed key is refused and
// a new one served, requests go to the new upstream, and an upstream
// configured exactly as before is kept (its connections and slots).
func TestReloadKeysAndUpstreams(t *testing.T) {
	a, b := answering(t), answering(t)
	cfg := testConfig(a)
	cfg.Upstreams[0].Name, cfg.Upstreams[0].Models = "a", []string{"m"}
	cfg.Auth.Keys = []config.Key{{Key: "sk-old", UserID: "old"}}
	tg := newTestGateway(t, cfg)
	chat := func(key string) int {
		resp := post(t, tg.URL+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"q"}]}`, map[string]string{"Authorization": "Bearer " + key})
		readAll(t, resp)
		return resp.StatusCode
	}
	if code := chat("sk-old"); code != 200 {
		t.Fatalf("before the reload: %d", code)
	}
	if r := tg.next(t); r.Upstream != "a" || r.UserID != "old" {
		t.Fatalf("before the reload: upstream %q user %q", r.Upstream, r.UserID)
	}

	next := testConfig(b)
	next.Upstreams[0].Name, next.Upstreams[0].Models = "b", []string{"m"}
	next.Auth.Keys = []config.Key{{Key: "sk-new", UserID: "new"}}
	if err := next.Validate(); err != nil {
		t.Fatal(err)
	}
	tg.G.Reload(next, nil)
	if code := chat("sk-old"); code != http.StatusUnauthorized {
		t.Errorf("a removed key after the reload: %d, want 401", code)
	}
	tg.next(t) // the refusal's record
	if code := chat("sk-new"); code != 200 {
		t.Fatalf("the new key after the reload: %d", code)
	}
	if r := tg.next(t); r.Upstream != "b" || r.UserID != "new" {
		t.Errorf("after the reload: upstream %q user %q, want b and new", r.Upstream, r.UserID)
	}

	kept := tg.G.routes().named("b")
	tg.G.Reload(next, nil)
	if tg.G.routes().named("b") != kept {
		t.Error("an unchanged upstream was rebuilt by the reload (its slots and connections lost)")
	}
}
