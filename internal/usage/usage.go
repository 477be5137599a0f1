// Package usage reads what an engine says about a request: the usage
// object (input, cached, cache-write, output, reasoning tokens) in its
// several dialects, and the few fields of a streamed chunk the gateway's
// SSE tap needs (is this a content token, the finish reason, the served
// model) — for chat and completions here and in chunk.go, for the APIs
// agents speak in responses.go (OpenAI's Responses) and messages.go
// (Anthropic's Messages). It sits between the gateway's tap, which hands
// it raw bytes, and the Record.
//
// Parsing is deliberately narrow: only the fields tollgate needs are
// decoded, so an engine's extra fields never cost anything or break it.
package usage

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// wire is the union of the usage dialects seen in OpenAI-compatible
// engines: OpenAI chat/completions (prompt_/completion_), OpenAI Responses
// (input_/output_), both with cache_write_tokens beside cached_tokens;
// DeepSeek's prompt_cache_hit_tokens/prompt_cache_miss_tokens; Kimi's
// top-level cached_tokens; vLLM and SGLang (OpenAI's names, cached tokens
// when prefix caching reports them); Gemini's OpenAI-compatible endpoint,
// which leaves thinking out of completion_tokens (see normalize).
type wire struct {
	PromptTokens        *int64 `json:"prompt_tokens"`
	CompletionTokens    *int64 `json:"completion_tokens"`
	InputTokens         *int64 `json:"input_tokens"`
	OutputTokens        *int64 `json:"output_tokens"`
	TotalTokens         *int64 `json:"total_tokens"`
	PromptCacheHit      *int64 `json:"prompt_cache_hit_tokens"`
	PromptCacheMiss     *int64 `json:"prompt_cache_miss_tokens"`
	CachedTokensTop     *int64 `json:"cached_tokens"`
	ReasoningTokensTop  *int64 `json:"reasoning_tokens"`
	PromptTokensDetails *struct {
		CachedTokens     *int64 `json:"cached_tokens"`
		CacheWriteTokens *int64 `json:"cache_write_tokens"`
	} `json:"prompt_tokens_details"`
	InputTokensDetails *struct {
		CachedTokens     *int64 `json:"cached_tokens"`
		CacheWriteTokens *int64 `json:"cache_write_tokens"`
	} `json:"input_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens *int64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
	OutputTokensDetails *struct {
		ReasoningTokens *int64 `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
}

func first(ps ...*int64) (int64, bool) {
	for _, p := range ps {
		if p != nil {
			return *p, true
		}
	}
	return 0, false
}

// normalize turns any dialect into a Usage with source engine (see
// check for the invariants it then enforces).
func (w *wire) normalize() (record.Usage, error) {
	in, okIn := first(w.PromptTokens, w.InputTokens)
	if !okIn && w.PromptCacheHit != nil && w.PromptCacheMiss != nil {
		in, okIn = *w.PromptCacheHit+*w.PromptCacheMiss, true // DeepSeek: hit + miss = prompt
	}
	out, okOut := first(w.CompletionTokens, w.OutputTokens)
	if !okIn && !okOut {
		if w.TotalTokens == nil {
			return record.Usage{}, errors.New("usage has no token counts")
		}
		in, okIn = *w.TotalTokens, true // embeddings-style: total only
	}
	u := record.Usage{InputTokens: in, OutputTokens: out, Source: record.SourceEngine}
	var pd, id struct{ cached, write *int64 }
	if d := w.PromptTokensDetails; d != nil {
		pd.cached, pd.write = d.CachedTokens, d.CacheWriteTokens
	}
	if d := w.InputTokensDetails; d != nil {
		id.cached, id.write = d.CachedTokens, d.CacheWriteTokens
	}
	u.CachedInputTokens, _ = first(pd.cached, id.cached, w.PromptCacheHit, w.CachedTokensTop)
	u.CacheWriteTokens, _ = first(pd.write, id.write)
	var cd, od *int64
	if d := w.CompletionTokensDetails; d != nil {
		cd = d.ReasoningTokens
	}
	if d := w.OutputTokensDetails; d != nil {
		od = d.ReasoningTokens
	}
	u.ReasoningTokens, _ = first(cd, od, w.ReasoningTokensTop)
	// Gemini's OpenAI-compatible endpoint counts thinking in total_tokens
	// but not in completion_tokens (prompt 758, completion 102, total
	// 1725). Everywhere else total = prompt + completion, so a surplus is
	// output the engine generated and left out: thinking, billed as
	// output.
	if w.TotalTokens != nil && okIn && okOut && in >= 0 && out >= 0 && out <= math.MaxInt64-in && *w.TotalTokens > in+out {
		gap := *w.TotalTokens - in - out
		u.OutputTokens += gap
		u.ReasoningTokens = max(u.ReasoningTokens, gap)
	}
	if err := check(&u); err != nil {
		return record.Usage{}, err
	}
	return u, nil
}

// check enforces a Usage's invariants: no negative count (an error: the
// figures are nonsense), then cached ≤ input, cache writes ≤ input −
// cached, the 1-hour writes ≤ cache writes, reasoning ≤ output (clamped:
// an engine over-reporting a detail must not make input or output lie).
func check(u *record.Usage) error {
	if u.InputTokens < 0 || u.OutputTokens < 0 || u.CachedInputTokens < 0 || u.ReasoningTokens < 0 ||
		u.CacheWriteTokens < 0 || u.CacheWrite1hTokens < 0 || u.ToolCalls < 0 {
		return fmt.Errorf("usage has a negative count: %+v", *u)
	}
	u.CachedInputTokens = min(u.CachedInputTokens, u.InputTokens)
	u.CacheWriteTokens = min(u.CacheWriteTokens, u.InputTokens-u.CachedInputTokens)
	u.CacheWrite1hTokens = min(u.CacheWrite1hTokens, u.CacheWriteTokens)
	u.ReasoningTokens = min(u.ReasoningTokens, u.OutputTokens)
	return nil
}

// Parse reads a usage object in any supported dialect.
func Parse(b []byte) (record.Usage, error) {
	var w wire
	if err := json.Unmarshal(b, &w); err != nil {
		return record.Usage{}, fmt.Errorf("usage: %w", err)
	}
	return w.normalize()
}

// Chunk is what the tap needs from one streamed event's data.
type Chunk struct {
	Model        string
	ID           string // the engine's id of its answer (chatcmpl-…), on every chunk
	Content      int    // bytes of generated content in this chunk (text, reasoning, tool-call arguments)
	HasContent   bool   // the chunk carries at least one generated token
	FinishReason string
	Usage        *record.Usage // present on the usage chunk (or every chunk with continuous usage)
	UsageOnly    bool          // "choices": [] with a usage object: the include_usage chunk
	Error        string        // an error object sent mid-stream by the engine
}

type chunkWire struct {
	ID      json.RawMessage `json:"id"`
	Model   string          `json:"model"`
	Choices *[]struct {
		Delta *struct {
			Content          *string         `json:"content"`
			ReasoningContent *string         `json:"reasoning_content"`
			Reasoning        *string         `json:"reasoning"`
			ToolCalls        []toolCallDelta `json:"tool_calls"`
		} `json:"delta"`
		Text         *string `json:"text"`
		FinishReason *string `json:"finish_reason"`
		// Usage inside a choice: Kimi (Moonshot) streams put the usage
		// in the last chunk's choice, not beside choices. Read when the
		// chunk has no top-level usage.
		Usage json.RawMessage `json:"usage"`
	} `json:"choices"`
	Usage json.RawMessage `json:"usage"`
	Error json.RawMessage `json:"error"`
}

type toolCallDelta struct {
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// parseChunkSlow is the reference reading of a chunk, with encoding/json:
// ParseChunk answers exactly as it does (see chunk.go), and falls back to
// it for any input its own scan is not sure of.
func parseChunkSlow(data []byte) (Chunk, error) {
	var w chunkWire
	if err := json.Unmarshal(data, &w); err != nil {
		return Chunk{}, fmt.Errorf("stream chunk: %w", err)
	}
	c := Chunk{Model: w.Model, ID: stringValue(w.ID)}
	if len(w.Error) > 0 && !bytes.Equal(w.Error, []byte("null")) {
		c.Error = errorMessage(w.Error)
	}
	var choiceUsage json.RawMessage // the last non-null one
	if w.Choices != nil {
		for _, ch := range *w.Choices {
			if ch.FinishReason != nil && *ch.FinishReason != "" {
				c.FinishReason = *ch.FinishReason
			}
			if len(ch.Usage) > 0 && !bytes.Equal(ch.Usage, []byte("null")) {
				choiceUsage = ch.Usage
			}
			n := 0
			if ch.Text != nil {
				n += len(*ch.Text)
			}
			if d := ch.Delta; d != nil {
				for _, s := range []*string{d.Content, d.ReasoningContent, d.Reasoning} {
					if s != nil {
						n += len(*s)
					}
				}
				for _, tc := range d.ToolCalls {
					n += len(tc.Function.Name) + len(tc.Function.Arguments)
				}
			}
			// A tool call's first delta may carry only an id: it is still
			// generated output, so the chunk counts as a token.
			if n > 0 || (ch.Delta != nil && len(ch.Delta.ToolCalls) > 0) {
				c.HasContent = true
				c.Content += n
			}
		}
	}
	if len(w.Usage) == 0 || bytes.Equal(w.Usage, []byte("null")) {
		w.Usage = choiceUsage
	}
	if len(w.Usage) > 0 {
		u, err := Parse(w.Usage)
		if err != nil {
			return Chunk{}, err
		}
		c.Usage = &u
		c.UsageOnly = w.Choices != nil && len(*w.Choices) == 0
	}
	return c, nil
}

// Response is what the gateway needs from a non-streamed response body.
type Response struct {
	Model        string
	ID           string // the engine's id of its answer (chatcmpl-…)
	FinishReason string
	Content      int
	Usage        *record.Usage
}

type responseWire struct {
	ID      json.RawMessage `json:"id"`
	Model   string          `json:"model"`
	Choices []struct {
		Message *struct {
			Content          *string         `json:"content"`
			ReasoningContent *string         `json:"reasoning_content"`
			ToolCalls        json.RawMessage `json:"tool_calls"`
		} `json:"message"`
		Text         *string `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage json.RawMessage `json:"usage"`
}

// ParseResponse reads a non-streamed chat, completion or embeddings body.
func ParseResponse(body []byte) (Response, error) {
	var w responseWire
	if err := json.Unmarshal(body, &w); err != nil {
		return Response{}, fmt.Errorf("response body: %w", err)
	}
	r := Response{Model: w.Model, ID: stringValue(w.ID)}
	for _, ch := range w.Choices {
		if ch.FinishReason != nil && r.FinishReason == "" {
			r.FinishReason = *ch.FinishReason
		}
		if ch.Text != nil {
			r.Content += len(*ch.Text)
		}
		if m := ch.Message; m != nil {
			if m.Content != nil {
				r.Content += len(*m.Content)
			}
			if m.ReasoningContent != nil {
				r.Content += len(*m.ReasoningContent)
			}
			if len(m.ToolCalls) > 0 && !bytes.Equal(m.ToolCalls, []byte("null")) {
				r.Content += len(m.ToolCalls)
			}
		}
	}
	if len(w.Usage) > 0 && !bytes.Equal(w.Usage, []byte("null")) {
		u, err := Parse(w.Usage)
		if err != nil {
			return Response{}, err
		}
		r.Usage = &u
	}
	return r, nil
}

// stringValue is raw decoded when it is a JSON string, and "" otherwise:
// the id is only reported, so an engine giving it another type (or none)
// is no reason to refuse an answer whose other fields are good.
func stringValue(raw json.RawMessage) string {
	var s string
	if len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
		return s
	}
	return ""
}

func errorMessage(raw json.RawMessage) string {
	var e struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	}
	if json.Unmarshal(raw, &e) == nil && (e.Message != "" || e.Type != "") {
		if e.Type != "" {
			return e.Type
		}
		return "error"
	}
	return "error"
}
