package gateway

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate-dev/tollgate/internal/record"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

// TestGoldenTranscripts plays recorded upstream streams through the real
// gateway and pins, for each, the exact bytes the client receives and the
// Record written. Review a golden diff like code: it is the contract.
func TestGoldenTranscripts(t *testing.T) {
	chatBody := `{"model":"Qwen/Qwen3-8B","messages":[{"role":"user","content":"Why is the sky blue?"}],"stream":true,"max_tokens":64}`
	cases := []struct {
		name      string
		endpoint  string
		body      string
		wantInjct bool // the gateway must add include_usage upstream
	}{
		{"vllm_chat", "/v1/chat/completions", chatBody, true},
		{"openai_usage_null", "/v1/chat/completions", chatBody, true},
		{"completions", "/v1/completions", `{"model":"Qwen/Qwen3-8B","prompt":"Tell a story","stream":true,"stream_options":{"include_usage":true},"max_tokens":4}`, false},
		{"cut", "/v1/chat/completions", chatBody, true},
		{"malformed", "/v1/chat/completions", chatBody, true},
		{"reasoning_keepalive", "/v1/chat/completions", chatBody, true},
		{"tool_calls", "/v1/chat/completions", `{"model":"Qwen/Qwen3-8B","messages":[{"role":"user","content":"weather?"}],"tools":[{"type":"function","function":{"name":"get_weather"}}],"stream":true}`, true},
		{"engine_error", "/v1/chat/completions", chatBody, true},
		{"llamacpp_timings", "/v1/chat/completions", chatBody, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			transcript, err := os.ReadFile(filepath.Join("testdata/sse", tc.name+".sse"))
			if err != nil {
				t.Fatal(err)
			}
			up := newTranscriptUpstream(t, string(transcript))
			tg := newTestGateway(t, testConfig(up.URL()))
			// Usage the engine did not send is counted with Qwen3's own
			// tokenizer; a request arriving while it loads would wait for
			// it, which a busy test host could stretch past tokenizer_wait.
			tg.waitCounter(t, "Qwen/Qwen3-8B")

			resp := post(t, tg.URL+tc.endpoint, tc.body, map[string]string{"X-Tollgate-Biz": "search"})
			got := readAll(t, resp)
			rec := tg.next(t)
			tg.noMore(t)

			sent := <-up.bodies
			var upReq map[string]any
			if err := json.Unmarshal(sent, &upReq); err != nil {
				t.Fatalf("upstream received invalid JSON %q: %v", sent, err)
			}
			so, _ := upReq["stream_options"].(map[string]any)
			if so["include_usage"] != true {
				t.Errorf("upstream body lacks stream_options.include_usage=true: %s", sent)
			}
			if !tc.wantInjct && string(sent) != tc.body {
				t.Errorf("body changed although the client asked for usage itself:\n got %s\nwant %s", sent, tc.body)
			}
			if tc.wantInjct {
				// Apart from the injected member, the body is byte-identical.
				if s := strings.Replace(string(sent), `"stream_options":{"include_usage":true},`, "", 1); s != tc.body {
					t.Errorf("injection changed other bytes:\n got %s\nwant %s", s, tc.body)
				}
			}

			checkGolden(t, filepath.Join("testdata/sse", tc.name+".client"), got)
			checkGolden(t, filepath.Join("testdata/sse", tc.name+".record.json"), goldenRecord(t, rec))
			checkInvariants(t, rec)
		})
	}
}

func checkGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (-want +got):\n%s", path, cmp.Diff(string(want), string(got)))
	}
}

// checkInvariants holds for every Record, whatever happened.
func checkInvariants(t *testing.T, r *record.Record) {
	t.Helper()
	u := r.Usage
	if u.CachedInputTokens > u.InputTokens {
		t.Errorf("cached %d > input %d", u.CachedInputTokens, u.InputTokens)
	}
	if u.ReasoningTokens > u.OutputTokens {
		t.Errorf("reasoning %d > output %d", u.ReasoningTokens, u.OutputTokens)
	}
	d := r.Derived
	if d.E2E <= 0 {
		t.Errorf("E2E = %v, want > 0", d.E2E)
	}
	if d.TTFT != nil && *d.TTFT > d.E2E {
		t.Errorf("TTFT %v > E2E %v", *d.TTFT, d.E2E)
	}
	if d.TPOT != nil && r.Stream {
		want := (d.E2E - *d.TTFT) / time.Duration(u.OutputTokens-1)
		if *d.TPOT != want {
			t.Errorf("TPOT = %v, want (E2E−TTFT)/(n−1) = %v", *d.TPOT, want)
		}
	}
	if d.TPOT != nil && !r.Stream {
		// Non-streamed: the engine's decode over the tokens after the first.
		if want := r.EngineTiming.Decode / time.Duration(u.OutputTokens-1); *d.TPOT != want {
			t.Errorf("TPOT = %v, want engine decode/(n−1) = %v", *d.TPOT, want)
		}
	}
	m := r.Marks
	// Segments sum to E2E (the issue allows 1 %; by construction it is exact).
	if seg := d.Segments; seg.Sum() != d.E2E {
		t.Errorf("segments sum to %v, E2E %v: %+v", seg.Sum(), d.E2E, seg)
	}
	for _, n := range record.SegmentNames {
		if d.Segments.Get(n) < 0 {
			t.Errorf("segment %s negative", n)
		}
	}
	if r.Stream && u.OutputTokens > 0 && m.LastToken > m.FirstClientToken && m.FirstClientToken > 0 {
		want := float64(u.OutputTokens) / (m.LastToken - m.FirstClientToken).Seconds()
		if d.DecodeRate == nil || *d.DecodeRate != want {
			t.Errorf("decode rate = %v, want n/(last−first) = %v", d.DecodeRate, want)
		}
	}
	ordered := []time.Duration{m.AuthDone, m.Admitted, m.UpstreamSent, m.UpstreamHeaders, m.FirstUpstreamToken, m.FirstClientToken, m.LastToken, m.End}
	prev := time.Duration(0)
	for i, v := range ordered {
		if v == 0 {
			continue
		}
		if v < prev {
			t.Errorf("mark %d (%v) before an earlier mark (%v): %+v", i, v, prev, m)
		}
		prev = v
	}
	for i := 1; i < len(r.Timeline); i++ {
		if r.Timeline[i].Index <= r.Timeline[i-1].Index || r.Timeline[i].Offset < r.Timeline[i-1].Offset {
			t.Errorf("timeline not increasing: %v", r.Timeline)
		}
	}
}

// TestGoldenTGIHeaders: TGI's timing headers on a non-streamed answer
// become the engine's segments: queue 12ms; 50ms of inference of which
// 9 generated tokens − 1 at 4ms each are decode, the rest prefill.
func TestGoldenTGIHeaders(t *testing.T) {
	up := newTranscriptUpstream(t, "")
	up.ctype, up.rawBody = "application/json", nonStreamBody
	tgi := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("X-Queue-Time", "12")
		h.Set("X-Inference-Time", "50")
		h.Set("X-Time-Per-Token", "4")
		h.Set("X-Prompt-Tokens", "9")
		h.Set("X-Generated-Tokens", "9")
		_, _ = io.WriteString(w, nonStreamBody)
	}))
	defer tgi.Close()
	cfg := testConfig(tgi.URL + "/v1")
	cfg.Upstreams[0].Engine = "tgi"
	tg := newTestGateway(t, cfg)
	readAll(t, post(t, tg.URL+"/v1/chat/completions", chatReq, nil))
	r := tg.next(t)
	want := &record.EngineTiming{Signal: "tgi-headers", Queue: 12 * time.Millisecond, Inference: 50 * time.Millisecond,
		Decode: 32 * time.Millisecond, Prefill: 18 * time.Millisecond, TTFT: 30 * time.Millisecond, PromptTokens: 9, CompletionTokens: 9}
	if diff := cmp.Diff(want, r.EngineTiming); diff != "" {
		t.Errorf("engine timing (-want +got):\n%s", diff)
	}
	checkGolden(t, filepath.Join("testdata/sse", "tgi_headers.record.json"), goldenRecord(t, r))
	checkInvariants(t, r)
}
