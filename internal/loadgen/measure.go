package loadgen

import (
	"bytes"
	"encoding/json"
	"time"
)

// Kind is what one server-sent event of a streamed completion is.
type Kind uint8

const (
	KindOther   Kind = iota // a JSON event with neither choices nor usage
	KindRole                // choices, but no output and no finish_reason (the role-only first delta)
	KindContent             // carries generated output
	KindFinish              // choices with a finish_reason and no output
	KindUsage               // no choices, a usage object (stream_options.include_usage)
	KindError               // an error object inside the stream
	KindDone                // data: [DONE]
)

var kindNames = [...]string{"other", "role", "content", "finish", "usage", "error", "done"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// Event is one server-sent event as the client read it.
type Event struct {
	At   time.Time
	Kind Kind
	// Usage, when the event carried a usage object (any kind may: some
	// engines send usage on every chunk).
	HasUsage                       bool
	PromptTokens, CompletionTokens int
	FinishReason                   string
	// Text is the output the event carried (content, reasoning or text).
	Text string
	// Model and Fingerprint are the chunk's "model" and
	// "system_fingerprint", when present: who actually answered.
	Model, Fingerprint string
}

// Output-token sources, as reported in results.
const (
	FromUsage  = "usage"  // the server's usage object
	FromChunks = "chunks" // counted content chunks (no usage reported)
)

// Measurement is one request's figures, derived from its event timeline by
// Measure. Durations are from the request's start (intended send time).
type Measurement struct {
	TTFT    time.Duration // first content chunk; valid when HasTTFT
	HasTTFT bool
	// E2E ends at the last event with choices (role, content or finish):
	// the usage-only chunk and [DONE] are excluded, as the package doc says.
	E2E time.Duration
	// StreamEnd ends at the last event of any kind ([DONE] included): the
	// end of the response as a proxy sees it (tollgate's E2E).
	StreamEnd     time.Duration
	ITL           []time.Duration
	TPOT          time.Duration // valid when HasTPOT (output tokens > 1)
	HasTPOT       bool
	ContentChunks int
	OutputTokens  int
	OutputFrom    string // FromUsage or FromChunks
	InputTokens   int    // from usage; 0 when none was reported
	FinishReason  string
	SawDone       bool
	SawError      bool
}

// Measure derives a request's figures from its event timeline, with the
// definitions of the package doc. It is a pure function of its inputs.
func Measure(start time.Time, events []Event) Measurement {
	var m Measurement
	var first, lastContent, lastChoice time.Time
	usage := -1
	for _, e := range events {
		if e.HasUsage {
			usage = e.CompletionTokens
			m.InputTokens = e.PromptTokens
		}
		if e.FinishReason != "" {
			m.FinishReason = e.FinishReason
		}
		m.StreamEnd = e.At.Sub(start)
		switch e.Kind {
		case KindContent:
			m.ContentChunks++
			if first.IsZero() {
				first = e.At
			} else {
				m.ITL = append(m.ITL, e.At.Sub(lastContent))
			}
			lastContent = e.At
			lastChoice = e.At
		case KindRole, KindFinish:
			lastChoice = e.At
		case KindDone:
			m.SawDone = true
		case KindError:
			m.SawError = true
		}
	}
	switch {
	case !lastChoice.IsZero():
		m.E2E = lastChoice.Sub(start)
	default:
		m.E2E = m.StreamEnd
	}
	if !first.IsZero() {
		m.TTFT, m.HasTTFT = first.Sub(start), true
	}
	m.OutputTokens, m.OutputFrom = m.ContentChunks, FromChunks
	if usage >= 0 {
		m.OutputTokens, m.OutputFrom = usage, FromUsage
	}
	if m.HasTTFT && m.OutputTokens > 1 {
		m.TPOT, m.HasTPOT = (m.E2E-m.TTFT)/time.Duration(m.OutputTokens-1), true
	}
	return m
}

// chunkJSON is the part of a streamed completion chunk that classify reads:
// chat deltas, completions text, usage and errors.
type chunkJSON struct {
	Model             string `json:"model"`
	SystemFingerprint string `json:"system_fingerprint"`
	Choices           []struct {
		Delta *struct {
			Content          *string         `json:"content"`
			ReasoningContent *string         `json:"reasoning_content"`
			Reasoning        *string         `json:"reasoning"`
			ToolCalls        json.RawMessage `json:"tool_calls"`
		} `json:"delta"`
		Text         *string `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// classify fills e's kind, usage, finish reason and text from one event's
// data payload. A payload that is not JSON is an error event.
func classify(data []byte, e *Event) {
	if bytes.Equal(data, []byte("[DONE]")) {
		e.Kind = KindDone
		return
	}
	var c chunkJSON
	if err := json.Unmarshal(data, &c); err != nil {
		e.Kind = KindError
		return
	}
	e.Model, e.Fingerprint = c.Model, c.SystemFingerprint
	if c.Usage != nil {
		e.HasUsage, e.PromptTokens, e.CompletionTokens = true, c.Usage.PromptTokens, c.Usage.CompletionTokens
	}
	if len(c.Error) > 0 && !bytes.Equal(c.Error, []byte("null")) {
		e.Kind = KindError
		return
	}
	if len(c.Choices) == 0 {
		if c.Usage != nil {
			e.Kind = KindUsage
		}
		return
	}
	e.Kind = KindRole
	for _, ch := range c.Choices {
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			e.FinishReason = *ch.FinishReason
		}
		text := ""
		if ch.Text != nil {
			text += *ch.Text
		}
		tools := false
		if d := ch.Delta; d != nil {
			for _, s := range []*string{d.Content, d.ReasoningContent, d.Reasoning} {
				if s != nil {
					text += *s
				}
			}
			tools = len(d.ToolCalls) > 0 && !bytes.Equal(d.ToolCalls, []byte("null")) && !bytes.Equal(d.ToolCalls, []byte("[]"))
		}
		if text != "" || tools {
			e.Kind = KindContent
			e.Text += text
		}
	}
	if e.Kind == KindRole && e.FinishReason != "" {
		e.Kind = KindFinish
	}
}
