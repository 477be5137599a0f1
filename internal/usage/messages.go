package usage

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// Anthropic's Messages API (POST /v1/messages), and the
// Anthropic-compatible endpoints of DeepSeek, Kimi, GLM and others. A
// body is a message; a stream is message_start (the message, usage with
// the input counts and an output placeholder), content blocks
// (content_block_start, _delta, _stop), one or more message_delta (the
// stop_reason, cumulative usage), message_stop; ping and error between.
//
// Usage: Anthropic's input_tokens leaves out the tokens read from and
// written to the prompt cache, so the record's input is input_tokens +
// cache_creation_input_tokens + cache_read_input_tokens; cached is
// cache_read_input_tokens, cache_write cache_creation_input_tokens (its
// 1-hour part cache_creation.ephemeral_1h_input_tokens); output is
// output_tokens, reasoning output_tokens_details.thinking_tokens.
//
// In a stream every count is cumulative, and each is taken from the LAST
// event that carried it, never added up: adding message_delta's output
// to message_start's counts a token twice (tensorzero#5481), adding a
// newer API's repeated input and cache counts doubles them
// (envoyproxy/ai-gateway#2236). Taking the last value of each field also
// reads the endpoints that put the whole prompt in message_start's
// input_tokens, with no cache counts, and the split into uncached input
// and cache reads only in message_delta (Kimi, QwenCloud: bifrost#5354):
// message_delta's input_tokens and cache_read_input_tokens replace it.
// Taking the maximum would keep the prompt-sized value and count the
// cache twice.
//
// Tool calls are the content blocks of type tool_use (the client runs
// them) and *_tool_use — server_tool_use, mcp_tool_use — which the
// provider runs; their results (*_tool_result) are not calls.

// messagesUsage is Anthropic's usage object, in message bodies,
// message_start and message_delta. A field absent (or null) leaves the
// value an earlier event gave.
type messagesUsage struct {
	InputTokens              *int64 `json:"input_tokens"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
	CacheCreation            *struct {
		Ephemeral1h *int64 `json:"ephemeral_1h_input_tokens"`
		Ephemeral5m *int64 `json:"ephemeral_5m_input_tokens"`
	} `json:"cache_creation"`
	OutputTokens        *int64 `json:"output_tokens"`
	OutputTokensDetails *struct {
		ThinkingTokens *int64 `json:"thinking_tokens"`
	} `json:"output_tokens_details"`
}

// messagesCounts are the last value of each usage field.
type messagesCounts struct {
	in, cacheWrite, cacheRead, write1h, write5m, out, thinking *int64
}

func (c *messagesCounts) merge(u *messagesUsage) {
	set := func(dst **int64, v *int64) {
		if v != nil {
			*dst = v
		}
	}
	set(&c.in, u.InputTokens)
	set(&c.cacheWrite, u.CacheCreationInputTokens)
	set(&c.cacheRead, u.CacheReadInputTokens)
	if d := u.CacheCreation; d != nil {
		set(&c.write1h, d.Ephemeral1h)
		set(&c.write5m, d.Ephemeral5m)
	}
	set(&c.out, u.OutputTokens)
	if d := u.OutputTokensDetails; d != nil {
		set(&c.thinking, d.ThinkingTokens)
	}
}

func val(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

var errUsageOverflow = errors.New("usage counts overflow")

// addCounts adds non-negative counts, refusing an overflow.
func addCounts(vs ...int64) (int64, error) {
	var sum int64
	for _, v := range vs {
		if v < 0 {
			return 0, fmt.Errorf("usage has a negative count: %d", v)
		}
		if v > math.MaxInt64-sum {
			return 0, errUsageOverflow
		}
		sum += v
	}
	return sum, nil
}

// usage turns the counts into a Usage (source engine, invariants
// enforced).
func (c *messagesCounts) usage() (record.Usage, error) {
	write := val(c.cacheWrite)
	if c.cacheWrite == nil && (c.write1h != nil || c.write5m != nil) {
		var err error
		if write, err = addCounts(val(c.write1h), val(c.write5m)); err != nil {
			return record.Usage{}, err
		}
	}
	in, err := addCounts(val(c.in), write, val(c.cacheRead))
	if err != nil {
		return record.Usage{}, err
	}
	u := record.Usage{
		InputTokens: in, CachedInputTokens: val(c.cacheRead), CacheWriteTokens: write, CacheWrite1hTokens: val(c.write1h),
		OutputTokens: val(c.out), ReasoningTokens: val(c.thinking), Source: record.SourceEngine,
	}
	if err := check(&u); err != nil {
		return record.Usage{}, err
	}
	return u, nil
}

// messagesFinish maps a stop_reason to a finish reason.
func messagesFinish(stop string) string {
	switch stop {
	case "end_turn", "stop_sequence":
		return "stop"
	case "max_tokens", "model_context_window_exceeded":
		return "length"
	case "tool_use":
		return "tool_calls"
	case "refusal":
		return "content_filter"
	}
	return stop // pause_turn (a server tool loop paused: the client continues it), and any new one
}

// toolUse says whether a content block is a tool call, and whether the
// provider runs it.
func toolUse(typ string) (call, hosted bool) {
	switch {
	case typ == "tool_use":
		return true, false
	case strings.HasSuffix(typ, "_tool_use"):
		return true, true
	}
	return false, false
}

// messagesBlock is the union of the content blocks' fields tollgate
// reads, decoded leniently as responsesItem is.
type messagesBlock struct {
	Type     string          `json:"type"`
	Name     json.RawMessage `json:"name"`
	Text     json.RawMessage `json:"text"`
	Thinking json.RawMessage `json:"thinking"`
	Input    json.RawMessage `json:"input"`
}

type messagesBody struct {
	ID         json.RawMessage   `json:"id"`
	Model      string            `json:"model"`
	Content    []json.RawMessage `json:"content"`
	StopReason json.RawMessage   `json:"stop_reason"`
	Usage      *messagesUsage    `json:"usage"`
	Error      json.RawMessage   `json:"error"`
}

// ParseMessagesBody reads a non-streamed Messages API answer.
func ParseMessagesBody(body []byte) (Answer, error) {
	var b messagesBody
	if err := json.Unmarshal(body, &b); err != nil {
		return Answer{}, fmt.Errorf("response body: %w", err)
	}
	a := Answer{ID: stringValue(b.ID), Model: b.Model, NativeFinish: stringValue(b.StopReason)}
	a.FinishReason = messagesFinish(a.NativeFinish)
	calls, hosted := 0, 0
	for _, raw := range b.Content {
		var bl messagesBlock
		if json.Unmarshal(raw, &bl) != nil {
			continue
		}
		a.Content += strLen(bl.Text) + strLen(bl.Thinking) + strLen(bl.Name)
		if call, h := toolUse(bl.Type); call {
			calls++
			if h {
				hosted++
			}
			if !isNull(bl.Input) {
				a.Content += len(bl.Input) // the arguments' JSON, as sent
			}
		}
	}
	if b.Usage != nil {
		var c messagesCounts
		c.merge(b.Usage)
		u, err := c.usage()
		if err != nil {
			return Answer{}, err
		}
		a.Usage, a.OutputUnknown = &u, c.out == nil
	}
	a.setToolCalls(calls, hosted)
	if !isNull(b.Error) {
		a.Error = errorMessage(b.Error)
	}
	return a, nil
}

// MessagesStream reads the events of one streamed Messages API answer.
// The zero value is ready to use; it is not safe for concurrent use.
type MessagesStream struct {
	id, model     string
	stop          string
	counts        messagesCounts
	usage         record.Usage
	hasUsage      bool // an event carried usage
	outputKnown   bool // a message_delta carried output_tokens
	calls, hosted int
	content       int
	seenOutput    bool
	done          bool
	err           string
}

// Parse reads the data of the stream's next event (without "data: ").
// content_block_delta, the stream's bulk, is read without allocating.
func (s *MessagesStream) Parse(data []byte) (StreamEvent, error) {
	if out, n, ok := scanMessagesDelta(data); ok {
		return s.output(out, n, false), nil
	}
	return s.parseSlow(data)
}

// output is an event with n bytes of output of kind out; an empty one is
// no token, unless whole (a tool call's start, redacted thinking: output
// even without text).
func (s *MessagesStream) output(out Output, n int, whole bool) StreamEvent {
	if out == NoOutput || (n == 0 && !whole) {
		return StreamEvent{}
	}
	ev := StreamEvent{Output: out, Content: n, First: !s.seenOutput}
	s.seenOutput = true
	s.content += n
	return ev
}

type messagesEventWire struct {
	Type         string          `json:"type"`
	Message      json.RawMessage `json:"message"`
	ContentBlock json.RawMessage `json:"content_block"`
	Delta        *messagesDelta  `json:"delta"`
	Usage        json.RawMessage `json:"usage"`
	Error        json.RawMessage `json:"error"`
}

// messagesDelta is a content_block_delta's delta or a message_delta's.
type messagesDelta struct {
	Type        string          `json:"type"`
	Text        json.RawMessage `json:"text"`
	Thinking    json.RawMessage `json:"thinking"`
	PartialJSON json.RawMessage `json:"partial_json"`
	StopReason  json.RawMessage `json:"stop_reason"`
}

// messagesDeltaKind is a content delta's kind, and which of its text,
// thinking and partial_json (0, 1, 2) is the generated text.
func messagesDeltaKind(typ []byte) (Output, int) {
	switch {
	case string(typ) == "text_delta":
		return OutputText, 0
	case string(typ) == "thinking_delta":
		return OutputReasoning, 1
	case string(typ) == "input_json_delta":
		return OutputToolCall, 2
	}
	return NoOutput, 0 // signature_delta, citations_delta: no generated tokens
}

// mergeUsage folds an event's usage into the counts, refusing (and
// leaving the counts as they were) figures that make no sense.
func (s *MessagesStream) mergeUsage(raw json.RawMessage, what string) (outputTokens bool, err error) {
	if isNull(raw) {
		return false, nil
	}
	var u messagesUsage
	if err := json.Unmarshal(raw, &u); err != nil {
		return false, fmt.Errorf("stream event %s usage: %w", what, err)
	}
	c := s.counts
	c.merge(&u)
	usage, err := c.usage()
	if err != nil {
		return false, err
	}
	s.counts, s.usage, s.hasUsage = c, usage, true
	return u.OutputTokens != nil, nil
}

// parseSlow is the reference reading of an event, with encoding/json:
// Parse answers exactly as it does (FuzzMessagesStreamDifferential).
func (s *MessagesStream) parseSlow(data []byte) (StreamEvent, error) {
	var w messagesEventWire
	if err := json.Unmarshal(data, &w); err != nil {
		return StreamEvent{}, fmt.Errorf("stream event: %w", err)
	}
	switch w.Type {
	case "message_start":
		var m struct {
			ID    json.RawMessage `json:"id"`
			Model string          `json:"model"`
			Usage json.RawMessage `json:"usage"`
		}
		if err := json.Unmarshal(w.Message, &m); err != nil {
			return StreamEvent{}, fmt.Errorf("stream event message_start: %w", err)
		}
		if _, err := s.mergeUsage(m.Usage, w.Type); err != nil {
			return StreamEvent{}, err
		}
		s.id, s.model = stringValue(m.ID), m.Model
	case "content_block_start":
		var bl messagesBlock
		if json.Unmarshal(w.ContentBlock, &bl) != nil {
			break
		}
		if call, hosted := toolUse(bl.Type); call {
			s.calls++
			if hosted {
				s.hosted++
			}
			ev := s.output(OutputToolCall, strLen(bl.Name), true)
			ev.ToolCall = true
			return ev, nil
		}
		switch bl.Type {
		case "text":
			return s.output(OutputText, strLen(bl.Text), false), nil
		case "thinking":
			return s.output(OutputReasoning, strLen(bl.Thinking), false), nil
		case "redacted_thinking": // reasoning, generated whole and encrypted
			return s.output(OutputReasoning, 0, true), nil
		}
	case "content_block_delta":
		if d := w.Delta; d != nil {
			out, i := messagesDeltaKind([]byte(d.Type))
			if out != NoOutput {
				return s.output(out, strLen([...]json.RawMessage{d.Text, d.Thinking, d.PartialJSON}[i]), false), nil
			}
		}
	case "message_delta":
		out, err := s.mergeUsage(w.Usage, w.Type)
		if err != nil {
			return StreamEvent{}, err
		}
		s.outputKnown = s.outputKnown || out
		if w.Delta != nil {
			if stop := stringValue(w.Delta.StopReason); stop != "" {
				s.stop = stop
			}
		}
		return StreamEvent{Final: true}, nil
	case "message_stop":
		s.done = true
		return StreamEvent{Done: true}, nil
	case "error":
		s.err = errorMessage(w.Error)
		return StreamEvent{Error: s.err}, nil
	}
	return StreamEvent{}, nil
}

// Answer is what the stream has said so far: all of it after
// message_stop (Done); after a cut, the tokens consumed so far —
// message_start's input, the last message_delta's output, or
// OutputUnknown when no message_delta came.
func (s *MessagesStream) Answer() Answer {
	a := Answer{ID: s.id, Model: s.model, NativeFinish: s.stop, FinishReason: messagesFinish(s.stop),
		Content: s.content, Done: s.done, Error: s.err}
	if s.hasUsage {
		u := s.usage
		a.Usage, a.OutputUnknown = &u, !s.outputKnown
	}
	a.setToolCalls(s.calls, s.hosted)
	return a
}
