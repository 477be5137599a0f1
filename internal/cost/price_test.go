package cost

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// decodeConfig decodes strictly, the way tollgate's config loader does.
func decodeConfig(t testing.TB, b []byte) (Config, error) {
	t.Helper()
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	err := dec.Decode(&c)
	return c, err
}

func loadTable(t testing.TB) *Table {
	t.Helper()
	b, err := os.ReadFile("testdata/prices.good.yml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := decodeConfig(t, b)
	if err != nil {
		t.Fatal(err)
	}
	tab, err := NewTable(c)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

func day(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestRate(t *testing.T) {
	tab := loadTable(t)
	u := func(in, cached, out, reasoning int64, src record.Source) record.Usage {
		return record.Usage{InputTokens: in, CachedInputTokens: cached, OutputTokens: out, ReasoningTokens: reasoning, Source: src}
	}
	eng := record.SourceEngine
	cases := []struct {
		name            string
		usage           record.Usage
		model, upstream string
		at              string
		want            int64 // nanos, computed by hand in the comment
		currency        string
		version         string // prefix before the hash
	}{
		// (600·0.15 + 400·0.075 + 200·0.60) / 1M = (90 + 30 + 120) / 1M USD = 0.00024
		{"cached tokens at the old price", u(1000, 400, 200, 0, eng), "gpt-4o-mini", "openai", "2026-10-15T12:00:00Z", 240000, "USD", "gpt-4o-mini@*@2026-01-01T00:00:00Z"},
		{"last nanosecond of the old price", u(1000, 400, 200, 0, eng), "gpt-4o-mini", "openai", "2026-10-31T23:59:59.999999999Z", 240000, "USD", "gpt-4o-mini@*@2026-01-01T00:00:00Z"},
		// (600·0.10 + 400·0.05 + 200·0.40) / 1M = 160 / 1M
		{"new price from its first instant", u(1000, 400, 200, 0, eng), "gpt-4o-mini", "openai", "2026-11-01T00:00:00Z", 160000, "USD", "gpt-4o-mini@*@2026-11-01T00:00:00Z"},
		{"new price seen from another zone", u(1000, 400, 200, 0, eng), "gpt-4o-mini", "openai", "2026-11-01T09:00:00+08:00", 160000, "USD", "gpt-4o-mini@*@2026-11-01T00:00:00Z"},
		// upstream-specific (2026-01-01) beats the newer generic price: (1000·0.165 + 100·0.66) / 1M
		{"upstream-specific beats generic", u(1000, 0, 100, 0, eng), "gpt-4o-mini", "azure", "2026-11-05T00:00:00Z", 231000, "USD", "gpt-4o-mini@azure@2026-01-01T00:00:00Z"},
		// cached_input omitted: cached tokens at the input price. (1000·0.165 + 100·0.66) / 1M again
		{"cached defaults to input", u(1000, 1000, 100, 0, eng), "gpt-4o-mini", "azure", "2026-11-05T00:00:00Z", 231000, "USD", "gpt-4o-mini@azure@2026-01-01T00:00:00Z"},
		// (2000·1.10 + 500·4.40 + 1000·6.00) / 1M = (2200 + 2200 + 6000) / 1M = 0.0104
		{"reasoning priced apart", u(2000, 0, 1500, 1000, eng), "o3-mini", "openai", "2026-11-02T00:00:00Z", 10400000, "USD", "o3-mini@openai@always"},
		// generic entry has no reasoning price: (2000·1.10 + 1500·4.40) / 1M = 8800 / 1M
		{"reasoning is output when not priced apart", u(2000, 0, 1500, 1000, eng), "o3-mini", "other", "2026-11-02T00:00:00Z", 8800000, "USD", "o3-mini@*@always"},
		// (1M·2 + 0.5M·8) / 1M = 6 CNY
		{"glob", u(1000000, 0, 500000, 0, eng), "Qwen/Qwen3-32B", "vllm", "2026-11-02T00:00:00Z", 6000000000, "CNY", "Qwen/Qwen3-*@*@always"},
		// (1M·4 + 0.5M·16) / 1M = 12 CNY
		{"exact beats glob", u(1000000, 0, 500000, 0, eng), "Qwen/Qwen3-235B", "vllm", "2026-11-02T00:00:00Z", 12000000000, "CNY", "Qwen/Qwen3-235B@*@always"},
		// (1M·1 + 0.5M·1) / 1M = 1.5 CNY
		{"longer glob beats shorter", u(1000000, 0, 500000, 0, eng), "Qwen/QwQ-32B", "vllm", "2026-11-02T00:00:00Z", 1500000000, "CNY", "Qwen/*@*@always"},
		// A client cut the stream: no usage arrived, 37 chunks counted. 37·0.40 / 1M
		{"cancelled stream, chunks only", u(0, 0, 37, 0, record.SourceChunks), "gpt-4o-mini", "openai", "2026-11-02T00:00:00Z", 14800, "USD", "gpt-4o-mini@*@2026-11-01T00:00:00Z"},
		// The same with a tokenizer: (1234·0.10 + 37·0.40) / 1M = 123.4 + 14.8
		{"cancelled stream, tokenizer counts", u(1234, 0, 37, 0, record.SourceTokenizer), "gpt-4o-mini", "openai", "2026-11-02T00:00:00Z", 138200, "USD", "gpt-4o-mini@*@2026-11-01T00:00:00Z"},
		{"failed before any token", u(0, 0, 0, 0, record.SourceNone), "gpt-4o-mini", "openai", "2026-11-02T00:00:00Z", 0, "USD", "gpt-4o-mini@*@2026-11-01T00:00:00Z"},
		// 0.000001 per 1M = 0.001 nanos a token: 499 tokens round down, 500 up.
		{"rounds down below half a nano", u(499, 0, 0, 0, eng), "tiny", "", "2026-11-02T00:00:00Z", 0, "USD", "tiny@*@always"},
		{"rounds half up", u(500, 0, 0, 0, eng), "tiny", "", "2026-11-02T00:00:00Z", 1, "USD", "tiny@*@always"},
		{"rounds once, at the end", u(1500, 0, 0, 0, eng), "tiny", "", "2026-11-02T00:00:00Z", 2, "USD", "tiny@*@always"},
		// Broken invariants are clamped, never charged negative: cached→input, reasoning→output.
		{"cached above input clamped", u(100, 300, 0, 0, eng), "gpt-4o-mini", "openai", "2026-11-02T00:00:00Z", 5000, "USD", "gpt-4o-mini@*@2026-11-01T00:00:00Z"},
		{"reasoning above output clamped", u(0, 0, 10, 50, eng), "o3-mini", "openai", "2026-11-02T00:00:00Z", 60000, "USD", "o3-mini@openai@always"},
	}
	hash := regexp.MustCompile(`^#[0-9a-f]{8}$`)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := tab.Rate(c.usage, c.model, c.upstream, day(c.at))
			if !ok {
				t.Fatal("unrated")
			}
			if got.Nanos != c.want || got.Currency != c.currency {
				t.Errorf("cost = %d %s; want %d %s", got.Nanos, got.Currency, c.want, c.currency)
			}
			rest, found := strings.CutPrefix(got.PriceVersion, c.version)
			if !found || !hash.MatchString(rest) {
				t.Errorf("price version %q; want %q#<8 hex>", got.PriceVersion, c.version)
			}
		})
	}
}

func TestRateUnrated(t *testing.T) {
	tab := loadTable(t)
	usage := record.Usage{InputTokens: 10, OutputTokens: 10, Source: record.SourceEngine}
	for _, c := range []struct{ name, model, at string }{
		{"unknown model", "llama-3-8b", "2026-11-02T00:00:00Z"},
		{"before the first price", "gpt-4o-mini", "2025-12-31T23:59:59Z"},
		{"glob needs its prefix", "Qwen", "2026-11-02T00:00:00Z"},
		{"exact name is not a prefix", "gpt-4o-mini-2024-07-18", "2026-11-02T00:00:00Z"},
	} {
		if got, ok := tab.Rate(usage, c.model, "openai", day(c.at)); ok || got != (Cost{}) {
			t.Errorf("%s: rated %+v; want unrated zero cost", c.name, got)
		}
	}
	var none *Table
	if _, ok := none.Rate(usage, "gpt-4o-mini", "", day("2026-11-02T00:00:00Z")); ok {
		t.Error("a nil table rated a request")
	}
}

func TestRateRecord(t *testing.T) {
	tab := loadTable(t)
	r := &record.Record{Model: "gpt-4o-mini", ServedModel: "Qwen/Qwen3-32B", Upstream: "vllm",
		Arrival: day("2026-11-02T00:00:00Z"), Usage: record.Usage{InputTokens: 1000000}}
	if c, _ := tab.RateRecord(r); c.Nanos != 2000000000 || c.Currency != "CNY" {
		t.Errorf("served model first: %+v", c)
	}
	r.ServedModel = "gpt-4o-mini-2024-07-18" // no price for the snapshot: fall back to the requested model
	if c, _ := tab.RateRecord(r); c.Nanos != 100000000 || c.Currency != "USD" {
		t.Errorf("fallback to requested model: %+v", c)
	}
}

func TestPriceVersionChangesWithAmounts(t *testing.T) {
	p := func(out string) Config {
		in, o := MustDecimal("1"), MustDecimal(out)
		return Config{Prices: []Price{{Model: "m", Currency: "USD", EffectiveFrom: "2026-11-01", Input: &in, Output: &o}}}
	}
	a, _ := NewTable(p("2"))
	b, _ := NewTable(p("2.5")) // edited in place, same date
	_, va, _ := a.Lookup("m", "", day("2026-11-02T00:00:00Z"))
	_, vb, _ := b.Lookup("m", "", day("2026-11-02T00:00:00Z"))
	if va == vb || !strings.HasPrefix(va, "m@*@2026-11-01T00:00:00Z#") || !strings.HasPrefix(vb, "m@*@2026-11-01T00:00:00Z#") {
		t.Errorf("versions %q and %q: want same entry, different hash", va, vb)
	}
	a2, _ := NewTable(p("2"))
	if _, va2, _ := a2.Lookup("m", "", day("2026-11-02T00:00:00Z")); va2 != va {
		t.Errorf("version not stable across builds: %q vs %q", va, va2)
	}
}

func TestGPUHourAt(t *testing.T) {
	tab := loadTable(t)
	for _, c := range []struct {
		at       string
		ok       bool
		hourCost Money
	}{
		{"2026-10-31T23:00:00Z", false, Money{}},
		{"2026-11-15T10:00:00Z", true, Money{39200000000, "CNY"}}, // 9.80 × 4
		{"2026-12-01T00:00:00Z", true, Money{34000000000, "CNY"}}, // 8.50 × 4
	} {
		g, v, ok := tab.GPUHourAt("vllm-a100", day(c.at))
		if ok != c.ok || g.HourCost() != c.hourCost || (ok && !strings.HasPrefix(v, "gpu@vllm-a100@")) {
			t.Errorf("at %s: %+v %q %v; want hour cost %v", c.at, g.HourCost(), v, ok, c.hourCost)
		}
	}
	if _, _, ok := tab.GPUHourAt("openai", day("2026-11-15T10:00:00Z")); ok {
		t.Error("GPU price for an upstream without one")
	}
}

func TestConfigErrors(t *testing.T) {
	const ok = "    currency: USD\n    input: 1\n    output: 2\n"
	cases := []struct {
		name, yaml, path, want string
	}{
		{"negative price names its path",
			"prices:\n  - model: a\n" + ok + "  - model: b\n" + ok + "  - model: c\n    currency: USD\n    input: 1\n    output: -0.5\n", "",
			"prices[2].output: must not be negative"},
		{"nested under cost", "prices:\n  - model: a\n    currency: USD\n    input: 1\n    output: -1\n", "cost",
			"cost.prices[0].output: must not be negative"},
		{"forgotten price", "prices:\n  - model: a\n    currency: USD\n    output: 1\n", "",
			"prices[0].input: is required (write 0 if it is free)"},
		{"currency", "prices:\n  - model: a\n    currency: usd\n    input: 1\n    output: 1\n", "",
			`prices[0].currency: must be an ISO 4217 code such as USD or CNY; got "usd"`},
		{"empty model", "prices:\n  - model: \"\"\n" + ok, "", "prices[0].model: must not be empty"},
		{"inner star", "prices:\n  - model: Qwen/*-32B\n" + ok, "",
			`prices[0].model: only a trailing * is allowed (Qwen/Qwen3-*); got "Qwen/*-32B"`},
		{"upstream pattern", "prices:\n  - model: a\n    upstream: vllm-*\n" + ok, "",
			`prices[0].upstream: must be an upstream name, not a pattern; got "vllm-*"`},
		{"date", "prices:\n  - model: a\n    effective_from: Nov 1 2026\n" + ok, "",
			`prices[0].effective_from: must be a date (2026-11-01) or an RFC 3339 time (2026-11-01T08:00:00+08:00); got "Nov 1 2026"`},
		{"too dear", "prices:\n  - model: a\n    currency: USD\n    input: 1000000.000000001\n    output: 1\n", "",
			"prices[0].input: must be at most 1000000 per 1M tokens; got 1000000.000000001"},
		{"negative optional prices", "prices:\n  - model: a\n" + ok + "    cached_input: -1\n    reasoning: -2\n", "",
			"prices[0].cached_input: must not be negative\nprices[0].reasoning: must not be negative"},
		{"cache write prices", "prices:\n  - model: a\n" + ok + "    cache_write: -3.75\n    cache_write_1h: 1000001\n", "",
			"prices[0].cache_write: must not be negative\nprices[0].cache_write_1h: must be at most 1000000 per 1M tokens; got 1000001"},
		{"same instant twice", "prices:\n  - model: a\n    effective_from: 2026-11-01\n" + ok +
			"  - model: a\n    effective_from: 2026-11-01T08:00:00+08:00\n" + ok, "",
			"prices[1]: same model, upstream and effective_from as prices[0]"},
		{"gpu entry", "gpu_hours:\n  - upstream: \"\"\n    currency: CNY\n    gpus: -1\n    output_weight: 1001\n", "",
			"gpu_hours[0].upstream: must not be empty\ngpu_hours[0].price_per_hour: is required (write 0 if it is free)\n" +
				"gpu_hours[0].gpus: must be at least 1 (omit it for 1); got -1\ngpu_hours[0].output_weight: must be between 0 and 1000; got 1001"},
		{"gpu duplicate", "gpu_hours:\n  - {upstream: g, currency: CNY, price_per_hour: 1}\n  - {upstream: g, currency: CNY, price_per_hour: 2}\n", "",
			"gpu_hours[1]: same upstream and effective_from as gpu_hours[0]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := decodeConfig(t, []byte(c.yaml))
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			err = cfg.Validate(c.path)
			if err == nil || err.Error() != c.want {
				t.Errorf("error:\n got %v\nwant %s", err, c.want)
			}
			if c.path == "" {
				if _, err := NewTable(cfg); err == nil {
					t.Error("NewTable accepted a bad config")
				}
			}
		})
	}
}

func TestConfigDecodeErrors(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"prices:\n  - model: a\n    currency: USD\n    input: 0.1234567891\n    output: NaN\n",
			"yaml: unmarshal errors:\n  line 4: must have at most 9 decimal places; got \"0.1234567891\"\n  line 5: must be a finite decimal number; got \"NaN\""},
		{"prices:\n  - model: a\n    inptu: 1\n", "yaml: unmarshal errors:\n  line 3: field inptu not found in type cost.Price"},
	} {
		_, err := decodeConfig(t, []byte(c.yaml))
		if err == nil || err.Error() != c.want {
			t.Errorf("error:\n got %v\nwant %s", err, c.want)
		}
	}
}

func TestConfigRoundTrip(t *testing.T) {
	b, err := os.ReadFile("testdata/prices.good.yml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := decodeConfig(t, b)
	if err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodeConfig(t, out)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(c, back); diff != "" {
		t.Errorf("config changed through YAML (-before +after):\n%s", diff)
	}
}

func BenchmarkRate(b *testing.B) {
	tab := loadTable(b)
	u := record.Usage{InputTokens: 1200, CachedInputTokens: 1024, OutputTokens: 350, Source: record.SourceEngine}
	at := day("2026-11-02T00:00:00Z")
	b.ReportAllocs()
	for b.Loop() {
		tab.Rate(u, "Qwen/Qwen3-32B", "vllm", at)
	}
}
