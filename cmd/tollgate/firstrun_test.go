package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tollgate-dev/tollgate/internal/baseline"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/sim"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
	"github.com/tollgate-dev/tollgate/internal/store/storetest"
)

// TestRequestsNoMatch: a filter that matches no row says so, naming the
// filter; "no requests recorded yet" is kept for an empty ledger.
func TestRequestsNoMatch(t *testing.T) {
	dir := t.TempDir()
	full, empty := filepath.Join(dir, "full.db"), filepath.Join(dir, "empty.db")
	for _, db := range []string{full, empty} {
		st, err := sqlite.Open(context.Background(), db, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if db == full {
			if err := st.Insert(context.Background(), store.Batch{Records: storetest.Records(0, 4)}); err != nil {
				t.Fatal(err)
			}
		}
		st.Close()
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"requests", "--db", full, "--user", "nobody"}, `no requests match --user "nobody"`},
		{[]string{"requests", "--errors", "--db", full, "--model", "none"}, `no requests match --errors --model "none"`},
		{[]string{"requests", "--db", empty}, "no requests recorded yet"},
	} {
		out, _, err := runCmd(t, tc.args...)
		if err != nil || strings.TrimSpace(out) != tc.want {
			t.Errorf("%q: err %v, output %q; want %q", tc.args, err, out, tc.want)
		}
	}
}

// TestBaselineCompareFailedRequests is the README's `baseline compare v1
// --suite suite.yaml` against a gateway that wants a key, run without one:
// every request fails, and the command says why (counted, with the first
// error and what to do) and exits "inconclusive" instead of claiming the
// model changed.
func TestBaselineCompareFailedRequests(t *testing.T) {
	dir := t.TempDir()
	suite := filepath.Join(dir, "suite.yaml")
	writeTestFile(t, suite, cliSuite)
	bdir := filepath.Join(dir, "baselines")
	cfg := shutdownConfig(t, startSimServer(t, sim.Config{Seed: 1, DecodeBase: time.Millisecond}), 0)
	cfg.Auth.Keys = []config.Key{{KeySHA256: config.HashKey("sk-test"), UserID: "u"}}
	addr, cancel, wait := startServe(t, cfg)
	defer func() {
		cancel()
		if err := wait(); err != nil {
			t.Error(err)
		}
	}()
	t.Setenv("OPENAI_API_KEY", "")
	gw := "http://" + addr + "/v1"
	if out, errOut, err := runCmd(t, "baseline", "run", "--suite", suite, "--save", "v1", "--dir", bdir, "--base-url", gw, "--api-key", "sk-test"); err != nil {
		t.Fatalf("baseline run: %v\n%s%s", err, out, errOut)
	}

	// The saved baseline gives the URL; no key this time.
	out, _, err := runCmd(t, "baseline", "compare", "v1", "--suite", suite, "--dir", bdir)
	var ex *exitError
	if !errors.As(err, &ex) || ex.code != exitInconclusive {
		t.Fatalf("compare without a key: error %v, want exit status %d (inconclusive)\n%s", err, exitInconclusive, out)
	}
	for _, want := range []string{"inconclusive: 4 of 4 requests failed: HTTP 401", "--api-key"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if !strings.Contains(out, "INCONCLUSIVE: 4 of 4 requests failed (first: HTTP 401") || strings.Contains(out, "DRIFT") || strings.Contains(out, "model or its version changed") {
		t.Errorf("report:\n%s", out)
	}

	// A run of which every request fails is not saved, and says why.
	_, _, err = runCmd(t, "baseline", "run", "--suite", suite, "--save", "v2", "--dir", bdir, "--base-url", gw)
	if err == nil || !strings.Contains(err.Error(), "HTTP 401") || !strings.Contains(err.Error(), "--api-key") {
		t.Errorf("run without a key: %v", err)
	}
	// Without any URL the client commands go to a gateway's default address.
	if u := baselineURL("", &baseline.Suite{}, ""); u != "http://127.0.0.1:8080/v1" {
		t.Errorf("default baseline URL %q", u)
	}
}

// TestBenchWarmupFailureDoesNotAbort: against a gateway that wants a key,
// bench without one reports the failed warm-up and runs anyway (old: it
// stopped at the warm-up); with the key it measures every request. The
// --header help names tollgate's own business-line header.
func TestBenchWarmupFailureDoesNotAbort(t *testing.T) {
	cfg := shutdownConfig(t, startSimServer(t, sim.Config{Seed: 1, DecodeBase: time.Millisecond}), 0)
	cfg.Auth.Keys = []config.Key{{KeySHA256: config.HashKey("sk-test"), UserID: "u"}}
	addr, cancel, wait := startServe(t, cfg)
	defer func() {
		cancel()
		if err := wait(); err != nil {
			t.Error(err)
		}
	}()
	t.Setenv("OPENAI_API_KEY", "")
	args := []string{"bench", "--base-url", "http://" + addr + "/v1", "--model", demoModel, "--num-prompts", "3", "--input-len", "8", "--output-len", "4", "--progress", "never"}

	out, errOut, err := runCmd(t, args...)
	if err == nil || !strings.Contains(err.Error(), "all 3 requests failed (first: HTTP 401") || !strings.Contains(err.Error(), "--api-key") {
		t.Errorf("without a key: error %v, want the measured requests' failure with a hint", err)
	}
	if !strings.Contains(errOut, "warm-up: 1 of 1 requests failed, each tried 3 times (first: warm-up request 0: HTTP 401") || !strings.Contains(out, "Serving Benchmark Result") {
		t.Errorf("without a key: stderr %q, stdout:\n%s", errOut, out)
	}

	out, errOut, err = runCmd(t, append(args, "--api-key", "sk-test")...)
	if err != nil || strings.Contains(errOut, "warm-up") || !strings.Contains(out, "Successful requests:                     3 ") {
		t.Errorf("with the key: %v\n%s%s", err, errOut, out)
	}

	_, errOut, _ = runCmd(t, "bench", "-h")
	if !strings.Contains(errOut, "e.g. 'X-Tollgate-Biz: bench'") || strings.Contains(errOut, "X-Biz-Line") {
		t.Errorf("--header help:\n%s", errOut)
	}
}

// TestReconcileExitStatus: reconcile's exit status follows the worst
// line's severity — 0 when the bill matches, 3 on a warning, 4 on a
// critical mismatch — and requests refused before any engine (no model,
// no tokens) make no all-zero ledger_only line.
func TestReconcileExitStatus(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "b.db")
	st, err := sqlite.Open(context.Background(), db, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	// Clean engine-counted requests only (every third storetest record is a
	// cut stream, which would explain differences), and one 401.
	recs := append(storetest.Records(0, 2), storetest.Records(3, 2)...)
	recs = append(recs, storetest.Minimal("refused", storetest.Base.Add(time.Minute)))
	if err := st.Insert(context.Background(), store.Batch{Records: recs}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	type line struct {
		Day, Model, Side string
		Ledger           struct{ Requests, Input, Cached, Output int64 }
	}
	reconcile := func(name string, lines []line, bump func(l *line)) (string, error) {
		t.Helper()
		var b strings.Builder
		b.WriteString("day,model,requests,input,cached,output\n")
		for _, l := range lines {
			bump(&l)
			fmt.Fprintf(&b, "%s,%s,%d,%d,%d,%d\n", l.Day, l.Model, l.Ledger.Requests, l.Ledger.Input, l.Ledger.Cached, l.Ledger.Output)
		}
		bill := filepath.Join(dir, name)
		writeTestFile(t, bill, b.String())
		out, _, err := runCmd(t, "reconcile", "--bill", bill, "--bill-format", "generic", "--db", db, "--no-save", "--json",
			"--map", "day=day,model=model,requests=requests,input=input,cached=cached,output=output")
		return out, err
	}
	status := func(err error) int {
		var ex *exitError
		switch {
		case err == nil:
			return 0
		case errors.As(err, &ex):
			return ex.code
		}
		t.Fatalf("reconcile failed: %v", err)
		return -1
	}

	// A bill for another model: every ledger line is ledger_only, critical.
	out, err := reconcile("probe.csv", []line{{Day: "2025-03-14", Model: "other"}}, func(*line) {})
	if got := status(err); got != exitCritical {
		t.Errorf("probe: exit status %d, want %d", got, exitCritical)
	}
	var probe struct{ Lines []line }
	if err := json.Unmarshal([]byte(out), &probe); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var ledger []line
	for _, l := range probe.Lines {
		if l.Side == "ledger_only" {
			if l.Model == "" || l.Ledger.Requests == 0 {
				t.Errorf("empty ledger_only line: %+v", l)
			}
			ledger = append(ledger, l)
		}
	}
	if len(ledger) != 2 {
		t.Fatalf("ledger lines %+v, want the two served models", ledger)
	}

	for _, tc := range []struct {
		name string
		bump func(l *line)
		want int
	}{
		{"matching.csv", func(*line) {}, 0},
		{"warning.csv", func(l *line) { l.Ledger.Input += l.Ledger.Input / 100 }, exitWarning},    // 1 %: above 0.5 %, below 2 %
		{"critical.csv", func(l *line) { l.Ledger.Output += l.Ledger.Output / 10 }, exitCritical}, // 10 %
	} {
		out, err := reconcile(tc.name, ledger, tc.bump)
		if got := status(err); got != tc.want {
			t.Errorf("%s: exit status %d (%v), want %d\n%s", tc.name, got, err, tc.want, out)
		}
	}
}

// TestRootOpensOverview: GET / on the gateway redirects to the dashboard
// (it answered 404), other methods at / stay the gateway's, and the
// dashboard opened without a page lands on Overview (it opened Requests),
// in real Chromium when it is installed.
func TestRootOpensOverview(t *testing.T) {
	cfg := shutdownConfig(t, startSimServer(t, sim.Config{Seed: 1}), 0)
	addr, cancel, wait := startServe(t, cfg)
	defer func() {
		cancel()
		if err := wait(); err != nil {
			t.Error(err)
		}
	}()
	base := "http://" + addr
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		req, _ := http.NewRequest(method, base+"/?lang=zh", nil)
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/ui/?lang=zh" {
			t.Errorf("%s /?lang=zh: %d to %q, want 302 to /ui/?lang=zh", method, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	resp, err := http.Post(base+"/", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("POST /: %d, want the gateway's 404", resp.StatusCode)
	}

	chrome := chromium()
	if chrome == "" {
		t.Skip("chromium not installed; scripts/test.sh installs Debian's chromium")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.DisableGPU)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	ctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	ctx, cancelT := context.WithTimeout(ctx, 60*time.Second)
	defer cancelT()
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/?lang=en"), chromedp.WaitVisible(chromedp.CSS(`#main[data-ready]:not([data-ready=""])`))); err != nil {
		t.Fatalf("open %s/: %v", base, err)
	}
	page, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('main').dataset.ready + ' ' + location.pathname + location.search`))
	if err != nil || page != "overview /ui/?lang=en" {
		t.Errorf("the browser opened %q (err %v), want the overview at /ui/", page, err)
	}
}
