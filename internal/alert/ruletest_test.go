package alert

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
	"github.com/tollgate-dev/tollgate/internal/window"
)

func scratch(t *testing.T) Scratch {
	return func(i int) (window.Persister, func() error, error) {
		st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), fmt.Sprintf("t%d.db", i)), nil)
		if err != nil {
			return nil, nil, err
		}
		return st, st.Close, nil
	}
}

// TestBuiltinRules runs the shipped scenarios: each seed scenario fires
// its rule at its severity, and steady noisy traffic fires nothing.
func TestBuiltinRules(t *testing.T) {
	b, err := os.ReadFile("testdata/builtin.test.yml")
	if err != nil {
		t.Fatal(err)
	}
	expectPass(t, b)
}

// expectPass runs a rule test file and fails with every failure it has.
func expectPass(t *testing.T, file []byte) {
	t.Helper()
	f, err := ParseTestFile(file)
	if err != nil {
		t.Fatal(err)
	}
	res, err := RunTests(context.Background(), f, scratch(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		for _, fail := range r.Failures {
			t.Errorf("%s: %s\n  fired: %s", r.Name, fail, strings.Join(r.Fired, "; "))
		}
	}
}

// TestRuleTestCatchesWrongExpectations: the runner fails a test whose
// expectation is wrong, both ways.
func TestRuleTestCatchesWrongExpectations(t *testing.T) {
	f, err := ParseTestFile([]byte(`
alerts:
  defaults: false
  rules:
    - {name: errs, signal: error_rate, windows: [1m], threshold: {warning: 0.1}, min_requests: 10}
tests:
  - name: expects nothing but errors fire
    series:
      - labels: {model: m}
        errors: "0.5"
    expect:
      - at: 10m
  - name: expects a firing that never comes
    series:
      - labels: {model: m}
    expect:
      - at: 10m
        firing: [{rule: errs, severity: warning}]
`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := RunTests(context.Background(), f, scratch(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || len(res[0].Failures) != 1 || !strings.Contains(res[0].Failures[0], "errs") || !strings.Contains(res[0].Failures[0], "not expected") {
		t.Errorf("first test: %+v", res[0].Failures)
	}
	if len(res[1].Failures) != 1 || !strings.Contains(res[1].Failures[0], "want errs") {
		t.Errorf("second test: %+v", res[1].Failures)
	}
}

func TestParseTestFileErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"tests: []", "tests: none"},
		{"alerts: {rules: [{name: x, signal: nope, threshold: {warning: 1}}]}\ntests: [{name: a}]", `alerts.rules[0].signal: unknown signal "nope"`},
		{"tests: [{name: a, series: [{ttft: '0.2x'}]}]", `tests[0].series[0].ttft: "0.2x": want VALUE, VALUExCOUNT`},
		{"tests: [{name: a, series: [{labels: {colour: red}}]}]", `tests[0].series[0].labels: unknown label "colour"`},
		{"tests: [{name: a, sereis: []}]", "field sereis not found"},
		{"tests: [{name: a, expect: [{at: 1m, firing: [{rule: x, severity: high}]}]}]", `tests[0].expect[0].firing[0].severity: "high"`},
	} {
		_, err := ParseTestFile([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

func TestExpand(t *testing.T) {
	for in, want := range map[string]string{
		"0.5x2 1+1x3 _ 4": "[0.5 0.5 1 2 3 4 NaN 4]",
		"1e-3x2 2.5e+1":   "[0.001 0.001 25]",
		"_x2 3-1x2":       "[NaN NaN 3 2 1]",
		".5 -2":           "[0.5 -2]",
	} {
		got, err := expand(in)
		if err != nil || fmt.Sprint(got) != want {
			t.Errorf("expand(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"0.2x", "x3", "1+1", "_+1x2", "abc", "1x0"} {
		if _, err := expand(bad); err == nil {
			t.Errorf("expand(%q) accepted", bad)
		}
	}
}

// TestBaselineBeyondMemory: a baseline that ends before the windows kept
// in memory (a 2 h window against the hour before it) is read back from
// the store, so the rule fires; steady traffic over a 24 h window does
// not drift past its day-before baseline.
func TestBaselineBeyondMemory(t *testing.T) {
	expectPass(t, []byte(`
alerts:
  defaults: false
  rules:
    - {name: long, signal: input_tokens_per_request, windows: [2h], baseline: {previous: 1h}, min_requests: 20}
    - {name: daily, signal: tokens, windows: [24h], baseline: {previous: 24h, warning: 1.1}, min_requests: 20}
tests:
  - name: a jump judged over two hours
    series:
      - labels: {model: m}
        rate: "6"
        input_tokens: "200x240 2000x80"
    expect:
      - at: 239m
      - at: 300m
        firing: [{rule: long, severity: critical}]
  - name: steady for two days
    series:
      - labels: {model: m}
        rate: "2"
    expect:
      - at: 2900m
`))
}
