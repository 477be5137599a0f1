package billing

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate-dev/tollgate/internal/cost"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
)

// Runs are kept in the ledger's own file beside the ledger, survive a
// reopen of both, and list newest first with their summaries; one run's
// report comes back with every line.
func TestRunsKeptInLedgerFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "l.db")
	st, err := sqlite.Open(ctx, path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	day := "2026-11-10"
	at := time.Date(2026, 11, 10, 13, 0, 0, 0, time.UTC)
	insert(t, st, rec("openai", "gpt-4o", at, 1000, 0, 200), rec("openai", "gpt-4o", at, 500, 0, 100), rec("openai", "gpt-4o-mini", at, 100, 0, 10))
	ledger, err := LedgerLines(ctx, st, h0.Truncate(24*time.Hour), h0.Truncate(24*time.Hour).AddDate(0, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	usd := func(n int64) *cost.Money { return &cost.Money{Nanos: n, Currency: "USD"} }
	// gpt-4o matches; gpt-4o-mini is billed 20 % more output than the ledger holds.
	bill := []cost.BillLine{
		{Day: day, Model: "gpt-4o", Requests: 2, Input: 1500, Output: 300, NoCached: true, Cost: usd(4_000_000)},
		{Day: day, Model: "gpt-4o-mini", Requests: 1, Input: 100, Output: 12, NoCached: true, Cost: usd(500_000)},
	}
	tol := cost.DefaultTolerance()
	rep := cost.Reconcile(bill, ledger, tol)
	if rep.Severity != cost.SeverityCritical {
		t.Fatalf("the fixture should be critical: %+v", rep)
	}

	runs, err := OpenRuns(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	first, err := runs.Save(ctx, NewRun(at.Add(time.Hour), "bills/nov.csv", "generic", day, day, tol, rep), rep)
	if err != nil {
		t.Fatal(err)
	}
	okRep := cost.Reconcile(bill[:1], ledger[:1], tol)
	second, err := runs.Save(ctx, NewRun(at.Add(2*time.Hour), "bills/nov-4o.csv", "openai", day, day, tol, okRep), okRep)
	if err != nil || second <= first {
		t.Fatalf("second run id %d (first %d): %v", second, first, err)
	}
	runs.Close()
	// The ledger still opens (and migrates) with the runs' table in its file.
	insert(t, st, rec("openai", "gpt-4o", at, 1, 0, 1))
	st.Close()
	st, err = sqlite.Open(ctx, path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("reopen the ledger beside the runs: %v", err)
	}
	st.Close()

	runs, err = OpenRuns(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer runs.Close()
	list, err := runs.List(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != second || list[1].ID != first {
		t.Fatalf("list: %+v, want runs %d then %d", list, second, first)
	}
	got := list[1]
	want := Run{ID: first, At: at.Add(time.Hour), Bill: "bills/nov.csv", Format: "generic", From: day, To: day, Lines: 2,
		Severity: "critical", OverTolerance: true, Tolerance: RunTolerance{Warn: tol.Warn, Critical: tol.Critical},
		BillTotal: cost.Counts{Requests: 3, Input: 1600, Output: 312}, LedgerTotal: cost.Counts{Requests: 3, Input: 1600, Output: 310},
		Diff: cost.Counts{Output: 2}, Explained: map[cost.Cause]cost.Counts{}, Unexplained: cost.Counts{Output: 2},
		BillCost: []cost.Money{{Nanos: 4_500_000, Currency: "USD"}}, LedgerCost: []cost.Money{}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("first run (-want +got):\n%s", d)
	}
	if list[0].Severity != "ok" || list[0].OverTolerance {
		t.Errorf("second run: %+v", list[0])
	}
	if one, err := runs.List(ctx, 1); err != nil || len(one) != 1 || one[0].ID != second {
		t.Errorf("limit 1: %+v %v", one, err)
	}

	run, raw, err := runs.Get(ctx, first)
	if err != nil || run.ID != first || run.Bill != "bills/nov.csv" {
		t.Fatalf("get %d: %+v %v", first, run, err)
	}
	var back struct {
		Lines []struct {
			Model    string
			Severity string
			Bill     cost.Counts
			Ledger   cost.Counts
		}
	}
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Lines) != 2 || back.Lines[1].Model != "gpt-4o-mini" || back.Lines[1].Severity != "critical" ||
		back.Lines[1].Bill.Output != 12 || back.Lines[1].Ledger.Output != 10 {
		t.Errorf("report lines: %+v", back.Lines)
	}
	if _, _, err := runs.Get(ctx, second+1); !errors.Is(err, ErrNoRun) {
		t.Errorf("get an unknown run: %v, want ErrNoRun", err)
	}
}

func TestOpenRunsBadPath(t *testing.T) {
	for _, p := range []string{"", ":memory:", "file:x.db", "x.db?mode=ro"} {
		if _, err := OpenRuns(context.Background(), p); err == nil {
			t.Errorf("OpenRuns(%q): no error", p)
		}
	}
}
