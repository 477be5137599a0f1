package alert

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/window"
)

// Config is the `alerts:` section of the configuration.
type Config struct {
	// Interval between evaluations (default 30 s).
	Interval time.Duration `yaml:"interval"`
	// Defaults adds the built-in rules from the seeds (DefaultRules);
	// a rule of the config with the same name replaces a built-in one.
	// On unless set to false.
	Defaults *bool `yaml:"defaults"`
	// Disable names built-in rules to leave out.
	Disable []string `yaml:"disable"`
	Rules   []Rule   `yaml:"rules"`
	// Repeat is how often a firing alert is sent again while it lasts
	// (default 4 h; 0 in the config keeps the default).
	Repeat time.Duration `yaml:"repeat"`
	// Runaway is the runaway-spend rule (on unless disabled).
	Runaway Runaway `yaml:"runaway"`
	// YoungMin is the least history before a baseline rule's shortest
	// window that a young baseline rests on, the first minute left out
	// (default 5m: baseline rules judge from 11 minutes of history on).
	// See docs/metrics.md.
	YoungMin time.Duration `yaml:"young_min"`
}

// Runaway is the rule on each API key's tokens per window against its
// own usual rate — a script looping without an exit condition is caught
// in minutes, before its daily quota — and, for a key without that much
// history, against an absolute ceiling. Zero fields take the defaults.
type Runaway struct {
	Disabled bool `yaml:"disabled"`
	// Window is the period judged (default 5m).
	Window time.Duration `yaml:"window"`
	// Usual is how far back the key's usual rate is read, before the
	// window (default 1h); from YoungMin of the key's history on.
	Usual time.Duration `yaml:"usual"`
	// Warning and Critical are factors of the usual rate (10 and 50).
	Warning  float64 `yaml:"warning"`
	Critical float64 `yaml:"critical"`
	// MinTokens in the window for a key to be judged against its usual
	// rate at all (default 50,000): a quiet key tripling is no runaway.
	MinTokens int64 `yaml:"min_tokens"`
	// Ceiling is the tokens per window a key without history may use
	// before a warning (default 1,000,000).
	Ceiling int64 `yaml:"ceiling"`
}

// Effective is the runaway rule with its defaults filled in.
func (r Runaway) Effective() Runaway { return r.withDefaults() }

// RunawayRule is the name of the runaway-spend rule's alerts.
const RunawayRule = "runaway_spend"

func (r Runaway) withDefaults() Runaway {
	r.Window = cmp.Or(r.Window, 5*time.Minute)
	r.Usual = cmp.Or(r.Usual, time.Hour)
	r.Warning = cmp.Or(r.Warning, 20)
	r.Critical = cmp.Or(r.Critical, 50)
	r.MinTokens = cmp.Or(r.MinTokens, 50000)
	r.Ceiling = cmp.Or(r.Ceiling, 1000000)
	return r
}

func (r Runaway) validate(p string) error {
	var errs []error
	bad := func(f, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", p, f, fmt.Sprintf(format, a...)))
	}
	if r.Window < 0 || r.Window%time.Minute != 0 {
		bad("window", "%v: want whole minutes", r.Window)
	}
	if r.Usual < 0 || r.Usual%time.Minute != 0 {
		bad("usual", "%v: want whole minutes", r.Usual)
	}
	if (r.Warning != 0 && r.Warning <= 1) || r.Warning < 0 {
		bad("warning", "%v: a factor above 1 (10 = ten times the usual rate)", r.Warning)
	}
	if (r.Critical != 0 && r.Critical <= 1) || r.Critical < 0 {
		bad("critical", "%v: a factor above 1", r.Critical)
	}
	if d := r.withDefaults(); d.Critical < d.Warning {
		bad("critical", "%v is less severe than warning %v", d.Critical, d.Warning)
	}
	if r.MinTokens < 0 {
		bad("min_tokens", "must not be negative")
	}
	if r.Ceiling < 0 {
		bad("ceiling", "must not be negative")
	}
	return errors.Join(errs...)
}

// Rule is one alerting rule: a signal over one or more sliding windows,
// per group, against fixed levels (threshold) or against the same signal
// over an earlier window (baseline).
type Rule struct {
	Name string `yaml:"name"`
	// Signal is what is measured; see Signals.
	Signal string `yaml:"signal"`
	// By groups the series (model, biz_line, upstream, template): one
	// alert per group. A rule by upstream leaves out the requests that
	// reached no upstream (refused by the gateway itself). Where keeps
	// only series with these label values.
	By    []string          `yaml:"by"`
	Where map[string]string `yaml:"where"`
	// Windows are the sliding windows that must all breach; with a short
	// and a long one, a brief spike does not page (default 5m).
	Windows []time.Duration `yaml:"windows"`
	// Threshold levels, in the signal's unit.
	Threshold *Levels `yaml:"threshold"`
	// Baseline compares with an earlier window; its levels are factors.
	Baseline *Baseline `yaml:"baseline"`
	// Below breaches when the value is below the levels (a hit rate).
	Below bool `yaml:"below"`
	// MinRequests in every window (and baseline) for the rule to judge
	// at all: quiet hours do not page.
	MinRequests int64 `yaml:"min_requests"`
	// For is how long the breach must last before the alert fires.
	For time.Duration `yaml:"for"`
	// Currency of cost signals (default USD).
	Currency string `yaml:"currency"`
	// Summary says what it means and what to do; {{group}} is replaced by
	// the group's labels.
	Summary string `yaml:"summary"`
}

// Levels are the warning and critical levels; 0 leaves a level off.
type Levels struct {
	Warning  float64 `yaml:"warning"`
	Critical float64 `yaml:"critical"`
}

// Baseline is the earlier window a baseline rule compares with: the
// window of length Previous just before the rule's longest window began,
// or the same clock hour on each of the last SameHourDays days. Every
// window compares with that one baseline. The levels are factors of the
// baseline (default warning 1.5, critical 3).
type Baseline struct {
	Previous     time.Duration `yaml:"previous"`
	SameHourDays int           `yaml:"same_hour_days"`
	Levels       `yaml:",inline"`
}

// Signal is one measurable figure of a window.
type Signal struct {
	Name, Unit, Help string
	// sum: the value grows with the window's length (a count), so a
	// baseline over a longer window is scaled down to the window's.
	sum bool
	// quantity is the sketch the value reads, NoQuantity for counts.
	quantity window.Quantity
	// value of the stats over a window of length w; n is how many
	// requests (or samples) it rests on.
	value func(s *window.Stats, w time.Duration, currency string) (v float64, n int64)
}

// Signals lists every signal rules may use.
var Signals = func() []Signal {
	var out []Signal
	for q := range window.QuantityNames {
		qty := window.Quantity(q)
		unit := "s"
		if strings.HasSuffix(qty.String(), "_tokens") {
			unit = "tokens"
		}
		for _, p := range []float64{0.5, 0.95, 0.99} {
			out = append(out, Signal{Name: fmt.Sprintf("%s_p%g", qty, p*100), Unit: unit, Help: fmt.Sprintf("P%g of %s", p*100, qty), quantity: qty,
				// n is how many values the sketch holds (streamed
				// successes for TTFT), not how many requests there were.
				value: func(s *window.Stats, _ time.Duration, _ string) (float64, int64) {
					return s.Quantile(qty, p)
				}})
		}
	}
	ratio := func(a, b int64) float64 {
		if b == 0 {
			return math.NaN()
		}
		return float64(a) / float64(b)
	}
	return append(out,
		Signal{Name: "requests", Unit: "requests", Help: "requests that finished in the window", sum: true, quantity: window.NoQuantity, value: func(s *window.Stats, _ time.Duration, _ string) (float64, int64) {
			return float64(s.Requests), s.Requests
		}},
		Signal{Name: "error_rate", Unit: "ratio", Help: "share of requests that failed", sum: false, quantity: window.NoQuantity, value: func(s *window.Stats, _ time.Duration, _ string) (float64, int64) {
			return ratio(s.Errors, s.Requests), s.Requests
		}},
		Signal{Name: "length_share", Unit: "ratio", Help: "share of answers cut by max_tokens (finish_reason=length)", sum: false, quantity: window.NoQuantity, value: func(s *window.Stats, _ time.Duration, _ string) (float64, int64) {
			return ratio(s.FinishLength, s.Requests), s.Requests
		}},
		Signal{Name: "usage_missing_share", Unit: "ratio", Help: "share of requests whose engine reported no usage", sum: false, quantity: window.NoQuantity, value: func(s *window.Stats, _ time.Duration, _ string) (float64, int64) {
			return ratio(s.UsageMissing, s.Requests), s.Requests
		}},
		Signal{Name: "input_tokens_per_request", Unit: "tokens", Help: "average input tokens per request", sum: false, quantity: window.NoQuantity, value: func(s *window.Stats, _ time.Duration, _ string) (float64, int64) {
			return ratio(s.Input, s.Requests), s.Requests
		}},
		Signal{Name: "output_tokens_per_request", Unit: "tokens", Help: "average output tokens per request", sum: false, quantity: window.NoQuantity, value: func(s *window.Stats, _ time.Duration, _ string) (float64, int64) {
			return ratio(s.Output, s.Requests), s.Requests
		}},
		Signal{Name: "max_input_tokens", Unit: "tokens", Help: "the largest single request's input tokens", sum: false, quantity: window.NoQuantity, value: func(s *window.Stats, _ time.Duration, _ string) (float64, int64) {
			return float64(s.MaxInput), s.Requests
		}},
		Signal{Name: "tokens", Unit: "tokens", Help: "input + output tokens in the window", sum: true, quantity: window.NoQuantity, value: func(s *window.Stats, _ time.Duration, _ string) (float64, int64) {
			return float64(s.Input + s.Output), s.Requests
		}},
		Signal{Name: "cost_per_hour", Unit: "per hour", Help: "cost in the window's currency, per hour", sum: false, quantity: window.NoQuantity, value: func(s *window.Stats, w time.Duration, cur string) (float64, int64) {
			return float64(s.CostNanos[cur]) / 1e9 / w.Hours(), s.Requests
		}},
	)
}()

// SignalNamed is the signal of a name.
func SignalNamed(name string) (Signal, bool) {
	i := slices.IndexFunc(Signals, func(s Signal) bool { return s.Name == name })
	if i < 0 {
		return Signal{}, false
	}
	return Signals[i], true
}

// Validate checks the rules, naming the YAML path of what is wrong.
func (c *Config) Validate(path string) error {
	var errs []error
	bad := func(p, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", p, fmt.Sprintf(format, a...)))
	}
	if c.Interval < 0 {
		bad(path+".interval", "must not be negative")
	}
	if c.YoungMin < 0 || c.YoungMin%time.Minute != 0 {
		bad(path+".young_min", "%v: want whole minutes", c.YoungMin)
	}
	if err := c.Runaway.validate(path + ".runaway"); err != nil {
		errs = append(errs, err)
	}
	names := map[string]bool{}
	for _, n := range c.Disable {
		if !slices.ContainsFunc(DefaultRules, func(r Rule) bool { return r.Name == n }) {
			bad(path+".disable", "no built-in rule %q", n)
		}
	}
	for i, r := range c.Rules {
		p := fmt.Sprintf("%s.rules[%d]", path, i)
		if r.Name == "" {
			bad(p+".name", "required")
		} else if names[r.Name] {
			bad(p+".name", "%q used twice", r.Name)
		}
		names[r.Name] = true
		if err := r.validate(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (r Rule) validate(p string) error {
	var errs []error
	bad := func(f, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", p, f, fmt.Sprintf(format, a...)))
	}
	if _, ok := SignalNamed(r.Signal); !ok {
		names := make([]string, len(Signals))
		for i, s := range Signals {
			names[i] = s.Name
		}
		bad("signal", "unknown signal %q; one of %s", r.Signal, strings.Join(names, ", "))
	}
	for _, l := range r.By {
		if !slices.Contains(window.Labels, l) {
			bad("by", "unknown label %q; one of %s", l, strings.Join(window.Labels, ", "))
		}
	}
	for l := range r.Where {
		if !slices.Contains(window.Labels, l) {
			bad("where", "unknown label %q; one of %s", l, strings.Join(window.Labels, ", "))
		}
	}
	for i, w := range r.Windows {
		if w < time.Minute || w%time.Minute != 0 {
			bad(fmt.Sprintf("windows[%d]", i), "%v: want whole minutes, at least 1m", w)
		}
	}
	switch {
	case (r.Threshold == nil) == (r.Baseline == nil):
		bad("threshold", "set exactly one of threshold and baseline")
	case r.Threshold != nil && r.Threshold.Warning == 0 && r.Threshold.Critical == 0:
		bad("threshold", "set warning, critical or both")
	case r.Baseline != nil:
		b := r.Baseline
		if (b.Previous > 0) == (b.SameHourDays > 0) {
			bad("baseline", "set exactly one of previous and same_hour_days")
		}
		if b.Previous < 0 || b.Previous%time.Minute != 0 {
			bad("baseline.previous", "%v: want whole minutes", b.Previous)
		}
		if b.SameHourDays < 0 || b.SameHourDays > 60 {
			bad("baseline.same_hour_days", "%d: want 1–60", b.SameHourDays)
		}
		switch {
		case r.Below && (b.Warning == 0 && b.Critical == 0):
			bad("baseline", "a below rule needs its factors (e.g. warning: 0.5, critical: 0.2)")
		case r.Below && (b.Warning < 0 || b.Warning >= 1 || b.Critical < 0 || b.Critical >= 1):
			bad("baseline", "factors of a below rule must be between 0 and 1 (0.5 = half the baseline)")
		case r.Below && b.Warning != 0 && b.Critical != 0 && b.Critical > b.Warning:
			bad("baseline.critical", "%v is less severe than warning %v", b.Critical, b.Warning)
		case !r.Below && ((b.Warning != 0 && b.Warning <= 1) || (b.Critical != 0 && b.Critical <= 1) || b.Warning < 0 || b.Critical < 0):
			bad("baseline", "factors must be above 1 (1.5 = 50 %% above the baseline)")
		case !r.Below && b.Warning != 0 && b.Critical != 0 && b.Critical < b.Warning:
			bad("baseline.critical", "%v is less severe than warning %v", b.Critical, b.Warning)
		}
	}
	if t := r.Threshold; t != nil && t.Warning != 0 && t.Critical != 0 {
		if (!r.Below && t.Critical < t.Warning) || (r.Below && t.Critical > t.Warning) {
			bad("threshold.critical", "%v is less severe than warning %v", t.Critical, t.Warning)
		}
	}
	if r.MinRequests < 0 {
		bad("min_requests", "must not be negative")
	}
	if r.For < 0 {
		bad("for", "must not be negative")
	}
	return errors.Join(errs...)
}

// withDefaults fills a rule's unset fields.
func (r Rule) withDefaults() Rule {
	if len(r.Windows) == 0 {
		r.Windows = []time.Duration{5 * time.Minute}
	}
	if r.Currency == "" {
		r.Currency = "USD"
	}
	if b := r.Baseline; b != nil && b.Warning == 0 && b.Critical == 0 {
		nb := *b
		nb.Warning, nb.Critical = 1.5, 3
		r.Baseline = &nb
	}
	return r
}

// Effective is the rule set the engine runs: the built-in rules (unless
// turned off or disabled), replaced or extended by the configured ones.
func (c *Config) Effective() []Rule {
	var out []Rule
	if c.Defaults == nil || *c.Defaults {
		for _, r := range DefaultRules {
			if !slices.Contains(c.Disable, r.Name) && !slices.ContainsFunc(c.Rules, func(o Rule) bool { return o.Name == r.Name }) {
				out = append(out, r.withDefaults())
			}
		}
	}
	for _, r := range c.Rules {
		out = append(out, r.withDefaults())
	}
	return out
}

var (
	shortLong = []time.Duration{5 * time.Minute, time.Hour}
	factors   = &Baseline{Previous: 30 * time.Minute, Levels: Levels{Warning: 1.5, Critical: 3}}
)

// DefaultRules are the seeds' alerts (seed 000 §2, seed 001 §3–4).
var DefaultRules = []Rule{
	{Name: "ttft_p99_baseline", Signal: "ttft_p99", By: []string{"model"}, Windows: shortLong, Baseline: factors, MinRequests: 50, For: 2 * time.Minute,
		Summary: "TTFT P99 of {{group}} is far above the half hour before: look at prompt sizes (prefill) and engine queueing."},
	{Name: "tpot_p99_baseline", Signal: "tpot_p99", By: []string{"model"}, Windows: shortLong, Baseline: factors, MinRequests: 50, For: 2 * time.Minute,
		Summary: "Time per output token (P99) of {{group}} is far above the half hour before: the engine's batch is overloaded or the KV cache is full."},
	{Name: "e2e_p99_baseline", Signal: "e2e_p99", By: []string{"model"}, Windows: shortLong, Baseline: factors, MinRequests: 50, For: 2 * time.Minute,
		Summary: "End-to-end P99 of {{group}} is far above the half hour before."},
	{Name: "ttft_p99_daily", Signal: "ttft_p99", By: []string{"model"}, Windows: []time.Duration{time.Hour},
		Baseline: &Baseline{SameHourDays: 14, Levels: Levels{Warning: 1.5, Critical: 3}}, MinRequests: 200, For: 10 * time.Minute,
		Summary: "TTFT P99 of {{group}} over the last hour is far above the same hour of the last 14 days."},
	{Name: "gateway_queue_p95", Signal: "gateway_queue_p95", By: []string{"upstream"}, Threshold: &Levels{Warning: 0.5}, MinRequests: 20, For: 2 * time.Minute,
		Summary: "Requests to {{group}} wait over 500 ms (P95) in tollgate's queue: evaluate scaling out, or raise max_concurrency if the engine has room."},
	{Name: "engine_queue_p95", Signal: "engine_queue_p95", By: []string{"upstream"}, Threshold: &Levels{Warning: 0.5}, MinRequests: 20, For: 2 * time.Minute,
		Summary: "Requests wait over 500 ms (P95) in the engine's own queue at {{group}}: evaluate scaling out."},
	{Name: "error_rate", Signal: "error_rate", By: []string{"model", "upstream"}, Threshold: &Levels{Warning: 0.05, Critical: 0.2}, MinRequests: 20, For: 2 * time.Minute,
		Summary: "{{group}}: a large share of requests fails."},
	{Name: "large_request", Signal: "max_input_tokens", By: []string{"biz_line"}, Windows: []time.Duration{time.Minute}, Threshold: &Levels{Warning: 8000}, MinRequests: 1,
		Summary: "{{group}} sent a single request above 8000 input tokens: check for runaway context or set limits.max_input_tokens."},
	{Name: "biz_tokens_day_over_day", Signal: "tokens", By: []string{"biz_line"}, Windows: []time.Duration{24 * time.Hour},
		Baseline: &Baseline{Previous: 24 * time.Hour, Levels: Levels{Warning: 1.5}}, MinRequests: 100, For: 30 * time.Minute,
		Summary: "{{group}} used over 50 % more tokens in the last 24 h than the day before."},
	{Name: "input_tokens_jump_biz", Signal: "input_tokens_per_request", By: []string{"biz_line"}, Windows: shortLong,
		Baseline: &Baseline{Previous: time.Hour, Levels: Levels{Warning: 1.5, Critical: 3}}, MinRequests: 20, For: 5 * time.Minute,
		Summary: "Input tokens per request of {{group}} jumped: a prompt grew (system prompt, retrieved context, history)."},
	{Name: "input_tokens_jump_template", Signal: "input_tokens_per_request", By: []string{"template"}, Windows: shortLong,
		Baseline: &Baseline{Previous: time.Hour, Levels: Levels{Warning: 1.5, Critical: 3}}, MinRequests: 20, For: 5 * time.Minute,
		Summary: "Input tokens per request of template {{group}} jumped: the prompt grew."},
	{Name: "output_tokens_jump", Signal: "output_tokens_per_request", By: []string{"model"}, Windows: shortLong,
		Baseline: &Baseline{Previous: time.Hour, Levels: Levels{Warning: 1.5, Critical: 3}}, MinRequests: 20, For: 5 * time.Minute,
		Summary: "Output tokens per request of {{group}} jumped: the model got verbose (a new fine-tune or prompt)."},
	{Name: "length_share", Signal: "length_share", By: []string{"model", "template"}, Windows: []time.Duration{15 * time.Minute},
		Threshold: &Levels{Warning: 0.1, Critical: 0.3}, MinRequests: 20, For: 5 * time.Minute,
		Summary: "{{group}}: many answers are cut by max_tokens — raise max_tokens or shorten the answers."},
	{Name: "usage_missing_share", Signal: "usage_missing_share", By: []string{"upstream"}, Windows: []time.Duration{15 * time.Minute},
		Threshold: &Levels{Warning: 0.05}, MinRequests: 20, For: 5 * time.Minute,
		Summary: "{{group}} often reports no token usage: counts fall back to the tokenizer; check the engine and stream_options.include_usage."},
	{Name: "cost_per_hour", Signal: "cost_per_hour", Windows: []time.Duration{time.Hour},
		Baseline: &Baseline{SameHourDays: 7, Levels: Levels{Warning: 2, Critical: 4}}, MinRequests: 100, For: 15 * time.Minute,
		Summary: "Cost in the last hour is far above the same hour of the last 7 days."},
}
