package otlp

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// Attributes that are missing, mistyped or out of range read as "not
// reported" and never cost the rest of the span.
func TestSpanFromVLLMOddAttributes(t *testing.T) {
	tests := []struct {
		name    string
		set     func(a pcommon.Map)
		want    record.EngineTiming
		reasons []string
	}{
		{
			name: "nothing",
			set:  func(pcommon.Map) {},
			want: record.EngineTiming{Signal: SignalVLLMSpan},
		},
		{
			name: "ints for seconds and doubles for tokens",
			set: func(a pcommon.Map) {
				a.PutInt("gen_ai.latency.e2e", 3)
				a.PutDouble("gen_ai.usage.prompt_tokens", 17)
				a.PutDouble("gen_ai.usage.completion_tokens", 2.5) // not a count
				a.PutInt("gen_ai.usage.cached_tokens", 16)
			},
			want: record.EngineTiming{Signal: SignalVLLMSpan, E2E: 3 * time.Second, PromptTokens: 17, CachedTokens: 16},
		},
		{
			name: "out of range",
			set: func(a pcommon.Map) {
				a.PutDouble("gen_ai.latency.time_in_queue", -0.5) // vLLM's queue when never scheduled
				a.PutDouble("gen_ai.latency.e2e", math.NaN())
				a.PutDouble("gen_ai.latency.time_to_first_token", math.Inf(1))
				a.PutDouble("gen_ai.latency.time_in_model_decode", 1e300)
				a.PutInt("gen_ai.usage.completion_tokens", -4)
				a.PutDouble("gen_ai.latency.time_in_model_prefill", 0.001)
			},
			want: record.EngineTiming{Signal: SignalVLLMSpan, Prefill: time.Millisecond},
		},
		{
			name: "wrong types",
			set: func(a pcommon.Map) {
				a.PutStr("gen_ai.latency.e2e", "0.5")
				a.PutBool("gen_ai.usage.prompt_tokens", true)
				a.PutInt("gen_ai.request.id", 7)
				a.PutInt("gen_ai.response.finish_reasons", 1)
			},
			want: record.EngineTiming{Signal: SignalVLLMSpan},
		},
		{
			name: "finish reasons as a string array",
			set: func(a pcommon.Map) {
				a.PutEmptySlice("gen_ai.response.finish_reasons").FromRaw([]any{"length", 3, "stop"})
			},
			want:    record.EngineTiming{Signal: SignalVLLMSpan},
			reasons: []string{"length", "stop"},
		},
		{
			name: "finish reasons not JSON",
			set:  func(a pcommon.Map) { a.PutStr("gen_ai.response.finish_reasons", "stop") },
			want: record.EngineTiming{Signal: SignalVLLMSpan},
		},
		{
			name:    "several sequences",
			set:     func(a pcommon.Map) { a.PutStr("gen_ai.response.finish_reasons", `["stop", "abort"]`) },
			want:    record.EngineTiming{Signal: SignalVLLMSpan},
			reasons: []string{"stop", "abort"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := ptrace.NewSpan()
			s.SetName(VLLMSpanName)
			tt.set(s.Attributes())
			got := SpanFromVLLM(s, testReceived)
			want := Span{Name: VLLMSpanName, Timing: tt.want, FinishReasons: tt.reasons, Received: testReceived}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// A duration vLLM computed in float seconds comes back to the nanosecond.
func TestSecondsRoundTrip(t *testing.T) {
	for _, d := range []time.Duration{0, 1, 999, 1234567, 29600 * time.Microsecond, 3*time.Hour + 7, 90 * 24 * time.Hour} {
		if got, ok := duration(d.Seconds(), time.Second); !ok || got != d {
			t.Errorf("%v → %v s → %v, %v", d, d.Seconds(), got, ok)
		}
		ms := float64(d) / float64(time.Millisecond)
		if got, ok := duration(ms, time.Millisecond); !ok || got != d {
			t.Errorf("%v → %v ms → %v, %v", d, ms, got, ok)
		}
	}
}

func TestParsePerRequestMetrics(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	tests := []struct {
		file string
		want record.EngineTiming
		ok   bool
	}{
		{
			// vLLM's unit-test stats: queued 1.0, scheduled 1.5, first
			// token 2.0, last 3.0 (seconds).
			file: "chat.json",
			want: record.EngineTiming{
				Signal: SignalVLLMMetrics, Queue: ms(500), Prefill: ms(500), Decode: ms(1000),
				TTFT: ms(1000), Inference: ms(1500),
			},
			ok: true,
		},
		{
			file: "chat_stream_final.json",
			want: record.EngineTiming{
				Signal: SignalVLLMMetrics, Queue: ms(2.5), Prefill: ms(31.25),
				TTFT: ms(33.75), Inference: ms(31.25),
			},
			ok: true,
		},
		{file: "completion_disabled.json"},
		{file: "chat_no_engine_stats.json"},
		{file: "chat_stream_no_engine_stats.json"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", "vllm", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			var body struct {
				Metrics json.RawMessage `json:"metrics"`
			}
			if err := json.Unmarshal(b, &body); err != nil {
				t.Fatal(err)
			}
			got, ok := ParsePerRequestMetrics(body.Metrics)
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v", ok, tt.ok)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParsePerRequestMetricsEdges(t *testing.T) {
	tests := []struct {
		raw  string
		want record.EngineTiming
		ok   bool
	}{
		{raw: ``},
		{raw: `null`},
		{raw: `[]`},
		{raw: `"metrics"`},
		{raw: `{"time_to_first_token_ms": "12"}`},
		{raw: `{"mean_itl_ms": 3, "tokens_per_second": 40}`}, // nothing to attribute
		{raw: `{"queue_time_ms": -1, "generation_time_ms": 1e300}`},
		{raw: `{"queue_time_ms": 0}`, want: record.EngineTiming{Signal: SignalVLLMMetrics}, ok: true},
		{
			raw:  `{"generation_time_ms": 250.5, "unknown_field": true}`,
			want: record.EngineTiming{Signal: SignalVLLMMetrics, Decode: 250500 * time.Microsecond},
			ok:   true,
		},
	}
	for _, tt := range tests {
		got, ok := ParsePerRequestMetrics(json.RawMessage(tt.raw))
		if ok != tt.ok || got != tt.want {
			t.Errorf("ParsePerRequestMetrics(%s) = %+v, %v; want %+v, %v", tt.raw, got, ok, tt.want, tt.ok)
		}
	}
}

func FuzzParsePerRequestMetrics(f *testing.F) {
	f.Add([]byte(`{"time_to_first_token_ms":500.0,"generation_time_ms":1000.0,"queue_time_ms":500.0,"mean_itl_ms":null}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"queue_time_ms":1e18}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, ok := ParsePerRequestMetrics(raw)
		if !ok {
			if got != (record.EngineTiming{}) {
				t.Errorf("not ok but returned %+v", got)
			}
			return
		}
		for _, d := range []time.Duration{got.Queue, got.Prefill, got.Decode, got.TTFT, got.Inference} {
			if d < 0 {
				t.Errorf("negative duration in %+v from %s", got, raw)
			}
		}
	})
}
