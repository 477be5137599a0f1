package usage

import (
	"bytes"
	"encoding/json"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// The APIs agents speak — OpenAI's Responses (responses.go) and
// Anthropic's Messages (messages.go) — stream typed events rather than
// chat chunks, and report usage in their own dialects. Their parsers share
// the types below: Answer, what a whole answer says about itself, read
// from a body or gathered from a stream; StreamEvent, what the tap needs
// from one event.

// Output is the kind of generated output an event carries.
type Output uint8

const (
	NoOutput        Output = iota
	OutputText             // answer text: output text, refusals
	OutputReasoning        // reasoning: thinking, reasoning text and summaries
	OutputToolCall         // a tool call: its start (the name) and its argument deltas
)

func (o Output) String() string {
	switch o {
	case OutputText:
		return "text"
	case OutputReasoning:
		return "reasoning"
	case OutputToolCall:
		return "tool_call"
	}
	return "none"
}

// StreamEvent is what the tap needs from one event of a Responses or
// Messages stream. The stream's cumulative state is its parser's Answer.
type StreamEvent struct {
	// Output is the kind of generated output the event carries, NoOutput
	// for lifecycle events and empty deltas. Any kind is a token: the
	// stream's first one (First) is TTFT's mark, as a chat chunk's first
	// content, reasoning or tool-call delta is.
	Output   Output
	Content  int  // bytes of generated content, as decoded
	First    bool // the stream's first event with output
	ToolCall bool // a tool call starts here
	// Final: the event carries the answer's status and usage
	// (response.completed/incomplete/failed; Anthropic's message_delta,
	// of which a later one supersedes an earlier one).
	Final bool
	// Done: the protocol's last event (response.completed/incomplete/
	// failed, message_stop). A stream ending without it was cut.
	Done  bool
	Error string // an error event's type or code
}

// Answer is what a Responses or Messages answer says about itself.
type Answer struct {
	ID    string // the API's id of its answer (resp_…, msg_…)
	Model string // as the API reported it
	// FinishReason is how the answer ended in chat's words — stop,
	// length, tool_calls, content_filter, error, abort — or the API's own
	// when none fits (Anthropic's pause_turn); "" while unknown.
	// NativeFinish is the API's own: Responses' status (with the
	// incomplete reason: "incomplete/max_output_tokens"), Anthropic's
	// stop_reason.
	FinishReason string
	NativeFinish string
	// Usage is nil when the answer reported none (a Responses stream cut
	// before its last event). Usage.ToolCalls is ToolCalls.
	Usage *record.Usage
	// OutputUnknown: Usage's output count is not the answer's. Anthropic
	// reports output in message_delta, near the end; a stream cut before
	// one came has only message_start's placeholder (usually 1). The
	// gateway counts the output itself instead.
	OutputUnknown bool
	// ToolCalls is the number of tool calls in the answer; HostedToolCalls
	// of them the provider ran itself (web search, code interpreter, MCP).
	ToolCalls, HostedToolCalls int
	Content                    int    // bytes of generated content
	Done                       bool   // streams: the protocol's last event arrived
	Error                      string // the error the answer or stream reported: its type or code
}

// setToolCalls records n tool calls, hosted of them run by the provider.
func (a *Answer) setToolCalls(n, hosted int) {
	a.ToolCalls, a.HostedToolCalls = n, hosted
	if a.Usage != nil {
		a.Usage.ToolCalls = n
	}
}

// strLen is the decoded length of raw when it is a JSON string, else 0:
// only strings are generated text; another type is no reason to refuse an
// answer.
func strLen(raw json.RawMessage) int {
	var s string
	if len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
		return len(s)
	}
	return 0
}

func isNull(raw json.RawMessage) bool { return len(raw) == 0 || bytes.Equal(raw, []byte("null")) }
