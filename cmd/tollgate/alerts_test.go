package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAlertsTestCommand: `tollgate alerts test` passes a correct file,
// fails (exit status) with the failure named for a wrong one, and names
// the field of a bad one.
func TestAlertsTestCommand(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rules := `alerts:
  defaults: false
  rules:
    - {name: errs, signal: error_rate, windows: [1m], threshold: {warning: 0.1, critical: 0.4}, min_requests: 10}
`
	good := write("good.yml", rules+`tests:
  - name: half the requests fail
    series:
      - labels: {model: m}
        errors: "0x5 0.5x10"
    expect:
      - at: 4m
      - at: 9m
        firing: [{rule: errs, severity: critical}]
`)
	out, _, err := runCmd(t, "alerts", "test", "-v", good)
	if err != nil || !strings.Contains(out, "PASS  half the requests fail") || !strings.Contains(out, "errs  firing critical") {
		t.Errorf("good file: err %v, output:\n%s", err, out)
	}
	wrong := write("wrong.yml", rules+`tests:
  - name: expects a warning
    series:
      - labels: {model: m}
        errors: "0.5"
    expect:
      - at: 9m
        firing: [{rule: errs, severity: warning}]
`)
	out, _, err = runCmd(t, "alerts", "test", wrong)
	if !errors.Is(err, errTestsFailed) || !strings.Contains(out, "FAIL  expects a warning") || !strings.Contains(out, "want errs  warning firing") {
		t.Errorf("wrong file: err %v, output:\n%s", err, out)
	}
	bad := write("bad.yml", `alerts: {rules: [{name: x, signal: ttft_p99, threshold: {warning: 1}, by: [colour]}]}
tests: [{name: a}]`)
	if _, _, err := runCmd(t, "alerts", "test", bad); err == nil || !strings.Contains(err.Error(), `alerts.rules[0].by: unknown label "colour"`) {
		t.Errorf("bad file: err = %v", err)
	}
	out, _, err = runCmd(t, "alerts", "rules")
	if err != nil || !strings.Contains(out, "ttft_p99_baseline") || !strings.Contains(out, "warning ×1.5, critical ×3 the 30m before") {
		t.Errorf("alerts rules: err %v, output:\n%s", err, out)
	}
}
