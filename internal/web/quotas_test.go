package web

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/quota"
)

func TestQuotas(t *testing.T) {
	now := time.Date(2026, 3, 10, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	tokens := []config.APIToken{{Name: "ops", TokenSHA256: config.HashKey("tok-read"), Role: "read"}}

	// No quotas configured: an empty list, not null.
	srv := httptest.NewServer(NewAPI(Options{Tokens: tokens, Log: slog.New(slog.DiscardHandler), Now: clock, Quotas: quota.Reader(nil)}))
	defer srv.Close()
	if code, b := get(t, srv.URL+"/api/v1/quotas", "tok-read"); code != 200 || string(b) != "{\"quotas\":[]}\n" {
		t.Errorf("no quotas: %d %s", code, b)
	}
	if code, _ := get(t, srv.URL+"/api/v1/quotas", ""); code != 401 {
		t.Errorf("without a token: %d, want 401", code)
	}

	l, err := quota.NewLocal(quota.Config{Users: map[string]quota.Limits{"alice": {DailyTokens: 1000, DailyCost: "2.50"}}}, clock, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, tk, err := l.Admit(context.Background(), quota.Request{Subject: quota.Subject{UserID: "alice"}, EstInputTokens: 400, EstOutputTokens: 400})
	if err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	tk.Commit(850, 500_000_000)
	srv2 := httptest.NewServer(NewAPI(Options{Tokens: tokens, Log: slog.New(slog.DiscardHandler), Now: clock, Quotas: quota.Reader(l)}))
	defer srv2.Close()
	code, b := get(t, srv2.URL+"/api/v1/quotas", "tok-read")
	if code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	var res struct {
		Quotas []struct {
			Scope, Kind, Name, Limit string
			Used, Reserved, Quota    int64
			Share                    float64
			WarnAt                   float64   `json:"warn_at"`
			DayStart                 time.Time `json:"day_start"`
			DayEnd                   time.Time `json:"day_end"`
		}
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Quotas) != 2 {
		t.Fatalf("%s", b)
	}
	c, tok := res.Quotas[0], res.Quotas[1]
	if c.Limit != "daily_cost" || c.Used != 500_000_000 || c.Quota != 2_500_000_000 || c.Share != 0.2 {
		t.Errorf("cost: %+v", c)
	}
	if tok.Scope != "user:alice" || tok.Kind != "user" || tok.Name != "alice" || tok.Limit != "daily_tokens" ||
		tok.Used != 850 || tok.Quota != 1000 || tok.Share != 0.85 || tok.WarnAt != 0.8 ||
		!tok.DayStart.Equal(time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)) || !tok.DayEnd.Equal(time.Date(2026, 3, 11, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("tokens: %+v", tok)
	}
}
