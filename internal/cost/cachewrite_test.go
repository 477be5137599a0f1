package cost

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/usage"
)

// anthropicPrices are Claude Sonnet 4.5's published prices per 1M tokens
// (https://docs.claude.com/en/docs/about-claude/pricing): input $3, 5-minute
// cache writes $3.75 (1.25×), 1-hour cache writes $6 (2×), cache reads
// $0.30 (0.1×), output $15.
const anthropicPrices = `prices:
  - model: claude-sonnet-4-5*
    currency: USD
    input: 3
    cached_input: 0.30
    cache_write: 3.75
    cache_write_1h: 6
    output: 15
`

func tableOf(t *testing.T, y string) *Table {
	t.Helper()
	c, err := decodeConfig(t, []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	tab, err := NewTable(c)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// TestRateAnthropicCacheWrites rates a non-streamed Messages answer with
// cache reads and both lifetimes of cache writes, read through the usage
// parser the gateway uses, against a hand computation.
func TestRateAnthropicCacheWrites(t *testing.T) {
	body, err := os.ReadFile("testdata/anthropic_cache.json")
	if err != nil {
		t.Fatal(err)
	}
	a, err := usage.ParseMessagesBody(body)
	if err != nil {
		t.Fatal(err)
	}
	// Anthropic's input_tokens (1234) leaves out the cache: the Record's
	// input is 1234 + 5678 + 40960.
	want := record.Usage{InputTokens: 47872, CachedInputTokens: 40960, CacheWriteTokens: 5678, CacheWrite1hTokens: 2222,
		OutputTokens: 789, Source: record.SourceEngine}
	if diff := cmp.Diff(&want, a.Usage); diff != "" {
		t.Fatalf("usage (-want +got):\n%s", diff)
	}
	// By hand, in USD per 1M tokens:
	//   plain input   (47872 − 40960 − 5678) = 1234 × 3    =  3702
	//   cache reads                           40960 × 0.30 = 12288
	//   5-minute writes        (5678 − 2222) = 3456 × 3.75 = 12960
	//   1-hour writes                          2222 × 6    = 13332
	//   output                                  789 × 15   = 11835
	//                                                total = 54117 → 0.054117 USD = 54,117,000 nanos
	c, ok := tableOf(t, anthropicPrices).Rate(*a.Usage, a.Model, "anthropic", time.Now())
	if !ok {
		t.Fatal("no price for", a.Model)
	}
	if c.Nanos != 54_117_000 || c.Currency != "USD" {
		t.Errorf("cost = %d nanos %s, want 54117000 USD", c.Nanos, c.Currency)
	}
	// Every input token is rated once: the same request with no cache at
	// all costs 47872 × 3 + 789 × 15 = 155451 per 1M.
	plain := record.Usage{InputTokens: 47872, OutputTokens: 789, Source: record.SourceEngine}
	if c, _ := tableOf(t, anthropicPrices).Rate(plain, a.Model, "", time.Now()); c.Nanos != 155_451_000 {
		t.Errorf("uncached cost = %d nanos, want 155451000", c.Nanos)
	}
}

// TestRateCacheWriteDefaults: a price without cache_write rates writes as
// input, without cache_write_1h rates the 1-hour part as cache_write; usage
// breaking the invariants is clamped, never rated twice or negative.
func TestRateCacheWriteDefaults(t *testing.T) {
	const base = "prices:\n  - {model: m, currency: USD, input: 2, cached_input: 0.5, output: 8"
	u := record.Usage{InputTokens: 1000, CachedInputTokens: 300, CacheWriteTokens: 200, CacheWrite1hTokens: 50, OutputTokens: 10}
	for _, tc := range []struct {
		name, extra string
		u           record.Usage
		want        int64 // nanos
	}{
		// 500·2 + 300·0.5 + 200·2 + 10·8 = 1630
		{"writes at input", "", u, 1_630_000},
		// 500·2 + 300·0.5 + 200·2.5 + 10·8 = 1730
		{"1h at cache_write", ", cache_write: 2.5", u, 1_730_000},
		// 500·2 + 300·0.5 + 150·2.5 + 50·4 + 10·8 = 1805
		{"both", ", cache_write: 2.5, cache_write_1h: 4", u, 1_805_000},
		// writes clamped to input − cached = 0; 1h clamped to writes: 100·0.5 + 10·8 = 130
		{"writes beyond input", ", cache_write: 2.5, cache_write_1h: 4",
			record.Usage{InputTokens: 100, CachedInputTokens: 100, CacheWriteTokens: 70, CacheWrite1hTokens: 90, OutputTokens: 10}, 130_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ok := tableOf(t, base+tc.extra+"}\n").Rate(tc.u, "m", "", time.Now())
			if !ok || c.Nanos != tc.want {
				t.Errorf("cost = %d nanos (ok %t), want %d", c.Nanos, ok, tc.want)
			}
		})
	}
}

// TestVersionUnchangedWithoutCacheWrite: entries that do not price cache
// writes keep the version they had before cache writes existed, so
// re-rating with an unchanged table moves no row.
func TestVersionUnchangedWithoutCacheWrite(t *testing.T) {
	tab := loadTable(t)
	_, v, ok := tab.Lookup("gpt-4o-mini", "openai", day("2026-10-15T12:00:00Z"))
	if !ok {
		t.Fatal("no price")
	}
	// The hash of "USD|150000000|75000000|600000000|0|false", as before.
	if want := "gpt-4o-mini@*@2026-01-01T00:00:00Z#"; !strings.HasPrefix(v, want) {
		t.Fatalf("version %q", v)
	}
	p, _, _ := tab.Lookup("gpt-4o-mini", "openai", day("2026-10-15T12:00:00Z"))
	e := version(p.Model, p.Upstream, day("2026-01-01T00:00:00Z"), p.Currency, 150000000, 75000000, 600000000, 0, false)
	if e != v {
		t.Errorf("version %q, want %q", v, e)
	}
	w := tableOf(t, "prices:\n  - {model: gpt-4o-mini, effective_from: 2026-01-01, currency: USD, input: 0.15, cached_input: 0.075, output: 0.60, cache_write: 0.15}\n")
	if _, v2, _ := w.Lookup("gpt-4o-mini", "", day("2026-10-15T12:00:00Z")); v2 == v {
		t.Errorf("an entry pricing cache writes has the version of one that does not: %q", v2)
	}
}
