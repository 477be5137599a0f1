package record

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func ptr[T any](v T) *T { return &v }

func TestFinishFormulas(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name string
		r    Record
		want Derived
	}{
		{
			// TTFT 100ms, E2E 1100ms, 11 tokens: TPOT = 1000/10 = 100ms;
			// first→last 900ms: decode rate = 11/0.9 s.
			name: "stream",
			r: Record{Stream: true, Usage: Usage{OutputTokens: 11}, Marks: Marks{
				UpstreamSent: 10 * ms, FirstUpstreamToken: 90 * ms, FirstClientToken: 100 * ms, LastToken: 1000 * ms, End: 1100 * ms}},
			want: Derived{TTFT: ptr(100 * ms), UpstreamTTFT: ptr(80 * ms), Queue: ptr(20 * ms), E2E: 1100 * ms, TPOT: ptr(100 * ms), DecodeRate: ptr(11 / 0.9)},
		},
		{
			name: "one token: no TPOT, no decode rate",
			r:    Record{Stream: true, Usage: Usage{OutputTokens: 1}, Marks: Marks{UpstreamSent: 1, FirstUpstreamToken: 5 * ms, FirstClientToken: 6 * ms, LastToken: 6 * ms, End: 7 * ms}},
			want: Derived{TTFT: ptr(6 * ms), UpstreamTTFT: ptr(5*ms - 1), Queue: ptr(ms + 1), E2E: 7 * ms},
		},
		{
			name: "non-streamed: TTFT at the flush, no TPOT",
			r:    Record{Usage: Usage{OutputTokens: 50}, Marks: Marks{UpstreamSent: ms, FirstUpstreamToken: 400 * ms, FirstClientToken: 401 * ms, LastToken: 401 * ms, End: 402 * ms}},
			want: Derived{TTFT: ptr(401 * ms), UpstreamTTFT: ptr(399 * ms), Queue: ptr(2 * ms), E2E: 402 * ms},
		},
		{
			name: "refused before the upstream",
			r:    Record{Marks: Marks{AuthDone: ms, End: 2 * ms}},
			want: Derived{E2E: 2 * ms},
		},
		{
			// 20 tokens in 5 chunks, 100 content bytes: 5 bytes per token on
			// average; a first chunk of 40 bytes carried about 8 tokens.
			name: "first packet merged",
			r:    Record{Stream: true, Usage: Usage{OutputTokens: 20}, ContentChunks: 5, ContentBytes: 100, FirstChunkBytes: 40, Marks: Marks{FirstClientToken: ms, LastToken: 2 * ms, End: 3 * ms}},
			want: Derived{TTFT: ptr(ms), E2E: 3 * ms, TPOT: ptr(2 * ms / 19), DecodeRate: ptr(20 / 0.001), FirstPacketMerge: true},
		},
		{
			name: "one token per chunk: no merge",
			r:    Record{Stream: true, Usage: Usage{OutputTokens: 5}, ContentChunks: 5, ContentBytes: 25, FirstChunkBytes: 9, Marks: Marks{FirstClientToken: ms, LastToken: 2 * ms, End: 3 * ms}},
			want: Derived{TTFT: ptr(ms), E2E: 3 * ms, TPOT: ptr(2 * ms / 4), DecodeRate: ptr(5 / 0.001)},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.r.Finish()
			if diff := cmp.Diff(tc.want, tc.r.Derived, cmp.Comparer(func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }),
				cmpopts.IgnoreFields(Derived{}, "Segments")); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestJSONRoundTrip(t *testing.T) {
	arrival := time.Date(2026, 11, 29, 9, 30, 0, 123456789, time.UTC)
	r := Record{
		RequestID: "req_1", LogicalRequestID: "req_1", Attempt: 1, TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7",
		UserID: "alice", KeyID: "abc", Team: "t", BizLine: "search", SessionID: "s", TemplateID: "faq", Tags: map[string]string{"app": "web"},
		Endpoint: "chat", Model: "m", ServedModel: "m-1", Upstream: "gpu-a", Engine: "vllm",
		Stream: true, IncludeUsage: true, MaxTokens: ptr(int64(64)), Temperature: ptr(0.7), TopP: ptr(0.9),
		PromptSHA256: "ff", PromptBytes: 10, Messages: 2, RequestBytes: 99,
		Arrival:  arrival,
		Marks:    Marks{AuthDone: 1000, Admitted: 2000, UpstreamSent: 3000, UpstreamHeaders: 4000, FirstUpstreamToken: 5 * time.Millisecond, FirstClientToken: 6 * time.Millisecond, LastToken: 60 * time.Millisecond, End: 61 * time.Millisecond},
		Timeline: []TimelinePoint{{0, 6 * time.Millisecond}, {10, 20 * time.Millisecond}, {11, 60 * time.Millisecond}},
		Status:   200, UpstreamStatus: 200, FinishReason: "stop", ResponseBytes: 500, ContentChunks: 12, FirstChunkBytes: 3, ContentBytes: 40,
		Retries: 0, Sampled: true,
		Usage:    Usage{InputTokens: 30, CachedInputTokens: 16, OutputTokens: 12, ReasoningTokens: 2, Source: SourceEngine},
		Cost:     Cost{Nanos: 1_230_000, Currency: "USD", PriceVersion: "m@2026-11-01"},
		CacheHit: true,
		// These change the segments; "tollgate store import" relies on
		// reading them back.
		ConnectWait: 1500, ClientWrite: 2*time.Millisecond + 1, ClientWriteTail: time.Millisecond + 3,
		EngineTiming: &EngineTiming{Signal: "vllm_span", Queue: 1000001, TTFT: 4*time.Millisecond + 7, Prefill: 3 * time.Millisecond,
			Decode: 50*time.Millisecond + 9, Inference: 53 * time.Millisecond, E2E: 55 * time.Millisecond, PromptTokens: 30, CompletionTokens: 12, CachedTokens: 16},
	}
	r.Finish()
	b, err := json.Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	var got Record
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(r, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s\n%s", diff, b)
	}
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	timing := m["timing"].(map[string]any)
	if timing["arrival"] != "2026-11-29T09:30:00.123456789Z" || timing["ttft_ms"] != 6.0 || timing["e2e_ms"] != 61.0 || m["prefix_cache_hit"] != true || m["cache_hit"] != true {
		t.Errorf("JSON form: arrival %v ttft %v e2e %v prefix_cache_hit %v cache_hit %v", timing["arrival"], timing["ttft_ms"], timing["e2e_ms"], m["prefix_cache_hit"], m["cache_hit"])
	}
	if c := m["cost"].(map[string]any); c["amount"] != "0.00123" || c["currency"] != "USD" {
		t.Errorf("cost = %v", c)
	}
	if tpot := timing["tpot_ms"].(float64); tpot != 5 { // (61−6)/11
		t.Errorf("tpot_ms = %v, want 5", tpot)
	}
}

func TestUsageTotal(t *testing.T) {
	if got := (Usage{InputTokens: 7, CachedInputTokens: 5, OutputTokens: 3, ReasoningTokens: 2}).Total(); got != 10 {
		t.Errorf("Total = %d, want input+output = 10", got)
	}
}

// TestInputUnknown: an input nobody counted (sources chunks and none) is
// unknown, and the JSON form says so beside input_tokens (0), so that
// readers show it as unknown rather than as a count of 0.
func TestInputUnknown(t *testing.T) {
	for _, tc := range []struct {
		src   Source
		known bool
	}{
		{SourceEngine, true}, {SourceTokenizer, true}, {SourceMerged, true},
		{SourceChunks, false}, {SourceNone, false}, {"", false},
	} {
		u := Usage{OutputTokens: 3, Source: tc.src}
		if got := u.InputKnown(); got != tc.known {
			t.Errorf("source %q: InputKnown = %v, want %v", tc.src, got, tc.known)
		}
		r := &Record{RequestID: "r", Usage: u}
		b, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var j struct {
			Usage map[string]any `json:"usage"`
		}
		if err := json.Unmarshal(b, &j); err != nil {
			t.Fatal(err)
		}
		if got, _ := j.Usage["input_unknown"].(bool); got == tc.known {
			t.Errorf("source %q: JSON usage %v, want input_unknown %v", tc.src, j.Usage, !tc.known)
		}
		if j.Usage["input_tokens"] != 0.0 {
			t.Errorf("source %q: input_tokens %v, want 0 kept for scripts", tc.src, j.Usage["input_tokens"])
		}
		var back Record
		if err := back.UnmarshalJSON(b); err != nil {
			t.Fatal(err)
		}
		if want := r.Usage; want.Source == "" {
			want.Source = SourceNone
			r.Usage = want
		}
		if back.Usage != r.Usage {
			t.Errorf("source %q: read back %+v, want %+v", tc.src, back.Usage, r.Usage)
		}
	}
}

func TestCostAmount(t *testing.T) {
	for nanos, want := range map[int64]string{0: "0", 1: "0.000000001", 1_500_000_000: "1.5", 123_456_789_012: "123.456789012", -2_500_000: "-0.0025"} {
		if got := (Cost{Nanos: nanos}).Amount(); got != want {
			t.Errorf("Amount(%d) = %q, want %q", nanos, got, want)
		}
	}
}

// TestTimelineRoundTrip: the stores' timeline encoding comes back to the
// nanosecond, empty included.
func TestTimelineRoundTrip(t *testing.T) {
	for _, tl := range [][]TimelinePoint{{}, {{Index: 0, Offset: 1}, {Index: 7, Offset: 1<<62 + 3}}} {
		s := EncodeTimeline(tl)
		back, err := ParseTimeline(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if len(back) != len(tl) {
			t.Fatalf("%s: %d points back, want %d", s, len(back), len(tl))
		}
		for i := range tl {
			if back[i] != tl[i] {
				t.Errorf("%s: point %d = %+v, want %+v", s, i, back[i], tl[i])
			}
		}
	}
	if _, err := ParseTimeline("[[1,"); err == nil {
		t.Error("a cut timeline parsed")
	}
}
