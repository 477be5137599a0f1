package web

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/billing"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/cost"
)

func TestReconciliations(t *testing.T) {
	ctx := context.Background()
	tokens := []config.APIToken{{Name: "ops", TokenSHA256: config.HashKey("tok-read"), Role: "read"}}

	// Without kept runs: an empty list, and no run to get.
	srv := httptest.NewServer(NewAPI(Options{Tokens: tokens, Log: slog.New(slog.DiscardHandler)}))
	defer srv.Close()
	if code, b := get(t, srv.URL+"/api/v1/reconciliations", "tok-read"); code != 200 || string(b) != "{\"reconciliations\":[]}\n" {
		t.Errorf("no runs: %d %s", code, b)
	}
	if code, _ := get(t, srv.URL+"/api/v1/reconciliations/1", "tok-read"); code != 404 {
		t.Errorf("a run without runs: %d, want 404", code)
	}

	runs, err := billing.OpenRuns(ctx, filepath.Join(t.TempDir(), "l.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer runs.Close()
	bill := []cost.BillLine{{Day: "2026-11-10", Model: "gpt-4o", Requests: 2, Input: 1000, Output: 240}}
	ledger := []cost.LedgerLine{{Day: "2026-11-10", Model: "gpt-4o", Requests: 2, Input: 1000, Output: 200}}
	tol := cost.DefaultTolerance()
	rep := cost.Reconcile(bill, ledger, tol)
	at := time.Date(2026, 11, 11, 8, 0, 0, 0, time.UTC)
	id, err := runs.Save(ctx, billing.NewRun(at, "nov.csv", "openai", "2026-11-10", "2026-11-10", tol, rep), rep)
	if err != nil {
		t.Fatal(err)
	}
	srv2 := httptest.NewServer(NewAPI(Options{Tokens: tokens, Log: slog.New(slog.DiscardHandler), Reconciliations: runs}))
	defer srv2.Close()
	code, b := get(t, srv2.URL+"/api/v1/reconciliations", "tok-read")
	var list struct {
		Reconciliations []struct {
			ID            int64
			At            time.Time
			Bill          string
			Severity      string
			OverTolerance bool        `json:"over_tolerance"`
			BillTotal     cost.Counts `json:"bill_total"`
			LedgerTotal   cost.Counts `json:"ledger_total"`
			Diff          cost.Counts
		}
	}
	if code != 200 || json.Unmarshal(b, &list) != nil || len(list.Reconciliations) != 1 {
		t.Fatalf("list: %d %s", code, b)
	}
	r := list.Reconciliations[0]
	if r.ID != id || !r.At.Equal(at) || r.Bill != "nov.csv" || r.Severity != "critical" || !r.OverTolerance ||
		r.BillTotal.Output != 240 || r.LedgerTotal.Output != 200 || r.Diff.Output != 40 {
		t.Errorf("listed run: %+v", r)
	}

	code, b = get(t, srv2.URL+"/api/v1/reconciliations/"+strconv.FormatInt(id, 10), "tok-read")
	var one struct {
		Reconciliation struct{ ID int64 }
		Report         struct {
			Lines []struct {
				Model    string
				Severity string
				Diff     cost.Counts
			}
		}
	}
	if code != 200 || json.Unmarshal(b, &one) != nil || one.Reconciliation.ID != id || len(one.Report.Lines) != 1 ||
		one.Report.Lines[0].Diff.Output != 40 || one.Report.Lines[0].Severity != "critical" {
		t.Errorf("get: %d %s", code, b)
	}

	for _, c := range []struct {
		path string
		code int
	}{
		{"/api/v1/reconciliations/99", 404},
		{"/api/v1/reconciliations/x", 400},
		{"/api/v1/reconciliations/0", 400},
		{"/api/v1/reconciliations?limit=0", 400},
		{"/api/v1/reconciliations?limit=501", 400},
		{"/api/v1/reconciliations?limit=1", 200},
	} {
		if code, b := get(t, srv2.URL+c.path, "tok-read"); code != c.code {
			t.Errorf("%s: %d %s, want %d", c.path, code, b, c.code)
		}
	}
	if code, _ := get(t, srv2.URL+"/api/v1/reconciliations", ""); code != 401 {
		t.Errorf("without a token: %d, want 401", code)
	}
}
