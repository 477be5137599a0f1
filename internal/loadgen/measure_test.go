package loadgen

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func at(msec float64) time.Time { return t0.Add(time.Duration(msec * float64(time.Millisecond))) }

func msd(msec float64) time.Duration { return time.Duration(msec * float64(time.Millisecond)) }

func content(msec float64) Event { return Event{At: at(msec), Kind: KindContent, Text: " w"} }

func usage(msec float64, prompt, completion int) Event {
	return Event{At: at(msec), Kind: KindUsage, HasUsage: true, PromptTokens: prompt, CompletionTokens: completion}
}

// TestMeasureDefinitions checks each figure against hand-computed values on
// synthetic chunk timelines (start is t0).
func TestMeasureDefinitions(t *testing.T) {
	tests := []struct {
		name   string
		events []Event
		want   Measurement
	}{{
		// role-only first delta at 10 ms is not the first token; the usage
		// chunk (103) and [DONE] (104) are not part of E2E, which ends at
		// the finish chunk (101). TPOT = (101 − 50) / (4 − 1) = 17 ms.
		name: "chat stream with role chunk, finish, usage and done",
		events: []Event{
			{At: at(10), Kind: KindRole},
			content(50), content(60), content(75), content(100),
			{At: at(101), Kind: KindFinish, FinishReason: "stop"},
			usage(103, 12, 4),
			{At: at(104), Kind: KindDone},
		},
		want: Measurement{
			TTFT: msd(50), HasTTFT: true, E2E: msd(101), StreamEnd: msd(104),
			ITL:  []time.Duration{msd(10), msd(15), msd(25)},
			TPOT: msd(17), HasTPOT: true, ContentChunks: 4, OutputTokens: 4, OutputFrom: FromUsage,
			InputTokens: 12, FinishReason: "stop", SawDone: true,
		},
	}, {
		// n = 1: TPOT is undefined (vLLM leaves such requests out of TPOT),
		// and there is no inter-token gap.
		name: "one output token",
		events: []Event{
			{At: at(5), Kind: KindRole}, content(20),
			{At: at(21), Kind: KindFinish, FinishReason: "length"},
			usage(29, 7, 1), {At: at(30), Kind: KindDone},
		},
		want: Measurement{
			TTFT: msd(20), HasTTFT: true, E2E: msd(21), StreamEnd: msd(30),
			ContentChunks: 1, OutputTokens: 1, OutputFrom: FromUsage, InputTokens: 7, FinishReason: "length", SawDone: true,
		},
	}, {
		// Without usage the content chunks are the token count. The last
		// content chunk carries the finish reason (as vLLM sends it).
		name: "no usage: tokens are content chunks",
		events: []Event{
			content(30), content(40),
			{At: at(52), Kind: KindContent, FinishReason: "stop"},
			{At: at(60), Kind: KindDone},
		},
		want: Measurement{
			TTFT: msd(30), HasTTFT: true, E2E: msd(52), StreamEnd: msd(60),
			ITL:  []time.Duration{msd(10), msd(12)},
			TPOT: msd(11), HasTPOT: true, ContentChunks: 3, OutputTokens: 3, OutputFrom: FromChunks, FinishReason: "stop", SawDone: true,
		},
	}, {
		// The server's count wins over chunks: a merged first packet holds
		// several tokens. TPOT = (71 − 30) / (5 − 1) = 10.25 ms; ITL stays the
		// one gap the client saw.
		name: "usage counts more tokens than chunks",
		events: []Event{
			content(30), content(70),
			{At: at(71), Kind: KindFinish, FinishReason: "stop"},
			usage(90, 3, 5),
		},
		want: Measurement{
			TTFT: msd(30), HasTTFT: true, E2E: msd(71), StreamEnd: msd(90),
			ITL:  []time.Duration{msd(40)},
			TPOT: msd(10.25), HasTPOT: true, ContentChunks: 2, OutputTokens: 5, OutputFrom: FromUsage, InputTokens: 3, FinishReason: "stop",
		},
	}, {
		name:   "role only, then the end: no first token",
		events: []Event{{At: at(8), Kind: KindRole}, {At: at(9), Kind: KindFinish, FinishReason: "stop"}, {At: at(10), Kind: KindDone}},
		want:   Measurement{E2E: msd(9), StreamEnd: msd(10), OutputFrom: FromChunks, FinishReason: "stop", SawDone: true},
	}, {
		name:   "nothing at all",
		events: nil,
		want:   Measurement{OutputFrom: FromChunks},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Measure(t0, tt.events)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Measure (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMeasureFromIntendedStart: the same timeline measured from an earlier
// intended start has every latency longer by the difference, and gaps
// unchanged — the open loop's queueing is not hidden.
func TestMeasureFromIntendedStart(t *testing.T) {
	ev := []Event{content(50), content(60), {At: at(61), Kind: KindFinish, FinishReason: "stop"}, usage(62, 1, 2), {At: at(63), Kind: KindDone}}
	sent := Measure(t0, ev)
	due := Measure(t0.Add(-msd(200)), ev)
	if due.TTFT-sent.TTFT != msd(200) || due.E2E-sent.E2E != msd(200) {
		t.Errorf("from 200 ms earlier: TTFT %v → %v, E2E %v → %v", sent.TTFT, due.TTFT, sent.E2E, due.E2E)
	}
	if due.TPOT != msd(11) || sent.TPOT != msd(11) {
		// (261 − 250) / 1 and (61 − 50) / 1: TPOT excludes the first token,
		// so the queue does not leak into it.
		t.Errorf("TPOT %v from the intended start, %v from the send, want 11ms both", due.TPOT, sent.TPOT)
	}
}

// TestReadEvents parses a vLLM-like chat transcript with a fake clock that
// ticks one millisecond per line read: each data line gets its own stamp,
// comments and blank lines are skipped, and chunk kinds follow the
// content-chunk rules.
func TestReadEvents(t *testing.T) {
	transcript := strings.Join([]string{
		`: ping`,
		`data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}`,
		``,
		`data: {"id":"c","choices":[{"index":0,"delta":{"content":" Hello"},"finish_reason":null}]}`,
		``,
		`data:{"id":"c","choices":[{"index":0,"delta":{"reasoning_content":"hmm"},"finish_reason":null}]}`,
		``,
		`data: {"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}`,
		``,
		`data: {"id":"c","choices":[{"index":0,"delta":{"tool_calls":[]}}]}`,
		``,
		`data: {"id":"c","choices":[{"index":0,"text":" world","finish_reason":null}]}`,
		``,
		`data: {"id":"c","choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop"}]}`,
		``,
		`data: {"id":"c","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13}}`,
		``,
		`data: {"error":{"message":"boom","code":500}}`,
		``,
		`data: {"id": broken`,
		``,
		`data: [DONE]`,
		``,
		`data: {"never":"read"}`,
		``,
	}, "\r\n")
	tick := t0
	now := func() time.Time { tick = tick.Add(time.Millisecond); return tick }
	events, err := readEvents(strings.NewReader(transcript), now)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		Kind   string
		AtMS   int
		Text   string
		Finish string
		Usage  [2]int
	}
	var gs []got
	for _, e := range events {
		g := got{Kind: e.Kind.String(), AtMS: int(e.At.Sub(t0) / time.Millisecond), Text: e.Text, Finish: e.FinishReason}
		if e.HasUsage {
			g.Usage = [2]int{e.PromptTokens, e.CompletionTokens}
		}
		gs = append(gs, g)
	}
	// Lines are numbered from 1 by the clock: ": ping" is 1, the role
	// chunk 2, its blank line 3, …
	want := []got{
		{Kind: "role", AtMS: 2},
		{Kind: "content", AtMS: 4, Text: " Hello"},
		{Kind: "content", AtMS: 6, Text: "hmm"},
		{Kind: "content", AtMS: 8},
		{Kind: "role", AtMS: 10},
		{Kind: "content", AtMS: 12, Text: " world"},
		{Kind: "finish", AtMS: 14, Finish: "stop"},
		{Kind: "usage", AtMS: 16, Usage: [2]int{9, 4}},
		{Kind: "error", AtMS: 18},
		{Kind: "error", AtMS: 20},
		{Kind: "done", AtMS: 22},
	}
	if diff := cmp.Diff(want, gs); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestReadEventsLongLine: an event longer than the read buffer is read
// whole.
func TestReadEventsLongLine(t *testing.T) {
	long := strings.Repeat("x", 100<<10)
	in := `data: {"choices":[{"delta":{"content":"` + long + `"}}]}` + "\n\ndata: [DONE]\n\n"
	events, err := readEvents(strings.NewReader(in), time.Now)
	if err != nil || len(events) != 2 || events[0].Kind != KindContent || len(events[0].Text) != len(long) {
		t.Fatalf("got %d events (err %v)", len(events), err)
	}
}

func FuzzReadEvents(f *testing.F) {
	f.Add("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n")
	f.Add("data: {\"choices\":[],\"usage\":{\"completion_tokens\":3}}\n")
	f.Add(": c\r\ndata:\r\n\r\n")
	f.Fuzz(func(t *testing.T, s string) {
		events, _ := readEvents(strings.NewReader(s), time.Now)
		m := Measure(time.Now(), events)
		if m.OutputTokens < 0 && m.OutputFrom == FromChunks {
			t.Fatalf("negative chunk count")
		}
	})
}
