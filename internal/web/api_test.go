package web

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/alert"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/notify"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
	"github.com/tollgate-dev/tollgate/internal/store/storetest"
)

var now = time.Date(2025, 3, 16, 12, 0, 0, 0, time.UTC)

func newAPI(t *testing.T, tokens []config.APIToken) (*httptest.Server, []*record.Record) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "a.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	recs := storetest.Records(0, 12)
	for i, r := range recs {
		r.Cost = record.Cost{Nanos: int64(i+1) * 1e6, Currency: "USD"}
	}
	if err := st.Insert(context.Background(), store.Batch{Records: recs}); err != nil {
		t.Fatal(err)
	}
	_ = st.AddEvents(context.Background(), nil)
	srv := httptest.NewServer(NewAPI(Options{Store: st, Tokens: tokens, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }}))
	t.Cleanup(srv.Close)
	return srv, recs
}

func get(t *testing.T, url, token string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func TestAuth(t *testing.T) {
	srv, _ := newAPI(t, []config.APIToken{{Name: "ops", TokenSHA256: config.HashKey("tok-read"), Role: "read"}})
	for _, tc := range []struct {
		token string
		want  int
	}{{"", 401}, {"sk-proxy-key", 401}, {"tok-read", 200}} {
		if code, b := get(t, srv.URL+"/api/v1/reports", tc.token); code != tc.want {
			t.Errorf("token %q: %d %s, want %d", tc.token, code, b, tc.want)
		}
	}
}

func TestLoopbackOnlyWithoutTokens(t *testing.T) {
	srv, _ := newAPI(t, nil)
	if code, _ := get(t, srv.URL+"/api/v1/reports", ""); code != 200 {
		t.Errorf("loopback without tokens: %d, want 200", code)
	}
	a := NewAPI(Options{Log: slog.New(slog.DiscardHandler)})
	req := httptest.NewRequest(http.MethodGet, "/api/v1/reports", nil)
	req.RemoteAddr = "192.0.2.7:5555"
	rec := httptest.NewRecorder()
	a.ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden {
		t.Errorf("remote client without tokens: %d, want 403", rec.Code)
	}
}

// TestProxiedWithoutTokens: with no api.tokens a loopback client is let
// in, but not one whose request came through a reverse proxy on the host
// (it carries one of the headers proxies add): 401, naming api.tokens and
// the header. With tokens, the headers change nothing.
func TestProxiedWithoutTokens(t *testing.T) {
	srv, _ := newAPI(t, nil)
	withTokens, _ := newAPI(t, []config.APIToken{{Name: "ops", TokenSHA256: config.HashKey("tok-read"), Role: "read"}})
	for _, h := range []struct{ name, value string }{
		{"X-Forwarded-For", "203.0.113.9"},
		{"Forwarded", "for=203.0.113.9;proto=https"},
		{"X-Real-IP", "203.0.113.9"},
		{"X-Forwarded-Host", "tollgate.example.com"},
		{"X-Forwarded-Proto", "https"},
		{"Via", "1.1 caddy"},
	} {
		for _, path := range []string{"/api/v1/requests", "/api/v1/captures"} {
			code, b, hdr := getWith(t, srv.URL+path, "", h.name, h.value)
			var e struct {
				Error struct{ Code, Message string }
			}
			_ = json.Unmarshal(b, &e)
			if code != http.StatusUnauthorized || e.Error.Code != "unauthorized" || !strings.Contains(e.Error.Message, "api.tokens") ||
				!strings.Contains(e.Error.Message, h.name) || hdr.Get("WWW-Authenticate") == "" {
				t.Errorf("%s through a proxy (%s) without tokens: %d %s; want 401 naming api.tokens and %s", path, h.name, code, b, h.name)
			}
		}
		if code, b, _ := getWith(t, withTokens.URL+"/api/v1/requests", "tok-read", h.name, h.value); code != 200 {
			t.Errorf("token through a proxy (%s): %d %s, want 200", h.name, code, b)
		}
	}
	if code, b, _ := getWith(t, srv.URL+"/api/v1/requests", "", "X-Tollgate-Biz", "search"); code != 200 {
		t.Errorf("loopback without a proxy header: %d %s, want 200", code, b)
	}
}

func getWith(t *testing.T, url, token, header, value string) (int, []byte, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set(header, value)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

func TestReportsAndRequests(t *testing.T) {
	srv, recs := newAPI(t, nil)
	code, b := get(t, srv.URL+"/api/v1/reports/users?from=2025-03-14&to=2025-03-15", "")
	if code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	var rep struct {
		Rows []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, r := range rep.Rows {
		n += r["requests"].(float64)
	}
	if n != 12 {
		t.Errorf("users report counts %v requests, want 12: %s", n, b)
	}
	if code, b := get(t, srv.URL+"/api/v1/reports/top?from=2025-03-14&to=2025-03-15&format=csv", ""); code != 200 || !strings.HasPrefix(string(b), "user,requests") {
		t.Errorf("csv: %d %s", code, b)
	}
	for _, bad := range []string{"/api/v1/reports/nope", "/api/v1/reports/users?from=yesterday", "/api/v1/requests?limit=0", "/api/v1/requests?status=x"} {
		if code, b := get(t, srv.URL+bad, ""); code != 400 || !strings.Contains(string(b), `"error"`) {
			t.Errorf("%s: %d %s, want a 400 JSON error", bad, code, b)
		}
	}
	code, b = get(t, srv.URL+"/api/v1/requests?limit=3&user="+recs[0].UserID, "")
	var list struct {
		Requests []*record.Record `json:"requests"`
	}
	if code != 200 || json.Unmarshal(b, &list) != nil || len(list.Requests) == 0 || list.Requests[0].UserID != recs[0].UserID {
		t.Errorf("requests: %d %s", code, b)
	}
	code, b = get(t, srv.URL+"/api/v1/requests/"+recs[4].RequestID, "")
	var one struct {
		Attempts []*record.Record `json:"attempts"`
		Now      time.Time        `json:"now"` // the clock engine timing pending is judged by
	}
	if code != 200 || json.Unmarshal(b, &one) != nil || one.Attempts[0].RequestID != recs[4].RequestID || one.Attempts[0].Cost.Nanos != 5e6 || !one.Now.Equal(now) {
		t.Errorf("request: %d %s", code, b)
	}
	if code, _ := get(t, srv.URL+"/api/v1/requests/nope", ""); code != 404 {
		t.Errorf("unknown request: %d", code)
	}
}

// TestAlerts: /api/v1/alerts lists the active alerts, the alert history
// from the store (other events left out) and the notifiers' status.
func TestAlerts(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "a.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.AddEvents(context.Background(), []store.Event{
		{At: now.Add(-time.Hour), Kind: alert.EventKind, Subject: "error_rate model=m", Message: "firing: many fail"},
		{At: now.Add(-time.Hour), Kind: "quota_warning", Subject: "user:bob"},
		{At: now.Add(-30 * 24 * time.Hour), Kind: alert.EventKind, Subject: "old"},
	}); err != nil {
		t.Fatal(err)
	}
	active := []alert.Alert{{Rule: "error_rate", Severity: alert.Critical, State: alert.Firing, Labels: map[string]string{"model": "m"}}}
	srv := httptest.NewServer(NewAPI(Options{Store: st, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now },
		Alerts:    func() []alert.Alert { return active },
		Notifiers: func() []notify.Status { return []notify.Status{{Name: "oncall", Type: "dingtalk"}} }}))
	defer srv.Close()
	code, body := get(t, srv.URL+"/api/v1/alerts", "")
	var got struct {
		Active    []alert.Alert   `json:"active"`
		History   []store.Event   `json:"history"`
		Notifiers []notify.Status `json:"notifiers"`
	}
	if code != 200 || json.Unmarshal(body, &got) != nil {
		t.Fatalf("GET /api/v1/alerts: %d %s", code, body)
	}
	if len(got.Active) != 1 || got.Active[0].Labels["model"] != "m" || got.Active[0].Severity != alert.Critical {
		t.Errorf("active = %+v", got.Active)
	}
	if len(got.History) != 1 || got.History[0].Subject != "error_rate model=m" {
		t.Errorf("history = %+v, want only the last week's alert event", got.History)
	}
	if len(got.Notifiers) != 1 || got.Notifiers[0].Name != "oncall" {
		t.Errorf("notifiers = %+v", got.Notifiers)
	}
	if code, _ := get(t, srv.URL+"/api/v1/alerts?since=yesterday-ish", ""); code != 400 {
		t.Errorf("bad since: %d, want 400", code)
	}
}
