package baseline

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/tollgate-dev/tollgate/internal/loadgen"
)

// Options are the comparison's thresholds.
type Options struct {
	// LatencyRatio flags a latency as drifted when the current median is
	// at least this many times the baseline's (default 1.5, the alert
	// rules' warning ratio) and the two distributions differ (KS test).
	LatencyRatio float64
	// LengthShare flags output lengths as drifted when their mean moved by
	// more than this share (default 0.1) and the distributions differ.
	LengthShare float64
	// Alpha is the two-sample Kolmogorov–Smirnov test's level (default 0.01).
	Alpha float64
}

func (o Options) withDefaults() Options {
	if o.LatencyRatio <= 0 {
		o.LatencyRatio = 1.5
	}
	if o.LengthShare <= 0 {
		o.LengthShare = 0.1
	}
	if o.Alpha <= 0 || o.Alpha >= 1 {
		o.Alpha = 0.01
	}
	return o
}

// Shift compares one figure's distribution in two runs.
type Shift struct {
	Figure     string  `json:"figure"`
	BaseN      int     `json:"base_n"`
	CurN       int     `json:"cur_n"`
	BaseMedian float64 `json:"base_median"`
	CurMedian  float64 `json:"cur_median"`
	BaseP95    float64 `json:"base_p95"`
	CurP95     float64 `json:"cur_p95"`
	BaseMean   float64 `json:"base_mean"`
	CurMean    float64 `json:"cur_mean"`
	// KS is the two-sample Kolmogorov–Smirnov statistic (the largest gap
	// between the two empirical distributions) and KSCritical its
	// critical value at the chosen level: KS > KSCritical means the two
	// samples are unlikely to come from one distribution.
	KS         float64 `json:"ks"`
	KSCritical float64 `json:"ks_critical"`
	Drift      bool    `json:"drift"`
}

// Change is one prompt whose output is not what it was.
type Change struct {
	Prompt     string `json:"prompt"`
	BaseTokens int    `json:"base_output_tokens"`
	CurTokens  int    `json:"cur_output_tokens"`
	BaseFinish string `json:"base_finish_reason"`
	CurFinish  string `json:"cur_finish_reason"`
	BaseInput  int    `json:"base_input_tokens"`
	CurInput   int    `json:"cur_input_tokens"`
	BaseFailed bool   `json:"base_failed,omitempty"`
	CurFailed  bool   `json:"cur_failed,omitempty"`
}

// Report is what changed between a baseline and a later run.
type Report struct {
	Baseline  string   `json:"baseline"`
	Current   string   `json:"current"`
	SameSuite bool     `json:"same_suite"`
	Shifts    []Shift  `json:"shifts"` // TTFT, TPOT, output tokens
	Changed   []Change `json:"changed_outputs"`
	Prompts   int      `json:"prompts"`
	// Unstable lists prompts whose repetitions disagreed within one run:
	// the engine is not deterministic for them, so a changed output there
	// means less.
	Unstable     []string `json:"unstable,omitempty"`
	ModelChanged bool     `json:"model_changed"`
	ModelReasons []string `json:"model_reasons,omitempty"`
	Drift        bool     `json:"drift"`
	Reasons      []string `json:"reasons,omitempty"`
	// Requests and Failed count the current run's requests and those
	// that failed, FirstError says why the first one failed.
	Requests   int    `json:"requests"`
	Failed     int    `json:"failed"`
	FirstError string `json:"first_error,omitempty"`
	// Inconclusive is set when requests of the current run failed: what
	// failed says nothing about the model, so neither drift nor a model
	// change is concluded; Reasons still lists what the requests that
	// answered showed.
	Inconclusive bool `json:"inconclusive"`
	// Verdict is the one-line conclusion: "no drift", "drift", "model
	// changed" or "inconclusive: N of M requests failed: <first error>".
	Verdict string `json:"verdict"`
}

// Compare reports how cur differs from base. It is a pure function.
func Compare(base, cur *Baseline, o Options) *Report {
	o = o.withDefaults()
	r := &Report{Baseline: base.Name, Current: cur.Name, SameSuite: base.SuiteHash == cur.SuiteHash}
	if r.Current == "" {
		r.Current = "now"
	}
	for _, sm := range cur.Samples {
		r.Requests++
		if !sm.OK {
			if r.Failed == 0 {
				r.FirstError = sm.Error
			}
			r.Failed++
		}
	}
	if !r.SameSuite {
		r.Reasons = append(r.Reasons, "the suite differs from the baseline's (prompts, model or sampling): figures compare different requests")
	}
	figures := []struct {
		name  string
		get   func(Sample) (float64, bool)
		ratio bool
	}{
		{"ttft_ms", func(s Sample) (float64, bool) { return s.TTFTMS, s.OK }, true},
		{"tpot_ms", func(s Sample) (float64, bool) {
			if s.TPOTMS == nil {
				return 0, false
			}
			return *s.TPOTMS, s.OK
		}, true},
		{"output_tokens", func(s Sample) (float64, bool) { return float64(s.OutputTokens), s.OK }, false},
	}
	for _, f := range figures {
		sh := shift(f.name, values(base, f.get), values(cur, f.get), o.Alpha)
		significant := sh.BaseN > 0 && sh.CurN > 0 && sh.KS > sh.KSCritical
		if f.ratio {
			sh.Drift = significant && sh.BaseMedian > 0 && sh.CurMedian >= o.LatencyRatio*sh.BaseMedian
			if sh.Drift {
				r.Reasons = append(r.Reasons, fmt.Sprintf("%s: median %.2f → %.2f (×%.2f), KS %.2f > %.2f", f.name, sh.BaseMedian, sh.CurMedian, sh.CurMedian/sh.BaseMedian, sh.KS, sh.KSCritical))
			}
		} else {
			moved := sh.BaseMean > 0 && math.Abs(sh.CurMean-sh.BaseMean) > o.LengthShare*sh.BaseMean
			sh.Drift = significant && moved
			if sh.Drift {
				r.Reasons = append(r.Reasons, fmt.Sprintf("output length: mean %.1f → %.1f tokens, KS %.2f > %.2f", sh.BaseMean, sh.CurMean, sh.KS, sh.KSCritical))
			}
		}
		r.Shifts = append(r.Shifts, sh)
	}

	// Outputs, prompt by prompt: each run's first repetition.
	bFirst, bUnstable := firsts(base)
	cFirst, cUnstable := firsts(cur)
	for id := range bUnstable {
		r.Unstable = append(r.Unstable, id)
	}
	for id := range cUnstable {
		if !bUnstable[id] {
			r.Unstable = append(r.Unstable, id)
		}
	}
	sort.Strings(r.Unstable)
	inputChanged, outputChanged := 0, 0 // among prompts that answered in both runs
	ids := make([]string, 0, len(bFirst))
	for id := range bFirst {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		b := bFirst[id]
		c, ok := cFirst[id]
		if !ok {
			continue
		}
		r.Prompts++
		if b.OK && c.OK && b.InputTokens != c.InputTokens && b.InputTokens > 0 && c.InputTokens > 0 {
			inputChanged++
		}
		if b.OK && c.OK && (b.OutputSHA256 != c.OutputSHA256 || b.FinishReason != c.FinishReason) {
			outputChanged++
		}
		if b.OutputSHA256 != c.OutputSHA256 || b.OK != c.OK || b.FinishReason != c.FinishReason {
			r.Changed = append(r.Changed, Change{Prompt: id, BaseTokens: b.OutputTokens, CurTokens: c.OutputTokens,
				BaseFinish: b.FinishReason, CurFinish: c.FinishReason, BaseInput: b.InputTokens, CurInput: c.InputTokens,
				BaseFailed: !b.OK, CurFailed: !c.OK})
		}
	}
	changed := len(r.Changed)
	if r.Failed > 0 {
		changed = outputChanged // a failure is not a changed output
	}
	if changed > 0 {
		r.Reasons = append(r.Reasons, fmt.Sprintf("%d of %d outputs changed", changed, r.Prompts))
	}

	// Signs that the model (or its version, tokenizer, chat template)
	// changed, rather than the serving path.
	if bm, cm := strings.Join(base.ServedModels, ","), strings.Join(cur.ServedModels, ","); bm != cm {
		r.ModelReasons = append(r.ModelReasons, fmt.Sprintf("served model %q → %q", bm, cm))
	}
	if bf, cf := strings.Join(base.Fingerprints, ","), strings.Join(cur.Fingerprints, ","); bf != cf && bf != "" && cf != "" {
		r.ModelReasons = append(r.ModelReasons, fmt.Sprintf("system_fingerprint %q → %q", bf, cf))
	}
	if inputChanged > 0 {
		r.ModelReasons = append(r.ModelReasons, fmt.Sprintf("%d prompts count a different number of input tokens (tokenizer or chat template changed)", inputChanged))
	}
	if r.SameSuite && r.Prompts > 0 && outputChanged*2 > r.Prompts && len(r.Unstable)*2 <= r.Prompts {
		r.ModelReasons = append(r.ModelReasons, fmt.Sprintf("%d of %d deterministic outputs changed", outputChanged, r.Prompts))
	}
	switch {
	case r.Failed > 0:
		// A failed request has no served model, no tokens and no output:
		// compared with the baseline it looks like everything changed.
		r.Inconclusive, r.ModelReasons = true, nil
		r.Verdict = fmt.Sprintf("inconclusive: %d of %d requests failed: %s", r.Failed, r.Requests, r.FirstError)
	default:
		r.ModelChanged = len(r.ModelReasons) > 0
		r.Drift = len(r.Reasons) > 0 || r.ModelChanged
		r.Verdict = "no drift"
		if r.ModelChanged {
			r.Verdict = "model changed"
		} else if r.Drift {
			r.Verdict = "drift"
		}
	}
	return r
}

func values(b *Baseline, get func(Sample) (float64, bool)) []float64 {
	var v []float64
	for _, s := range b.Samples {
		if x, ok := get(s); ok {
			v = append(v, x)
		}
	}
	sort.Float64s(v)
	return v
}

// firsts returns each prompt's first successful repetition (or its first
// one) and the prompts whose successful repetitions gave different
// outputs.
func firsts(b *Baseline) (map[string]Sample, map[string]bool) {
	first := map[string]Sample{}
	unstable := map[string]bool{}
	for _, s := range b.Samples {
		f, seen := first[s.Prompt]
		switch {
		case !seen, !f.OK && s.OK:
			first[s.Prompt] = s
		case f.OK && s.OK && f.OutputSHA256 != s.OutputSHA256:
			unstable[s.Prompt] = true
		}
	}
	return first, unstable
}

func shift(name string, b, c []float64, alpha float64) Shift {
	s := Shift{Figure: name, BaseN: len(b), CurN: len(c)}
	if len(b) > 0 {
		s.BaseMedian, s.BaseP95, s.BaseMean = loadgen.Percentile(b, 50), loadgen.Percentile(b, 95), mean(b)
	}
	if len(c) > 0 {
		s.CurMedian, s.CurP95, s.CurMean = loadgen.Percentile(c, 50), loadgen.Percentile(c, 95), mean(c)
	}
	if len(b) > 0 && len(c) > 0 {
		s.KS = KS(b, c)
		n, m := float64(len(b)), float64(len(c))
		s.KSCritical = math.Sqrt(-math.Log(alpha/2)/2) * math.Sqrt((n+m)/(n*m))
	}
	return s
}

func mean(v []float64) float64 {
	var t float64
	for _, x := range v {
		t += x
	}
	return t / float64(len(v))
}

// KS is the two-sample Kolmogorov–Smirnov statistic of two sorted
// samples: the largest distance between their empirical distribution
// functions.
func KS(a, b []float64) float64 {
	var i, j int
	var d float64
	for i < len(a) && j < len(b) {
		x := min(a[i], b[j])
		for i < len(a) && a[i] == x {
			i++
		}
		for j < len(b) && b[j] == x {
			j++
		}
		d = max(d, math.Abs(float64(i)/float64(len(a))-float64(j)/float64(len(b))))
	}
	return d
}

// WriteText prints the report for people.
func WriteText(w io.Writer, r *Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "baseline %q vs %s: %d prompts compared\n\n", r.Baseline, r.Current, r.Prompts)
	fmt.Fprintf(&b, "%-14s %10s %10s %10s %10s %6s %6s  %s\n", "figure", "base p50", "now p50", "base p95", "now p95", "KS", "crit", "")
	for _, s := range r.Shifts {
		mark := ""
		if s.Drift {
			mark = "DRIFT"
		}
		fmt.Fprintf(&b, "%-14s %10.2f %10.2f %10.2f %10.2f %6.2f %6.2f  %s\n", s.Figure, s.BaseMedian, s.CurMedian, s.BaseP95, s.CurP95, s.KS, s.KSCritical, mark)
	}
	if len(r.Changed) > 0 {
		fmt.Fprintf(&b, "\nchanged outputs (%d of %d):\n", len(r.Changed), r.Prompts)
		for _, c := range r.Changed {
			fmt.Fprintf(&b, "  %-20s tokens %d → %d, finish %q → %q", c.Prompt, c.BaseTokens, c.CurTokens, c.BaseFinish, c.CurFinish)
			if c.BaseFailed || c.CurFailed {
				fmt.Fprintf(&b, " (failed: %v → %v)", c.BaseFailed, c.CurFailed)
			}
			b.WriteByte('\n')
		}
	}
	if len(r.Unstable) > 0 {
		fmt.Fprintf(&b, "\nnot deterministic within a run (outputs there say less): %s\n", strings.Join(r.Unstable, ", "))
	}
	if r.ModelChanged {
		fmt.Fprintf(&b, "\nIt looks like the model or its version changed:\n  - %s\n", strings.Join(r.ModelReasons, "\n  - "))
	}
	switch {
	case r.Inconclusive:
		fmt.Fprintf(&b, "\nINCONCLUSIVE: %d of %d requests failed (first: %s); no drift or model change is concluded from failed requests\n",
			r.Failed, r.Requests, r.FirstError)
		if len(r.Reasons) > 0 {
			fmt.Fprintf(&b, "what the requests that answered show:\n  - %s\n", strings.Join(r.Reasons, "\n  - "))
		}
	case r.Drift:
		fmt.Fprintf(&b, "\nDRIFT:\n  - %s\n", strings.Join(slices.Concat(r.Reasons, r.ModelReasons), "\n  - "))
	default:
		b.WriteString("\nno drift\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
