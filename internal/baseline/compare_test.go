package baseline

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

func TestKS(t *testing.T) {
	for _, tt := range []struct {
		a, b []float64
		want float64
	}{
		{[]float64{1, 2, 3}, []float64{1, 2, 3}, 0},
		{[]float64{1, 2, 3}, []float64{4, 5, 6}, 1},
		{[]float64{1, 2, 3, 4}, []float64{3, 4, 5, 6}, 0.5},
		{[]float64{1, 1, 2}, []float64{1, 2, 2}, 1.0 / 3},
	} {
		if got := KS(tt.a, tt.b); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("KS(%v, %v) = %g, want %g", tt.a, tt.b, got, tt.want)
		}
	}
}

// synth is a baseline of n prompts × 3 repetitions with the given TTFT and
// TPOT (ms, spread a little), output tokens and outputs.
func synth(name string, n int, ttft, tpot float64, out func(i int) (tokens int, text string), input int) *Baseline {
	b := &Baseline{Name: name, SuiteHash: "h", ServedModels: []string{"m"}}
	for rep := range 3 {
		for i := range n {
			tok, text := out(i)
			v := tpot + float64(i%5)*0.1
			b.Samples = append(b.Samples, Sample{Prompt: fmt.Sprintf("p%02d", i), Rep: rep, OK: true,
				TTFTMS: ttft + float64(i%7)*0.2, TPOTMS: &v, InputTokens: input, OutputTokens: tok, FinishReason: "stop",
				OutputSHA256: text})
		}
	}
	return b
}

func same(i int) (int, string) { return 20 + i%4, fmt.Sprintf("out%d", i) }

func TestCompare(t *testing.T) {
	base := synth("base", 10, 30, 10, same, 50)
	tests := []struct {
		name         string
		cur          *Baseline
		drift        []string // figures that drift
		changed      int
		modelChanged bool
		reason       string
	}{
		{name: "same", cur: synth("", 10, 30, 10, same, 50)},
		{name: "noise below the ratio", cur: synth("", 10, 36, 12, same, 50)},
		{name: "decode twice as slow", cur: synth("", 10, 30, 20, same, 50), drift: []string{"tpot_ms"}, reason: "tpot_ms: median"},
		{name: "queueing", cur: synth("", 10, 60, 10, same, 50), drift: []string{"ttft_ms"}},
		{name: "one output changed", cur: synth("", 10, 30, 10, func(i int) (int, string) {
			if i == 3 {
				return 21, "other"
			}
			return same(i)
		}, 50), changed: 1, reason: "1 of 10 outputs changed"},
		{name: "longer answers everywhere", cur: synth("", 10, 30, 10, func(i int) (int, string) { return 40 + i%4, fmt.Sprintf("long%d", i) }, 50),
			drift: []string{"output_tokens"}, changed: 10, modelChanged: true, reason: "10 of 10 deterministic outputs changed"},
		{name: "new tokenizer", cur: synth("", 10, 30, 10, same, 53), modelChanged: true, reason: "10 prompts count a different number of input tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Compare(base, tt.cur, Options{})
			var drift []string
			for _, s := range r.Shifts {
				if s.Drift {
					drift = append(drift, s.Figure)
				}
			}
			if strings.Join(drift, ",") != strings.Join(tt.drift, ",") {
				t.Errorf("drifting figures %v, want %v (%+v)", drift, tt.drift, r.Shifts)
			}
			if len(r.Changed) != tt.changed || r.ModelChanged != tt.modelChanged || r.Prompts != 10 {
				t.Errorf("%d changed (want %d), model changed %v (want %v), %d prompts; reasons %v %v", len(r.Changed), tt.changed, r.ModelChanged, tt.modelChanged, r.Prompts, r.Reasons, r.ModelReasons)
			}
			wantDrift := len(tt.drift) > 0 || tt.changed > 0 || tt.modelChanged
			if r.Drift != wantDrift {
				t.Errorf("drift %v, want %v", r.Drift, wantDrift)
			}
			all := strings.Join(append(r.Reasons, r.ModelReasons...), "; ")
			if tt.reason != "" && !strings.Contains(all, tt.reason) {
				t.Errorf("reasons %q lack %q", all, tt.reason)
			}
			var out strings.Builder
			if err := WriteText(&out, r); err != nil {
				t.Fatal(err)
			}
			if wantDrift != strings.Contains(out.String(), "DRIFT") || (tt.modelChanged != strings.Contains(out.String(), "model or its version changed")) {
				t.Errorf("report:\n%s", out.String())
			}
		})
	}
}

// TestCompareUnstable: an engine that is not deterministic for a prompt
// is named, and many changed outputs there are not read as a new model.
func TestCompareUnstable(t *testing.T) {
	base := synth("base", 4, 30, 10, same, 50)
	cur := synth("", 4, 30, 10, func(i int) (int, string) { return same(i) }, 50)
	for i := range cur.Samples {
		cur.Samples[i].OutputSHA256 = fmt.Sprintf("r%d", i) // every repetition differs
	}
	r := Compare(base, cur, Options{})
	if len(r.Unstable) != 4 || r.ModelChanged || len(r.Changed) != 4 {
		t.Errorf("unstable %v, model changed %v, changed %d", r.Unstable, r.ModelChanged, len(r.Changed))
	}
}

// TestCompareFailedRun: requests that failed (no served model, no tokens,
// no output) are counted and their first error given, and never read as
// drift or a new model: the comparison is inconclusive.
func TestCompareFailedRun(t *testing.T) {
	base := synth("base", 10, 30, 10, same, 50)
	fail := func(cur *Baseline, every int) *Baseline {
		for i := range cur.Samples {
			if i%every == 0 {
				cur.Samples[i] = Sample{Prompt: cur.Samples[i].Prompt, Rep: cur.Samples[i].Rep, Error: fmt.Sprintf("HTTP 401: bad key %d", i)}
			}
		}
		return cur
	}
	allFailed := fail(synth("", 10, 30, 10, same, 50), 1)
	allFailed.ServedModels = nil
	for _, tt := range []struct {
		name    string
		cur     *Baseline
		verdict string
	}{
		{"every request failed", allFailed, "inconclusive: 30 of 30 requests failed: HTTP 401: bad key 0"},
		{"some failed", fail(synth("", 10, 30, 10, same, 50), 7), "inconclusive: 5 of 30 requests failed: HTTP 401: bad key 0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := Compare(base, tt.cur, Options{})
			if !r.Inconclusive || r.Drift || r.ModelChanged || len(r.ModelReasons) > 0 || r.Verdict != tt.verdict {
				t.Errorf("inconclusive %v, drift %v, model changed %v %v, verdict %q; want verdict %q",
					r.Inconclusive, r.Drift, r.ModelChanged, r.ModelReasons, r.Verdict, tt.verdict)
			}
			var out strings.Builder
			if err := WriteText(&out, r); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), "INCONCLUSIVE") || strings.Contains(out.String(), "DRIFT") || strings.Contains(out.String(), "model or its version changed") {
				t.Errorf("report:\n%s", out.String())
			}
		})
	}
	if r := Compare(base, synth("", 10, 30, 10, same, 50), Options{}); r.Verdict != "no drift" || r.Requests != 30 || r.Failed != 0 {
		t.Errorf("same run: verdict %q, %d of %d failed", r.Verdict, r.Failed, r.Requests)
	}
}

func TestParseSuite(t *testing.T) {
	good := `
model: m
seed: 7
repeat: 2
prompts:
  - id: a
    messages: [{role: user, content: hi}]
  - id: b
    prompt: once upon
    max_tokens: 8
`
	s, err := ParseSuite([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if *s.Temperature != 0 || *s.Seed != 7 || s.Repeat != 2 || s.MaxTokens != 256 {
		t.Errorf("suite %+v", s)
	}
	path, body := s.body(s.Prompts[1])
	if path != "/completions" || !strings.Contains(string(body), `"max_tokens":8`) || !strings.Contains(string(body), `"temperature":0`) ||
		!strings.Contains(string(body), `"seed":7`) || !strings.Contains(string(body), `"include_usage":true`) {
		t.Errorf("body %s %s", path, body)
	}
	for _, tt := range []struct{ in, want string }{
		{"model: m\nprompts: [{id: a, prompt: x}]\ntemprature: 0\n", "field temprature not found"},
		{"prompts: [{id: a, prompt: x}]\n", "model: required"},
		{"model: m\n", "prompts: at least one is required"},
		{"model: m\nprompts: [{prompt: x}]\n", "prompts[0].id: required"},
		{"model: m\nprompts: [{id: a, prompt: x}, {id: a, prompt: y}]\n", `prompts[1].id: "a" used twice`},
		{"model: m\nprompts: [{id: a}]\n", "prompts[0] (a): exactly one of messages and prompt"},
		{"model: m\nrepeat: -1\nprompts: [{id: a, prompt: x}]\n", "repeat: must be at least 1, got -1"},
		{"model: m\nprompts: [{id: a, messages: [{content: x}]}]\n", "prompts[0].messages[0].role: required"},
	} {
		_, err := ParseSuite([]byte(tt.in))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want %q", tt.in, err, tt.want)
		}
	}
}
