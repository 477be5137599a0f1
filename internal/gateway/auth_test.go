package gateway

import (
	"net/http"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/config"
)

// TestClientKeyNotForwarded: when tollgate checks keys, the client's key —
// in whichever header it came — never reaches the upstream: the upstream
// gets its own api_key, or no credentials at all when it has none.
func TestClientKeyNotForwarded(t *testing.T) {
	for _, upstreamKey := range []string{"sk-upstream", ""} {
		up := newTranscriptUpstream(t, "")
		up.ctype, up.rawBody = "application/json", nonStreamBody
		cfg := testConfig(up.URL())
		cfg.Auth.Keys = []config.Key{{KeySHA256: config.HashKey("sk-alice"), UserID: "alice"}}
		cfg.Upstreams[0].APIKey = upstreamKey
		tg := newTestGateway(t, cfg)
		for _, h := range []string{"Authorization", "X-Api-Key", "Api-Key"} {
			v := "sk-alice"
			if h == "Authorization" {
				v = "Bearer sk-alice"
			}
			resp := post(t, tg.URL+"/v1/chat/completions", chatReq, map[string]string{h: v})
			readAll(t, resp)
			if r := tg.next(t); resp.StatusCode != 200 || r.UserID != "alice" {
				t.Fatalf("key in %s: status %d, user %q", h, resp.StatusCode, r.UserID)
			}
			<-up.bodies
			got := <-up.headers
			want := http.Header{}
			if upstreamKey != "" {
				want.Set("Authorization", "Bearer "+upstreamKey)
			}
			for _, k := range []string{"Authorization", "X-Api-Key", "Api-Key"} {
				if got.Get(k) != want.Get(k) {
					t.Errorf("upstream key %q, client key in %s: upstream got %s %q, want %q", upstreamKey, h, k, got.Get(k), want.Get(k))
				}
			}
		}
	}
}
