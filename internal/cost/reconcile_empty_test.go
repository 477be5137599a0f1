package cost

import (
	"regexp"
	"strings"
	"testing"
)

// TestReconcileSkipsEmptyLedgerLines: a ledger line with nothing a
// provider could bill (requests refused before any engine, often without
// a model) is no all-zero ledger_only line; one with usage is kept, and a
// line without a model reads "-" in the table.
func TestReconcileSkipsEmptyLedgerLines(t *testing.T) {
	bill := []BillLine{{Day: "2026-11-01", Model: "m", Requests: 1, Input: 10, Output: 5}}
	ledger := []LedgerLine{
		{Day: "2026-11-01", Model: "m", Requests: 1, Input: 10, Output: 5},
		{Day: "2026-11-01", Model: ""},   // 401s: no engine, no tokens
		{Day: "2026-11-02", Model: "m2"}, // the same, with a model
		{Day: "2026-11-02", Model: "", Requests: 2, Input: 40, Output: 8},
	}
	rep := Reconcile(bill, ledger, DefaultTolerance())
	if len(rep.Lines) != 2 {
		t.Fatalf("%d lines, want the billed one and the unbilled one with usage: %+v", len(rep.Lines), rep.Lines)
	}
	if l := rep.Lines[1]; l.Side != SideLedgerOnly || l.Ledger.Requests != 2 || l.Severity != SeverityCritical {
		t.Errorf("ledger-only line %+v", l)
	}
	var out strings.Builder
	if err := rep.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^2026-11-02\s+-\s+-\s+ledger_only\s+critical`).MatchString(out.String()) {
		t.Errorf("table:\n%s", out.String())
	}
}
