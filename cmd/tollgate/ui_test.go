package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/sim"
)

// chromium finds Debian's chromium, or "" when it is not installed.
func chromium() string {
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	p, _ := exec.LookPath("chromium")
	return p
}

// uiRecord is the part of the Record JSON the dashboard test compares.
type uiRecord struct {
	RequestID string `json:"request_id"`
	TraceID   string `json:"trace_id"`
	Stream    bool   `json:"stream"`
	Status    int    `json:"status"`
	Usage     struct {
		InputTokens  int64  `json:"input_tokens"`
		InputUnknown bool   `json:"input_unknown"`
		OutputTokens int64  `json:"output_tokens"`
		Source       string `json:"source"`
	} `json:"usage"`
	Timing struct {
		Arrival time.Time `json:"arrival"`
		TTFT    *float64  `json:"ttft_ms"`
		E2E     float64   `json:"e2e_ms"`
	} `json:"timing"`
	TokenTimeline [][2]float64 `json:"token_timeline"`
}

// reconLine is the part of a reconciliation line the dashboard test uses.
type reconLine struct {
	Day, Model, Side, Severity string
	Ledger                     reconCounts
	Diff, Unexplained          reconCounts
}

type reconCounts struct{ Requests, Input, Cached, Output int64 }

func (c reconCounts) tokens() int64 { return c.Input + c.Output }

// signed is how the dashboard writes a difference: +12, 0, -3.
func signed(n int64) string {
	if n > 0 {
		return "+" + strconv.FormatInt(n, 10)
	}
	return strconv.FormatInt(n, 10)
}

// sumSeries adds up the requests of every point of a /api/v1/series answer.
func sumSeries(t *testing.T, url string) string {
	t.Helper()
	var se struct {
		Series []struct {
			Points []struct{ Requests int64 }
		}
	}
	getJSON(t, url, &se)
	var n int64
	for _, s := range se.Series {
		for _, p := range s.Points {
			n += p.Requests
		}
	}
	return strconv.FormatInt(n, 10)
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// TestDashboardInBrowser drives the dashboard in headless Chromium over a
// real gateway (serve, on a temp SQLite) in front of the simulator: every
// page loads without a console error or an uncaught exception, the
// Requests → Request drill-down shows the API's numbers, Overview and
// Diagnostics count what /overview and /series count, the drill-down
// Overview → Diagnostics → Requests → Request follows the bucket's range
// through the URLs, Chinese renders
// with no untranslated key, and each page is saved as a PNG (into
// $TOLLGATE_UI_SCREENSHOTS, else a temp directory).
func TestDashboardInBrowser(t *testing.T) {
	chrome := chromium()
	if chrome == "" {
		t.Skip("chromium not installed; scripts/test.sh installs Debian's chromium")
	}
	shots := os.Getenv("TOLLGATE_UI_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}

	up := startSimServer(t, sim.Config{DecodeBase: 2 * time.Millisecond})
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "tollgate.yml")
	// Without auth keys a caller's user is "key-" and its key's hash prefix.
	aliceID := "key-" + config.HashKey("key-alice")[:12]
	yml := fmt.Sprintf(`listen: 127.0.0.1:0
store: {sqlite: {path: %s}}
upstreams:
  - {name: sim, url: %q, engine: vllm}
sampling: {normal: 1}
prices:
  - {model: "Qwen*", currency: USD, input: 0.5, output: 2}
otlp: {http_listen: %q, grpc_listen: ""}
engine_metrics: {interval: 0s}
quotas:
  users:
    %s: {daily_tokens: 1000000}
budgets:
  - {name: alice-month, scope: user, subject: %s, period: month, tokens: 50000000}
alerts:
  interval: 1s
  rules:
    - {name: ui_error_share, signal: error_rate, windows: [1m], threshold: {warning: 0.000001}, min_requests: 1}
`, filepath.Join(dir, "ui.db"), up, freePort(t), aliceID, aliceID)
	if err := os.WriteFile(cfgPath, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	addr, cancel, wait := startServe(t, cfg)
	defer func() {
		cancel()
		if err := wait(); err != nil {
			t.Error(err)
		}
	}()
	base := "http://" + addr

	// Traffic: streamed and whole answers from three users on two
	// business lines, and one request for a model nobody serves. The
	// OTLP receiver listens but the simulator sends no spans: every
	// request's engine timing stays pending (join_window, 2 min).
	sent := 0
	for i, u := range []string{"alice", "bob", "carol", "alice", "bob", "alice"} {
		stream := i%3 != 2
		body := fmt.Sprintf(`{"model":"Qwen/Qwen3-8B","messages":[{"role":"user","content":"question %d"}],"stream":%t}`, i, stream)
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer key-"+u)
		req.Header.Set("X-Tollgate-Biz", []string{"search", "chat"}[i%2])
		req.Header.Set(sim.OutputTokensHeader, strconv.Itoa(20+7*i))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.Copy(io.Discard, resp.Body) // read to the end, or the stream is a client disconnect
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %s %v", i, resp.Status, err)
		}
		sent++
	}
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"no-such-model","messages":[{"role":"user","content":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	sent++

	var list struct{ Requests []uiRecord }
	deadline := time.Now().Add(15 * time.Second)
	for {
		getJSON(t, base+"/api/v1/requests?limit=100", &list)
		if len(list.Requests) >= sent {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d records stored after 15 s", len(list.Requests), sent)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The request to drill into: a streamed success with its timeline.
	var pick *uiRecord
	for i := range list.Requests {
		r := &list.Requests[i]
		if r.Stream && r.Status == 200 {
			pick = r
			break
		}
	}
	if pick == nil {
		b, _ := json.Marshal(list.Requests)
		t.Fatalf("no streamed success in the ledger: %s", b)
	}
	var one struct{ Attempts []uiRecord }
	getJSON(t, base+"/api/v1/requests/"+pick.RequestID, &one)
	if len(one.Attempts) == 0 || len(one.Attempts[0].TokenTimeline) < 2 {
		t.Fatalf("API has no attempt with a token timeline for %s: %+v", pick.RequestID, one.Attempts)
	}
	api := one.Attempts[0]

	// Reconciliation, through the CLI against the running gateway's file:
	// first what the ledger holds (a bill of one unknown line, not kept),
	// then a bill equal to the ledger and one billing a fifth more output,
	// both kept for the Cost page.
	db := filepath.Join(dir, "ui.db")
	writeBill := func(name string, lines []reconLine, extraOutput func(int64) int64) string {
		t.Helper()
		var b strings.Builder
		b.WriteString("day,model,requests,input,cached,output\n")
		for _, l := range lines {
			fmt.Fprintf(&b, "%s,%s,%d,%d,%d,%d\n", l.Day, l.Model, l.Ledger.Requests, l.Ledger.Input, l.Ledger.Cached, extraOutput(l.Ledger.Output))
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	reconcile := func(bill string, more ...string) string {
		t.Helper()
		out, errOut, err := runCmd(t, append([]string{"reconcile", "--bill", bill, "--bill-format", "generic", "--db", db,
			"--map", "day=day,model=model,requests=requests,input=input,cached=cached,output=output"}, more...)...)
		var severity *exitError // a mismatch's exit status, not a failure
		if err != nil && !errors.As(err, &severity) {
			t.Fatalf("reconcile %s: %v\n%s", bill, err, errOut)
		}
		return out
	}
	today := time.Now().UTC().Format(time.DateOnly)
	probe := writeBill("probe.csv", []reconLine{{Day: today, Model: "no-such-model-billed"}}, func(int64) int64 { return 1 })
	var held struct{ Lines []reconLine }
	if err := json.Unmarshal([]byte(reconcile(probe, "--no-save", "--json")), &held); err != nil {
		t.Fatal(err)
	}
	var ledgerLines []reconLine
	for _, l := range held.Lines {
		if l.Side == "ledger_only" {
			ledgerLines = append(ledgerLines, l)
		}
	}
	if len(ledgerLines) == 0 {
		t.Fatalf("the ledger holds no line to reconcile: %+v", held.Lines)
	}
	reconcile(writeBill("matching.csv", ledgerLines, func(n int64) int64 { return n }))
	reconcile(writeBill("over.csv", ledgerLines, func(n int64) int64 { return n + n/5 + 1 }))

	// The browser, with every console error and uncaught exception kept.
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1360, 900), chromedp.Flag("lang", "en-US"), chromedp.Env("TZ=Asia/Shanghai"))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	ctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	ctx, cancelT := context.WithTimeout(ctx, 150*time.Second)
	defer cancelT()
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start chromium: %v", err)
	}
	var mu sync.Mutex
	var problems []string
	go func() {
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				mu.Lock()
				problems = append(problems, m.String()+" "+m.URL)
				mu.Unlock()
			}
		}
	}()
	checkClean := func(where string) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		for _, p := range problems {
			t.Errorf("%s: %s", where, p)
		}
		problems = nil
	}
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	eval := func(expr string) int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](expr))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return n
	}
	ready := func(page string) chromedp.Action[chromedp.Void] {
		return chromedp.WaitVisible(chromedp.CSS(`#main[data-ready="` + page + `"]`))
	}
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		p := filepath.Join(shots, name+".png")
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot %s", p)
	}
	// textOf is sel's text; numbers are shown with thousands separators,
	// which it drops so they compare with the API's.
	textOf := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("read %s: %v", sel, err)
		}
		return strings.ReplaceAll(strings.TrimSpace(s), ",", "")
	}
	attr := func(sel, name string) string { // "" when sel matches nothing
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q) || {getAttribute: () => ''}).getAttribute(%q) || ''`, sel, name)))
		if err != nil {
			t.Fatalf("read %s of %s: %v", name, sel, err)
		}
		return v
	}
	noKeys := func(where string) {
		t.Helper()
		text := textOf("body")
		if i := strings.Index(text, "⟦"); i >= 0 {
			t.Errorf("%s shows an untranslated key: %q", where, text[i:min(len(text), i+60)])
		}
	}
	sameMS := func(what, shown string, want float64) {
		t.Helper()
		got, err := strconv.ParseFloat(shown, 64)
		if err != nil || math.Abs(got-want) > 0.05+1e-9 {
			t.Errorf("%s shown %q, API says %.3f", what, shown, want)
		}
	}

	// Requests: one row per record, the API's numbers.
	run("requests page", chromedp.Navigate(base+"/ui/?lang=en#/requests"), ready("requests"))
	rows := eval(`document.querySelectorAll('table[data-testid=requests] tbody tr').length`)
	if rows != len(list.Requests) {
		t.Errorf("Requests page shows %d rows, the API %d", rows, len(list.Requests))
	}
	row := `tr[data-request-id="` + pick.RequestID + `"] `
	sameMS("E2E in the list", textOf(row+`[data-testid=e2e]`), pick.Timing.E2E)
	if got := textOf(row + `[data-testid=output-tokens]`); got != strconv.FormatInt(pick.Usage.OutputTokens, 10) {
		t.Errorf("output tokens in the list: %q, API %d", got, pick.Usage.OutputTokens)
	}
	if got := textOf(row + `[data-testid=input-tokens]`); got != strconv.FormatInt(pick.Usage.InputTokens, 10) {
		t.Errorf("input tokens in the list: %q, API %d", got, pick.Usage.InputTokens)
	}
	// The unknown model's request reached no engine: nobody counted its
	// input, which shows as unknown, not as 0.
	unknown := 0
	for _, r := range list.Requests {
		if r.Usage.InputUnknown {
			unknown++
			if got := textOf(`tr[data-request-id="` + r.RequestID + `"] [data-testid=input-tokens]`); got != "unknown" {
				t.Errorf("input tokens of %s (status %d, input unknown) in the list: %q, want unknown", r.RequestID, r.Status, got)
			}
		}
	}
	if unknown != 1 {
		t.Errorf("%d requests with an unknown input in the API, want the unknown model's 1", unknown)
	}
	noKeys("Requests")
	checkClean("Requests")
	shot("requests_en")

	// Filters travel in the URL: errors only leaves the unknown-model request.
	run("errors only", chromedp.Navigate(base+"/ui/?lang=en#/requests?errors=1"), ready("requests"))
	rows = eval(`document.querySelectorAll('table[data-testid=requests] tbody tr').length`)
	if rows != 1 {
		t.Errorf("errors=1 shows %d rows, want the 1 failed request", rows)
	}
	checkClean("Requests, errors only")

	// Sorted by E2E over the whole period (the server sorts, not the page):
	// the first two rows are the API's two slowest, in that order.
	var slowest struct {
		Requests []struct {
			RequestID string `json:"request_id"`
		}
	}
	getJSON(t, base+"/api/v1/requests?sort=e2e&limit=2", &slowest)
	run("sorted by e2e", chromedp.Navigate(base+"/ui/?lang=en#/requests?sort=e2e&limit=2"), ready("requests"))
	if len(slowest.Requests) != 2 || textOf(`table[data-testid=requests] tbody tr:nth-child(1) a[data-testid=request-link]`) != slowest.Requests[0].RequestID ||
		textOf(`table[data-testid=requests] tbody tr:nth-child(2) a[data-testid=request-link]`) != slowest.Requests[1].RequestID {
		t.Errorf("Requests sorted by E2E do not start with the API's slowest %d", len(slowest.Requests))
	}
	if eval(`document.querySelectorAll('[data-testid=more]').length`) != 1 {
		t.Error("a capped sorted list offers no More rows")
	}

	// Requests → Request: the whole report of the picked request.
	run("back to all", chromedp.Navigate(base+"/ui/?lang=en#/requests"), ready("requests"))
	run("open the request", chromedp.Click(chromedp.CSS(row+`a[data-testid=request-link]`)), ready("request"))
	if got := textOf(`[data-testid=request-id]`); got != pick.RequestID {
		t.Errorf("Request page is for %q, want %q", got, pick.RequestID)
	}
	sameMS("E2E", textOf(`#main [data-testid=figures] [data-testid=e2e]`), api.Timing.E2E)
	if api.Timing.TTFT != nil {
		sameMS("TTFT", textOf(`#main [data-testid=figures] [data-testid=ttft]`), *api.Timing.TTFT)
	}
	if got := textOf(`#main [data-testid=figures] [data-testid=output-tokens]`); got != strconv.FormatInt(api.Usage.OutputTokens, 10) {
		t.Errorf("output tokens: %q, API %d", got, api.Usage.OutputTokens)
	}
	if got := textOf(`[data-testid=trace-id]`); got != api.TraceID {
		t.Errorf("trace id: %q, API %q", got, api.TraceID)
	}
	if got := textOf(`[data-testid=usage-source]`); got != api.Usage.Source {
		t.Errorf("usage source: %q, API %q", got, api.Usage.Source)
	}
	segs := eval(`document.querySelectorAll('[data-testid=waterfall] .wf-row').length`)
	canvases := eval(`document.querySelectorAll('[data-testid=timeline-plot] canvas').length`)
	if segs != 8 || canvases == 0 {
		t.Errorf("waterfall rows %d (want 8), timeline canvases %d (want a plot)", segs, canvases)
	}
	if got := textOf(`[data-testid=engine-pending]`); !strings.HasPrefix(got, "Engine timing pending") {
		t.Errorf("engine timing pending note: %q", got)
	}
	if got := textOf(`[data-testid=waterfall] .wf-row[data-segment=prefill] .muted`); !strings.HasSuffix(got, "— engine timing pending") {
		t.Errorf("prefill's source: %q, want it marked engine timing pending", got)
	}
	noKeys("Request")
	checkClean("Request")
	shot("request_en")

	pages := []string{"cost", "alerts", "overview", "diagnostics"}
	for _, p := range pages {
		run(p, chromedp.Navigate(base+"/ui/?lang=en#/"+p), ready(p))
		noKeys(p)
		checkClean(p)
		shot(p + "_en")
	}
	run("top spenders", chromedp.Navigate(base+"/ui/?lang=en#/cost"), ready("cost"))
	topRows := eval(`document.querySelectorAll('[data-testid=report-top] tbody tr').length`)
	if topRows < 3 {
		t.Errorf("Top spenders shows %d rows, want the 3 users", topRows)
	}
	if n := eval(`document.querySelectorAll('[data-testid=report-waste] table, [data-testid=report-waste] .placeholder').length`); n != 1 {
		t.Errorf("Cost shows no waste report (%d tables or placeholders)", n)
	}

	// Budget burn: alice's daily-token quota, with the used figure of /api/v1/quotas.
	var qs struct {
		Quotas []struct {
			Scope, Limit string
			Used, Quota  int64
		}
	}
	getJSON(t, base+"/api/v1/quotas", &qs)
	var aliceUsed int64 = -1
	for _, q := range qs.Quotas {
		if q.Scope == "user:"+aliceID && q.Limit == "daily_tokens" {
			aliceUsed = q.Used
		}
	}
	if aliceUsed <= 0 {
		t.Errorf("/api/v1/quotas has no usage for user:%s: %+v", aliceID, qs.Quotas)
	}
	if got := textOf(`[data-testid=budget] tr[data-scope="user:` + aliceID + `"][data-limit=daily_tokens] [data-testid=burn-used]`); got != strconv.FormatInt(aliceUsed, 10) {
		t.Errorf("budget burn shows %q tokens used by alice, /api/v1/quotas %d", got, aliceUsed)
	}
	if n := eval(`document.querySelectorAll('[data-testid=budget] tbody tr').length`); n != len(qs.Quotas) {
		t.Errorf("budget burn shows %d rows, /api/v1/quotas %d", n, len(qs.Quotas))
	}
	checkClean("Cost, budget burn")
	// Budgets: one card, one row per configured budget.
	if n := eval(`document.querySelectorAll('[data-testid=budgets] tr[data-budget="alice-month"]').length`); n != 1 {
		t.Errorf("the budgets card shows %d rows for alice-month, want 1", n)
	}

	// Reconciliation: one row per kept run with /api/v1/reconciliations'
	// totals, the run over tolerance highlighted, and its link opening the
	// run's lines.
	var recs struct {
		Reconciliations []struct {
			ID            int64
			Bill          string
			Severity      string
			OverTolerance bool        `json:"over_tolerance"`
			BillTotal     reconCounts `json:"bill_total"`
			LedgerTotal   reconCounts `json:"ledger_total"`
			Diff          reconCounts
			Unexplained   reconCounts
		}
	}
	getJSON(t, base+"/api/v1/"+attr(`[data-testid=reconcile]`, "data-api"), &recs)
	if len(recs.Reconciliations) != 2 {
		t.Fatalf("/api/v1/reconciliations lists %d runs, want the 2 kept", len(recs.Reconciliations))
	}
	if n := eval(`document.querySelectorAll('[data-testid=reconcile] tbody tr').length`); n != len(recs.Reconciliations) {
		t.Errorf("Reconciliation shows %d runs, the API %d", n, len(recs.Reconciliations))
	}
	var overID int64
	for _, r := range recs.Reconciliations {
		row := fmt.Sprintf(`[data-testid=reconcile] tr[data-run-id="%d"] `, r.ID)
		for _, c := range []struct {
			what, sel, want string
		}{
			{"bill tokens", "[data-testid=recon-bill-tokens]", strconv.FormatInt(r.BillTotal.tokens(), 10)},
			{"ledger tokens", "[data-testid=recon-ledger-tokens]", strconv.FormatInt(r.LedgerTotal.tokens(), 10)},
			{"difference", "[data-testid=recon-diff]", signed(r.Diff.tokens())},
			{"unexplained", "[data-testid=recon-unexplained]", signed(r.Unexplained.tokens())},
		} {
			if got := textOf(row + c.sel); got != c.want {
				t.Errorf("run %d (%s): %s shown %q, API %s", r.ID, r.Bill, c.what, got, c.want)
			}
		}
		if got := attr(row+"[data-testid=recon-status]", "data-severity"); got != r.Severity {
			t.Errorf("run %d: status %q, API %q", r.ID, got, r.Severity)
		}
		highlighted := eval(`document.querySelector('`+row+`').closest('tr').classList.contains('recon-over') ? 1 : 0`) == 1
		if highlighted != r.OverTolerance {
			t.Errorf("run %d (%s, %s): highlighted %v, over tolerance %v", r.ID, r.Bill, r.Severity, highlighted, r.OverTolerance)
		}
		if strings.HasSuffix(r.Bill, "over.csv") {
			overID = r.ID
			if !r.OverTolerance || r.Diff.Output <= 0 {
				t.Errorf("the bill with a fifth more output is not over tolerance: %+v", r)
			}
		} else if r.OverTolerance || r.Diff != (reconCounts{}) {
			t.Errorf("the bill equal to the ledger differs: %+v", r)
		}
	}
	checkClean("Cost, reconciliation")
	shot("cost_reconciliation_en")
	run("reconciliation run", chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-run-id="%d"] a[data-testid=recon-link]`, overID))), ready("reconciliation"))
	var oneRun struct {
		Report struct{ Lines []reconLine }
	}
	getJSON(t, fmt.Sprintf("%s/api/v1/reconciliations/%d", base, overID), &oneRun)
	if n := eval(`document.querySelectorAll('[data-testid=recon-lines-table] tbody tr').length`); n != len(oneRun.Report.Lines) || n == 0 {
		t.Errorf("run %d shows %d lines, the API %d", overID, n, len(oneRun.Report.Lines))
	}
	for _, l := range oneRun.Report.Lines {
		row := fmt.Sprintf(`[data-testid=recon-lines-table] tr[data-day=%q][data-model=%q] `, l.Day, l.Model)
		if got := textOf(row + "[data-testid=recon-line-diff]"); got != signed(l.Diff.tokens()) {
			t.Errorf("line %s %s: difference %q, API %s", l.Day, l.Model, got, signed(l.Diff.tokens()))
		}
		if got := attr(row+"[data-testid=recon-status]", "data-severity"); got != l.Severity {
			t.Errorf("line %s %s: status %q, API %q", l.Day, l.Model, got, l.Severity)
		}
	}
	noKeys("Reconciliation run")
	checkClean("Reconciliation run")
	shot("reconciliation_run_en")

	// Overview: the request count is the API's, for the period the page asked for.
	str := func(expr string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return v
	}
	run("overview, last 24 hours", chromedp.Navigate(base+"/ui/?lang=en#/overview?range=24h"), ready("overview"))
	var ov struct {
		Totals struct{ Requests int64 }
	}
	getJSON(t, base+"/api/v1/"+str(`document.querySelector('[data-testid=ov-figures]').dataset.api`), &ov)
	if got := textOf(`[data-testid=ov-requests]`); got != strconv.FormatInt(ov.Totals.Requests, 10) || ov.Totals.Requests == 0 {
		t.Errorf("Overview shows %q requests, /api/v1/overview %d", got, ov.Totals.Requests)
	}
	if n := eval(`document.querySelectorAll('[data-testid=chart-qps] canvas').length`); n == 0 {
		t.Error("Overview draws no QPS chart")
	}
	noKeys("Overview")
	checkClean("Overview")
	shot("overview_24h_en")

	// Overview → Diagnostics by the chart: the mouse over the QPS chart at
	// the x of a bucket with requests, then a click, opens Diagnostics for
	// that bucket's range — the target of the bucket's link — counting what
	// /api/v1/series counts and what the bucket's row showed.
	bucketT := attr(`a[data-testid=bucket-link]`, "data-t")
	if bucketT == "" {
		t.Fatal("Overview lists no bucket with requests")
	}
	bucketSel := fmt.Sprintf(`a[data-testid=bucket-link][data-t=%q]`, bucketT)
	wantHref := attr(bucketSel, "href")
	bucketRequests := str(fmt.Sprintf(`document.querySelector(%q).closest('tr').children[1].textContent`, bucketSel))
	var aim struct{ X, Y, Idx float64 }
	if err := json.Unmarshal([]byte(str(fmt.Sprintf(`(() => {
		const plot = document.querySelector('[data-testid=chart-qps]'), u = plot.uplot;
		plot.scrollIntoView({block: 'center'});
		const x = Date.parse(%q) / 1000, r = u.over.getBoundingClientRect();
		const px = Math.min(Math.max(r.left + u.valToPos(x, 'x'), r.left + 1), r.right - 1);
		return JSON.stringify({x: px, y: r.top + r.height / 2, idx: u.data[0].indexOf(x)});
	})()`, bucketT))), &aim); err != nil || aim.Idx < 0 {
		t.Fatalf("aim at the bucket %s on the QPS chart: %+v %v", bucketT, aim, err)
	}
	run("hover the bucket's point", chromedp.MouseEvent(chromedp.MouseMoved, aim.X, aim.Y))
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](fmt.Sprintf(`document.querySelector('[data-testid=chart-qps]').uplot.cursor.idx === %d`, int(aim.Idx)),
		chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("the QPS chart's cursor never reached bucket %s (index %d): %v", bucketT, int(aim.Idx), err)
	}
	run("click the bucket's point", chromedp.MouseClickXY(aim.X, aim.Y), ready("diagnostics"))
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(loc, wantHref) || !strings.Contains(loc, "from=") || !strings.Contains(loc, "to=") || !strings.Contains(loc, "step=") {
		t.Errorf("a click on the QPS chart at %s lands on %s; want the bucket's range %s", bucketT, loc, wantHref)
	}
	if got, want := str(`document.querySelector('[data-testid=diag-requests]').textContent`), sumSeries(t, base+"/api/v1/"+str(`document.querySelector('[data-testid=diag-requests]').dataset.api`)); got != want || got != bucketRequests || got == "0" {
		t.Errorf("after the chart click Diagnostics counts %q requests; /api/v1/series %s, the bucket's row %s", got, want, bucketRequests)
	}
	checkClean("Overview chart click")
	run("overview again", chromedp.Navigate(base+"/ui/?lang=en#/overview?range=24h"), ready("overview"))

	// Overview → Diagnostics: the busiest bucket's link (the same target as
	// a click on its chart point) opens Diagnostics for that bucket.
	run("overview → diagnostics", chromedp.Click(chromedp.CSS(`a[data-testid=bucket-link]`)), ready("diagnostics"))
	if loc, err = chromedp.Run(ctx, chromedp.Location()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(loc, "#/diagnostics?") || !strings.Contains(loc, "from=") || !strings.Contains(loc, "to=") {
		t.Errorf("drill-down to Diagnostics lands on %s; want the bucket's range in the URL", loc)
	}
	var se struct {
		Series []struct {
			Points []struct{ Requests int64 }
		}
	}
	getJSON(t, base+"/api/v1/"+str(`document.querySelector('[data-testid=diag-requests]').dataset.api`), &se)
	var seTotal int64
	for _, s := range se.Series {
		for _, p := range s.Points {
			seTotal += p.Requests
		}
	}
	if got := str(`document.querySelector('[data-testid=diag-requests]').textContent`); got != strconv.FormatInt(seTotal, 10) || seTotal == 0 {
		t.Errorf("Diagnostics counts %q requests in the bucket, /api/v1/series %d", got, seTotal)
	}
	if n := eval(`document.querySelectorAll('[data-testid=chart-segments] canvas, [data-testid=chart-ttft] canvas').length`); n < 2 {
		t.Errorf("Diagnostics draws %d of the segment and TTFT charts", n)
	}
	// Latency by input length: the table's requests are /api/v1/diagnose's.
	var dg struct {
		Results []struct {
			Rows []struct{ Requests int64 }
		}
	}
	getJSON(t, base+"/api/v1/"+str(`document.querySelector('[data-testid=diag-input]').dataset.api`), &dg)
	var dgTotal int64
	if len(dg.Results) > 0 {
		for _, r := range dg.Results[0].Rows {
			dgTotal += r.Requests
		}
	}
	if got := str(`String([...document.querySelectorAll('[data-testid=diag-input] tbody tr td:nth-child(2)')].reduce((a, td) => a + Number(td.textContent.replace(/,/g, '')), 0))`); got != strconv.FormatInt(dgTotal, 10) || dgTotal == 0 {
		t.Errorf("latency by input length counts %q requests, /api/v1/diagnose %d", got, dgTotal)
	}
	if n := eval(`document.querySelectorAll('[data-testid=diag-engine] [data-testid^=chart-engine]').length`); n != 2 {
		t.Errorf("Diagnostics shows %d engine gauge cards, want 2", n)
	}
	noKeys("Diagnostics")
	checkClean("Diagnostics")
	shot("diagnostics_bucket_en")

	// Diagnostics → Requests (same range) → Request.
	run("diagnostics → requests", chromedp.Click(chromedp.CSS(`a[data-testid=diag-requests-link]`)), ready("requests"))
	if loc, err = chromedp.Run(ctx, chromedp.Location()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(loc, "range=custom") || !strings.Contains(loc, "since=") || !strings.Contains(loc, "until=") {
		t.Errorf("drill-down to Requests lands on %s; want the bucket's range", loc)
	}
	if rows := eval(`document.querySelectorAll('table[data-testid=requests] tbody tr').length`); int64(rows) != seTotal {
		t.Errorf("Requests of the bucket: %d rows, the series counts %d", rows, seTotal)
	}
	run("requests → request", chromedp.Click(chromedp.CSS(`a[data-testid=request-link]`)), ready("request"))
	if got := textOf(`[data-testid=request-id]`); got == "" {
		t.Error("drill-down ends on a Request page with no request id")
	}
	checkClean("drill-down")

	// Chinese, chosen with the selector: kept in the URL and every page
	// renders from the Chinese catalogue.
	run("request page again", chromedp.Navigate(base+"/ui/?lang=en#/request/"+pick.RequestID), ready("request"))
	eval(`(() => { const s = document.getElementById('lang'); s.value = 'zh'; s.dispatchEvent(new Event('change')); return 0; })()`)
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.documentElement.lang === 'zh-CN' && document.getElementById('main').dataset.ready === 'request'`)); err != nil {
		t.Fatalf("switch to Chinese: %v", err)
	}
	loc, err = chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(loc, "lang=zh") || !strings.Contains(loc, "#/request/") {
		t.Errorf("after switching, the URL is %s; want lang=zh and the same page", loc)
	}
	if got := textOf(`#main [data-testid=waterfall] h2`); got != "时间花在哪里" {
		t.Errorf("waterfall title in Chinese: %q", got)
	}
	if got := textOf(`[data-testid=engine-pending]`); !strings.HasPrefix(got, "引擎计时待到") {
		t.Errorf("engine timing pending note in Chinese: %q", got)
	}
	noKeys("Request (zh)")
	checkClean("Request (zh)")
	shot("request_zh")
	for _, p := range append([]string{"requests"}, pages...) {
		// No lang in the URL now: the choice is remembered (localStorage).
		run(p+" (zh)", chromedp.Navigate(base+"/ui/#/"+p), ready(p))
		l, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.documentElement.lang`))
		if err != nil {
			t.Fatal(err)
		}
		if l != "zh-CN" {
			t.Errorf("%s: language %q after choosing Chinese, want zh-CN", p, l)
		}
		noKeys(p + " (zh)")
		checkClean(p + " (zh)")
		shot(p + "_zh")
	}
	run("reconciliation run (zh)", chromedp.Navigate(fmt.Sprintf("%s/ui/#/reconciliation/%d", base, overID)), ready("reconciliation"))
	noKeys("reconciliation run (zh)")
	checkClean("reconciliation run (zh)")
	if en, err := chromedp.Run(ctx, chromedp.Evaluate[string](englishJS)); err != nil || en != "" {
		t.Errorf("reconciliation run (zh): English words %q (%v)", en, err)
	}
	shot("reconciliation_run_zh")

	uiExactRanges(t, base, list.Requests, uiBrowser{run: run, str: str, ready: ready, shot: shot, checkClean: checkClean})
}

// The page checks of issue 20, as JavaScript run in the page.
const (
	// overflowJS lists what sticks out: the page wider than the window, a
	// card past the window's edge, an element past its card's edge (what
	// is inside a table's own scroll box scrolls there: the box itself must
	// fit its card), a tile whose text is cut.
	overflowJS = `(() => {
		const bad = [], vw = document.documentElement.clientWidth;
		const name = (el) => el.tagName.toLowerCase() + (el.dataset.testid ? '[' + el.dataset.testid + ']' : '') + (el.className && typeof el.className === 'string' ? '.' + el.className.split(' ')[0] : '');
		if (document.documentElement.scrollWidth > vw + 1) bad.push('page ' + document.documentElement.scrollWidth + ' px wide in a ' + vw + ' px window');
		for (const c of document.querySelectorAll('.card, header.top')) {
			const r = c.getBoundingClientRect();
			if (r.width === 0) continue;
			if (r.right > vw + 1) bad.push(name(c) + ' ends at ' + Math.round(r.right) + ' px, window ' + vw);
			for (const el of c.querySelectorAll('*')) {
				const box = el.parentElement && el.parentElement.closest('.scroll');
				if (box && c.contains(box)) continue;
				const e = el.getBoundingClientRect();
				if (e.width > 0 && e.right > r.right + 1) { bad.push(name(el) + ' in ' + name(c) + ': ' + Math.round(e.right) + ' > ' + Math.round(r.right)); break; }
			}
		}
		for (const f of document.querySelectorAll('.figure')) if (f.scrollWidth > f.clientWidth + 1) bad.push('tile cut: ' + f.textContent);
		return JSON.stringify(bad.slice(0, 8));
	})()`
	// englishJS lists English words shown on a Chinese page: runs of three
	// or more ASCII letters, outside code (ids, rule names), the language
	// selector and the allowed units, acronyms and test data.
	englishJS = `(() => {
		// Units and terms of art kept in Chinese text (Token, Trace ID, RFC
		// 3339, Batch API), config keys and commands the text names
		// (prices, reconcile), and the test's data (biz lines, users).
		const allow = new Set(['ms', 'tokens', 'token', 'Token', 'Trace', 'RFC', 'Batch', 'QPS', 'TTFT', 'TPOT', 'UTC', 'USD', 'CNY', 'API', 'HTTP',
			'tollgate', 'GPU', 'KV', 'prices', 'budgets', 'reconcile', 'search', 'chat', 'sim', 'vllm', 'anonymous', 'csv', 'generic', 'metrics']);
		const found = new Set();
		const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
		for (let n = walk.nextNode(); n; n = walk.nextNode()) {
			const el = n.parentElement;
			if (!el || el.closest('code, script, style, #lang, #version')) continue;
			if (el.closest('[hidden]') || el.offsetParent === null && el.tagName !== 'OPTION') continue;
			for (const w of n.textContent.match(/[A-Za-z][A-Za-z0-9_.\/:+-]*/g) || []) {
				if (/^[A-Za-z]{3,}$/.test(w) && !allow.has(w)) found.add(w);
			}
		}
		return [...found].slice(0, 12).join(' ');
	})()`
)

// uiBrowser is TestDashboardInBrowser's page driver, for the checks it
// hands to functions of their own.
type uiBrowser struct {
	run        func(what string, actions ...chromedp.Action[chromedp.Void])
	str        func(expr string) string
	ready      func(page string) chromedp.Action[chromedp.Void]
	shot       func(name string)
	checkClean func(where string)
}

// uiExactRanges: the checks of issue 20 — headline figures equal the API's
// exact-range figures; a drilled minute shows its requests in every card;
// partial and one-request buckets; one time zone per page, carried in the
// URL; no English on Chinese pages; nothing overflows at 1440 and 390 px.
func uiExactRanges(t *testing.T, base string, recs []uiRecord, b uiBrowser) {
	t.Helper()
	run, str, ready, shot, checkClean := b.run, b.str, b.ready, b.shot, b.checkClean
	var first, last time.Time
	for _, r := range recs {
		if first.IsZero() || r.Timing.Arrival.Before(first) {
			first = r.Timing.Arrival
		}
		if r.Timing.Arrival.After(last) {
			last = r.Timing.Arrival
		}
	}

	// Headline figures: the last 15 minutes, as the API counts them —
	// exactly that period (to the minute), QPS over its elapsed seconds.
	run("overview, last 15 minutes", chromedp.Navigate(base+"/ui/?lang=en#/overview?range=15m"), ready("overview"))
	var ov struct {
		From, To string
		QPS      float64 `json:"qps"`
		Elapsed  float64 `json:"elapsed_s"`
		Totals   struct {
			Requests     int64   `json:"requests"`
			InputTokens  int64   `json:"input_tokens"`
			OutputTokens int64   `json:"output_tokens"`
			Prefix       float64 `json:"prefix_cache_share"`
		}
	}
	getJSON(t, base+"/api/v1/"+str(`document.querySelector('[data-testid=ov-figures]').dataset.api`), &ov)
	from, _ := time.Parse(time.RFC3339, ov.From)
	to, _ := time.Parse(time.RFC3339, ov.To)
	if d := to.Sub(from); d < 15*time.Minute || d > 16*time.Minute {
		t.Errorf("overview of the last 15 minutes counts %s – %s (%s), want 15 minutes to the minute", ov.From, ov.To, d)
	}
	if ov.Totals.Requests != int64(len(recs)) {
		t.Errorf("overview of the last 15 minutes: %d requests, the ledger %d", ov.Totals.Requests, len(recs))
	}
	if want := float64(ov.Totals.Requests) / ov.Elapsed; ov.Elapsed > 16*60 || math.Abs(ov.QPS-want) > 1e-9 {
		t.Errorf("overview QPS %v over %v s elapsed; want requests ÷ elapsed = %v", ov.QPS, ov.Elapsed, want)
	}
	// The tiles hold the API's figures; QPS to 1 %: the page asked a few
	// hundred milliseconds earlier, so its elapsed seconds were fewer.
	for id, want := range map[string]float64{"ov-requests": float64(ov.Totals.Requests), "ov-qps": ov.QPS, "ov-input-tokens": float64(ov.Totals.InputTokens), "ov-output-tokens": float64(ov.Totals.OutputTokens)} {
		got, err := strconv.ParseFloat(str(fmt.Sprintf(`document.querySelector('[data-testid=%s]').dataset.value`, id)), 64)
		if err != nil || math.Abs(got-want) > want/100 {
			t.Errorf("tile %s holds %v, the API %v", id, got, want)
		}
	}
	// A partial bucket: the minute in progress is marked, not drawn as a dip.
	if p := str(`document.querySelector('[data-testid=chart-qps]').dataset.partial`); p == "" {
		t.Error("the QPS chart of the last 15 minutes marks no partial bucket")
	} else if n := str(`String(document.querySelector('[data-testid=chart-qps]').uplot.data[0].length - 1)`); p != n {
		t.Errorf("the QPS chart marks bucket %s as partial, want the last one (%s)", p, n)
	}
	// Separate scales: E2E and TTFT P99 each on their own chart.
	if n := str(`String(document.querySelectorAll('[data-testid=chart-p99] canvas, [data-testid=chart-ttft-p99] canvas').length)`); n != "2" {
		t.Errorf("E2E and TTFT P99 are drawn in %s canvases, want 2 panels", n)
	}
	checkClean("Overview, 15 minutes")

	// Alert markers: the test's rule (any error in a minute) fires on the
	// unknown model's failure; the charts mark its start.
	// The rule judges whole minutes: the failure's minute must end first.
	deadline := time.Now().Add(90 * time.Second)
	for {
		var al struct{ History, Active []json.RawMessage }
		getJSON(t, base+"/api/v1/alerts", &al)
		if len(al.History) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the test's alert rule did not fire within 90 s (active: %s)", al.Active)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A fresh load: the same URL again would only change nothing.
	run("overview with the alert", chromedp.Navigate("about:blank"), chromedp.Navigate(base+"/ui/?lang=en#/overview?range=15m"), ready("overview"))
	if m := str(`document.querySelector('[data-testid=chart-qps]').dataset.markers`); m == "" || m == "0" {
		t.Errorf("the QPS chart marks %q alerts, want the one fired", m)
	}
	run("alerts page", chromedp.Navigate(base+"/ui/?lang=zh#/alerts"), ready("alerts"))
	if n := str(`String(document.querySelectorAll('[data-testid=no-notifier]').length)`); n != "1" {
		t.Error("the Alerts page does not say that no notifier is configured")
	}
	// The rule's window is a minute: by now the alert may have resolved.
	// Its history rows say fired or resolved in Chinese either way.
	if got := str(`[...document.querySelectorAll('[data-testid=alerts-history] .badge')].map((b) => b.textContent).join(' ')`); got == "" || strings.Trim(got, "触发中已恢复待定 ") != "" {
		t.Errorf("alert history states in Chinese: %q, want 触发中/已恢复", got)
	}
	if got := str(`(document.querySelector('[data-testid=alert-severity]') || {}).textContent || '警告'`); got != "警告" {
		t.Errorf("an active alert's severity in Chinese: %q, want 警告", got)
	}

	// A drilled minute: every card shows that minute's requests.
	minute := first.UTC().Truncate(time.Minute)
	if !last.Before(minute.Add(time.Minute)) {
		minute = last.UTC().Truncate(time.Minute) // traffic crossed a minute: drill the later one
	}
	var inMinute int64
	for _, r := range recs {
		if !r.Timing.Arrival.Before(minute) && r.Timing.Arrival.Before(minute.Add(time.Minute)) {
			inMinute++
		}
	}
	drill := fmt.Sprintf("%s/ui/?lang=en#/diagnostics?range=custom&from=%s&to=%s&step=1m", base, minute.Format(time.RFC3339), minute.Add(time.Minute).Format(time.RFC3339))
	run("diagnostics of one minute", chromedp.Navigate(drill), ready("diagnostics"))
	sum := func(sel string, col int) int64 {
		t.Helper()
		v, err := strconv.ParseInt(str(fmt.Sprintf(`String([...document.querySelectorAll('%s tbody tr td:nth-child(%d)')].reduce((a, td) => a + Number(td.textContent.replace(/,/g, '')), 0))`, sel, col)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		card string
		col  int
	}{{"[data-testid=diag-buckets]", 2}, {"[data-testid=diag-biz-tokens]", 2}, {"[data-testid=diag-length]", 3}} {
		if got := sum(c.card, c.col); got != inMinute {
			t.Errorf("drilled minute %s: %s counts %d requests, want %d", minute.Format(time.TimeOnly), c.card, got, inMinute)
		}
	}
	if got := str(`document.querySelector('[data-testid=diag-requests]').textContent`); got != strconv.FormatInt(inMinute, 10) {
		t.Errorf("drilled minute: Diagnostics counts %s requests, want %d", got, inMinute)
	}
	// Its x-axis is the minute (not years around one point), and the
	// engines' gauges share it.
	for _, id := range []string{"chart-ttft", "chart-engine-queue"} {
		x := str(fmt.Sprintf(`(() => { const u = document.querySelector('[data-testid=%s]').uplot; return u ? u.scales.x.min + ' ' + u.scales.x.max : 'none'; })()`, id))
		if want := fmt.Sprintf("%d %d", minute.Unix(), minute.Add(time.Minute).Unix()); x != want && x != "none" {
			t.Errorf("drilled minute: %s's x-axis spans %s, want %s", id, x, want)
		}
	}
	checkClean("drilled minute")

	// A one-request bucket draws no rate: the unknown model's one request.
	run("diagnostics of the unknown model", chromedp.Navigate(drill+"&model=no-such-model"), ready("diagnostics"))
	if got := str(`document.querySelector('[data-testid=diag-requests]').textContent`); got != "1" {
		t.Errorf("the unknown model's minute counts %s requests, want 1", got)
	}
	if got := str(`JSON.stringify(document.querySelector('[data-testid=chart-cache]').uplot.data.slice(1).flat().filter((v) => v !== null))`); got != "[]" {
		t.Errorf("a one-request bucket draws cache shares %s, want none", got)
	}

	// One zone per page, carried in the URL: the browser runs in
	// Asia/Shanghai; From shows the URL's instant in the zone chosen.
	for _, z := range []struct{ tz, suffix string }{{"", "+08:00"}, {"UTC", "Z"}} {
		run("zone "+z.tz, chromedp.Navigate(base+"/ui/?lang=en&tz="+z.tz+"#/diagnostics?range=custom&from="+minute.Format(time.RFC3339)+"&to="+minute.Add(time.Minute).Format(time.RFC3339)), ready("diagnostics"))
		v := str(`document.querySelector('#main form input[name=from]').value`)
		shown, err := time.Parse(time.RFC3339, v)
		if !strings.HasSuffix(v, z.suffix) || err != nil || !shown.Equal(minute) {
			t.Errorf("tz=%q: From shows %q, want %s in the zone (%s)", z.tz, v, minute.Format(time.RFC3339), z.suffix)
		}
		if p := str(`document.querySelector('[data-testid=period]').textContent`); z.tz == "UTC" && !strings.Contains(p, "(UTC)") || z.tz == "" && !strings.Contains(p, "Asia/Shanghai") {
			t.Errorf("tz=%q: the period does not name its zone: %q", z.tz, p)
		}
	}

	// No English on Chinese pages, and nothing overflows at 1440 and 390 px.
	pages := []string{"overview?range=15m", "requests", "cost", "alerts", "diagnostics?range=custom&from=" + minute.Format(time.RFC3339) + "&to=" + minute.Add(time.Minute).Format(time.RFC3339) + "&step=1m"}
	for _, lang := range []string{"zh", "en"} {
		for _, size := range [][2]int64{{1440, 900}, {390, 844}} {
			run("viewport", chromedp.EmulateViewport(size[0], size[1]))
			for _, p := range pages {
				name := strings.SplitN(p, "?", 2)[0]
				run(p, chromedp.Navigate(base+"/ui/?lang="+lang+"#/"+p), ready(name))
				if bad := str(overflowJS); bad != "[]" {
					t.Errorf("%s (%s) at %d px overflows: %s", name, lang, size[0], bad)
				}
				if size[0] == 1440 {
					if cut := str(`JSON.stringify([...document.querySelectorAll('[data-testid=ov-by-biz] .scroll, [data-testid=ov-by-model] .scroll')].filter((b) => b.scrollWidth > b.clientWidth + 1).map((b) => b.parentElement.dataset.testid))`); cut != "[]" {
						t.Errorf("%s at 1440 px clips the columns of %s", name, cut)
					}
				}
				if lang == "zh" {
					if en := str(englishJS); en != "" {
						t.Errorf("%s (zh) shows English: %s", name, en)
					}
				}
				checkClean(name + " " + lang)
				if lang == "en" && size[0] == 1440 && (name == "overview" || name == "diagnostics" || name == "cost") {
					shot(name + "-after")
				}
			}
		}
	}
}
