package usage

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// Events as Anthropic streams them.
const (
	mStart       = `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"output_tokens":1}}}`
	mTextStart   = `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`
	mPing        = `{"type": "ping"}`
	mHello       = `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`
	mBang        = `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"!"}}`
	mBlockStop   = `{"type":"content_block_stop","index":0}`
	mDeltaEnd15  = `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}`
	mMessageStop = `{"type":"message_stop"}`
)

func TestMessagesStream(t *testing.T) {
	text := func(n int, first bool) StreamEvent { return StreamEvent{Output: OutputText, Content: n, First: first} }
	final, done := StreamEvent{Final: true}, StreamEvent{Done: true}
	for _, tc := range []struct {
		name   string
		events []string
		want   map[int]StreamEvent // the events that say something, by index
		answer Answer
	}{{
		name:   "text: message_delta's cumulative output replaces message_start's placeholder",
		events: []string{mStart, mTextStart, mPing, mHello, mBang, mBlockStop, mDeltaEnd15, mMessageStop},
		want:   map[int]StreamEvent{3: text(5, true), 4: text(1, false), 6: final, 7: done},
		answer: Answer{ID: "msg_1", Model: "claude-sonnet-4-5", FinishReason: "stop", NativeFinish: "end_turn",
			Usage: usagePtr(record.Usage{InputTokens: 25, OutputTokens: 15}), Content: 6, Done: true},
	}, {
		name: "message_delta twice: the last count, never the sum",
		events: []string{mStart, mHello,
			`{"type":"message_delta","delta":{"stop_reason":null},"usage":{"output_tokens":10}}`,
			`{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":15}}`, mMessageStop},
		want: map[int]StreamEvent{1: text(5, true), 2: final, 3: final, 4: done},
		answer: Answer{ID: "msg_1", Model: "claude-sonnet-4-5", FinishReason: "length", NativeFinish: "max_tokens",
			Usage: usagePtr(record.Usage{InputTokens: 25, OutputTokens: 15}), Content: 5, Done: true},
	}, {
		name: "a newer API repeats input and cache counts in message_delta: not doubled (envoyproxy/ai-gateway#2236)",
		events: []string{
			`{"type":"message_start","message":{"id":"msg_2","model":"claude-opus-4-6","usage":{"input_tokens":9,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":1}}}`,
			mHello,
			`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":9,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":40}}`,
			mMessageStop},
		want: map[int]StreamEvent{1: text(5, true), 2: final, 3: done},
		answer: Answer{ID: "msg_2", Model: "claude-opus-4-6", FinishReason: "stop", NativeFinish: "end_turn",
			Usage: usagePtr(record.Usage{InputTokens: 1109, CachedInputTokens: 1000, CacheWriteTokens: 100, OutputTokens: 40}), Content: 5, Done: true},
	}, {
		// The prompt-sized input_tokens of message_start is replaced by
		// message_delta's uncached part; the maximum would count the cache
		// twice (bifrost#5354, #6439).
		name: "whole prompt at message_start, the cache split at message_delta (Kimi, QwenCloud)",
		events: []string{
			`{"type":"message_start","message":{"id":"msg_3","model":"kimi-k3","usage":{"input_tokens":173306,"cache_creation_input_tokens":0,"cache_read_input_tokens":5000,"output_tokens":0}}}`,
			`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":250,"cache_creation_input_tokens":0,"cache_read_input_tokens":173056,"output_tokens":166}}`,
			mMessageStop},
		want: map[int]StreamEvent{1: final, 2: done},
		answer: Answer{ID: "msg_3", Model: "kimi-k3", FinishReason: "stop", NativeFinish: "end_turn",
			Usage: usagePtr(record.Usage{InputTokens: 173306, CachedInputTokens: 173056, OutputTokens: 166}), Done: true},
	}, {
		name: "usage only in message_delta: its input and cache counts are kept (envoyproxy/ai-gateway#2290)",
		events: []string{
			`{"type":"message_start","message":{"id":"msg_4","model":"m","usage":{"input_tokens":0,"output_tokens":0}}}`,
			`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":4522,"cache_creation_input_tokens":4511,"output_tokens":5}}`,
			mMessageStop},
		want: map[int]StreamEvent{1: final, 2: done},
		answer: Answer{ID: "msg_4", Model: "m", FinishReason: "stop", NativeFinish: "end_turn",
			Usage: usagePtr(record.Usage{InputTokens: 9033, CacheWriteTokens: 4511, OutputTokens: 5}), Done: true},
	}, {
		name: "cut before message_delta: input kept, output unknown",
		events: []string{
			`{"type":"message_start","message":{"id":"msg_5","model":"m","usage":{"input_tokens":20,"cache_read_input_tokens":5,"output_tokens":1}}}`,
			mTextStart, mHello, mBang},
		want: map[int]StreamEvent{2: text(5, true), 3: text(1, false)},
		answer: Answer{ID: "msg_5", Model: "m", Usage: usagePtr(record.Usage{InputTokens: 25, CachedInputTokens: 5, OutputTokens: 1}),
			OutputUnknown: true, Content: 6},
	}, {
		name:   "cut after message_delta, before message_stop: its output kept",
		events: []string{mStart, mHello, mDeltaEnd15},
		want:   map[int]StreamEvent{1: text(5, true), 2: final},
		answer: Answer{ID: "msg_1", Model: "claude-sonnet-4-5", FinishReason: "stop", NativeFinish: "end_turn",
			Usage: usagePtr(record.Usage{InputTokens: 25, OutputTokens: 15}), Content: 5},
	}, {
		name:   "cut before message_start: nothing known",
		events: []string{mPing},
		answer: Answer{},
	}, {
		name: "tool use: the block's start is the call and a token, an empty input delta is none",
		events: []string{mStart,
			`{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}}`,
			`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}`,
			`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"location\":"}}`,
			`{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}`,
			mMessageStop},
		want: map[int]StreamEvent{
			1: {Output: OutputToolCall, Content: 11, First: true, ToolCall: true},
			3: {Output: OutputToolCall, Content: 12}, 4: final, 5: done},
		answer: Answer{ID: "msg_1", Model: "claude-sonnet-4-5", FinishReason: "tool_calls", NativeFinish: "tool_use",
			Usage: usagePtr(record.Usage{InputTokens: 25, OutputTokens: 89, ToolCalls: 1}), ToolCalls: 1, Content: 23, Done: true},
	}, {
		name: "server tool use: a call the provider runs; its result is no call",
		events: []string{mStart,
			`{"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}}`,
			`{"type":"content_block_start","index":1,"content_block":{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[]}}`,
			`{"type":"message_delta","delta":{"stop_reason":"pause_turn"},"usage":{"output_tokens":30,"server_tool_use":{"web_search_requests":1}}}`},
		want: map[int]StreamEvent{1: {Output: OutputToolCall, Content: 10, First: true, ToolCall: true}, 3: final},
		answer: Answer{ID: "msg_1", Model: "claude-sonnet-4-5", FinishReason: "pause_turn", NativeFinish: "pause_turn",
			Usage: usagePtr(record.Usage{InputTokens: 25, OutputTokens: 30, ToolCalls: 1}), ToolCalls: 1, HostedToolCalls: 1, Content: 10},
	}, {
		name: "thinking first: reasoning is the first token; a signature is none",
		events: []string{mStart,
			`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me think"}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM"}}`,
			`{"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":"EmwKAhgBEgy3"}}`,
			mHello},
		want: map[int]StreamEvent{2: {Output: OutputReasoning, Content: 12, First: true}, 4: {Output: OutputReasoning}, 5: text(5, false)},
		answer: Answer{ID: "msg_1", Model: "claude-sonnet-4-5", Usage: usagePtr(record.Usage{InputTokens: 25, OutputTokens: 1}),
			OutputUnknown: true, Content: 17},
	}, {
		name: "cache writes with a 1-hour part, thinking tokens",
		events: []string{
			`{"type":"message_start","message":{"id":"msg_6","model":"m","usage":{"input_tokens":21,"cache_creation_input_tokens":2048,"cache_read_input_tokens":10240,"cache_creation":{"ephemeral_5m_input_tokens":1024,"ephemeral_1h_input_tokens":1024},"output_tokens":1}}}`,
			`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":310,"output_tokens_details":{"thinking_tokens":290}}}`},
		want: map[int]StreamEvent{1: final},
		answer: Answer{ID: "msg_6", Model: "m", FinishReason: "stop", NativeFinish: "end_turn",
			Usage: usagePtr(record.Usage{InputTokens: 12309, CachedInputTokens: 10240, CacheWriteTokens: 2048, CacheWrite1hTokens: 1024,
				OutputTokens: 310, ReasoningTokens: 290})},
	}, {
		name: "cache writes given only by their lifetimes",
		events: []string{
			`{"type":"message_start","message":{"id":"msg_7","model":"m","usage":{"input_tokens":3,"cache_creation":{"ephemeral_5m_input_tokens":100,"ephemeral_1h_input_tokens":50},"output_tokens":1}}}`},
		answer: Answer{ID: "msg_7", Model: "m", OutputUnknown: true,
			Usage: usagePtr(record.Usage{InputTokens: 153, CacheWriteTokens: 150, CacheWrite1hTokens: 50, OutputTokens: 1})},
	}, {
		name:   "error event",
		events: []string{mStart, mHello, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`},
		want:   map[int]StreamEvent{1: text(5, true), 2: {Error: "overloaded_error"}},
		answer: Answer{ID: "msg_1", Model: "claude-sonnet-4-5", Usage: usagePtr(record.Usage{InputTokens: 25, OutputTokens: 1}),
			OutputUnknown: true, Content: 5, Error: "overloaded_error"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var s MessagesStream
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

// TestMessagesStreamRefuses: events that cannot be read, or whose usage
// makes no sense, are errors and leave the usage as it was.
func TestMessagesStreamRefuses(t *testing.T) {
	var s MessagesStream
	if _, err := s.Parse([]byte(mStart)); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		`{"type":"content_block_delta","delta":{"type":"text_delta","text":"x"}`,
		`{"type":5}`,
		`{"type":"message_delta","usage":{"output_tokens":-1}}`,
		`{"type":"message_delta","usage":{"input_tokens":9223372036854775807,"cache_read_input_tokens":9223372036854775807}}`,
		`{"type":"message_delta","usage":{"output_tokens":"7"}}`,
		`{"type":"message_start","message":{"model":5}}`,
		`{"type":"content_block_delta","delta":"x"}`,
	} {
		if ev, err := s.Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%s) = %+v, want an error", bad, ev)
		}
	}
	if a := s.Answer(); a.Usage.InputTokens != 25 || a.Usage.OutputTokens != 1 {
		t.Errorf("a refused event changed the usage: %+v", *a.Usage)
	}
}

func TestMessagesFinish(t *testing.T) {
	for stop, want := range map[string]string{
		"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "model_context_window_exceeded": "length",
		"tool_use": "tool_calls", "refusal": "content_filter", "pause_turn": "pause_turn", "": "", "new_reason": "new_reason",
	} {
		if got := messagesFinish(stop); got != want {
			t.Errorf("messagesFinish(%q) = %q, want %q", stop, got, want)
		}
	}
}

// TestMessagesTranscripts replays whole streams, Anthropic's documented
// examples and an Anthropic-compatible endpoint's, as they arrive.
func TestMessagesTranscripts(t *testing.T) {
	for _, tc := range []struct {
		file   string
		first  Output
		answer Answer
	}{
		{"stream_text.sse", OutputText, Answer{ID: "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY", Model: "claude-sonnet-4-5-20250929",
			FinishReason: "stop", NativeFinish: "end_turn", Usage: usagePtr(record.Usage{InputTokens: 25, OutputTokens: 15}), Content: 6, Done: true}},
		{"stream_tool_use.sse", OutputText, Answer{ID: "msg_014p7gG3wDgGV9EUtLvnow3U", Model: "claude-opus-4-6",
			FinishReason: "tool_calls", NativeFinish: "tool_use", Usage: usagePtr(record.Usage{InputTokens: 472, OutputTokens: 89, ToolCalls: 1}),
			ToolCalls: 1, Content: len("Okay, let's check the weather for San Francisco, CA:get_weather{\"location\": \"San Francisco, CA\"}"), Done: true}},
		{"stream_thinking_cache.sse", OutputReasoning, Answer{ID: "msg_01Xk2fQYf7Ww8Wq1c2PZbL3n", Model: "claude-sonnet-4-5-20250929",
			FinishReason: "stop", NativeFinish: "end_turn",
			Usage: usagePtr(record.Usage{InputTokens: 12309, CachedInputTokens: 10240, CacheWriteTokens: 2048, CacheWrite1hTokens: 1024,
				OutputTokens: 310, ReasoningTokens: 290}),
			Content: len("I need to find the GCD of 1071 and 462 using the Euclidean algorithm.\n\n1071 = 2 × 462 + 147") + 14, Done: true}},
		// QwenCloud's Anthropic endpoint, as captured in bifrost#5355.
		{"stream_split_input.sse", OutputText, Answer{ID: "msg_ba0b5ef1", Model: "qwen3.7-plus", FinishReason: "stop", NativeFinish: "end_turn",
			Usage: usagePtr(record.Usage{InputTokens: 8849, CachedInputTokens: 8831, OutputTokens: 426}), Content: 5, Done: true}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			var s MessagesStream
			evs := replay(t, &s, readFixture(t, filepath.Join("messages", tc.file)))
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

// TestParseMessagesBody reads non-streamed answers: Anthropic's, and its
// compatible endpoints' as their docs show them.
func TestParseMessagesBody(t *testing.T) {
	for _, tc := range []struct {
		file string
		want Answer
	}{
		{"body_tool_use.json", Answer{ID: "msg_01Aq9w938a90dw8q", Model: "claude-opus-4-6", FinishReason: "tool_calls", NativeFinish: "tool_use",
			Usage:     usagePtr(record.Usage{InputTokens: 3012, CacheWriteTokens: 3000, CacheWrite1hTokens: 2000, OutputTokens: 57, ToolCalls: 1}),
			ToolCalls: 1, Content: 56 + 11 + len(`{"location":"San Francisco, CA","unit":"celsius"}`)}},
		{"body_web_search.json", Answer{ID: "msg_01Wt2u1q3e5r7t9y", Model: "claude-opus-4-6", FinishReason: "stop", NativeFinish: "end_turn",
			Usage:     usagePtr(record.Usage{InputTokens: 6039, OutputTokens: 931, ToolCalls: 1}),
			ToolCalls: 1, HostedToolCalls: 1, Content: 10 + len(`{"query":"claude shannon birth date"}`) + 64}},
		// https://api-docs.deepseek.com/guides/anthropic_api
		{"deepseek_anthropic.json", Answer{ID: "4b2a6f0e-8c1d-4e47-9a3b-2f6d5c7e8a90", Model: "deepseek-v4-pro", FinishReason: "stop", NativeFinish: "end_turn",
			Usage: usagePtr(record.Usage{InputTokens: 14, OutputTokens: 26}), Content: 19 + 30}},
		// https://platform.moonshot.ai/docs (Anthropic-compatible endpoint):
		// uncached input plus cache reads, as bifrost#5510's non-streamed
		// control shows.
		{"kimi_anthropic.json", Answer{ID: "chatcmpl-69c1e0a2f5d84b7e", Model: "kimi-k3", FinishReason: "tool_calls", NativeFinish: "tool_use",
			Usage:     usagePtr(record.Usage{InputTokens: 173306, CachedInputTokens: 173056, OutputTokens: 166, ToolCalls: 1}),
			ToolCalls: 1, Content: 30 + 11 + len(`{"city":"Beijing"}`)}},
		// https://docs.bigmodel.cn (open.bigmodel.cn/api/anthropic)
		{"glm_anthropic.json", Answer{ID: "msg_202512011234567890", Model: "glm-4.7", FinishReason: "length", NativeFinish: "max_tokens",
			Usage: usagePtr(record.Usage{InputTokens: 1802, CachedInputTokens: 512, OutputTokens: 64}), Content: len("你好！有什么可以帮你？")}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			a, err := ParseMessagesBody(readFixture(t, filepath.Join("messages", tc.file)))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, a); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	a, err := ParseMessagesBody([]byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`))
	if err != nil || a.Error != "overloaded_error" || a.Usage != nil {
		t.Errorf("error body: %+v, %v", a, err)
	}
	// Blocks are read leniently: one that is not an object is skipped, a
	// name that is not a string has no length.
	a, err = ParseMessagesBody([]byte(`{"id":"m","content":[{"type":"text","text":"x"},{"type":"tool_use","name":7},42,{"type":7}],"usage":{"input_tokens":3}}`))
	if err != nil || !a.OutputUnknown || a.ToolCalls != 1 || a.Content != 1 {
		t.Errorf("odd blocks, no output count: %+v, %v", a, err)
	}
	for _, bad := range []string{`[]`, `{"usage":{"input_tokens":-1,"output_tokens":1}}`, `{"model":1}`, `{"usage":{"output_tokens":1.5}}`} {
		if a, err := ParseMessagesBody([]byte(bad)); err == nil {
			t.Errorf("ParseMessagesBody(%s) = %+v, want an error", bad, a)
		}
	}
}

// messagesEdges are inputs where the scan and encoding/json could part.
var messagesEdges = []string{
	`{"type":"content_block_delta","delta":{"type":"text_delta","text":"\ud800\u00e9\n"}}`,
	`{"TYPE":"content_block_delta","Delta":{"Type":"thinking_delta","THINKING":"x"}}`,
	`{"type":"content_block_delta","delta":{"type":"text_delta","text":"a"},"type":"message_stop"}`,
	`{"type":"content_block_delta","delta":{"type":"text_delta","text":"a","text":"bb"}}`,
	`{"type":"content_block_delta","delta":{"type":"text_delta","text":7}}`,
	`{"type":"content_block_delta","delta":{"type":"text_delta","thinking":"not this"}}`,
	`{"type":"content_block_delta","delta":{"type":"input_json_delta","partial_json":null}}`,
	`{"type":"content_block_delta","delta":{"type":null,"text":"x"}}`,
	`{"type":"content_block_delta","delta":{"text":"x"}}`,
	`{"type":"content_block_delta","delta":{"type":"text\u005fdelta","text":"x"}}`,
	`{"type":"content_block_delta","delta":{"type":"text_delta","text":"x","stop_reason":"end_turn"}}`,
	`{"type":"content_block_delta","delta":{"type":"text_delta","text":"x"},"usage":{"output_tokens":1}}`,
	`{"type":"content_block_delta","delta":null}`,
	`{"type":"content_block_delta","delta":[]}`,
	`{"type":"content_block_delta"}`,
	`{"type":"content_block_delta","delta":{"type":"text_delta","text":"x"}} x`,
	`{"type":"content_block_delta","delta":{"type":"text_delta","text":"x"}`,
	`{"type":"content_block_delta","delta":{"type":"text_delta","text":"x","ſtop_reason":1}}`,
	`{"type":"content_block_delta","index":{"a":[1,2,{"b":null}]},"delta":{"type":"text_delta","text":"x","extra":[true]}}`,
	"{\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"\xff\"}}",
	`{"type":"message_delta","delta":{"stop_reason":5}}`,
	`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":null}`,
	`{"type":"content_block_start","content_block":{"type":"tool_use","name":"\u00e9"}}`,
	`{"type":"content_block_start","content_block":"x"}`,
	`{"type":"error","error":"boom"}`,
	`{"type":"message_start","message":null}`,
}

func messagesSeeds(f *testing.F) {
	for _, name := range []string{"stream_text.sse", "stream_tool_use.sse", "stream_thinking_cache.sse", "stream_split_input.sse"} {
		f.Add(readFixture(f, filepath.Join("messages", name)))
	}
	for _, e := range messagesEdges {
		f.Add([]byte(e))
	}
}

// FuzzMessagesStream: no panic; the answer keeps its invariants after
// every event.
func FuzzMessagesStream(f *testing.F) {
	messagesSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		fuzzStream(t, new(MessagesStream), in)
	})
}

// FuzzMessagesStreamDifferential holds Parse to parseSlow (encoding/json)
// event by event, over whole transcripts and inside the delta frames.
func FuzzMessagesStreamDifferential(f *testing.F) {
	messagesSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		slow := new(MessagesStream)
		sameStream(t, new(MessagesStream), slow, slow.parseSlow, dataLines(in))
		for _, w := range streamFrames {
			if strings.Contains(w[0], "content_block") {
				d := []byte(w[0] + string(in) + w[1])
				slow := new(MessagesStream)
				sameStream(t, new(MessagesStream), slow, slow.parseSlow, [][]byte{d, d})
			}
		}
	})
}

func TestMessagesScanMatchesReference(t *testing.T) {
	var all [][]byte
	for _, e := range messagesEdges {
		all = append(all, []byte(e))
	}
	for _, name := range []string{"stream_text.sse", "stream_tool_use.sse", "stream_thinking_cache.sse", "stream_split_input.sse"} {
		all = append(all, dataLines(readFixture(t, filepath.Join("messages", name)))...)
	}
	slow := new(MessagesStream)
	sameStream(t, new(MessagesStream), slow, slow.parseSlow, all)
	// The scan must answer for the deltas Anthropic sends, or it is idle.
	for _, d := range []string{mHello, mBang, `{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"location\":"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQB"}}`} {
		if _, _, ok := scanMessagesDelta([]byte(d)); !ok {
			t.Errorf("the scan leaves %s to encoding/json", d)
		}
	}
}
