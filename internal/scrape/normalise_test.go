package scrape

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func parse(t testing.TB, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mf, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parse exposition: %v\n%s", err, text)
	}
	return mf
}

func parseFile(t testing.TB, name string) map[string]*dto.MetricFamily {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return parse(t, string(b))
}

// goldenCases are expositions written after the engines' documentation and
// source (see engines.go): <case>.1.prom, and <case>.2.prom scraped 10s
// later when the case has one.
var goldenCases = []struct{ name, engine string }{
	{"vllm", EngineVLLM},
	{"vllm_v0", EngineVLLM},
	{"sglang", EngineSGLang},
	{"llamacpp", EngineLlamaCPP},
	{"llamacpp_old", EngineLlamaCPP},
	{"tgi", EngineTGI},
}

// scrapeCase normalises every scrape of a case in order and returns the
// Samples of each.
func scrapeCase(t *testing.T, name, engine string) [][]Sample {
	t.Helper()
	var st *State
	var out [][]Sample
	for i := 1; ; i++ {
		file := fmt.Sprintf("%s.%d.prom", name, i)
		if _, err := os.Stat(filepath.Join("testdata", file)); errors.Is(err, fs.ErrNotExist) {
			break
		}
		var samples []Sample
		samples, st = Normalise(engine, parseFile(t, file), st, t0.Add(time.Duration(i-1)*10*time.Second))
		out = append(out, samples)
	}
	return out
}

func render(scrapes [][]Sample) string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	var b strings.Builder
	for i, samples := range scrapes {
		for _, s := range samples {
			fmt.Fprintf(&b, "scrape %d +%s model=%q up=%t\n", i+1, s.At.Sub(t0), s.Model, s.Up)
			fmt.Fprintf(&b, "  running=%s waiting=%s kv_cache_usage=%s prefix_cache_hit_rate=%s\n",
				f(s.Running), f(s.Waiting), f(s.KVCacheUsage), f(s.PrefixCacheHitRate))
			fmt.Fprintf(&b, "  ttft_p50=%s ttft_p95=%s ttft_p99=%s prompt_tokens_per_s=%s generation_tokens_per_s=%s\n",
				f(s.TTFTP50), f(s.TTFTP95), f(s.TTFTP99), f(s.PromptTokensPerS), f(s.GenerationTokensPerS))
		}
	}
	return b.String()
}

func TestNormaliseGolden(t *testing.T) {
	for _, c := range goldenCases {
		t.Run(c.name, func(t *testing.T) {
			got := render(scrapeCase(t, c.name, c.engine))
			path := filepath.Join("testdata", c.name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("%s mismatch (-want +got):\n%s", path, diff)
			}
		})
	}
}

var nan = math.NaN()

var approx = cmp.Options{cmpopts.EquateNaNs(), cmpopts.EquateApprox(0, 1e-9)}

// TestNormaliseHandComputed checks the golden numbers against values worked
// out by hand from the .prom files (10s between the two scrapes).
func TestNormaliseHandComputed(t *testing.T) {
	at := t0.Add(10 * time.Second)
	tests := []struct {
		name, engine string
		first, last  []Sample
	}{{
		// Two engine cores of one model: counts summed, KV usage averaged.
		// TTFT bucket deltas summed over both cores, cumulative:
		// ≤0.06:5 ≤0.08:10 ≤0.1:20 ≤0.25:70 ≤0.5:90 ≤0.75:95 ≤1:98 ≤2.5:100.
		// p50: rank 50 in (0.1, 0.25] holding 50 → 0.1 + 0.15·30/50 = 0.19.
		// p95: rank 95 in (0.5, 0.75] holding 5 → 0.5 + 0.25·5/5 = 0.75.
		// p99: rank 99 in (1, 2.5] holding 2 → 1 + 1.5·1/2 = 1.75.
		// Prefix: Δhits 6000+1500 over Δqueries 12000+3000 = 0.5.
		// Tokens: Δprompt 15000, Δgeneration 8000 over 10s.
		name: "vllm", engine: EngineVLLM,
		first: []Sample{{At: t0, Model: "Qwen/Qwen3-8B", Up: true, Running: 3, Waiting: 0, KVCacheUsage: 0.30,
			PrefixCacheHitRate: nan, TTFTP50: nan, TTFTP95: nan, TTFTP99: nan, PromptTokensPerS: nan, GenerationTokensPerS: nan}},
		last: []Sample{{At: at, Model: "Qwen/Qwen3-8B", Up: true, Running: 5, Waiting: 1, KVCacheUsage: 0.40,
			PrefixCacheHitRate: 0.5, TTFTP50: 0.19, TTFTP95: 0.75, TTFTP99: 1.75, PromptTokensPerS: 1500, GenerationTokensPerS: 800}},
	}, {
		// V0 names: gpu_cache_usage_perc, and the hit-rate gauge read as it
		// is, on the first scrape too. TTFT deltas, cumulative:
		// ≤0.25:0 ≤0.5:20 ≤0.75:20 ≤1:28 ≤2.5:30.
		// p50: rank 15 in (0.25, 0.5] holding 20 → 0.25 + 0.25·15/20 = 0.4375.
		// p95: rank 28.5 in (1, 2.5] holding 2 → 1 + 1.5·0.5/2 = 1.375.
		// p99: rank 29.7 → 1 + 1.5·1.7/2 = 2.275.
		name: "vllm_v0", engine: EngineVLLM,
		first: []Sample{{At: t0, Model: "meta-llama/Llama-3.1-8B-Instruct", Up: true, Running: 4, Waiting: 2, KVCacheUsage: 0.55,
			PrefixCacheHitRate: 0.25, TTFTP50: nan, TTFTP95: nan, TTFTP99: nan, PromptTokensPerS: nan, GenerationTokensPerS: nan}},
		last: []Sample{{At: at, Model: "meta-llama/Llama-3.1-8B-Instruct", Up: true, Running: 6, Waiting: 3, KVCacheUsage: 0.61,
			PrefixCacheHitRate: 0.3125, TTFTP50: 0.4375, TTFTP95: 1.375, TTFTP99: 2.275, PromptTokensPerS: 600, GenerationTokensPerS: 300}},
	}, {
		// Hit rate from Δcached 8000 / Δprompt 20000 = 0.4, not the gauge.
		// TTFT deltas, cumulative: ≤0.2:40 ≤0.4:80 ≤0.6:90 ≤0.8:90 ≤1:96 ≤2:100.
		// p50: rank 50 in (0.2, 0.4] holding 40 → 0.2 + 0.2·10/40 = 0.25.
		// p95: rank 95 in (0.8, 1] holding 6 → 0.8 + 0.2·5/6.
		// p99: rank 99 in (1, 2] holding 4 → 1 + 1·3/4 = 1.75.
		name: "sglang", engine: EngineSGLang,
		first: []Sample{{At: t0, Model: "meta-llama/Llama-3.1-8B-Instruct", Up: true, Running: 12, Waiting: 3, KVCacheUsage: 0.28,
			PrefixCacheHitRate: nan, TTFTP50: nan, TTFTP95: nan, TTFTP99: nan, PromptTokensPerS: nan, GenerationTokensPerS: nan}},
		last: []Sample{{At: at, Model: "meta-llama/Llama-3.1-8B-Instruct", Up: true, Running: 16, Waiting: 5, KVCacheUsage: 0.35,
			PrefixCacheHitRate: 0.4, TTFTP50: 0.25, TTFTP95: 0.8 + 0.2*5/6, TTFTP99: 1.75, PromptTokensPerS: 2000, GenerationTokensPerS: 1000}},
	}, {
		// No model label, no KV gauge in current builds, no TTFT histogram.
		name: "llamacpp", engine: EngineLlamaCPP,
		first: []Sample{{At: t0, Up: true, Running: 2, Waiting: 0, KVCacheUsage: nan,
			PrefixCacheHitRate: nan, TTFTP50: nan, TTFTP95: nan, TTFTP99: nan, PromptTokensPerS: nan, GenerationTokensPerS: nan}},
		last: []Sample{{At: at, Up: true, Running: 4, Waiting: 3, KVCacheUsage: nan,
			PrefixCacheHitRate: nan, TTFTP50: nan, TTFTP95: nan, TTFTP99: nan, PromptTokensPerS: 300, GenerationTokensPerS: 40}},
	}, {
		name: "llamacpp_old", engine: EngineLlamaCPP,
		first: []Sample{{At: t0, Up: true, Running: 1, Waiting: 0, KVCacheUsage: 0.5,
			PrefixCacheHitRate: nan, TTFTP50: nan, TTFTP95: nan, TTFTP99: nan, PromptTokensPerS: nan, GenerationTokensPerS: nan}},
	}, {
		// Token rates from the _sum of the per-request token histograms.
		name: "tgi", engine: EngineTGI,
		first: []Sample{{At: t0, Up: true, Running: 24, Waiting: 7, KVCacheUsage: nan,
			PrefixCacheHitRate: nan, TTFTP50: nan, TTFTP95: nan, TTFTP99: nan, PromptTokensPerS: nan, GenerationTokensPerS: nan}},
		last: []Sample{{At: at, Up: true, Running: 20, Waiting: 2, KVCacheUsage: nan,
			PrefixCacheHitRate: nan, TTFTP50: nan, TTFTP95: nan, TTFTP99: nan, PromptTokensPerS: 1500, GenerationTokensPerS: 400}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := scrapeCase(t, tt.name, tt.engine)
			if diff := cmp.Diff(tt.first, got[0], approx); diff != "" {
				t.Errorf("first scrape (-want +got):\n%s", diff)
			}
			if tt.last == nil {
				return
			}
			if diff := cmp.Diff(tt.last, got[len(got)-1], approx); diff != "" {
				t.Errorf("last scrape (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNormaliseCounterReset(t *testing.T) {
	before := `# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="m"} 1000
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="m"} 500
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{model_name="m"} 1000
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{model_name="m"} 800
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{model_name="m",le="0.1"} 50
vllm:time_to_first_token_seconds_bucket{model_name="m",le="1"} 90
vllm:time_to_first_token_seconds_bucket{model_name="m",le="+Inf"} 100
vllm:time_to_first_token_seconds_count{model_name="m"} 100
vllm:time_to_first_token_seconds_sum{model_name="m"} 20
`
	// The engine restarted in between: every counter is below its old value,
	// so what it shows now is what happened in the interval.
	after := `# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="m"} 300
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="m"} 600
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{model_name="m"} 200
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{model_name="m"} 50
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{model_name="m",le="0.1"} 2
vllm:time_to_first_token_seconds_bucket{model_name="m",le="1"} 4
vllm:time_to_first_token_seconds_bucket{model_name="m",le="+Inf"} 4
vllm:time_to_first_token_seconds_count{model_name="m"} 4
vllm:time_to_first_token_seconds_sum{model_name="m"} 1
`
	_, st := Normalise(EngineVLLM, parse(t, before), nil, t0)
	got, _ := Normalise(EngineVLLM, parse(t, after), st, t0.Add(10*time.Second))
	// prompt: reset, 300/10s. generation went up (500→600): 100/10s.
	// prefix: 50/200. TTFT from the 4 new observations: p50 rank 2 is the
	// whole of (0, 0.1] → 0.1; p95 rank 3.8 in (0.1, 1] holding 2 → 0.1 + 0.9·1.8/2.
	want := []Sample{{At: t0.Add(10 * time.Second), Model: "m", Up: true,
		Running: nan, Waiting: nan, KVCacheUsage: nan, PrefixCacheHitRate: 0.25,
		TTFTP50: 0.1, TTFTP95: 0.1 + 0.9*1.8/2, TTFTP99: 0.1 + 0.9*1.96/2,
		PromptTokensPerS: 30, GenerationTokensPerS: 10}}
	if diff := cmp.Diff(want, got, approx); diff != "" {
		t.Errorf("after restart (-want +got):\n%s", diff)
	}
}

func TestNormaliseChoices(t *testing.T) {
	tests := []struct {
		name, engine, before, after string
		check                       func(t *testing.T, s Sample)
	}{{
		name: "vllm prefers kv_cache_usage_perc over the deprecated name", engine: EngineVLLM,
		after: "vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.9\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.2\n",
		check: func(t *testing.T, s Sample) { wantFloat(t, "KVCacheUsage", s.KVCacheUsage, 0.2) },
	}, {
		name: "vllm 0.9 deprecated prefix counters", engine: EngineVLLM,
		before: "vllm:gpu_prefix_cache_queries_total{model_name=\"m\"} 100\nvllm:gpu_prefix_cache_hits_total{model_name=\"m\"} 10\n",
		after:  "vllm:gpu_prefix_cache_queries_total{model_name=\"m\"} 300\nvllm:gpu_prefix_cache_hits_total{model_name=\"m\"} 60\n",
		check:  func(t *testing.T, s Sample) { wantFloat(t, "PrefixCacheHitRate", s.PrefixCacheHitRate, 0.25) },
	}, {
		name: "no prefix query in the interval is unknown, not zero", engine: EngineVLLM,
		before: "vllm:prefix_cache_queries_total{model_name=\"m\"} 100\nvllm:prefix_cache_hits_total{model_name=\"m\"} 10\n",
		after:  "vllm:prefix_cache_queries_total{model_name=\"m\"} 100\nvllm:prefix_cache_hits_total{model_name=\"m\"} 10\n",
		check:  func(t *testing.T, s Sample) { wantFloat(t, "PrefixCacheHitRate", s.PrefixCacheHitRate, nan) },
	}, {
		name: "no TTFT observed in the interval is unknown; an idle token rate is zero", engine: EngineVLLM,
		before: "vllm:prompt_tokens_total{model_name=\"m\"} 7\nvllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 3\n",
		after:  "vllm:prompt_tokens_total{model_name=\"m\"} 7\nvllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 3\n",
		check: func(t *testing.T, s Sample) {
			wantFloat(t, "TTFTP50", s.TTFTP50, nan)
			wantFloat(t, "PromptTokensPerS", s.PromptTokensPerS, 0)
		},
	}, {
		name: "a model first seen now gets gauges only", engine: EngineVLLM,
		before: "vllm:prompt_tokens_total{model_name=\"other\"} 7\n",
		after:  "vllm:prompt_tokens_total{model_name=\"m\"} 70\nvllm:num_requests_running{model_name=\"m\"} 1\n",
		check: func(t *testing.T, s Sample) {
			wantFloat(t, "Running", s.Running, 1)
			wantFloat(t, "PromptTokensPerS", s.PromptTokensPerS, nan)
		},
	}, {
		name: "sglang falls back to its hit-rate gauge without cached_tokens_total", engine: EngineSGLang,
		after: "sglang:cache_hit_rate{model_name=\"m\"} 0.7\nsglang:prompt_tokens_total{model_name=\"m\"} 10\n",
		check: func(t *testing.T, s Sample) { wantFloat(t, "PrefixCacheHitRate", s.PrefixCacheHitRate, 0.7) },
	}, {
		name: "sglang DP ranks: counts summed, usage averaged", engine: EngineSGLang,
		after: "sglang:num_running_reqs{model_name=\"m\",dp_rank=\"0\"} 3\nsglang:num_running_reqs{model_name=\"m\",dp_rank=\"1\"} 4\n" +
			"sglang:token_usage{model_name=\"m\",dp_rank=\"0\"} 0.2\nsglang:token_usage{model_name=\"m\",dp_rank=\"1\"} 0.6\n",
		check: func(t *testing.T, s Sample) {
			wantFloat(t, "Running", s.Running, 7)
			wantFloat(t, "KVCacheUsage", s.KVCacheUsage, 0.4)
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var st *State
			if tt.before != "" {
				_, st = Normalise(tt.engine, parse(t, tt.before), nil, t0)
			}
			got, _ := Normalise(tt.engine, parse(t, tt.after), st, t0.Add(10*time.Second))
			for _, s := range got {
				if s.Model == "m" {
					tt.check(t, s)
					return
				}
			}
			t.Fatalf("no sample for model m in %+v", got)
		})
	}
}

func TestNormaliseNothingToRead(t *testing.T) {
	vllm := parseFile(t, "vllm.1.prom")
	for _, engine := range []string{EngineOllama, EngineOpenAI, "triton"} {
		if got, st := Normalise(engine, vllm, nil, t0); got != nil || st != nil {
			t.Errorf("Normalise(%s) = %v, %v; want nothing", engine, got, st)
		}
	}
	// vLLM's exposition read as llama.cpp's has none of its names.
	if got, _ := Normalise(EngineLlamaCPP, vllm, nil, t0); len(got) != 0 {
		t.Errorf("vLLM exposition as llama.cpp: %+v", got)
	}
	if got, _ := Normalise(EngineVLLM, nil, nil, t0); len(got) != 0 {
		t.Errorf("nil families: %+v", got)
	}
}

func TestQuantile(t *testing.T) {
	inf := math.Inf(1)
	h := hist{bounds: []float64{0.1, 0.5, 1, inf}, counts: []float64{0, 10, 14, 16}}
	tests := []struct {
		name string
		h    hist
		q    float64
		want float64
	}{
		{"interpolated in (0.1, 0.5]", h, 0.5, 0.1 + 0.4*8/10},
		{"interpolated in (0.5, 1]", h, 0.75, 0.5 + 0.5*2/4},
		{"in +Inf: highest finite bound", h, 0.95, 1},
		{"first bucket from 0", hist{bounds: []float64{2, inf}, counts: []float64{4, 4}}, 0.5, 1},
		{"first bucket with bound ≤ 0", hist{bounds: []float64{-1, inf}, counts: []float64{4, 4}}, 0.5, -1},
		{"non-monotonic counts fixed", hist{bounds: []float64{1, 2, 3, inf}, counts: []float64{4, 2, 6, 8}}, 0.625, 2 + 1.0/2},
		{"empty", hist{bounds: []float64{1, inf}, counts: []float64{0, 0}}, 0.5, nan},
		{"no +Inf bucket", hist{bounds: []float64{1, 2}, counts: []float64{1, 2}}, 0.5, nan},
		{"nothing", hist{}, 0.5, nan},
	}
	for _, tt := range tests {
		if got := tt.h.quantile(tt.q); !cmp.Equal(got, tt.want, approx) {
			t.Errorf("%s: quantile(%v) = %v, want %v", tt.name, tt.q, got, tt.want)
		}
	}
}

func TestMetricsURL(t *testing.T) {
	tests := []struct{ base, want string }{
		{"http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/metrics"},
		{"http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000/metrics"},
		{"https://vllm.internal/prefix/v1", "https://vllm.internal/prefix/metrics"},
		{"http://llama:8080", "http://llama:8080/metrics"},
		{"http://user:pw@sglang:30000/v1?x=1", "http://user:pw@sglang:30000/metrics"},
	}
	for _, tt := range tests {
		got, err := MetricsURL(tt.base)
		if err != nil || got != tt.want {
			t.Errorf("MetricsURL(%q) = %q, %v; want %q", tt.base, got, err, tt.want)
		}
	}
	for _, bad := range []string{"127.0.0.1:8000", "/v1", "ftp://x/v1", "http://[::1"} {
		if got, err := MetricsURL(bad); err == nil {
			t.Errorf("MetricsURL(%q) = %q, want an error", bad, got)
		}
	}
}

func wantFloat(t *testing.T, name string, got, want float64) {
	t.Helper()
	if !cmp.Equal(got, want, approx) {
		t.Errorf("%s = %v, want %v", name, got, want)
	}
}
