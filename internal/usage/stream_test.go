package usage

import (
	"bytes"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// streamParser is what MessagesStream and ResponsesStream have in common.
type streamParser interface {
	Parse(data []byte) (StreamEvent, error)
	Answer() Answer
}

// replay feeds the data of every event of an SSE transcript to p.
func replay(t testing.TB, p streamParser, transcript []byte) []StreamEvent {
	t.Helper()
	er := NewEventReader(bytes.NewReader(transcript), 1<<20)
	var evs []StreamEvent
	for {
		ev, err := er.Next()
		if err == io.EOF {
			return evs
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.Data == nil || ev.Done() {
			continue
		}
		se, err := p.Parse(ev.Data)
		if err != nil {
			t.Fatalf("Parse(%s): %v", ev.Data, err)
		}
		evs = append(evs, se)
	}
}

// feed gives p each data in turn and returns the events that said
// something, by their index.
func feed(t *testing.T, p streamParser, data []string) map[int]StreamEvent {
	t.Helper()
	got := map[int]StreamEvent{}
	for i, d := range data {
		ev, err := p.Parse([]byte(d))
		if err != nil {
			t.Fatalf("event %d %s: %v", i, d, err)
		}
		if ev != (StreamEvent{}) {
			got[i] = ev
		}
	}
	return got
}

func usagePtr(u record.Usage) *record.Usage {
	u.Source = record.SourceEngine
	return &u
}

// checkAnswer holds an Answer to its invariants.
func checkAnswer(t *testing.T, a Answer, in []byte) {
	t.Helper()
	if a.Content < 0 || a.ToolCalls < 0 || a.HostedToolCalls < 0 || a.HostedToolCalls > a.ToolCalls {
		t.Fatalf("counts broken: %+v from %q", a, in)
	}
	u := a.Usage
	if u == nil {
		if a.OutputUnknown {
			t.Fatalf("output unknown without usage: %+v", a)
		}
		return
	}
	if u.InputTokens < 0 || u.OutputTokens < 0 || u.CachedInputTokens < 0 || u.CacheWriteTokens < 0 || u.CacheWrite1hTokens < 0 ||
		u.ReasoningTokens < 0 || u.CachedInputTokens+u.CacheWriteTokens > u.InputTokens || u.CacheWrite1hTokens > u.CacheWriteTokens ||
		u.ReasoningTokens > u.OutputTokens || u.ToolCalls != a.ToolCalls || u.Source != record.SourceEngine {
		t.Fatalf("usage invariants broken: %+v from %q", *u, in)
	}
}

func TestOutputString(t *testing.T) {
	for o, want := range map[Output]string{NoOutput: "none", OutputText: "text", OutputReasoning: "reasoning", OutputToolCall: "tool_call", 9: "none"} {
		if got := o.String(); got != want {
			t.Errorf("Output(%d) = %q, want %q", o, got, want)
		}
	}
}

// TestStreamEventsZeroAlloc: the delta events, the bulk of a stream, are
// read without allocating.
func TestStreamEventsZeroAlloc(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    streamParser
		data string
	}{
		{"responses", new(ResponsesStream), `{"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hi","logprobs":[]}`},
		{"messages", new(MessagesStream), `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`},
	} {
		data := []byte(tc.data)
		if n := testing.AllocsPerRun(100, func() {
			if _, err := tc.p.Parse(data); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s: %v allocations per delta event, want 0", tc.name, n)
		}
	}
}

// streamFrames put a fuzz input where the delta scans work hardest: as a
// delta's text, as its type, as a key, as a skipped value.
var streamFrames = [][2]string{
	{`{"type":"response.output_text.delta","delta":"`, `"}`},
	{`{"type":"`, `","delta":"x"}`},
	{`{"type":"response.function_call_arguments.delta","`, `":1,"delta":"x"}`},
	{`{"type":"response.reasoning_text.delta","delta":`, `}`},
	{`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`, `"}}`},
	{`{"type":"content_block_delta","delta":{"type":"`, `","thinking":"x","partial_json":"y"}}`},
	{`{"type":"content_block_delta","delta":{"`, `":1,"type":"input_json_delta","partial_json":"y"}}`},
	{`{"type":"content_block_delta","delta":`, `}`},
}

// sameStream feeds the same events to a stream reading them with Parse
// and to one reading them with parseSlow (encoding/json): every event
// and the answer after it must agree, errors included.
func sameStream(t *testing.T, fast, slow streamParser, slowParse func([]byte) (StreamEvent, error), events [][]byte) {
	t.Helper()
	for _, d := range events {
		got, gerr := fast.Parse(d)
		want, werr := slowParse(d)
		if (gerr == nil) != (werr == nil) || (gerr != nil && gerr.Error() != werr.Error()) {
			t.Fatalf("Parse(%q): error %v, encoding/json says %v", d, gerr, werr)
		}
		if got != want {
			t.Fatalf("Parse(%q) = %+v, encoding/json says %+v", d, got, want)
		}
		if diff := cmp.Diff(slow.Answer(), fast.Answer()); diff != "" {
			t.Fatalf("after %q the answers differ (-encoding/json +Parse):\n%s", d, diff)
		}
	}
}

// dataLines are the fuzz input's lines as event data ("data: " cut), and
// the input whole: seeds are transcripts.
func dataLines(in []byte) [][]byte {
	var out [][]byte
	for line := range bytes.Lines(in) {
		line = bytes.TrimRight(line, "\r\n")
		if d, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			line = bytes.TrimPrefix(d, []byte(" "))
		}
		out = append(out, line)
	}
	return append(out, in)
}

// fuzzStream: no panic; after every event the stream's answer keeps its
// invariants; at most one event is the first output, and only an event
// with output.
func fuzzStream(t *testing.T, p streamParser, in []byte) {
	firsts := 0
	for _, d := range dataLines(in) {
		ev, err := p.Parse(d)
		if err != nil {
			continue
		}
		if ev.First {
			firsts++
		}
		if ev.Content < 0 || (ev.Content > 0 && ev.Output == NoOutput) || (ev.First && ev.Output == NoOutput) ||
			(ev.ToolCall && ev.Output != OutputToolCall) || firsts > 1 {
			t.Fatalf("event %+v from %q (%d firsts)", ev, d, firsts)
		}
		checkAnswer(t, p.Answer(), d)
	}
}
