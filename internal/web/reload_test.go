package web

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
)

// TestReloadAdminOnly: POST /api/v1/admin/reload reloads for an admin
// token only (401 without one, 403 to a read token), says which keys
// need a restart, and answers 422 with the error when the file is bad.
func TestReloadAdminOnly(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "r.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	calls := 0
	var fail error
	reload := func() ([]string, error) {
		calls++
		return []string{"listen"}, fail
	}
	tokens := []config.APIToken{
		{Name: "ops", TokenSHA256: config.HashKey("tok-read"), Role: "read"},
		{Name: "root", TokenSHA256: config.HashKey("tok-admin"), Role: "admin"},
	}
	srv := httptest.NewServer(NewAPI(Options{Store: st, Tokens: tokens, Log: slog.New(slog.DiscardHandler), Reload: reload}))
	t.Cleanup(srv.Close)
	post := func(token string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/admin/reload", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		token string
		want  int
	}{{"", 401}, {"tok-read", 403}} {
		if code, b := post(tc.token); code != tc.want {
			t.Errorf("reload with %q: %d %s, want %d", tc.token, code, b, tc.want)
		}
	}
	if calls != 0 {
		t.Fatalf("reloaded %d times for callers without the admin role", calls)
	}
	if code, b := post("tok-admin"); code != 200 || !strings.Contains(b, `"needs_restart":["listen"]`) {
		t.Errorf("admin reload: %d %s", code, b)
	}
	fail = errors.New("prices[0].output: must not be negative")
	if code, b := post("tok-admin"); code != 422 || !strings.Contains(b, "prices[0].output") || !strings.Contains(b, "running one is kept") {
		t.Errorf("bad file: %d %s", code, b)
	}
}
