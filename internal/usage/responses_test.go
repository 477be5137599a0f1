package usage

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// Events as OpenAI streams them (fields tollgate skips shortened).
const (
	rCreated   = `{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","status":"in_progress","model":"gpt-4.1","output":[],"usage":null}}`
	rMsgAdded  = `{"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","role":"assistant","content":[]}}`
	rPartAdded = `{"type":"response.content_part.added","sequence_number":3,"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}}`
	rHi        = `{"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hi","logprobs":[]}`
	rThere     = `{"type":"response.output_text.delta","sequence_number":5,"item_id":"msg_1","output_index":0,"content_index":0,"delta":" there","logprobs":[]}`
	rTextDone  = `{"type":"response.output_text.done","sequence_number":6,"item_id":"msg_1","output_index":0,"content_index":0,"text":"Hi there"}`
	rCompleted = `{"type":"response.completed","sequence_number":9,"response":{"id":"resp_1","object":"response","status":"completed","model":"gpt-4.1","output":[{"id":"msg_1","type":"message","content":[{"type":"output_text","text":"Hi there"}]}],"usage":{"input_tokens":37,"input_tokens_details":{"cached_tokens":0},"output_tokens":11,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":48}}}`
)

func TestResponsesStream(t *testing.T) {
	text := func(n int, first bool) StreamEvent { return StreamEvent{Output: OutputText, Content: n, First: first} }
	end := StreamEvent{Final: true, Done: true}
	for _, tc := range []struct {
		name   string
		events []string
		want   map[int]StreamEvent
		answer Answer
	}{{
		name:   "text: the first output_text.delta is the first token, response.completed the usage",
		events: []string{rCreated, rMsgAdded, rPartAdded, rHi, rThere, rTextDone, rCompleted},
		want:   map[int]StreamEvent{3: text(2, true), 4: text(6, false), 6: end},
		answer: Answer{ID: "resp_1", Model: "gpt-4.1", FinishReason: "stop", NativeFinish: "completed",
			Usage: usagePtr(record.Usage{InputTokens: 37, OutputTokens: 11}), Content: 8, Done: true},
	}, {
		name: "reasoning summary first, then a function call: tool_calls",
		events: []string{rCreated,
			`{"type":"response.output_item.added","output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]}}`,
			`{"type":"response.reasoning_summary_text.delta","item_id":"rs_1","output_index":0,"summary_index":0,"delta":"**Weather**"}`,
			`{"type":"response.output_item.added","output_index":1,"item":{"type":"function_call","id":"fc_1","call_id":"call_1","name":"get_weather","arguments":""}}`,
			`{"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":1,"delta":"{\""}`,
			`{"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":1,"delta":""}`,
			`{"type":"response.completed","response":{"id":"resp_1","status":"completed","model":"gpt-5","output":[{"type":"reasoning","summary":[{"type":"summary_text","text":"**Weather**"}]},{"type":"function_call","name":"get_weather","arguments":"{\"location\":\"Paris\"}"}],"usage":{"input_tokens":2210,"input_tokens_details":{"cached_tokens":1920},"output_tokens":186,"output_tokens_details":{"reasoning_tokens":128},"total_tokens":2396}}}`},
		want: map[int]StreamEvent{2: {Output: OutputReasoning, Content: 11, First: true}, 3: {Output: OutputToolCall, Content: 11, ToolCall: true},
			4: {Output: OutputToolCall, Content: 2}, 6: end},
		answer: Answer{ID: "resp_1", Model: "gpt-5", FinishReason: "tool_calls", NativeFinish: "completed",
			Usage:     usagePtr(record.Usage{InputTokens: 2210, CachedInputTokens: 1920, OutputTokens: 186, ReasoningTokens: 128, ToolCalls: 1}),
			ToolCalls: 1, Content: 24, Done: true},
	}, {
		name: "incomplete at max_output_tokens: length",
		events: []string{rCreated, rHi,
			`{"type":"response.incomplete","response":{"id":"resp_1","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"model":"gpt-4.1","output":[],"usage":{"input_tokens":5,"output_tokens":16,"total_tokens":21}}}`},
		want: map[int]StreamEvent{1: text(2, true), 2: end},
		answer: Answer{ID: "resp_1", Model: "gpt-4.1", FinishReason: "length", NativeFinish: "incomplete/max_output_tokens",
			Usage: usagePtr(record.Usage{InputTokens: 5, OutputTokens: 16}), Content: 2, Done: true},
	}, {
		name: "failed: an error, its code kept",
		events: []string{rCreated,
			`{"type":"response.failed","response":{"id":"resp_1","status":"failed","error":{"code":"server_error","message":"The model failed."},"model":"gpt-4.1","output":[],"usage":null}}`},
		want:   map[int]StreamEvent{1: {Final: true, Done: true, Error: "server_error"}},
		answer: Answer{ID: "resp_1", Model: "gpt-4.1", FinishReason: "error", NativeFinish: "failed", Done: true, Error: "server_error"},
	}, {
		name:   "error event mid-stream",
		events: []string{rCreated, rHi, `{"type":"error","sequence_number":3,"code":"rate_limit_exceeded","message":"Slow down.","param":null}`},
		want:   map[int]StreamEvent{1: text(2, true), 2: {Error: "rate_limit_exceeded"}},
		answer: Answer{ID: "resp_1", Model: "gpt-4.1", Content: 2, Error: "rate_limit_exceeded"},
	}, {
		name: "cut stream: what was consumed, no usage, the calls as they started",
		events: []string{rCreated,
			`{"type":"response.output_item.added","output_index":0,"item":{"type":"web_search_call","id":"ws_1","status":"in_progress"}}`,
			`{"type":"response.output_item.added","output_index":1,"item":{"type":"function_call","id":"fc_1","name":"f","arguments":""}}`,
			`{"type":"response.function_call_arguments.delta","item_id":"fc_1","delta":"{}"}`},
		want: map[int]StreamEvent{1: {Output: OutputToolCall, First: true, ToolCall: true}, 2: {Output: OutputToolCall, Content: 1, ToolCall: true},
			3: {Output: OutputToolCall, Content: 2}},
		answer: Answer{ID: "resp_1", Model: "gpt-4.1", ToolCalls: 2, HostedToolCalls: 1, Content: 3},
	}, {
		name: "a last event without its output: the calls as they started",
		events: []string{rCreated,
			`{"type":"response.output_item.added","output_index":0,"item":{"type":"custom_tool_call","id":"ct_1","name":"shell","input":""}}`,
			`{"type":"response.custom_tool_call_input.delta","item_id":"ct_1","delta":"ls"}`,
			`{"type":"response.completed","response":{"id":"resp_1","status":"completed","model":"gpt-4.1","usage":{"input_tokens":5,"output_tokens":3,"total_tokens":8}}}`},
		want: map[int]StreamEvent{1: {Output: OutputToolCall, Content: 5, First: true, ToolCall: true}, 2: {Output: OutputToolCall, Content: 2}, 3: end},
		answer: Answer{ID: "resp_1", Model: "gpt-4.1", FinishReason: "tool_calls", NativeFinish: "completed",
			Usage: usagePtr(record.Usage{InputTokens: 5, OutputTokens: 3, ToolCalls: 1}), ToolCalls: 1, Content: 7, Done: true},
	}, {
		name: "other deltas: refusal, reasoning text, MCP and code arguments; an empty delta is no token",
		events: []string{
			`{"type":"response.output_text.delta","delta":""}`,
			`{"type":"response.reasoning_text.delta","delta":"hm"}`,
			`{"type":"response.refusal.delta","delta":"No"}`,
			`{"type":"response.mcp_call_arguments.delta","delta":"{}"}`,
			`{"type":"response.code_interpreter_call_code.delta","delta":"print(1)"}`,
			`{"type":"response.output_text.annotation.added","annotation":{"type":"url_citation"}}`},
		want: map[int]StreamEvent{1: {Output: OutputReasoning, Content: 2, First: true}, 2: text(2, false),
			3: {Output: OutputToolCall, Content: 2}, 4: {Output: OutputToolCall, Content: 8}},
		answer: Answer{Content: 14},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var s ResponsesStream
			got := feed(t, &s, tc.events)
			if tc.want == nil {
				tc.want = map[int]StreamEvent{}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			a := s.Answer()
			if diff := cmp.Diff(tc.answer, a); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
			checkAnswer(t, a, nil)
		})
	}
}

func TestResponsesStreamRefuses(t *testing.T) {
	var s ResponsesStream
	for _, bad := range []string{
		`{"type":"response.output_text.delta","delta":"x"`,
		`[]`,
		`{"type":"response.completed","response":{"usage":{"input_tokens":-1,"output_tokens":1}}}`,
		`{"type":"response.completed","response":{"model":5}}`,
		`{"type":"response.created","response":"x"}`,
	} {
		if ev, err := s.Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%s) = %+v, want an error", bad, ev)
		}
	}
}

func TestResponsesFinish(t *testing.T) {
	for _, tc := range []struct {
		status, reason string
		calls          int
		finish, native string
	}{
		{"completed", "", 0, "stop", "completed"},
		{"completed", "", 2, "tool_calls", "completed"},
		{"incomplete", "max_output_tokens", 0, "length", "incomplete/max_output_tokens"},
		{"incomplete", "content_filter", 1, "content_filter", "incomplete/content_filter"},
		{"incomplete", "", 0, "incomplete", "incomplete"},
		{"incomplete", "new_reason", 0, "incomplete/new_reason", "incomplete/new_reason"},
		{"failed", "", 0, "error", "failed"},
		{"cancelled", "", 0, "abort", "cancelled"},
		{"in_progress", "", 0, "", "in_progress"},
		{"", "", 0, "", ""},
	} {
		if f, n := responsesFinish(tc.status, tc.reason, tc.calls); f != tc.finish || n != tc.native {
			t.Errorf("responsesFinish(%q, %q, %d) = %q, %q; want %q, %q", tc.status, tc.reason, tc.calls, f, n, tc.finish, tc.native)
		}
	}
}

func TestResponsesTranscripts(t *testing.T) {
	for _, tc := range []struct {
		file   string
		first  Output
		answer Answer
	}{
		{"stream_text.sse", OutputText, Answer{ID: "resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654", Model: "gpt-4.1-2025-04-14",
			FinishReason: "stop", NativeFinish: "completed", Usage: usagePtr(record.Usage{InputTokens: 37, OutputTokens: 11}),
			Content: len("Hi there! How can I assist you today?"), Done: true}},
		{"stream_reasoning_tool.sse", OutputReasoning, Answer{ID: "resp_68af4030592c81938ec0a5fbab4a3e9f05438e46b5f69a3b", Model: "gpt-5-2025-08-07",
			FinishReason: "tool_calls", NativeFinish: "completed",
			Usage:     usagePtr(record.Usage{InputTokens: 2210, CachedInputTokens: 1920, OutputTokens: 186, ReasoningTokens: 128, ToolCalls: 1}),
			ToolCalls: 1, Content: len("**Checking the weather**get_weather" + `{"location":"Paris, France"}`), Done: true}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			var s ResponsesStream
			evs := replay(t, &s, readFixture(t, filepath.Join("responses", tc.file)))
			firsts := 0
			for _, ev := range evs {
				if ev.First {
					firsts++
					if ev.Output != tc.first {
						t.Errorf("first output is %v, want %v", ev.Output, tc.first)
					}
				}
			}
			if firsts != 1 {
				t.Errorf("%d first outputs, want 1", firsts)
			}
			if diff := cmp.Diff(tc.answer, s.Answer()); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseResponsesBody(t *testing.T) {
	for _, tc := range []struct {
		file string
		want Answer
	}{
		{"body_incomplete.json", Answer{ID: "resp_6811ad4c0a488191b5d7e3f4f5a6b7c8", Model: "o4-mini-2025-04-16",
			FinishReason: "length", NativeFinish: "incomplete/max_output_tokens",
			Usage: usagePtr(record.Usage{InputTokens: 75, OutputTokens: 300, ReasoningTokens: 300})}},
		// A hosted web search, a function call, a tool search the client
		// ran, a call's output (no call), a message with a refusal.
		{"body_tools.json", Answer{ID: "resp_684b9fc2a7a8819a9e1b5c4d3e2f1a0b", Model: "gpt-4.1-2025-04-14",
			FinishReason: "tool_calls", NativeFinish: "completed",
			Usage:     usagePtr(record.Usage{InputTokens: 328, CacheWriteTokens: 256, OutputTokens: 356, ToolCalls: 3}),
			ToolCalls: 3, HostedToolCalls: 1,
			Content: len("send_email"+`{"to":"ilan@example.com"}`) + len("Here is some good news.") + len("No.")}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			a, err := ParseResponsesBody(readFixture(t, filepath.Join("responses", tc.file)))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, a); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	for _, tc := range []struct{ in, calls string }{
		{`{"output":[{"type":"tool_search_call","execution":"server"}]}`, "1/1"},
		{`{"output":[{"type":"image_generation_call"},{"type":"mcp_call","arguments":"{}"},{"type":"mcp_approval_request"}]}`, "2/2"},
		{`{"output":[{"type":"shell_call"},{"type":"apply_patch_call"},{"type":"apply_patch_call_output"},{"type":"computer_call"},{"type":7}]}`, "3/0"},
	} {
		a, err := ParseResponsesBody([]byte(tc.in))
		if got := fmt.Sprintf("%d/%d", a.ToolCalls, a.HostedToolCalls); err != nil || got != tc.calls {
			t.Errorf("ParseResponsesBody(%s): calls %s, %v; want %s", tc.in, got, err, tc.calls)
		}
	}
	for _, bad := range []string{`[]`, `{"usage":{"input_tokens":-1,"output_tokens":1}}`, `{"model":1}`, `{"output":{}}`} {
		if a, err := ParseResponsesBody([]byte(bad)); err == nil {
			t.Errorf("ParseResponsesBody(%s) = %+v, want an error", bad, a)
		}
	}
}

// responsesEdges are inputs where the scan and encoding/json could part.
var responsesEdges = []string{
	`{"type":"response.output_text.delta","delta":"\ud800\u00e9\n"}`,
	`{"TYPE":"response.output_text.delta","Delta":"x"}`,
	`{"type":"response.output_text.delta","delta":"a","type":"response.completed"}`,
	`{"type":"response.output_text.delta","delta":"a","delta":"bb"}`,
	`{"type":"response.output_text.delta","delta":7}`,
	`{"type":"response.output_text.delta","delta":null}`,
	`{"type":"response.output_text.delta","delta":{"a":"b"}}`,
	`{"type":"response.output_text.delta"}`,
	`{"type":null,"delta":"x"}`,
	`{"delta":"x"}`,
	`{"type":"response.output_text\u002edelta","delta":"x"}`,
	`{"type":"response.output_text.delta","delta":"x","item":{"type":"function_call"}}`,
	`{"type":"response.output_text.delta","delta":"x","response":null}`,
	`{"type":"response.output_text.delta","delta":"x","code":"c"}`,
	`{"type":"response.output_text.delta","delta":"x"} x`,
	`{"type":"response.output_text.delta","delta":"x"`,
	`{"type":"response.output_text.delta","delta":"x","ſequence_number":1}`,
	`{"type":"response.output_text.delta","logprobs":[{"token":"x","bytes":[1,2]}],"delta":"x","obfuscation":"\u0041"}`,
	"{\"type\":\"response.output_text.delta\",\"delta\":\"\xff\"}",
	`{"type":"response.shell_call_output_content.delta","delta":{"stdout":"x"}}`,
	`{"type":"response.output_item.added","item":{"type":"function_call","name":"\u00e9"}}`,
	`{"type":"response.output_item.added","item":"x"}`,
	`{"type":"error","error":{"type":"invalid_request_error"}}`,
	`{"type":"error","code":5}`,
	`{"type":"response.completed","response":null}`,
	`{"type":"response.completed","response":{"output":null,"usage":null}}`,
}

func responsesSeeds(f *testing.F) {
	for _, name := range []string{"stream_text.sse", "stream_reasoning_tool.sse"} {
		f.Add(readFixture(f, filepath.Join("responses", name)))
	}
	for _, e := range responsesEdges {
		f.Add([]byte(e))
	}
}

// FuzzResponsesStream: no panic; the answer keeps its invariants after
// every event.
func FuzzResponsesStream(f *testing.F) {
	responsesSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		fuzzStream(t, new(ResponsesStream), in)
	})
}

// FuzzResponsesStreamDifferential holds Parse to parseSlow (encoding/json)
// event by event, over whole transcripts and inside the delta frames.
func FuzzResponsesStreamDifferential(f *testing.F) {
	responsesSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		slow := new(ResponsesStream)
		sameStream(t, new(ResponsesStream), slow, slow.parseSlow, dataLines(in))
		for _, w := range streamFrames {
			if !strings.Contains(w[0], "content_block") {
				d := []byte(w[0] + string(in) + w[1])
				slow := new(ResponsesStream)
				sameStream(t, new(ResponsesStream), slow, slow.parseSlow, [][]byte{d, d})
			}
		}
	})
}

func TestResponsesScanMatchesReference(t *testing.T) {
	var all [][]byte
	for _, e := range responsesEdges {
		all = append(all, []byte(e))
	}
	for _, name := range []string{"stream_text.sse", "stream_reasoning_tool.sse"} {
		all = append(all, dataLines(readFixture(t, filepath.Join("responses", name)))...)
	}
	slow := new(ResponsesStream)
	sameStream(t, new(ResponsesStream), slow, slow.parseSlow, all)
	for _, d := range []string{rHi, rThere,
		`{"type":"response.function_call_arguments.delta","sequence_number":8,"item_id":"fc_1","output_index":1,"delta":"{\"","obfuscation":"x"}`,
		`{"type":"response.reasoning_summary_text.delta","item_id":"rs_1","output_index":0,"summary_index":0,"delta":"**Weather**"}`} {
		if _, _, ok := scanResponsesDelta([]byte(d)); !ok {
			t.Errorf("the scan leaves %s to encoding/json", d)
		}
	}
}
