package billing

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/cost"
	"github.com/tollgate-dev/tollgate/internal/record"
)

// TestCacheWritesRerateAndReconcile: requests with Anthropic cache reads
// and writes, stored in a real ledger, are re-rated with cache-write
// prices to the nano, and reconcile with a bill in Anthropic's convention
// (input without cache reads or writes) with nothing unexplained.
func TestCacheWritesRerateAndReconcile(t *testing.T) {
	s := open(t)
	day := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
	model := "claude-sonnet-4-5-20250929"
	var recs []*record.Record
	for i := range 4 {
		// 1234 uncached + 40960 read + 5678 written (2222 for 1 hour).
		r := rec("anthropic", model, day.Add(time.Duration(i)*time.Minute), 47872, 40960, 789)
		r.Usage.CacheWriteTokens, r.Usage.CacheWrite1hTokens = 5678, 2222
		recs = append(recs, r)
	}
	insert(t, s, recs...)

	tbl := table(t, "prices:\n  - {model: claude-sonnet-4-5*, currency: USD, input: 3, cached_input: 0.30, cache_write: 3.75, cache_write_1h: 6, output: 15}\n")
	from, to := day.Truncate(24*time.Hour), day.Truncate(24*time.Hour).AddDate(0, 0, 1)
	if n, err := Rerate(context.Background(), s, tbl, from, to); err != nil || n != 4 {
		t.Fatalf("re-rated %d (err %v), want 4", n, err)
	}
	// 1234·3 + 40960·0.30 + 3456·3.75 + 2222·6 + 789·15 = 54117 USD per 1M
	// (internal/cost TestRateAnthropicCacheWrites).
	for id, c := range costs(t, s, from, to) {
		if c.Nanos != 54_117_000 || c.Currency != "USD" {
			t.Errorf("%s: %+v, want 54117000 nanos USD", id, c)
		}
	}

	bill := "usage_date_utc,model,uncached_input_tokens,cache_read_input_tokens,cache_creation_5m_input_tokens,cache_creation_1h_input_tokens,output_tokens,cost_usd\n" +
		"2026-11-20," + model + ",4936,163840,13824,8888,3156,0.216468\n"
	lines, err := cost.ParseGenericCSV(strings.NewReader(bill), cost.ColumnMap{Day: "usage_date_utc", Model: "model", Input: "uncached_input_tokens",
		Cached: "cache_read_input_tokens", CacheWrite: "cache_creation_5m_input_tokens+cache_creation_1h_input_tokens", Output: "output_tokens",
		Cost: "cost_usd", CostCurrency: "USD"})
	if err != nil {
		t.Fatal(err)
	}
	ledger, err := LedgerLines(context.Background(), s, from, to)
	if err != nil {
		t.Fatal(err)
	}
	rep := cost.Reconcile(lines, ledger, cost.DefaultTolerance())
	if len(rep.Lines) != 1 {
		t.Fatalf("lines %+v", rep.Lines)
	}
	ln := rep.Lines[0]
	if ln.Unexplained != (cost.Counts{Requests: -4}) || ln.BillCacheWrite != 22712 {
		t.Errorf("unexplained %+v (the bill has no request count), bill cache writes %d", ln.Unexplained, ln.BillCacheWrite)
	}
	if ln.LedgerCost == nil || ln.BillCost == nil || *ln.LedgerCost != *ln.BillCost {
		t.Errorf("ledger cost %v, bill cost %v: want equal", ln.LedgerCost, ln.BillCost)
	}
}
