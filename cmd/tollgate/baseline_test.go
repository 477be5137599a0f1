package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/alert"
	"github.com/tollgate-dev/tollgate/internal/baseline"
	"github.com/tollgate-dev/tollgate/internal/sim"
)

const cliSuite = `model: Qwen/Qwen3-8B
max_tokens: 24
repeat: 1
prompts:
  - {id: a, messages: [{role: user, content: "Can I return shoes?"}]}
  - {id: b, messages: [{role: user, content: "List five fruits."}]}
  - {id: c, prompt: "Once upon a time"}
  - {id: d, messages: [{role: user, content: "Plan a day in Paris."}]}
`

// TestBaselineCLI: run saves a file; compare against a fresh engine of the
// same seed finds the outputs unchanged; two saved runs from engines of
// different seeds compare as changed outputs, a likely new model, and a
// drift exit.
func TestBaselineCLI(t *testing.T) {
	dir := t.TempDir()
	suite := filepath.Join(dir, "suite.yaml")
	writeTestFile(t, suite, cliSuite)
	store := filepath.Join(dir, "baselines")
	cfg := func(seed int64) sim.Config { return sim.Config{Seed: seed, DecodeBase: time.Millisecond} }

	out, errOut, err := runCmd(t, "baseline", "run", "--suite", suite, "--save", "v1", "--dir", store, "--base-url", startSimServer(t, cfg(1)))
	if err != nil || !strings.Contains(out, `saved baseline "v1"`) {
		t.Fatalf("baseline run: %v\n%s%s", err, out, errOut)
	}
	out, errOut, err = runCmd(t, "baseline", "compare", "v1", "--suite", suite, "--dir", store, "--base-url", startSimServer(t, cfg(1)), "--format", "json")
	if err != nil && !errors.Is(err, errDrift) {
		t.Fatalf("baseline compare: %v\n%s", err, errOut)
	}
	var r baseline.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("compare JSON: %v\n%s", err, out)
	}
	if len(r.Changed) != 0 || r.ModelChanged || r.Prompts != 4 || !r.SameSuite {
		t.Errorf("same engine: %+v", r)
	}

	if _, _, err := runCmd(t, "baseline", "run", "--suite", suite, "--save", "v2", "--dir", store, "--base-url", startSimServer(t, cfg(2))); err != nil {
		t.Fatal(err)
	}
	out, _, err = runCmd(t, "baseline", "compare", "v1", "--against", "v2", "--dir", store)
	if !errors.Is(err, errDrift) {
		t.Errorf("compare with another engine: error %v, want drift", err)
	}
	for _, want := range []string{"changed outputs (4 of 4)", "It looks like the model or its version changed", "DRIFT"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestBaselineFlagErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--save", "x"}, "--suite: required"},
		{[]string{"run", "--suite", "s.yaml"}, "--save: required"},
		{[]string{"run", "--suite", "s.yaml", "--save", "../x"}, `--save: baseline name "../x"`},
		{[]string{"compare", "--suite", "s.yaml"}, "baseline compare: the baseline NAME is required"},
		{[]string{"compare", "v1"}, "--suite or --against: give exactly one"},
		{[]string{"compare", "v1", "--against", "v2", "--latency-ratio", "0.5"}, "--latency-ratio: must be above 1, got 0.5"},
		{[]string{"compare", "v1", "--against", "v2", "--dir", "/nonexistent"}, `no baseline "v1" in /nonexistent`},
	} {
		_, _, err := runCmd(t, append([]string{"baseline"}, tt.args...)...)
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("baseline %v: error %v, want %q", tt.args, err, tt.want)
		}
	}
}

// TestBaselineWatchAlerts: one scheduled run against an engine that now
// answers differently raises a critical baseline_drift alert through the
// webhook notifier of tollgate's config.
func TestBaselineWatchAlerts(t *testing.T) {
	dir := t.TempDir()
	suite := filepath.Join(dir, "suite.yaml")
	writeTestFile(t, suite, cliSuite+"schedule: {every: 1h, baseline: v1}\n")
	store := filepath.Join(dir, "baselines")
	if _, _, err := runCmd(t, "baseline", "run", "--suite", suite, "--save", "v1", "--dir", store,
		"--base-url", startSimServer(t, sim.Config{Seed: 1, DecodeBase: time.Millisecond})); err != nil {
		t.Fatal(err)
	}
	hooks := make(chan alert.Alert, 4)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a alert.Alert
		if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
			t.Errorf("webhook body: %v", err)
		}
		hooks <- a
	}))
	defer hook.Close()
	cfg := filepath.Join(dir, "tollgate.yaml")
	writeTestFile(t, cfg, "notifiers:\n  - {name: hook, type: webhook, url: "+hook.URL+"}\n")
	out, errOut, err := runCmd(t, "baseline", "watch", "--suite", suite, "--runs", "1", "--config", cfg, "--dir", store,
		"--base-url", startSimServer(t, sim.Config{Seed: 2, DecodeBase: time.Millisecond}))
	if err != nil {
		t.Fatalf("watch: %v\n%s", err, errOut)
	}
	if !strings.Contains(out, "DRIFT") {
		t.Errorf("watch printed no drift:\n%s", out)
	}
	select {
	case a := <-hooks:
		if a.Rule != baseline.RuleDrift || a.Severity != alert.Critical || a.State != alert.Firing || a.Labels["baseline"] != "v1" ||
			!strings.Contains(a.Summary, "model or its version changed") {
			t.Errorf("alert %+v", a)
		}
	default:
		t.Fatal("no alert reached the webhook")
	}
}
