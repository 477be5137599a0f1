package cost

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// Config is the cost part of tollgate's configuration:
//
//	prices:
//	  - model: gpt-4o-mini            # exact name, or a prefix ending in * (Qwen/Qwen3-*)
//	    upstream: openai              # optional: only on this upstream (beats a generic entry)
//	    effective_from: 2026-11-01    # date (00:00 UTC) or RFC 3339 time; omitted = always
//	    currency: USD                 # ISO 4217
//	    input: 0.15                   # per 1M tokens, exact decimal
//	    cached_input: 0.075           # optional, default = input
//	    cache_write: 3.75             # optional: writing the prompt cache, default = input
//	    cache_write_1h: 6.00          # optional: the 1-hour part of cache writes, default = cache_write
//	    output: 0.60
//	    reasoning: 2.40               # optional: reasoning tokens priced apart, taken out of output
//	gpu_hours:
//	  - upstream: vllm-a100
//	    effective_from: 2026-11-01
//	    currency: CNY
//	    price_per_hour: 9.80          # per GPU
//	    gpus: 4                       # default 1
//	    output_weight: 4              # default 1: an output token counts as this many input tokens
//	    cached_weight: 0.1            # default 1: a cached input token counts this much
type Config struct {
	Prices   []Price   `yaml:"prices"`
	GPUHours []GPUHour `yaml:"gpu_hours"`
}

// Price is one row of the price table. Amounts are per 1M tokens in
// Currency. Input and Output are pointers so that a forgotten price is an
// error rather than a silent zero.
type Price struct {
	Model         string   `yaml:"model" json:"model"`
	Upstream      string   `yaml:"upstream,omitempty" json:"upstream,omitempty"`
	EffectiveFrom string   `yaml:"effective_from,omitempty" json:"effective_from,omitempty"`
	Currency      string   `yaml:"currency" json:"currency"`
	Input         *Decimal `yaml:"input" json:"input"`
	CachedInput   *Decimal `yaml:"cached_input,omitempty" json:"cached_input,omitempty"`
	CacheWrite    *Decimal `yaml:"cache_write,omitempty" json:"cache_write,omitempty"`
	CacheWrite1h  *Decimal `yaml:"cache_write_1h,omitempty" json:"cache_write_1h,omitempty"`
	Output        *Decimal `yaml:"output" json:"output"`
	Reasoning     *Decimal `yaml:"reasoning,omitempty" json:"reasoning,omitempty"`
}

// GPUHour prices a self-hosted upstream by the GPU-hour; AllocateHour turns
// an hour's cost into per-request costs.
type GPUHour struct {
	Upstream      string   `yaml:"upstream" json:"upstream"`
	EffectiveFrom string   `yaml:"effective_from,omitempty" json:"effective_from,omitempty"`
	Currency      string   `yaml:"currency" json:"currency"`
	PricePerHour  *Decimal `yaml:"price_per_hour" json:"price_per_hour"` // per GPU
	GPUs          int      `yaml:"gpus,omitempty" json:"gpus,omitempty"` // 0 means 1
	OutputWeight  *Decimal `yaml:"output_weight,omitempty" json:"output_weight,omitempty"`
	CachedWeight  *Decimal `yaml:"cached_weight,omitempty" json:"cached_weight,omitempty"`
}

// maxPrice bounds a configured price at 1,000,000 units per 1M tokens (or
// per GPU-hour): far above any real price, and low enough that a year of
// tokens times it stays inside int64 nanos.
const maxPrice = Decimal(1e6) * One

// Validate checks the cost config and names the YAML path of every bad
// value, below path ("" for the top level, "cost" if nested under cost:).
func (c Config) Validate(path string) error {
	var errs []error
	seen := map[string]int{}
	for i, p := range c.Prices {
		pp := join(path, fmt.Sprintf("prices[%d]", i))
		if err := p.Validate(pp); err != nil {
			errs = append(errs, err)
			continue
		}
		from, _ := parseWhen(p.EffectiveFrom)
		k := p.Model + "\x00" + p.Upstream + "\x00" + from.String()
		if j, dup := seen[k]; dup {
			errs = append(errs, fmt.Errorf("%s: same model, upstream and effective_from as %s", pp, join(path, fmt.Sprintf("prices[%d]", j))))
		}
		seen[k] = i
	}
	seen = map[string]int{}
	for i, g := range c.GPUHours {
		gp := join(path, fmt.Sprintf("gpu_hours[%d]", i))
		if err := g.Validate(gp); err != nil {
			errs = append(errs, err)
			continue
		}
		from, _ := parseWhen(g.EffectiveFrom)
		k := g.Upstream + "\x00" + from.String()
		if j, dup := seen[k]; dup {
			errs = append(errs, fmt.Errorf("%s: same upstream and effective_from as %s", gp, join(path, fmt.Sprintf("gpu_hours[%d]", j))))
		}
		seen[k] = i
	}
	return errors.Join(errs...)
}

// Validate checks one price entry found at path (e.g. "prices[2]").
func (p Price) Validate(path string) error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", join(path, key), fmt.Sprintf(format, args...)))
	}
	switch m := p.Model; {
	case strings.TrimSpace(m) == "":
		bad("model", "must not be empty")
	case strings.Contains(strings.TrimSuffix(m, "*"), "*"):
		bad("model", "only a trailing * is allowed (Qwen/Qwen3-*); got %q", m)
	}
	if strings.Contains(p.Upstream, "*") {
		bad("upstream", "must be an upstream name, not a pattern; got %q", p.Upstream)
	}
	if _, err := parseWhen(p.EffectiveFrom); err != nil {
		bad("effective_from", "%v", err)
	}
	if err := checkCurrency(p.Currency); err != nil {
		bad("currency", "%v", err)
	}
	for _, f := range []struct {
		key      string
		v        *Decimal
		required bool
	}{{"input", p.Input, true}, {"cached_input", p.CachedInput, false},
		{"cache_write", p.CacheWrite, false}, {"cache_write_1h", p.CacheWrite1h, false}, {"output", p.Output, true}, {"reasoning", p.Reasoning, false}} {
		checkAmount(bad, f.key, f.v, f.required, "per 1M tokens")
	}
	return errors.Join(errs...)
}

// Validate checks one GPU-hour entry found at path (e.g. "gpu_hours[0]").
func (g GPUHour) Validate(path string) error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", join(path, key), fmt.Sprintf(format, args...)))
	}
	if strings.TrimSpace(g.Upstream) == "" {
		bad("upstream", "must not be empty")
	}
	if _, err := parseWhen(g.EffectiveFrom); err != nil {
		bad("effective_from", "%v", err)
	}
	if err := checkCurrency(g.Currency); err != nil {
		bad("currency", "%v", err)
	}
	checkAmount(bad, "price_per_hour", g.PricePerHour, true, "per GPU-hour")
	if g.GPUs < 0 {
		bad("gpus", "must be at least 1 (omit it for 1); got %d", g.GPUs)
	}
	for _, w := range []struct {
		key string
		v   *Decimal
	}{{"output_weight", g.OutputWeight}, {"cached_weight", g.CachedWeight}} {
		if w.v != nil && (*w.v < 0 || *w.v > 1000*One) {
			bad(w.key, "must be between 0 and 1000; got %s", *w.v)
		}
	}
	return errors.Join(errs...)
}

func checkAmount(bad func(string, string, ...any), key string, v *Decimal, required bool, unit string) {
	switch {
	case v == nil && required:
		bad(key, "is required (write 0 if it is free)")
	case v == nil:
	case *v < 0:
		bad(key, "must not be negative")
	case *v > maxPrice:
		bad(key, "must be at most %s %s; got %s", maxPrice, unit, *v)
	}
}

func checkCurrency(c string) error {
	if len(c) != 3 || strings.ToUpper(c) != c || !isLetters(c) {
		return fmt.Errorf("must be an ISO 4217 code such as USD or CNY; got %q", c)
	}
	return nil
}

func isLetters(s string) bool {
	for i := range len(s) {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}

// parseWhen reads effective_from: a date is midnight UTC, an RFC 3339 time
// is converted to UTC, empty is "since always" (the zero time).
func parseWhen(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	return time.Time{}, fmt.Errorf("must be a date (2026-11-01) or an RFC 3339 time (2026-11-01T08:00:00+08:00); got %q", s)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// Cost is what one request cost and which price entry said so. A request
// with no applicable price has the zero Cost (unrated).
type Cost struct {
	Nanos        int64  `json:"nanos"`
	Currency     string `json:"currency,omitempty"`
	PriceVersion string `json:"price_version,omitempty"`
}

// Money is the cost as an amount.
func (c Cost) Money() Money { return Money{c.Nanos, c.Currency} }

// Table is the compiled price table. It is immutable, so one Table is shared
// by every request goroutine; a config reload builds a new one. A nil *Table
// rates nothing.
type Table struct {
	prices []priceEntry
	gpus   []gpuEntry
}

type priceEntry struct {
	Price
	from            time.Time
	prefix          string // the model without its trailing *
	glob            bool
	in, cached, out uint64 // nanos per 1M tokens
	write, write1h  uint64 // cache writes (5-minute or unstated lifetime) and their 1-hour part
	reasoning       uint64
	apart           bool // reasoning priced apart
	version         string
}

type gpuEntry struct {
	GPUHour
	from    time.Time
	version string
}

// NewTable validates the config and compiles it for lookups.
func NewTable(c Config) (*Table, error) {
	if err := c.Validate(""); err != nil {
		return nil, err
	}
	t := &Table{}
	for _, p := range c.Prices {
		from, _ := parseWhen(p.EffectiveFrom)
		e := priceEntry{Price: p, from: from, in: uint64(*p.Input), out: uint64(*p.Output)}
		e.prefix, e.glob = strings.CutSuffix(p.Model, "*")
		e.cached = e.in
		if p.CachedInput != nil {
			e.cached = uint64(*p.CachedInput)
		}
		if p.Reasoning != nil {
			e.reasoning, e.apart = uint64(*p.Reasoning), true
		}
		e.write = e.in
		if p.CacheWrite != nil {
			e.write = uint64(*p.CacheWrite)
		}
		e.write1h = e.write
		if p.CacheWrite1h != nil {
			e.write1h = uint64(*p.CacheWrite1h)
		}
		e.version = version(p.Model, p.Upstream, from, p.Currency, e.in, e.cached, e.out, e.reasoning, e.apart)
		if p.CacheWrite != nil || p.CacheWrite1h != nil {
			// Only entries that price cache writes hash them, so every
			// entry written before they existed keeps its version.
			e.version = version(p.Model, p.Upstream, from, p.Currency, e.in, e.cached, e.out, e.reasoning, e.apart, e.write, e.write1h)
		}
		t.prices = append(t.prices, e)
	}
	for _, g := range c.GPUHours {
		from, _ := parseWhen(g.EffectiveFrom)
		w := g.Weights()
		h := g.HourCost()
		t.gpus = append(t.gpus, gpuEntry{GPUHour: g, from: from,
			version: version("gpu", g.Upstream, from, g.Currency, uint64(h.Nanos), uint64(w.Cached), uint64(w.Output), 0, false)})
	}
	return t, nil
}

// version is the price version stored with every rated row:
//
//	<model pattern>@<upstream or *>@<effective_from, RFC 3339 UTC, or "always">#<8 hex>
//
// e.g. "gpt-4o-mini@openai@2026-11-01T00:00:00Z#4f1c2a9e". The readable part
// says which entry priced the row; the hash is of the entry's currency and
// amounts, so that an entry edited in place (instead of a new effective_from)
// still shows up as a different version in reports.
func version(model, upstream string, from time.Time, currency string, a, b, c, d uint64, apart bool, more ...uint64) string {
	if upstream == "" {
		upstream = "*"
	}
	when := "always"
	if !from.IsZero() {
		when = from.Format(time.RFC3339Nano)
	}
	text := fmt.Appendf(nil, "%s|%d|%d|%d|%d|%t", currency, a, b, c, d, apart)
	for _, m := range more {
		text = fmt.Appendf(text, "|%d", m)
	}
	h := sha256.Sum256(text)
	return model + "@" + upstream + "@" + when + "#" + hex.EncodeToString(h[:4])
}

// Lookup finds the price entry in force for model on upstream at time at,
// and its version. Among the entries whose effective_from is not after at,
// the most specific wins: an exact model name beats a glob (a longer glob
// beats a shorter one), then an entry for this upstream beats a generic one,
// then the latest effective_from.
func (t *Table) Lookup(model, upstream string, at time.Time) (Price, string, bool) {
	e := t.lookup(model, upstream, at)
	if e == nil {
		return Price{}, "", false
	}
	return e.Price, e.version, true
}

func (t *Table) lookup(model, upstream string, at time.Time) *priceEntry {
	if t == nil {
		return nil
	}
	var best *priceEntry
	bestRank := -1
	for i := range t.prices {
		e := &t.prices[i]
		if e.from.After(at) || (e.Upstream != "" && e.Upstream != upstream) {
			continue
		}
		var rank int
		switch {
		case !e.glob && e.prefix == model:
			rank = 1 << 20 // exact beats any glob
		case e.glob && strings.HasPrefix(model, e.prefix):
			rank = len(e.prefix) // model names are far shorter than 1<<19
		default:
			continue
		}
		rank <<= 1
		if e.Upstream != "" {
			rank |= 1
		}
		if rank > bestRank || (rank == bestRank && e.from.After(best.from)) {
			best, bestRank = e, rank
		}
	}
	return best
}

// Rate prices one request's usage with the entry in force at at:
//
//	  (input − cached − cache_write)·p_input
//	+ cached·p_cached
//	+ (cache_write − cache_write_1h)·p_cache_write + cache_write_1h·p_cache_write_1h
//	+ (output − reasoning)·p_output + reasoning·p_reasoning
//
// Input holds cache reads and cache writes (record.Usage), so each input
// token is in exactly one of the three input terms; p_cached defaults to
// p_input, p_cache_write to p_input, p_cache_write_1h to p_cache_write.
// Reasoning is taken out of output only when the entry prices it apart
// (otherwise reasoning tokens are just output). The sum of exact products
// is divided by 1M once, rounding half up, so the only rounding is to the
// nano. Failed and cancelled requests are rated on what they consumed
// like any other. ok is false when no price applies: the row stays
// unrated (cost 0, version "").
func (t *Table) Rate(u record.Usage, model, upstream string, at time.Time) (Cost, bool) {
	e := t.lookup(model, upstream, at)
	if e == nil {
		return Cost{}, false
	}
	// Clamp what breaks the invariants (cached + cache_write ≤ input,
	// cache_write_1h ≤ cache_write, reasoning ≤ output) instead of
	// charging negative token counts or a token twice.
	in := max(u.InputTokens, 0)
	cached := min(max(u.CachedInputTokens, 0), in)
	write := min(max(u.CacheWriteTokens, 0), in-cached)
	write1h := min(max(u.CacheWrite1hTokens, 0), write)
	out := max(u.OutputTokens, 0)
	reasoning := int64(0)
	if e.apart {
		reasoning = min(max(u.ReasoningTokens, 0), out)
	}
	var a acc128
	a.addMul(uint64(in-cached-write), e.in)
	a.addMul(uint64(cached), e.cached)
	a.addMul(uint64(write-write1h), e.write)
	a.addMul(uint64(write1h), e.write1h)
	a.addMul(uint64(out-reasoning), e.out)
	a.addMul(uint64(reasoning), e.reasoning)
	return Cost{Nanos: a.divRound(1e6), Currency: e.Currency, PriceVersion: e.version}, true
}

// RateRecord rates a finished record at its arrival time, so a request that
// straddles a price change is priced as it was when it came in. The served
// model is tried first because that is the name providers bill (e.g.
// gpt-4o-mini-2024-07-18); the requested model is the fallback.
func (t *Table) RateRecord(r *record.Record) (Cost, bool) {
	if r.ServedModel != "" {
		if c, ok := t.Rate(r.Usage, r.ServedModel, r.Upstream, r.Arrival); ok {
			return c, true
		}
	}
	return t.Rate(r.Usage, r.Model, r.Upstream, r.Arrival)
}

// GPUHourAt finds the GPU-hour entry in force for upstream at time at (the
// latest effective_from not after at) and its version, written like a price
// version with "gpu" as the model.
func (t *Table) GPUHourAt(upstream string, at time.Time) (GPUHour, string, bool) {
	if t == nil {
		return GPUHour{}, "", false
	}
	var best *gpuEntry
	for i := range t.gpus {
		e := &t.gpus[i]
		if e.Upstream == upstream && !e.from.After(at) && (best == nil || e.from.After(best.from)) {
			best = e
		}
	}
	if best == nil {
		return GPUHour{}, "", false
	}
	return best.GPUHour, best.version, true
}
