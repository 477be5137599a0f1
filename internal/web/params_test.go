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

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
)

// TestBadQueryParameters: every endpoint answers a bad query parameter
// alike — 400, JSON, code bad_parameter, the parameter named, a message
// that starts with it and says what form it wants — and never with a Go
// parse error (`?status=abc` answered "strconv.Atoi: …").
func TestBadQueryParameters(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "p.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv := httptest.NewServer(NewAPI(Options{Store: st, Captures: st, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now },
		Tokens: []config.APIToken{{Name: "ops", TokenSHA256: config.HashKey("tok-admin"), Role: RoleAdmin}}}))
	t.Cleanup(srv.Close)
	for _, tc := range []struct{ url, param, want string }{
		{"/api/v1/requests?status=abc", "status", "an HTTP status code, an integer from 100 to 599"},
		{"/api/v1/requests?status=7", "status", "an integer from 100 to 599"},
		{"/api/v1/requests?slow=fast", "slow", "a duration such as 500ms"},
		{"/api/v1/requests?slow=-2s", "slow", "a duration"},
		{"/api/v1/requests?errors=maybe", "errors", "1, true, 0 or false"},
		{"/api/v1/requests?sort=rowid", "sort", "one of cost, e2e, input, output, ttft"},
		{"/api/v1/requests?limit=x", "limit", "an integer from 1 to 10000"},
		{"/api/v1/requests?limit=10001", "limit", "an integer from 1 to 10000"},
		{"/api/v1/requests?since=yesterday", "since", "a date (2026-11-01) or an RFC 3339 time"},
		{"/api/v1/requests?until=later", "until", "a date"},
		{"/api/v1/reports/users?from=x", "from", "a date"},
		{"/api/v1/reports/users?to=y", "to", "a date"},
		{"/api/v1/reports/users?from=2025-03-15&to=2025-03-14", "from", "must be before to"},
		{"/api/v1/reports/users?limit=0", "limit", "an integer from 1"},
		{"/api/v1/reports/users?format=xml", "format", "one of json, csv, table"},
		{"/api/v1/events?since=x", "since", "a date"},
		{"/api/v1/engine?from=x", "from", "a date"},
		{"/api/v1/alerts?since=yesterday-ish", "since", "a date"},
		{"/api/v1/diagnose?limit=100001", "limit", "an integer from 1 to 100000"},
		{"/api/v1/diagnose?to=x", "to", "a date"},
		{"/api/v1/reconciliations?limit=abc", "limit", "an integer from 1 to 500"},
		{"/api/v1/captures?reason=odd", "reason", "one of failed, slow"},
		{"/api/v1/captures?limit=1001", "limit", "an integer from 1 to 1000"},
		{"/api/v1/series?step=2m", "step", ""},
		{"/api/v1/overview?from=x", "from", ""},
	} {
		code, b := get(t, srv.URL+tc.url, "tok-admin")
		var e struct {
			Error struct{ Code, Parameter, Message string }
		}
		err := json.Unmarshal(b, &e)
		if code != 400 || err != nil || e.Error.Code != "bad_parameter" || e.Error.Parameter != tc.param ||
			!strings.HasPrefix(e.Error.Message, tc.param+": ") || !strings.Contains(e.Error.Message, tc.want) ||
			strings.Contains(e.Error.Message, "strconv") || strings.Contains(e.Error.Message, "time: ") {
			t.Errorf("%s: %d %s; want 400 bad_parameter naming %q and saying %q", tc.url, code, b, tc.param, tc.want)
		}
	}
}
