package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/budget"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/sim"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
)

// TestTeamBudgetEnforcedThroughServe: a team's monthly budget, already
// used up in the ledger when serve starts, shows in /api/v1/budgets and
// refuses the team's keys with 429 insufficient_quota, while another
// team's key is served.
func TestTeamBudgetEnforcedThroughServe(t *testing.T) {
	up := startSimServer(t, sim.Config{DecodeBase: 1})
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.Store.SQLite.Path = filepath.Join(t.TempDir(), "b.db")
	cfg.Upstreams = []config.Upstream{{Name: "sim", URL: up, Engine: "vllm"}}
	cfg.Auth.Keys = []config.Key{{Name: "a", Key: "sk-team-a", UserID: "ann", Team: "platform"}, {Name: "b", Key: "sk-team-b", UserID: "ben", Team: "search"}}
	cfg.Budgets = []budget.Config{{Name: "platform-month", Scope: budget.ScopeTeam, Subject: "platform", Period: budget.PeriodMonth, Tokens: 1000, Enforce: true}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	if now.Add(time.Minute).Month() != now.Month() {
		t.Skip("a minute before the month ends: the seeded usage would be last month's")
	}
	st, err := sqlite.Open(context.Background(), cfg.Store.SQLite.Path, slog.New(slog.DiscardHandler), sqlite.WithLocation(cfg.Location()))
	if err != nil {
		t.Fatal(err)
	}
	used := &record.Record{RequestID: "seed", KeyID: config.HashKey("sk-team-a")[:12], UserID: "ann", Model: reloadModel, Arrival: now.Add(-time.Minute),
		Status: 200, Usage: record.Usage{InputTokens: 600, OutputTokens: 600}}
	if err := st.Insert(context.Background(), store.Batch{Records: []*record.Record{used}}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	addr, cancel, wait := startServe(t, cfg)
	defer func() {
		cancel()
		if err := wait(); err != nil {
			t.Error(err)
		}
	}()
	// The tracker's first read is at start: poll its answer, with a deadline.
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err := http.Get("http://" + addr + "/api/v1/budgets")
		if err != nil {
			t.Fatal(err)
		}
		var got struct{ Budgets []budget.Status }
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if err == nil && len(got.Budgets) == 1 && got.Budgets[0].Exceeded {
			if b := got.Budgets[0]; b.Tokens != 1200 || b.Share != 1.2 {
				t.Errorf("budget burn %+v, want 1200 tokens, share 1.2", b)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the budget never showed as exceeded: %+v %v", got, err)
		}
		time.Sleep(20 * time.Millisecond) // polling the API, with a deadline
	}
	if v := counterGauge(t, addr, "tollgate_budget_usage_ratio", "budget", "platform-month"); v != 1.2 {
		t.Errorf("tollgate_budget_usage_ratio{budget=platform-month} = %v, want 1.2", v)
	}
	chat := func(key string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions",
			strings.NewReader(`{"model":"`+reloadModel+`","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := chat("sk-team-a"); code != 429 || !strings.Contains(body, "insufficient_quota") || !strings.Contains(body, "platform-month") {
		t.Errorf("platform's key over its team's budget: %d %s", code, body)
	}
	if code, body := chat("sk-team-b"); code != 200 {
		t.Errorf("another team's key: %d %s", code, body)
	}
}

// counterGauge reads one series of a gauge from a real scrape; -1 when
// it is not there.
func counterGauge(t *testing.T, addr, name, labelName, labelValue string) float64 {
	t.Helper()
	if m := scrapeSeries(t, addr, name, labelName, labelValue); m != nil {
		return m.GetGauge().GetValue()
	}
	return -1
}
