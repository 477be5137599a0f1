package alert

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/window"
)

// TestFile is a rule unit-test file (`tollgate alerts test FILE`), in the
// spirit of `promtool test rules`: rules, synthetic traffic minute by
// minute, and the alerts expected to be firing at given times.
type TestFile struct {
	// Alerts are the rules under test, as in the config's alerts section.
	Alerts Config     `yaml:"alerts"`
	Tests  []RuleTest `yaml:"tests"`
}

// RuleTest is one scenario.
type RuleTest struct {
	Name string `yaml:"name"`
	// Interval between evaluations (default 30 s).
	Interval time.Duration `yaml:"interval"`
	Series   []Series      `yaml:"series"`
	Expect   []Expect      `yaml:"expect"`
}

// Series is synthetic traffic of one series, a value per minute. Values
// are written as in promtool: "0.2x90" is 0.2 for 90 minutes, "1+1x3" is
// 1 2 3 4, "_" is a minute without requests; the series ends with its
// last value.
type Series struct {
	Labels map[string]string `yaml:"labels"` // model, biz_line, upstream, template
	// Rate is requests per minute (default "60").
	Rate string `yaml:"rate"`
	// Per-request figures: latencies in seconds, tokens, and the shares
	// of requests that fail or end with finish_reason=length.
	TTFT         string `yaml:"ttft"`
	TPOT         string `yaml:"tpot"`
	GatewayQueue string `yaml:"gateway_queue"`
	InputTokens  string `yaml:"input_tokens"`
	OutputTokens string `yaml:"output_tokens"`
	Errors       string `yaml:"errors"`
	Length       string `yaml:"finish_length"`
	CostPerReq   string `yaml:"cost"` // USD per request
	// Jitter is the relative noise on latencies and tokens (0.1 = ±10 %
	// typical, normally distributed), from a fixed seed.
	Jitter float64 `yaml:"jitter"`
}

// Expect is the set of alerts firing at a time after the start.
type Expect struct {
	At     time.Duration   `yaml:"at"`
	Firing []ExpectedAlert `yaml:"firing"`
}

// ExpectedAlert matches a firing alert: rule, severity and labels.
type ExpectedAlert struct {
	Rule     string            `yaml:"rule"`
	Severity Severity          `yaml:"severity"`
	Labels   map[string]string `yaml:"labels"`
}

// ParseTestFile reads a test file strictly: an unknown key is an error.
func ParseTestFile(b []byte) (*TestFile, error) {
	var f TestFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("yaml: %w", err)
	}
	if err := f.Alerts.Validate("alerts"); err != nil {
		return nil, err
	}
	if len(f.Tests) == 0 {
		return nil, errors.New("tests: none")
	}
	for i, t := range f.Tests {
		for j, s := range t.Series {
			p := fmt.Sprintf("tests[%d].series[%d]", i, j)
			for l := range s.Labels {
				if !slices.Contains(window.Labels, l) {
					return nil, fmt.Errorf("%s.labels: unknown label %q; one of %s", p, l, strings.Join(window.Labels, ", "))
				}
			}
			for name, v := range s.fields() {
				if _, err := expand(v); err != nil {
					return nil, fmt.Errorf("%s.%s: %w", p, name, err)
				}
			}
		}
		for j, e := range t.Expect {
			for k, a := range e.Firing {
				if a.Severity != Warning && a.Severity != Critical {
					return nil, fmt.Errorf("tests[%d].expect[%d].firing[%d].severity: %q, want warning or critical", i, j, k, a.Severity)
				}
			}
		}
	}
	return &f, nil
}

func (s Series) fields() map[string]string {
	return map[string]string{"rate": s.Rate, "ttft": s.TTFT, "tpot": s.TPOT, "gateway_queue": s.GatewayQueue,
		"input_tokens": s.InputTokens, "output_tokens": s.OutputTokens, "errors": s.Errors, "finish_length": s.Length, "cost": s.CostPerReq}
}

// seriesToken is one token of a series: a value, an optional step and an
// optional count, as in promtool ("1e-3x5", "1+1x3", "_x4").
var seriesToken = regexp.MustCompile(`^(_|[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)([-+](?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)?(?:x([0-9]+))?$`)

// expand turns "0.2x3 1+1x2 _" into [0.2 0.2 0.2 1 2 3 NaN]; NaN is a
// minute without requests. As in promtool, "a+bxN" is N+1 values and
// "axN" N (a repeated), "_xN" N empty minutes.
func expand(s string) ([]float64, error) {
	var out []float64
	for _, tok := range strings.Fields(s) {
		m := seriesToken.FindStringSubmatch(tok)
		if m == nil || (m[1] == "_" && m[2] != "") {
			return nil, fmt.Errorf("%q: want VALUE, VALUExCOUNT, VALUE+STEPxCOUNT or _ (a minute without requests)", tok)
		}
		n := 1
		if m[3] != "" {
			var err error
			if n, err = strconv.Atoi(m[3]); err != nil || n < 1 || n > 1_000_000 {
				return nil, fmt.Errorf("%q: want a count from 1 to 1000000", tok)
			}
		}
		if m[1] == "_" {
			for range n {
				out = append(out, math.NaN())
			}
			continue
		}
		v, _ := strconv.ParseFloat(m[1], 64) // the pattern admits numbers only
		step := 0.0
		if m[2] != "" {
			if m[3] == "" {
				return nil, fmt.Errorf("%q: a step needs a count (VALUE+STEPxCOUNT)", tok)
			}
			step, _ = strconv.ParseFloat(m[2], 64)
			n++
		}
		for k := range n {
			out = append(out, v+float64(k)*step)
		}
	}
	return out, nil
}

// TestResult is the outcome of one RuleTest.
type TestResult struct {
	Name     string
	Failures []string
	// Fired lists every firing, escalation and resolution, for -v.
	Fired []string
}

// Scratch opens an empty store for one test (baselines over past days
// read closed hours back from it) and returns how to close it.
type Scratch func(i int) (window.Persister, func() error, error)

// RunTests runs every test of f, each on its own scratch store.
func RunTests(ctx context.Context, f *TestFile, scratch Scratch) ([]TestResult, error) {
	var out []TestResult
	for i, t := range f.Tests {
		st, closeSt, err := scratch(i)
		if err != nil {
			return out, err
		}
		res, err := runTest(ctx, f.Alerts, t, st)
		if cerr := closeSt(); err == nil {
			err = cerr
		}
		if err != nil {
			return out, fmt.Errorf("tests[%d] %q: %w", i, t.Name, err)
		}
		out = append(out, res)
	}
	return out, nil
}

type recorder struct{ lines []string }

func (r *recorder) Notify(_ context.Context, a Alert) {
	r.lines = append(r.lines, fmt.Sprintf("%s %s %s %s %s", a.To.Format("15:04"), a.Rule, labelString(a.Labels), a.State, a.Severity))
}

func runTest(ctx context.Context, cfg Config, t RuleTest, st window.Persister) (TestResult, error) {
	res := TestResult{Name: t.Name}
	agg := window.New(window.Config{}, st, nil, nil)
	rec := &recorder{}
	e := NewEngine(cfg, agg, Options{Notifier: rec})
	interval := t.Interval
	if interval <= 0 {
		interval = 30 * time.Second
	}
	type series struct {
		s      Series
		values map[string][]float64
		rng    *rand.Rand
	}
	var all []series
	minutes := 0
	for i, s := range t.Series {
		v := map[string][]float64{}
		for name, text := range s.fields() {
			v[name], _ = expand(text) // checked by ParseTestFile
			if name != "rate" {
				minutes = max(minutes, len(v[name]))
			}
		}
		all = append(all, series{s, v, rand.New(rand.NewPCG(uint64(i)+1, 7))})
	}
	var last time.Duration
	for _, e := range t.Expect {
		last = max(last, e.At)
	}
	minutes = max(minutes, int(last/time.Minute)+1)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	expect := slices.SortedFunc(slices.Values(t.Expect), func(a, b Expect) int { return int(a.At - b.At) })
	next := 0
	for m := range minutes {
		mStart := start.Add(time.Duration(m) * time.Minute)
		for _, s := range all {
			gen(agg, s.s, s.values, s.rng, m, mStart)
		}
		for at := mStart; at.Before(mStart.Add(time.Minute)); at = at.Add(interval) {
			agg.Flush(ctx, at)
			e.Eval(ctx, at)
			// As in promtool: what is expected at a time is the state
			// after the evaluation at that time.
			for next < len(expect) && expect[next].At <= at.Sub(start) {
				res.Failures = append(res.Failures, check(e, expect[next])...)
				next++
			}
		}
	}
	for ; next < len(expect); next++ {
		res.Failures = append(res.Failures, check(e, expect[next])...)
	}
	res.Fired = rec.lines
	return res, nil
}

// value is the series' value of a figure at minute m: the last one once
// the list ends; ok false for "_" or an absent figure.
func value(vs []float64, m int, def float64) (float64, bool) {
	if len(vs) == 0 {
		return def, true
	}
	v := vs[min(m, len(vs)-1)]
	return v, !math.IsNaN(v)
}

// gen adds minute m's requests of one series, spread over the minute.
func gen(agg *window.Aggregator, s Series, v map[string][]float64, rng *rand.Rand, m int, mStart time.Time) {
	rate, ok := value(v["rate"], m, 60)
	if !ok || rate <= 0 {
		return
	}
	if _, ok := value(v["ttft"], m, 0.2); !ok {
		return // "_": no traffic this minute
	}
	n := int(rate)
	noise := func(x float64) float64 { return max(x*(1+s.Jitter*rng.NormFloat64()), 0) }
	errShare, _ := value(v["errors"], m, 0)
	lenShare, _ := value(v["finish_length"], m, 0)
	for i := range n {
		ttft, _ := value(v["ttft"], m, 0.2)
		tpot, _ := value(v["tpot"], m, 0.02)
		gq, _ := value(v["gateway_queue"], m, 0)
		in, _ := value(v["input_tokens"], m, 500)
		out, _ := value(v["output_tokens"], m, 100)
		c, _ := value(v["cost"], m, 0)
		ttft, tpot, in, out = noise(ttft), noise(tpot), math.Round(noise(in)), math.Max(1, math.Round(noise(out)))
		queue := time.Duration(noise(gq) * float64(time.Second))
		first := queue + time.Duration(ttft*float64(time.Second))
		e2e := first + time.Duration(tpot*(out-1)*float64(time.Second))
		end := mStart.Add(time.Duration(i) * time.Minute / time.Duration(n))
		r := &record.Record{
			Model: s.Labels["model"], BizLine: s.Labels["biz_line"], Upstream: s.Labels["upstream"], TemplateID: s.Labels["template"],
			Arrival: end.Add(-e2e), Status: 200, UpstreamStatus: 200, FinishReason: "stop", Stream: true,
			Usage: record.Usage{InputTokens: int64(in), OutputTokens: int64(out), Source: record.SourceEngine},
			Cost:  record.Cost{Nanos: int64(c * 1e9), Currency: "USD"},
		}
		if r.Upstream == "" {
			r.Upstream = "default"
		}
		// Shares by a steady pattern, not by chance: 0.25 fails exactly
		// one request in four.
		if math.Floor(float64(i+1)*errShare) > math.Floor(float64(i)*errShare) {
			r.Status, r.ErrorType = 502, "upstream_error"
		}
		if math.Floor(float64(i+1)*lenShare) > math.Floor(float64(i)*lenShare) {
			r.FinishReason = "length"
		}
		r.Marks.Admitted = queue
		r.Marks.UpstreamSent = queue + time.Millisecond
		first += time.Millisecond
		e2e += time.Millisecond
		r.Marks.FirstUpstreamToken, r.Marks.FirstClientToken = first, first
		r.Marks.LastUpstreamToken, r.Marks.LastToken, r.Marks.End = e2e, e2e, e2e
		r.Finish()
		agg.Add(r)
	}
}

// check compares the firing alerts with what is expected at e.At.
func check(e *Engine, want Expect) []string {
	var firing []Alert
	for _, a := range e.Active() {
		if a.State == Firing {
			firing = append(firing, a)
		}
	}
	var fails []string
	matched := make([]bool, len(firing))
	for _, w := range want.Firing {
		found := false
		for i, a := range firing {
			if !matched[i] && a.Rule == w.Rule && a.Severity == w.Severity && subset(w.Labels, a.Labels) {
				matched[i], found = true, true
				break
			}
		}
		if !found {
			fails = append(fails, fmt.Sprintf("at %v: want %s %s %s firing; firing: %s", want.At, w.Rule, labelString(w.Labels), w.Severity, describe(firing)))
		}
	}
	for i, a := range firing {
		if !matched[i] {
			fails = append(fails, fmt.Sprintf("at %v: %s %s %s is firing, not expected (value %.4g, threshold %.4g)",
				want.At, a.Rule, labelString(a.Labels), a.Severity, a.Value, a.Threshold))
		}
	}
	return fails
}

func subset(want, got map[string]string) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

func describe(as []Alert) string {
	if len(as) == 0 {
		return "none"
	}
	var parts []string
	for _, a := range as {
		parts = append(parts, fmt.Sprintf("%s %s %s", a.Rule, labelString(a.Labels), a.Severity))
	}
	slices.Sort(parts)
	return strings.Join(slices.Compact(parts), "; ")
}
