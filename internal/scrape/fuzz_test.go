package scrape

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// FuzzNormalise feeds random exposition text to the normaliser of every
// engine, alone and after a real scrape, and checks it neither panics nor
// breaks its invariants. Whatever the parser accepts, even partly before an
// error, reaches Normalise, as from a half-broken engine.
func FuzzNormalise(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.prom"))
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	for _, s := range []string{
		"",
		"vllm:num_requests_running NaN\nvllm:kv_cache_usage_perc +Inf\n",
		"# TYPE vllm:time_to_first_token_seconds histogram\nvllm:time_to_first_token_seconds_bucket{le=\"-Inf\"} 3\nvllm:time_to_first_token_seconds_bucket{le=\"1\"} 1\n",
		"# TYPE vllm:time_to_first_token_seconds histogram\nvllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"NaN\"} 1e308\nvllm:time_to_first_token_seconds_count{model_name=\"m\"} 1.5\n",
		"# TYPE tgi_request_input_length summary\ntgi_request_input_length{quantile=\"0.5\"} 3\ntgi_request_input_length_sum -7\n",
		"sglang:cached_tokens_total{model_name=\"m\"} 9\nsglang:prompt_tokens_total{model_name=\"m\"} 1\n",
		"llamacpp:requests_processing{model_name=\"x\"} 1\nllamacpp:requests_processing 2\n",
		"vllm:num_requests_running{model_name=\"a\"} 1\nvllm:num_requests_running{model_name=\"a\"} 1\n",
	} {
		f.Add(s)
	}
	golden := map[string]string{
		EngineVLLM: "vllm.1.prom", EngineSGLang: "sglang.1.prom",
		EngineLlamaCPP: "llamacpp.1.prom", EngineTGI: "tgi.1.prom",
	}
	prevs := map[string]*State{}
	goldenFamilies := map[string]map[string]*dto.MetricFamily{}
	for engine, name := range golden {
		goldenFamilies[engine] = parseFile(f, name)
		_, prevs[engine] = Normalise(engine, goldenFamilies[engine], nil, t0)
	}

	f.Fuzz(func(t *testing.T, text string) {
		p := expfmt.NewTextParser(model.UTF8Validation)
		families, _ := p.TextToMetricFamilies(strings.NewReader(text))
		for engine := range specs {
			first, st := Normalise(engine, families, nil, t0)
			check(t, engine, first)
			again, _ := Normalise(engine, families, st, t0.Add(10*time.Second))
			check(t, engine, again)
			after, _ := Normalise(engine, families, prevs[engine], t0.Add(10*time.Second))
			check(t, engine, after)
			back, _ := Normalise(engine, goldenFamilies[engine], st, t0.Add(20*time.Second))
			check(t, engine, back)
		}
	})
}

func check(t *testing.T, engine string, samples []Sample) {
	t.Helper()
	if !slices.IsSortedFunc(samples, func(a, b Sample) int { return strings.Compare(a.Model, b.Model) }) {
		t.Fatalf("%s: samples not sorted by model: %+v", engine, samples)
	}
	for i, s := range samples {
		if i > 0 && samples[i-1].Model == s.Model {
			t.Fatalf("%s: model %q twice", engine, s.Model)
		}
		if !s.Up || !s.At.After(t0.Add(-time.Second)) {
			t.Fatalf("%s: sample %+v", engine, s)
		}
		if p := []float64{s.TTFTP50, s.TTFTP95, s.TTFTP99}; finite(p...) && !(p[0] <= p[1] && p[1] <= p[2]) {
			t.Fatalf("%s: percentiles out of order: %v", engine, p)
		}
		if r := s.PrefixCacheHitRate; finite(r) && engine != EngineSGLang && engine != EngineVLLM {
			t.Fatalf("%s has no prefix cache metric, got %v", engine, r)
		}
		for _, v := range []float64{s.PromptTokensPerS, s.GenerationTokensPerS} {
			if finite(v) && v < 0 {
				t.Fatalf("%s: negative token rate %v", engine, v)
			}
		}
	}
}

func finite(vs ...float64) bool {
	for _, v := range vs {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return false
		}
	}
	return true
}
