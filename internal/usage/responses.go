package usage

import (
	"encoding/json"
	"fmt"
	"strings"
)

// OpenAI's Responses API (POST /v1/responses). A body is a response
// object; a stream is typed events, each data's "type" naming it (the
// SSE event: line says the same), ending with response.completed,
// response.incomplete or response.failed — which carry the whole response,
// usage included — and no [DONE].
//
// Usage is OpenAI's: input_tokens includes the cached tokens
// (input_tokens_details.cached_tokens) and the cache writes
// (cache_write_tokens); output_tokens includes
// output_tokens_details.reasoning_tokens. Parse reads it.
//
// Tool calls are the output items whose type ends in "_call": the
// client's (function_call, custom_tool_call, computer_call, shell_call,
// local_shell_call, apply_patch_call) and the provider's (web_search_call,
// file_search_call, code_interpreter_call, image_generation_call,
// mcp_call, tool_search_call run by the server). Items ending in
// "_call_output" are results, not calls. A completed answer with a client
// call finishes with tool_calls, as a chat answer does.

// responsesDeltas are the delta events whose "delta" string is generated
// output, with its kind.
var responsesDeltas = [...]struct {
	typ string
	out Output
}{
	{"response.output_text.delta", OutputText},
	{"response.refusal.delta", OutputText},
	{"response.audio.transcript.delta", OutputText},
	{"response.reasoning_summary_text.delta", OutputReasoning},
	{"response.reasoning_text.delta", OutputReasoning},
	{"response.function_call_arguments.delta", OutputToolCall},
	{"response.custom_tool_call_input.delta", OutputToolCall},
	{"response.mcp_call_arguments.delta", OutputToolCall},
	{"response.code_interpreter_call_code.delta", OutputToolCall},
	{"response.shell_call_command.delta", OutputToolCall},
}

// responsesDeltaKind takes bytes so the scan's type needs no string: a
// comparison with a converted []byte does not allocate.
func responsesDeltaKind(typ []byte) Output {
	for _, d := range responsesDeltas {
		if string(typ) == d.typ {
			return d.out
		}
	}
	return NoOutput
}

// hostedCalls are the calls of tools the provider runs itself.
var hostedCalls = [...]string{"web_search_call", "file_search_call", "code_interpreter_call", "image_generation_call", "mcp_call"}

// callKind says whether an output item is a tool call, and whether the
// provider ran it.
func callKind(typ, execution string) (call, hosted bool) {
	if !strings.HasSuffix(typ, "_call") {
		return false, false
	}
	for _, h := range hostedCalls {
		if typ == h {
			return true, true
		}
	}
	if typ == "tool_search_call" {
		return true, execution != "client"
	}
	return true, false
}

// responsesFinish maps a response's status (and the reason it is
// incomplete) to a finish reason; clientCalls > 0 makes a completed
// answer a tool_calls one.
func responsesFinish(status, reason string, clientCalls int) (finish, native string) {
	native = status
	switch status {
	case "completed":
		finish = "stop"
		if clientCalls > 0 {
			finish = "tool_calls"
		}
	case "incomplete":
		if reason != "" {
			native = status + "/" + reason
		}
		switch reason {
		case "max_output_tokens":
			finish = "length"
		case "content_filter":
			finish = "content_filter"
		default:
			finish = native // an incomplete answer whose reason is new to us
		}
	case "failed":
		finish = "error"
	case "cancelled":
		finish = "abort"
	}
	return finish, native
}

type responsesBody struct {
	ID                json.RawMessage `json:"id"`
	Model             string          `json:"model"`
	Status            string          `json:"status"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Error  json.RawMessage    `json:"error"`
	Output *[]json.RawMessage `json:"output"`
	Usage  json.RawMessage    `json:"usage"`
}

// responsesItem is the union of the output items' fields tollgate reads.
// Items are decoded one by one and leniently: an item of a kind new to
// us, with fields of other types, is skipped, not a broken answer.
type responsesItem struct {
	Type      string          `json:"type"`
	Execution string          `json:"execution"`
	Name      json.RawMessage `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Input     json.RawMessage `json:"input"`
	Code      json.RawMessage `json:"code"`
	Content   json.RawMessage `json:"content"` // message and reasoning parts
	Summary   json.RawMessage `json:"summary"` // reasoning summary parts
}

// parts is the generated text of content or summary parts (output_text,
// refusal, reasoning_text, summary_text).
func parts(raw json.RawMessage) int {
	var ps []struct {
		Text    json.RawMessage `json:"text"`
		Refusal json.RawMessage `json:"refusal"`
	}
	if isNull(raw) || json.Unmarshal(raw, &ps) != nil {
		return 0
	}
	n := 0
	for _, p := range ps {
		n += strLen(p.Text) + strLen(p.Refusal)
	}
	return n
}

// answer reads a response object; calls reports whether it listed its
// output (a stream's last event may leave it out).
func (b *responsesBody) answer() (a Answer, status, reason string, listed bool, err error) {
	a = Answer{ID: stringValue(b.ID), Model: b.Model}
	calls, hosted := 0, 0
	if b.Output != nil {
		listed = true
		for _, raw := range *b.Output {
			var it responsesItem
			if json.Unmarshal(raw, &it) != nil {
				continue
			}
			if call, h := callKind(it.Type, it.Execution); call {
				calls++
				if h {
					hosted++
				}
			}
			a.Content += strLen(it.Name) + strLen(it.Arguments) + strLen(it.Input) + strLen(it.Code) +
				parts(it.Content) + parts(it.Summary)
		}
	}
	if !isNull(b.Usage) {
		u, err := Parse(b.Usage)
		if err != nil {
			return Answer{}, "", "", false, err
		}
		a.Usage = &u
	}
	a.setToolCalls(calls, hosted)
	status = b.Status
	if b.IncompleteDetails != nil {
		reason = b.IncompleteDetails.Reason
	}
	a.FinishReason, a.NativeFinish = responsesFinish(status, reason, calls-hosted)
	if !isNull(b.Error) {
		a.Error = errorCode(b.Error)
	}
	return a, status, reason, listed, nil
}

// errorCode is a Responses error object's code, else its type, else
// "error".
func errorCode(raw json.RawMessage) string {
	var e struct {
		Code json.RawMessage `json:"code"`
	}
	if json.Unmarshal(raw, &e) == nil {
		if c := stringValue(e.Code); c != "" {
			return c
		}
	}
	return errorMessage(raw)
}

// ParseResponsesBody reads a non-streamed Responses API answer.
func ParseResponsesBody(body []byte) (Answer, error) {
	var b responsesBody
	if err := json.Unmarshal(body, &b); err != nil {
		return Answer{}, fmt.Errorf("response body: %w", err)
	}
	a, _, _, _, err := b.answer()
	return a, err
}

// ResponsesStream reads the events of one streamed Responses API answer.
// The zero value is ready to use; it is not safe for concurrent use.
type ResponsesStream struct {
	last           Answer // from the last response object seen
	status, reason string
	listed         bool // the last response object listed its output
	final          bool // a response.completed/incomplete/failed arrived
	calls, hosted  int  // tool calls started (response.output_item.added)
	content        int
	seenOutput     bool
	err            string // the last error event's code
}

// Parse reads the data of the stream's next event (without "data: ").
// The delta events, the stream's bulk, are read without allocating.
func (s *ResponsesStream) Parse(data []byte) (StreamEvent, error) {
	if out, n, ok := scanResponsesDelta(data); ok {
		return s.output(out, n, false), nil
	}
	return s.parseSlow(data)
}

// output is an event with n bytes of output of kind out; an empty delta
// is no token, a tool call's start (whole) is one.
func (s *ResponsesStream) output(out Output, n int, whole bool) StreamEvent {
	if out == NoOutput || (n == 0 && !whole) {
		return StreamEvent{}
	}
	ev := StreamEvent{Output: out, Content: n, First: !s.seenOutput}
	s.seenOutput = true
	s.content += n
	return ev
}

type responsesEventWire struct {
	Type     string          `json:"type"`
	Delta    json.RawMessage `json:"delta"`
	Item     json.RawMessage `json:"item"`
	Response json.RawMessage `json:"response"`
	Code     json.RawMessage `json:"code"`
	Error    json.RawMessage `json:"error"`
}

// parseSlow is the reference reading of an event, with encoding/json:
// Parse answers exactly as it does (FuzzResponsesStreamDifferential).
func (s *ResponsesStream) parseSlow(data []byte) (StreamEvent, error) {
	var w responsesEventWire
	if err := json.Unmarshal(data, &w); err != nil {
		return StreamEvent{}, fmt.Errorf("stream event: %w", err)
	}
	if out := responsesDeltaKind([]byte(w.Type)); out != NoOutput {
		return s.output(out, strLen(w.Delta), false), nil
	}
	switch w.Type {
	case "response.created", "response.in_progress", "response.queued":
		var b responsesBody
		if err := json.Unmarshal(w.Response, &b); err != nil {
			return StreamEvent{}, fmt.Errorf("stream event %s: %w", w.Type, err)
		}
		s.last.ID, s.last.Model = stringValue(b.ID), b.Model
	case "response.output_item.added":
		var it responsesItem
		if json.Unmarshal(w.Item, &it) != nil {
			break
		}
		if call, hosted := callKind(it.Type, it.Execution); call {
			s.calls++
			if hosted {
				s.hosted++
			}
			ev := s.output(OutputToolCall, strLen(it.Name), true)
			ev.ToolCall = true
			return ev, nil
		}
	case "response.completed", "response.incomplete", "response.failed":
		var b responsesBody
		if err := json.Unmarshal(w.Response, &b); err != nil {
			return StreamEvent{}, fmt.Errorf("stream event %s: %w", w.Type, err)
		}
		a, status, reason, listed, err := b.answer()
		if err != nil {
			return StreamEvent{}, err
		}
		s.last, s.status, s.reason, s.listed, s.final = a, status, reason, listed, true
		ev := StreamEvent{Final: true, Done: true}
		if w.Type == "response.failed" {
			ev.Error = a.Error
			if ev.Error == "" {
				ev.Error = "error"
			}
		}
		return ev, nil
	case "error":
		code := stringValue(w.Code)
		if code == "" && !isNull(w.Error) {
			code = errorMessage(w.Error)
		}
		if code == "" {
			code = "error"
		}
		s.err = code
		return StreamEvent{Error: code}, nil
	}
	return StreamEvent{}, nil
}

// Answer is what the stream has said so far: all of it after its last
// event (Done), what was consumed before the cut otherwise (no usage:
// Responses reports it only at the end).
func (s *ResponsesStream) Answer() Answer {
	a := s.last
	if a.Usage != nil {
		u := *a.Usage
		a.Usage = &u
	}
	a.Content, a.Done = s.content, s.final
	if a.Error == "" {
		a.Error = s.err
	}
	if !s.listed { // the calls as they started
		a.setToolCalls(s.calls, s.hosted)
		a.FinishReason, a.NativeFinish = responsesFinish(s.status, s.reason, s.calls-s.hosted)
	}
	return a
}
