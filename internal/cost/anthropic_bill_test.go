package cost

import (
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// anthropicMap reads a usage export in Anthropic's convention — input
// without cache reads or writes, the writes in one column per lifetime —
// the way the Usage & Cost Admin API reports them (uncached_input_tokens,
// cache_read_input_tokens, cache_creation.ephemeral_5m_input_tokens,
// cache_creation.ephemeral_1h_input_tokens, output_tokens;
// https://docs.claude.com/en/api/usage-cost-api), flattened to CSV.
var anthropicMap = ColumnMap{Day: "usage_date_utc", Model: "model", Key: "api_key", Input: "uncached_input_tokens",
	Cached: "cache_read_input_tokens", CacheWrite: "cache_creation_5m_input_tokens + cache_creation_1h_input_tokens", Output: "output_tokens"}

// TestReconcileAnthropicCacheWrites: the ledger's input holds cache reads
// and writes; a bill leaving both out differs by exactly their sum, which
// is explained as the cached-token convention — reads alone would leave
// the writes unexplained.
func TestReconcileAnthropicCacheWrites(t *testing.T) {
	bill := readBill(t, "anthropic_bill.csv", func(f *os.File) ([]BillLine, error) { return ParseGenericCSV(f, anthropicMap) })
	if got := bill[0].CacheWrite; got != 300000 {
		t.Fatalf("cache writes summed from two columns = %d, want 300000", got)
	}
	sonnet, haiku := "claude-sonnet-4-5-20250929", "claude-haiku-4-5-20251001"
	ledger := []LedgerLine{
		// 120000 uncached + 3000000 read + 300000 written.
		{Day: "2026-11-02", Model: sonnet, Requests: 0, Input: 3420000, Cached: 3000000, Output: 90000},
		{Day: "2026-11-02", Model: haiku, Requests: 0, Input: 80000, Output: 40000},
	}
	rep := Reconcile(bill, ledger, DefaultTolerance())
	want := []outcome{
		{"2026-11-02", haiku, "", false, SideBoth, nil, Counts{}, SeverityOK},
		{"2026-11-02", sonnet, "", false, SideBoth,
			[]Explanation{{CauseCachedConvention, Counts{Input: -3300000}}}, Counts{}, SeverityExplained},
	}
	if diff := cmp.Diff(want, outcomes(rep)); diff != "" {
		t.Errorf("reconciliation (-want +got):\n%s", diff)
	}
	if rep.Lines[1].BillCacheWrite != 300000 {
		t.Errorf("bill cache writes on the line = %d", rep.Lines[1].BillCacheWrite)
	}

	// Without the bill's cache writes only the reads are explained: the
	// writes stay in plain sight.
	for i := range bill {
		bill[i].CacheWrite = 0
	}
	rep = Reconcile(bill, ledger, DefaultTolerance())
	if u := rep.Lines[1].Unexplained; u.Input != -300000 || rep.Lines[1].Severity != SeverityCritical {
		t.Errorf("without cache writes: unexplained %+v, severity %v", u, rep.Lines[1].Severity)
	}
}
