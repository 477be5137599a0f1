package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/loadgen"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/sim"
)

// TestBenchAgreesWithLedger runs `tollgate bench` through the real serve
// wiring (simulator behind it, SQLite ledger) and compares, request by
// request (matched by the X-Request-Id tollgate returns), the client's
// TTFT and TPOT with what tollgate recorded: two independent measurements
// of one truth, within 1 ms on loopback.
//
// The definitions differ in one place, accounted for here rather than in
// the tolerance: tollgate's E2E (hence its TPOT) ends when the response
// ends, after the usage chunk and [DONE]; the benchmark's E2E ends at the
// last chunk with choices, as vLLM's does. So tollgate's TPOT minus
// (end − last_token)/(n − 1) is the benchmark's TPOT, and the client's
// stream end gives tollgate's own TPOT back.
//
// A loaded host (2 cores shared by several test runs, the race detector)
// can hold the client's reader off the CPU for milliseconds at any chunk,
// which no definition explains: a stalled reader is late for one request,
// while a wrong definition is wrong for all of them. So an attempt passes
// when the median difference is within 1 ms, for the first token's
// instant and for TPOT both ways (requests over 1 ms are logged), and the
// comparison is repeated on a fresh gateway up to three times. On a quiet
// host every request agrees.
func TestBenchAgreesWithLedger(t *testing.T) {
	for attempt := 1; ; attempt++ {
		problems, medians, log := benchVersusLedger(t)
		t.Logf("attempt %d: %s; median differences: first token %v, TPOT %v, TPOT to the stream's end %v", attempt, log, medians[0], medians[1], medians[2])
		for _, p := range problems {
			t.Logf("attempt %d: %s", attempt, p)
		}
		if max(medians[0], medians[1], medians[2]) <= time.Millisecond {
			return
		}
		if attempt == 3 {
			t.Fatalf("bench and ledger: median differences over 1ms in every attempt (first token %v, TPOT %v, TPOT to the stream's end %v)", medians[0], medians[1], medians[2])
		}
	}
}

const benchRequests = 20

// benchVersusLedger is one attempt: it fails the test on what no load
// explains (counts, ids, tokens) and returns the requests that disagree
// by more than 1 ms and the median differences of the first token's
// instant, of TPOT, and of TPOT to the stream's end.
func benchVersusLedger(t *testing.T) (problems []string, medians [3]time.Duration, summary string) {
	t.Helper()
	// A model name no tokenizer is known for: the gateway would otherwise
	// load one in the background during the first requests, and its CPU
	// use on a small machine would be measured as latency by both sides.
	up := startSimServer(t, sim.Config{Seed: 1, Models: []string{benchModel}, DecodeBase: 2 * time.Millisecond, PrefillBase: time.Millisecond})
	cfg := shutdownConfig(t, up, 10*time.Second)
	cfg.OTLP.HTTPListen, cfg.OTLP.GRPCListen = "", ""
	addr, cancel, wait := startServe(t, cfg)
	out, errOut, err := runCmd(t, "bench", "--base-url", "http://"+addr+"/v1", "--model", benchModel,
		"--concurrency", "1", "--num-prompts", strconv.Itoa(benchRequests), "--input-len", "48", "--output-len", "48", "--range-ratio", "0.25",
		"--prefix-ratio", "0.5", "--ignore-eos", "--format", "json", "--detailed", "--progress", "never")
	cancel()
	if werr := wait(); werr != nil {
		t.Fatalf("serve: %v", werr)
	}
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, errOut)
	}
	if errOut != "" {
		t.Errorf("bench wrote to stderr with --progress never: %q", errOut)
	}
	var s loadgen.Summary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("bench JSON: %v\n%s", err, out)
	}
	if s.Completed != benchRequests || s.Failed != 0 || len(s.Requests) != benchRequests || s.OutputTokensFrom != loadgen.FromUsage {
		t.Fatalf("bench: %d completed, %d failed, %d rows, tokens from %s", s.Completed, s.Failed, len(s.Requests), s.OutputTokensFrom)
	}

	recs := allRequests(t, cfg.Store.SQLite.Path)
	byID := map[string]*record.Record{}
	for _, r := range recs {
		byID[r.LogicalRequestID] = r
	}
	if len(recs) != benchRequests+1 {
		t.Errorf("%d ledger rows, want %d (the warm-up request and those measured)", len(recs), benchRequests+1)
	}
	const tol = time.Millisecond
	near := func(a float64, b time.Duration) bool {
		d := time.Duration(a*float64(time.Millisecond)) - b
		return d <= tol && d >= -tol
	}
	var worstTTFT, worstTPOT, worstTransit time.Duration
	var raw []time.Duration // |bench TTFT − tollgate TTFT|, transit included
	var diffs [3][]time.Duration
	for _, row := range s.Requests {
		r := byID[row.RequestID]
		if row.RequestID == "" || r == nil {
			t.Fatalf("request %d: id %q not in the ledger", row.Index, row.RequestID)
		}
		n := r.Usage.OutputTokens
		if int64(row.OutputTokens) != n || int64(row.InputTokens) != r.Usage.InputTokens || row.FinishReason != r.FinishReason || n < 2 {
			t.Errorf("request %s: bench %d/%d tokens %q, ledger %d/%d %q", row.RequestID, row.InputTokens, row.OutputTokens, row.FinishReason,
				r.Usage.InputTokens, n, r.FinishReason)
			continue
		}
		if row.TTFTMS == nil || r.Derived.TTFT == nil || row.TPOTMS == nil || r.Derived.TPOT == nil {
			t.Fatalf("request %s: TTFT/TPOT missing: bench %v/%v, ledger %v/%v", row.RequestID, row.TTFTMS, row.TPOTMS, r.Derived.TTFT, r.Derived.TPOT)
		}
		// The two clocks start at different points of the same request:
		// the client's when it sends, tollgate's at arrival. Both run in
		// this process, so the transit between them is measured (wall
		// clock), and what must agree is the instant of the first token.
		sent := row.Intended.Add(time.Duration(row.SendLagMS * float64(time.Millisecond)))
		transit := r.Arrival.Sub(sent)
		if transit < 0 {
			problems = append(problems, fmt.Sprintf("request %s: tollgate's arrival %v before the client sent it", row.RequestID, -transit))
		}
		if !near(*row.TTFTMS, transit+*r.Derived.TTFT) {
			problems = append(problems, fmt.Sprintf("request %s: bench TTFT %.3fms, tollgate %v after a transit of %v", row.RequestID, *row.TTFTMS, *r.Derived.TTFT, transit))
		}
		raw = append(raw, absDur(time.Duration(*row.TTFTMS*float64(time.Millisecond))-*r.Derived.TTFT))
		worstTransit = max(worstTransit, transit)
		// tollgate's TPOT, less its share of the time after the last token.
		tpot := *r.Derived.TPOT - (r.Marks.End-r.Marks.LastToken)/time.Duration(n-1)
		if !near(*row.TPOTMS, tpot) {
			problems = append(problems, fmt.Sprintf("request %s: bench TPOT %.3fms, tollgate's without the stream's tail %v (recorded %v)", row.RequestID, *row.TPOTMS, tpot, *r.Derived.TPOT))
		}
		// And the other way: the client's figures with tollgate's E2E.
		own := (row.StreamEndMS - *row.TTFTMS) / float64(n-1)
		if !near(own, *r.Derived.TPOT) {
			problems = append(problems, fmt.Sprintf("request %s: bench TPOT to the stream's end %.3fms, tollgate recorded %v", row.RequestID, own, *r.Derived.TPOT))
		}
		d0 := absDur(time.Duration(*row.TTFTMS*float64(time.Millisecond)) - transit - *r.Derived.TTFT)
		d1 := absDur(time.Duration(*row.TPOTMS*float64(time.Millisecond)) - tpot)
		d2 := absDur(time.Duration(own*float64(time.Millisecond)) - *r.Derived.TPOT)
		diffs[0], diffs[1], diffs[2] = append(diffs[0], d0), append(diffs[1], d1), append(diffs[2], d2)
		worstTTFT = max(worstTTFT, d0)
		worstTPOT = max(worstTPOT, d1)
	}
	for i, d := range diffs {
		slices.Sort(d)
		medians[i] = d[len(d)/2]
	}
	// Without the transit taken out, the TTFTs differ by it (logged).
	slices.Sort(raw)
	return problems, medians, fmt.Sprintf("largest difference bench vs ledger: first token %v, TPOT %v; transit client → gateway up to %v; median raw TTFT difference %v",
		worstTTFT, worstTPOT, worstTransit, raw[len(raw)/2])
}

const benchModel = "bench-model"

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// TestBenchTable: the default output is vLLM's table, straight against
// the simulator (no gateway, so no request ids), with a prompt file; the
// progress bar, asked for, goes to stderr.
func TestBenchTable(t *testing.T) {
	up := startSimServer(t, sim.Config{Seed: 1, DecodeBase: time.Millisecond})
	file := t.TempDir() + "/p.jsonl"
	writeTestFile(t, file, `{"messages":[{"role":"user","content":"hello there"}],"max_tokens":4,"ignore_eos":true}
{"prompt":"once upon a time","max_tokens":3,"ignore_eos":true}
`)
	out, errOut, err := runCmd(t, "bench", "--base-url", up, "--prompts", file, "--model", "Qwen/Qwen3-8B", "--rate", "50", "--arrival", "constant", "--num-prompts", "6", "--progress", "always")
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, errOut)
	}
	if !strings.Contains(errOut, "100% 6/6 requests, 0 failed") || !strings.HasSuffix(errOut, "\n") {
		t.Errorf("progress bar on stderr: %q", errOut)
	}
	for _, want := range []string{"============ Serving Benchmark Result ============", "Successful requests:                     6 ",
		"Total generated tokens:                  21 ", "Request rate configured (RPS):           50.00", "Mean TTFT (ms):", "P99 ITL (ms):"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestBenchFlagErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--format", "xml"}, `--format: must be table or json, got "xml"`},
		{[]string{"--progress", "sometimes"}, `--progress: must be auto, always or never, got "sometimes"`},
		{[]string{"--base-url", "localhost:8000"}, `--base-url: want http(s)://host[:port]/v1, got "localhost:8000"`},
		{[]string{"--prompts", "x.jsonl", "--input-len", "5"}, "--prompts: the prompt file's bodies are sent as they are"},
		{[]string{"--rate", "-3"}, "--rate: must be a positive number of requests per second, got -3"},
		{[]string{"--concurrency", "0"}, "--concurrency: a closed loop (no --rate) needs at least 1"},
		{[]string{"--prompts", "/nonexistent/p.jsonl"}, "--prompts: open /nonexistent/p.jsonl"},
		{[]string{"--model", "m", "--input-len", "0"}, "--input-len: must be at least 1, got 0"},
		{[]string{"--header", "novalue"}, `--header: want 'Name: value', got "novalue"`},
	} {
		_, _, err := runCmd(t, append([]string{"bench"}, tt.args...)...)
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("bench %v: error %v, want %q", tt.args, err, tt.want)
		}
	}
}

func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
