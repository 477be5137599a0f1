package loadgen

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// TestPercentile: values computed with numpy.percentile (linear).
func TestPercentile(t *testing.T) {
	ten := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tt := range []struct {
		v    []float64
		p    float64
		want float64
	}{
		{ten, 50, 5.5}, {ten, 90, 9.1}, {ten, 99, 9.91}, {ten, 0, 1}, {ten, 100, 10},
		{[]float64{1, 2, 3, 4}, 99, 3.97}, {[]float64{7}, 99, 7},
	} {
		if got := Percentile(tt.v, tt.p); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("P%g of %v = %g, want %g", tt.p, tt.v, got, tt.want)
		}
	}
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Error("percentile of nothing is not NaN")
	}
	d := NewDist([]float64{4, 1, 3, 2})
	if d.Mean != 2.5 || d.Median != 2.5 || d.Min != 1 || d.Max != 4 || math.Abs(d.Std-math.Sqrt(1.25)) > 1e-12 {
		t.Errorf("dist %+v", d)
	}
}

// sampleRun is two successes and a failure, with hand-set timelines.
func sampleRun() *Run {
	ok := func(i int, ttft, e2e time.Duration, itl []time.Duration, out int) Result {
		start := t0.Add(time.Duration(i) * time.Second)
		return Result{Index: i, Intended: start, Response: Response{Sent: start.Add(time.Millisecond), Status: 200, RequestID: "r" + string(rune('0'+i))},
			Measurement: Measurement{TTFT: ttft, HasTTFT: true, E2E: e2e, StreamEnd: e2e + time.Millisecond, ITL: itl,
				TPOT: (e2e - ttft) / time.Duration(out-1), HasTPOT: out > 1, ContentChunks: out, OutputTokens: out, OutputFrom: FromUsage, InputTokens: 100, FinishReason: "length", SawDone: true}}
	}
	return &Run{
		Load:  Load{Rate: 2, Arrival: ArrivalPoisson, Requests: 3},
		Start: t0, End: t0.Add(4 * time.Second),
		Results: []Result{
			ok(0, msd(20), msd(50), []time.Duration{msd(10), msd(20)}, 3),
			ok(1, msd(40), msd(100), []time.Duration{msd(30), msd(30)}, 3),
			{Index: 2, Intended: t0.Add(2 * time.Second), Response: Response{Sent: t0.Add(2 * time.Second), Status: 503, Err: errors.New("HTTP 503: busy"), ErrKind: "status_503"}},
		},
	}
}

// TestSummarize: hand-computed totals and figures; failures counted apart
// and kept out of latencies, as in vLLM.
func TestSummarize(t *testing.T) {
	s := Summarize(sampleRun(), "http://x/v1", true)
	if s.Completed != 2 || s.Failed != 1 || s.Errors["status_503"] != 1 {
		t.Errorf("completed %d failed %d errors %v", s.Completed, s.Failed, s.Errors)
	}
	if s.TotalInputTokens != 200 || s.TotalOutputTokens != 6 || s.OutputTokensFrom != FromUsage {
		t.Errorf("tokens %d/%d from %s", s.TotalInputTokens, s.TotalOutputTokens, s.OutputTokensFrom)
	}
	if s.Duration != 4 || s.RequestThroughput != 0.5 || s.OutputThroughput != 1.5 || s.TotalThroughput != 51.5 {
		t.Errorf("duration %g, throughput %g req/s %g tok/s %g total", s.Duration, s.RequestThroughput, s.OutputThroughput, s.TotalThroughput)
	}
	// TTFT 20, 40; TPOT (50−20)/2 = 15, (100−40)/2 = 30; ITL 10, 20, 30, 30.
	if s.MeanTTFT != 30 || s.MedianTPOT != 22.5 || s.MeanITL != 22.5 || s.MedianITL != 25 || s.MeanE2EL != 75 {
		t.Errorf("TTFT mean %g, TPOT median %g, ITL mean %g median %g, E2EL mean %g", s.MeanTTFT, s.MedianTPOT, s.MeanITL, s.MedianITL, s.MeanE2EL)
	}
	if len(s.Requests) != 3 || s.Requests[2].OK || s.Requests[2].TTFTMS != nil || *s.Requests[1].TTFTMS != 40 {
		t.Errorf("rows %+v", s.Requests)
	}
}

// TestRenderGolden pins the table (vLLM's layout) and the JSON keys.
func TestRenderGolden(t *testing.T) {
	s := Summarize(sampleRun(), "http://x/v1", false)
	var table, js bytes.Buffer
	if err := WriteTable(&table, s); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(&js, s); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(js.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"completed", "total_input_tokens", "total_output_tokens", "request_throughput", "output_throughput",
		"total_token_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_itl_ms", "mean_e2el_ms", "duration"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks vLLM's key %q", k)
		}
	}
	for name, got := range map[string][]byte{"table.golden": table.Bytes(), "summary.json.golden": js.Bytes()} {
		path := filepath.Join("testdata", name)
		if *update {
			if err := os.MkdirAll("testdata", 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run with -update to create)", err)
		}
		if !bytes.Equal(want, got) {
			t.Errorf("%s differs; got:\n%s", name, got)
		}
	}
	for _, l := range strings.Split(strings.TrimSpace(table.String()), "\n") {
		if len(l) > 51 && !strings.HasPrefix(l, "  ") {
			t.Errorf("table line wider than vLLM's: %q", l)
		}
	}
}

// TestBar: the bar redraws in place and ends its line.
func TestBar(t *testing.T) {
	var b bytes.Buffer
	bar := NewBar(&b, 4, 0)
	bar.interval = 0
	bar.Update(1, 0)
	bar.Update(4, 1)
	bar.Finish()
	out := b.String()
	if !strings.HasPrefix(out, "\r[=======") || !strings.Contains(out, "\r[==============================] 100% 4/4 requests, 1 failed") || !strings.HasSuffix(out, "\n") {
		t.Errorf("bar output %q", out)
	}
}
