package web

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/capture"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
)

// TestCapturesAdminOnly: the captures endpoints answer admin tokens only —
// 401 without a token or with a proxy key, 403 to a read token (which
// opens every other endpoint), 200 to admin — and show the stored,
// redacted text.
func TestCapturesAdminOnly(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "c.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	at := now.Add(-time.Minute)
	if err := st.AddCaptures(t.Context(), []*capture.Capture{
		{RequestID: "req-1", At: at, Reason: "failed", Request: []byte(`{"p":"[REDACTED:email]"}`), Response: []byte("no"), ResponseTruncated: true},
		{RequestID: "req-2", At: at.Add(time.Second), Reason: "slow", Request: []byte(`{}`), Response: []byte("slow answer")},
	}); err != nil {
		t.Fatal(err)
	}
	tokens := []config.APIToken{
		{Name: "ops", TokenSHA256: config.HashKey("tok-read"), Role: "read"},
		{Name: "root", TokenSHA256: config.HashKey("tok-admin"), Role: "admin"},
	}
	srv := httptest.NewServer(NewAPI(Options{Store: st, Captures: st, Tokens: tokens, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }}))
	t.Cleanup(srv.Close)

	for _, path := range []string{"/api/v1/captures", "/api/v1/captures/req-1"} {
		for _, tc := range []struct {
			token string
			want  int
		}{{"", 401}, {"sk-proxy-key", 401}, {"tok-read", 403}, {"tok-admin", 200}} {
			if code, b := get(t, srv.URL+path, tc.token); code != tc.want {
				t.Errorf("%s with %q: %d %s, want %d", path, tc.token, code, b, tc.want)
			}
		}
	}
	if code, _ := get(t, srv.URL+"/api/v1/requests", "tok-read"); code != 200 {
		t.Errorf("the read token no longer opens /api/v1/requests: %d", code)
	}

	code, b := get(t, srv.URL+"/api/v1/captures?reason=failed", "tok-admin")
	var list struct{ Captures []captureView }
	if err := json.Unmarshal(b, &list); code != 200 || err != nil || len(list.Captures) != 1 {
		t.Fatalf("list: %d %s %v", code, b, err)
	}
	if c := list.Captures[0]; c.RequestID != "req-1" || !c.ResponseTruncated || c.Request != nil || c.RequestBytes != 24 {
		t.Errorf("listed %+v; want req-1, truncated response, no bodies, 24 request bytes", c)
	}
	code, b = get(t, srv.URL+"/api/v1/captures/req-1", "tok-admin")
	var one captureView
	if err := json.Unmarshal(b, &one); code != 200 || err != nil || one.Request == nil || *one.Request != `{"p":"[REDACTED:email]"}` || *one.Response != "no" {
		t.Errorf("get: %d %s %v", code, b, err)
	}
	if code, _ := get(t, srv.URL+"/api/v1/captures/nope", "tok-admin"); code != 404 {
		t.Errorf("unknown capture: %d, want 404", code)
	}
	if code, _ := get(t, srv.URL+"/api/v1/captures?reason=odd", "tok-admin"); code != 400 {
		t.Errorf("bad reason: %d, want 400", code)
	}
}

// TestCapturesNeedToken: with no api.tokens, a loopback client (which the
// test server's is) opens the rest of the API but gets 403 on both
// captures endpoints, so a process on the same host (a sidecar, a reverse
// proxy) never reads captured text anonymously.
func TestCapturesNeedToken(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "c.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.AddCaptures(t.Context(), []*capture.Capture{{RequestID: "req-1", At: now.Add(-time.Minute), Reason: "failed", Request: []byte("secret prompt")}}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(NewAPI(Options{Store: st, Captures: st, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }}))
	t.Cleanup(srv.Close)
	if code, b := get(t, srv.URL+"/api/v1/requests", ""); code != 200 {
		t.Fatalf("loopback without tokens no longer opens /api/v1/requests: %d %s", code, b)
	}
	for _, path := range []string{"/api/v1/captures", "/api/v1/captures/req-1"} {
		code, b := get(t, srv.URL+path, "")
		if code != 403 || strings.Contains(string(b), "secret prompt") || strings.Contains(string(b), "req-1") {
			t.Errorf("%s from loopback with no tokens: %d %s, want 403", path, code, b)
		}
	}
}
