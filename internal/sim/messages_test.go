package sim

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func messagesBody(content any, extra ...any) map[string]any {
	b := map[string]any{
		"model":      "Qwen/Qwen3-8B",
		"max_tokens": 1024,
		"messages":   []any{map[string]any{"role": "user", "content": content}},
	}
	for i := 0; i+1 < len(extra); i += 2 {
		b[extra[i].(string)] = extra[i+1]
	}
	return b
}

var weatherToolAnthropic = map[string]any{
	"name": "get_weather", "description": "Current weather in a city",
	"input_schema": map[string]any{
		"type": "object", "required": []string{"city"},
		"properties": map[string]any{"city": map[string]any{"type": "string"}},
	},
}

// longText is a system prompt long enough for Anthropic to cache.
var longText = strings.Repeat("You are a careful assistant. ", 300)

// The parts of a message the tests look at.
type messageResult struct {
	ID           string  `json:"id"`
	Type         string  `json:"type"`
	Role         string  `json:"role"`
	Model        string  `json:"model"`
	StopReason   *string `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
	Content      []struct {
		Type      string          `json:"type"`
		Text      string          `json:"text"`
		Thinking  string          `json:"thinking"`
		Signature string          `json:"signature"`
		ID        string          `json:"id"`
		Name      string          `json:"name"`
		Input     json.RawMessage `json:"input"`
	} `json:"content"`
	Usage anthropicUsage `json:"usage"`
}

func (m messageResult) kinds() []string {
	var out []string
	for _, c := range m.Content {
		out = append(out, c.Type)
	}
	return out
}

func TestMessagesGoldenShapes(t *testing.T) {
	tests := []struct {
		name   string
		body   any
		header []string
	}{
		{"messages.json", messagesBody("Hello, world"), []string{OutputTokensHeader, "3"}},
		{"messages_stream.txt", messagesBody("Hello, world", "max_tokens", 2048, "stream", true, "thinking", map[string]any{"type": "enabled", "budget_tokens": 1024}),
			[]string{OutputTokensHeader, "5", ReasoningTokensHeader, "2"}},
		{"messages_tool_stream.txt", messagesBody("Weather in Paris?", "stream", true, "tools", []any{weatherToolAnthropic}),
			[]string{OutputTokensHeader, "4"}},
		{"messages_error_no_max_tokens.json", map[string]any{"model": "Qwen/Qwen3-8B", "messages": []any{}}, nil},
		{"messages_error_529.json", messagesBody("hi"), []string{FaultHeader, "status=529"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, fastConfig())
			resp := h.post("/v1/messages", tt.body, append([]string{"X-Request-Id", "test", "anthropic-version", "2023-06-01"}, tt.header...)...)
			defer resp.Body.Close()
			golden(t, tt.name, readAll(t, resp.Body))
		})
	}
}

// TestMessagesStream checks the event stream against Anthropic's event
// flow and against the non-streamed answer to the same request.
func TestMessagesStream(t *testing.T) {
	tests := []struct {
		name       string
		body       map[string]any
		header     []string
		wantKinds  []string
		wantReason string
	}{
		{"text", messagesBody("Tell me a story."), nil, []string{"text"}, "end_turn"},
		{"thinking", messagesBody("Think first.", "max_tokens", 4096, "thinking", map[string]any{"type": "enabled", "budget_tokens": 2000}),
			nil, []string{"thinking", "text"}, "end_turn"},
		{"tool use", messagesBody("Weather?", "tools", []any{weatherToolAnthropic}), nil, []string{"tool_use"}, "tool_use"},
		{"max tokens", messagesBody("Long answer.", "max_tokens", 4), []string{OutputTokensHeader, "30"}, []string{"text"}, "max_tokens"},
		{"cut in thinking", messagesBody("Think.", "max_tokens", 4, "thinking", map[string]any{"type": "adaptive"}),
			[]string{OutputTokensHeader, "30", ReasoningTokensHeader, "10"}, []string{"thinking"}, "max_tokens"},
		{"cached system", messagesBody("Hi", "system", []any{map[string]any{"type": "text", "text": longText,
			"cache_control": map[string]any{"type": "ephemeral"}}}), nil, []string{"text"}, "end_turn"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := fastConfig()
			cfg.EOS = true
			h := start(t, cfg)
			var whole messageResult
			h.postJSON("/v1/messages", tt.body, http.StatusOK, &whole, append([]string{"X-Request-Id", "m1"}, tt.header...)...)
			h.nextStats()
			h2 := start(t, cfg)
			tt.body["stream"] = true
			resp := h2.post("/v1/messages", tt.body, append([]string{"X-Request-Id", "m1"}, tt.header...)...)
			defer resp.Body.Close()
			events, err := readNamedEvents(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			st := h2.nextStats()

			type event struct {
				Type         string           `json:"type"`
				Message      *messageResult   `json:"message"`
				Index        *int             `json:"index"`
				ContentBlock *json.RawMessage `json:"content_block"`
				Delta        map[string]any   `json:"delta"`
				Usage        *deltaUsage      `json:"usage"`
				Error        *anthropicError  `json:"error"`
				raw          string
			}
			var evs []event
			var names []string
			for i, se := range events {
				var ev event
				if err := json.Unmarshal([]byte(se.data), &ev); err != nil {
					t.Fatalf("event %d %q: %v", i, se.data, err)
				}
				if ev.Type != se.name {
					t.Errorf("event %d: event %q, type %q", i, se.name, ev.Type)
				}
				ev.raw = se.data
				evs = append(evs, ev)
				names = append(names, ev.Type)
			}
			// The flow: message_start, then per block start (the first
			// followed by one ping), deltas and stop with consecutive
			// indexes, then message_delta and message_stop.
			if len(evs) < 3 || names[0] != "message_start" || names[len(names)-2] != "message_delta" || names[len(names)-1] != "message_stop" {
				t.Fatalf("events %v", names)
			}
			streamed := *evs[0].Message
			index, open, pings := -1, false, 0
			var text, thinking, args strings.Builder
			shown := 0
			for i, ev := range evs[1 : len(evs)-2] {
				switch ev.Type {
				case "ping":
					pings++
					if i == 0 || names[i] != "content_block_start" || pings > 1 {
						t.Errorf("ping at %d after %s", i+1, names[i])
					}
				case "content_block_start":
					if open || ev.Index == nil || *ev.Index != index+1 {
						t.Errorf("block start %s while open=%v at index %d", ev.raw, open, index)
					}
					index, open = *ev.Index, true
				case "content_block_delta":
					if !open || *ev.Index != index {
						t.Errorf("delta %s outside block %d", ev.raw, index)
					}
					switch ev.Delta["type"] {
					case "text_delta":
						text.WriteString(ev.Delta["text"].(string))
						shown++
					case "thinking_delta":
						thinking.WriteString(ev.Delta["thinking"].(string))
						shown++
					case "input_json_delta":
						args.WriteString(ev.Delta["partial_json"].(string))
						shown++
					case "signature_delta":
					default:
						t.Errorf("delta %s", ev.raw)
					}
				case "content_block_stop":
					if !open || *ev.Index != index {
						t.Errorf("block stop %s, open block %d", ev.raw, index)
					}
					open = false
				default:
					t.Errorf("unexpected event %s", ev.raw)
				}
			}
			if open {
				t.Errorf("a block was left open")
			}
			md := evs[len(evs)-2]
			start := streamed.Usage
			if start.OutputTokens != 1 || streamed.StopReason != nil || len(streamed.Content) != 0 {
				t.Errorf("message_start %s", evs[0].raw)
			}
			// message_delta's usage is cumulative and final.
			u := md.Usage
			if u == nil || u.OutputTokens != st.OutputTokens || u.InputTokens != start.InputTokens ||
				u.CacheReadInputTokens != start.CacheReadInputTokens || u.CacheCreationInputTokens != start.CacheCreationInputTokens {
				t.Errorf("message_delta usage %+v, message_start %+v, engine %+v", u, start, st)
			}
			if md.Delta["stop_reason"] != tt.wantReason || whole.StopReason == nil || *whole.StopReason != tt.wantReason {
				t.Errorf("stop_reason %v streamed, %v whole; want %s", md.Delta["stop_reason"], whole.StopReason, tt.wantReason)
			}
			// Usage invariants: Anthropic's input excludes what the cache
			// read or wrote; together they are the whole prompt.
			wu := whole.Usage
			if wu.InputTokens+wu.CacheReadInputTokens+wu.CacheCreationInputTokens != st.PromptTokens ||
				wu.CacheCreationInputTokens != wu.CacheCreation.Ephemeral5m+wu.CacheCreation.Ephemeral1h ||
				wu.OutputTokens != st.OutputTokens || wu.ServiceTier != "standard" {
				t.Errorf("usage %+v, engine %+v", wu, st)
			}
			if diff := cmp.Diff(wu, start, cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".OutputTokens" }, cmp.Ignore())); diff != "" {
				t.Errorf("input usage differs between message_start and the whole answer:\n%s", diff)
			}
			hidden := 0
			if st.FinishReason == finishStop {
				hidden = 1 // the end-of-sequence token
			}
			if shown+hidden != st.OutputTokens {
				t.Errorf("%d deltas + %d hidden, %d output tokens", shown, hidden, st.OutputTokens)
			}
			if diff := cmp.Diff(tt.wantKinds, whole.kinds()); diff != "" {
				t.Errorf("content blocks (-want +got):\n%s", diff)
			}
			if index+1 != len(whole.Content) {
				t.Errorf("%d blocks streamed, %d in the whole answer", index+1, len(whole.Content))
			}
			for _, c := range whole.Content {
				switch c.Type {
				case "text":
					if c.Text != text.String() {
						t.Errorf("text %q, deltas %q", c.Text, text.String())
					}
				case "thinking":
					if c.Thinking != thinking.String() || c.Signature == "" {
						t.Errorf("thinking %q (signature %q), deltas %q", c.Thinking, c.Signature, thinking.String())
					}
				case "tool_use":
					var in map[string]string
					if err := json.Unmarshal(c.Input, &in); err != nil || in["city"] == "" || string(c.Input) != args.String() ||
						!strings.HasPrefix(c.ID, "toolu_") || c.Name != "get_weather" {
						t.Errorf("tool_use %+v, deltas %q: %v", c, args.String(), err)
					}
				}
			}
			if whole.ID != "msg_m1" || whole.Type != "message" || whole.Role != "assistant" || whole.Model != "Qwen/Qwen3-8B" {
				t.Errorf("message %+v", whole)
			}
		})
	}
}

// TestMessagesPromptCache: a cache_control breakpoint is written by the
// first request and read by the next, with Anthropic's accounting.
func TestMessagesPromptCache(t *testing.T) {
	h := start(t, fastConfig())
	system := func(ttl string) []any {
		cc := map[string]any{"type": "ephemeral"}
		if ttl != "" {
			cc["ttl"] = ttl
		}
		return []any{map[string]any{"type": "text", "text": longText, "cache_control": cc}}
	}
	count := func(body map[string]any) int {
		var n struct {
			InputTokens int `json:"input_tokens"`
		}
		b := map[string]any{}
		for k, v := range body {
			if k != "max_tokens" {
				b[k] = v
			}
		}
		h.postJSON("/v1/messages/count_tokens", b, http.StatusOK, &n)
		return n.InputTokens
	}
	send := func(body map[string]any) anthropicUsage {
		t.Helper()
		var got messageResult
		h.postJSON("/v1/messages", body, http.StatusOK, &got, OutputTokensHeader, "3")
		st := h.nextStats()
		u := got.Usage
		if u.InputTokens+u.CacheReadInputTokens+u.CacheCreationInputTokens != st.PromptTokens || st.PromptTokens != count(body) {
			t.Errorf("usage %+v does not add up to the %d prompt tokens (count_tokens %d)", u, st.PromptTokens, count(body))
		}
		return u
	}
	// The breakpoint ends the system block: tools (none), then the system
	// message header (3 tokens) and its text.
	prefix := 3 + countTokens(longText)

	first := send(messagesBody("What is the capital of France?", "system", system("")))
	if first.CacheCreationInputTokens != prefix || first.CacheCreation.Ephemeral5m != prefix || first.CacheReadInputTokens != 0 {
		t.Errorf("first request: %+v, want %d tokens written at 5m", first, prefix)
	}
	second := send(messagesBody("And of Italy?", "system", system("")))
	if second.CacheReadInputTokens != prefix || second.CacheCreationInputTokens != 0 {
		t.Errorf("second request: %+v, want %d tokens read", second, prefix)
	}

	// A conversation moving its breakpoint to the last message reads the
	// earlier prefix (found within the lookback) and writes the rest.
	turn := func(msgs ...any) map[string]any {
		b := messagesBody("", "system", system("1h"))
		b["messages"] = msgs
		return b
	}
	cached := func(role, text string) map[string]any {
		return map[string]any{"role": role, "content": []any{map[string]any{"type": "text", "text": text,
			"cache_control": map[string]any{"type": "ephemeral", "ttl": "1h"}}}}
	}
	plain := func(role, text string) map[string]any { return map[string]any{"role": role, "content": text} }
	// The system prompt is the one cached above: the cache holds prefixes,
	// whatever TTL wrote them; only the new message is written, for 1h.
	t1 := send(turn(cached("user", "Plan a trip to Rome.")))
	if t1.CacheReadInputTokens != prefix || t1.CacheCreation.Ephemeral1h != t1.CacheCreationInputTokens || t1.CacheCreationInputTokens == 0 {
		t.Errorf("turn 1: %+v", t1)
	}
	t2 := send(turn(plain("user", "Plan a trip to Rome."), plain("assistant", "Day one: the Forum."), cached("user", "And day two?")))
	if want := t1.CacheReadInputTokens + t1.CacheCreationInputTokens; t2.CacheReadInputTokens != want || t2.CacheCreationInputTokens == 0 {
		t.Errorf("turn 2: %+v, want %d read and the new turn written", t2, want)
	}

	// Below the minimum a breakpoint caches nothing; without breakpoints
	// nothing is cached either, whatever the engine's prefix cache holds.
	short := []any{map[string]any{"type": "text", "text": "Short.", "cache_control": map[string]any{"type": "ephemeral"}}}
	for _, body := range []map[string]any{messagesBody("x", "system", short), messagesBody("x", "system", longText)} {
		if u := send(body); u.CacheReadInputTokens != 0 || u.CacheCreationInputTokens != 0 {
			t.Errorf("uncacheable request: %+v", u)
		}
	}
}

func TestMessagesToolUse(t *testing.T) {
	result := []any{
		map[string]any{"role": "user", "content": "Weather in Paris?"},
		map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
			"input": map[string]any{"city": "Paris"}}}},
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C, sunny"}}},
	}
	withResult := func(extra ...any) map[string]any {
		b := messagesBody("", append([]any{"tools", []any{weatherToolAnthropic}}, extra...)...)
		b["messages"] = result
		return b
	}
	tests := []struct {
		name       string
		body       map[string]any
		header     []string
		want       []string
		wantReason string
	}{
		{"auto calls on a question", messagesBody("Weather?", "tools", []any{weatherToolAnthropic}), nil, []string{"tool_use"}, "tool_use"},
		{"auto answers a tool result", withResult(), nil, []string{"text"}, "end_turn"},
		{"any", withResult("tool_choice", map[string]any{"type": "any"}), nil, []string{"tool_use"}, "tool_use"},
		{"named", withResult("tool_choice", map[string]any{"type": "tool", "name": "get_weather"}), nil, []string{"tool_use"}, "tool_use"},
		{"none", messagesBody("Weather?", "tools", []any{weatherToolAnthropic}, "tool_choice", map[string]any{"type": "none"}),
			nil, []string{"text"}, "end_turn"},
		{"header forces", withResult(), []string{ToolCallHeader, "get_weather"}, []string{"tool_use"}, "tool_use"},
		{"header forbids", messagesBody("Weather?", "tools", []any{weatherToolAnthropic}), []string{ToolCallHeader, "none"}, []string{"text"}, "end_turn"},
		{"thinking first", messagesBody("Weather?", "tools", []any{weatherToolAnthropic}, "thinking", map[string]any{"type": "adaptive"}),
			nil, []string{"thinking", "tool_use"}, "tool_use"},
		{"server tools are not called", messagesBody("Search?", "tools", []any{map[string]any{"type": "web_search_20250305", "name": "web_search"}}),
			nil, []string{"text"}, "end_turn"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, fastConfig())
			var got messageResult
			h.postJSON("/v1/messages", tt.body, http.StatusOK, &got, tt.header...)
			if diff := cmp.Diff(tt.want, got.kinds()); diff != "" {
				t.Errorf("content blocks (-want +got):\n%s", diff)
			}
			if got.StopReason == nil || *got.StopReason != tt.wantReason {
				t.Errorf("stop_reason %v, want %s", got.StopReason, tt.wantReason)
			}
			if st := h.nextStats(); st.OutputTokens != got.Usage.OutputTokens || st.FinishReason != finishStop {
				t.Errorf("usage %d output tokens, engine %d (%s)", got.Usage.OutputTokens, st.OutputTokens, st.FinishReason)
			}
		})
	}
}

func TestMessagesStopSequence(t *testing.T) {
	h := start(t, fastConfig())
	// Every word the model says starts with a space: the first one stops.
	var got messageResult
	h.postJSON("/v1/messages", messagesBody("hi", "stop_sequences", []string{"END", " "}), http.StatusOK, &got, OutputTokensHeader, "10")
	if got.StopReason == nil || *got.StopReason != "stop_sequence" || got.StopSequence == nil || *got.StopSequence != " " ||
		len(got.Content) != 0 || got.Usage.OutputTokens != 1 {
		t.Errorf("message %+v", got)
	}
	// A stop sequence the model never says changes nothing.
	h.postJSON("/v1/messages", messagesBody("hi", "stop_sequences", []string{"END"}), http.StatusOK, &got, OutputTokensHeader, "10")
	if *got.StopReason != "end_turn" || got.StopSequence != nil || got.Usage.OutputTokens != 10 {
		t.Errorf("message %+v", got)
	}
}

func TestMessagesCountTokens(t *testing.T) {
	h := start(t, fastConfig())
	var n struct {
		InputTokens int `json:"input_tokens"`
	}
	h.postJSON("/v1/messages/count_tokens", map[string]any{"model": "Qwen/Qwen3-8B", "system": "Be brief.",
		"messages": []any{map[string]any{"role": "user", "content": "Hello, world"}}}, http.StatusOK, &n)
	// As a chat prompt: (4 + 4) + (5 + 4) + 3.
	if n.InputTokens != 20 {
		t.Errorf("input_tokens %d, want 20", n.InputTokens)
	}
	select {
	case st := <-h.stats:
		t.Errorf("count_tokens went through the engine: %+v", st)
	default:
	}
}

func TestMessagesErrors(t *testing.T) {
	noMax := messagesBody("hi")
	delete(noMax, "max_tokens")
	fiveBreakpoints := []any{}
	for range 5 {
		fiveBreakpoints = append(fiveBreakpoints, map[string]any{"type": "text", "text": "x", "cache_control": map[string]any{"type": "ephemeral"}})
	}
	tests := []struct {
		name       string
		path       string
		body       any
		header     []string
		wantStatus int
		wantType   string
		wantMsg    string
	}{
		{"no max_tokens", "/v1/messages", noMax, nil, 400, "invalid_request_error", "max_tokens: Field required"},
		{"max_tokens 0", "/v1/messages", messagesBody("hi", "max_tokens", 0), nil, 400, "invalid_request_error", "max_tokens"},
		{"no model", "/v1/messages", messagesBody("hi", "model", ""), nil, 400, "invalid_request_error", "model: Field required"},
		{"unknown model", "/v1/messages", messagesBody("hi", "model", "claude-opus-4-1"), nil, 404, "not_found_error", "claude-opus-4-1"},
		{"no messages", "/v1/messages", map[string]any{"model": "Qwen/Qwen3-8B", "max_tokens": 10}, nil, 400, "invalid_request_error", "messages: Field required"},
		{"bad JSON", "/v1/messages", `{"model": `, nil, 400, "invalid_request_error", "invalid JSON"},
		{"bad content", "/v1/messages", messagesBody(7), nil, 400, "invalid_request_error", "messages.0.content"},
		{"bad system", "/v1/messages", messagesBody("hi", "system", 7), nil, 400, "invalid_request_error", "system"},
		{"small budget", "/v1/messages", messagesBody("hi", "thinking", map[string]any{"type": "enabled", "budget_tokens": 100}),
			nil, 400, "invalid_request_error", "budget_tokens"},
		{"budget above max_tokens", "/v1/messages", messagesBody("hi", "max_tokens", 1024, "thinking", map[string]any{"type": "enabled", "budget_tokens": 1024}),
			nil, 400, "invalid_request_error", "`max_tokens` must be greater than `thinking.budget_tokens`"},
		{"bad thinking type", "/v1/messages", messagesBody("hi", "thinking", map[string]any{"type": "maybe"}), nil, 400, "invalid_request_error", "thinking.type"},
		{"thinking with forced tool", "/v1/messages", messagesBody("hi", "tools", []any{weatherToolAnthropic}, "tool_choice", map[string]any{"type": "any"},
			"thinking", map[string]any{"type": "adaptive"}), nil, 400, "invalid_request_error", "Thinking may not be enabled"},
		{"unknown tool_choice name", "/v1/messages", messagesBody("hi", "tools", []any{weatherToolAnthropic}, "tool_choice", map[string]any{"type": "tool", "name": "x"}),
			nil, 400, "invalid_request_error", "tool_choice.name"},
		{"too many breakpoints", "/v1/messages", messagesBody(fiveBreakpoints), nil, 400, "invalid_request_error", "A maximum of 4 blocks with cache_control"},
		{"bad ttl", "/v1/messages", messagesBody([]any{map[string]any{"type": "text", "text": "x", "cache_control": map[string]any{"type": "ephemeral", "ttl": "1d"}}}),
			nil, 400, "invalid_request_error", "messages.0.content.0.cache_control.ttl"},
		{"rate limited", "/v1/messages", messagesBody("hi"), []string{FaultHeader, "status=429"}, 429, "rate_limit_error", "rate limit"},
		{"overloaded", "/v1/messages", messagesBody("hi", "stream", true), []string{FaultHeader, "status=529"}, 529, "overloaded_error", ""},
		{"server error", "/v1/messages", messagesBody("hi"), []string{FaultHeader, "error"}, 500, "api_error", ""},
		{"bad header", "/v1/messages", messagesBody("hi"), []string{ReasoningTokensHeader, "x"}, 400, "invalid_request_error", ReasoningTokensHeader},
		{"count_tokens unknown model", "/v1/messages/count_tokens", map[string]any{"model": "x", "messages": []any{}}, nil, 404, "not_found_error", "x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, fastConfig())
			var got struct {
				Type  string         `json:"type"`
				Error anthropicError `json:"error"`
			}
			h.postJSON(tt.path, tt.body, tt.wantStatus, &got, tt.header...)
			if got.Type != "error" || got.Error.Type != tt.wantType || !strings.Contains(got.Error.Message, tt.wantMsg) {
				t.Errorf("got %+v; want %s with a message containing %q", got, tt.wantType, tt.wantMsg)
			}
		})
	}
}

// Faults and failures inside a Messages stream.
func TestMessagesStreamFaults(t *testing.T) {
	t.Run("reset", func(t *testing.T) {
		h := start(t, fastConfig())
		resp := h.post("/v1/messages", messagesBody("x", "stream", true), OutputTokensHeader, "10", FaultHeader, "reset-after=2")
		defer resp.Body.Close()
		events, err := readNamedEvents(resp.Body)
		if !isUnexpectedEOF(err) {
			t.Fatalf("read ended with %v, want an unexpected EOF", err)
		}
		deltas := 0
		for _, ev := range events {
			if ev.name == "content_block_delta" {
				deltas++
			}
		}
		if deltas != 2 {
			t.Errorf("%d deltas before the reset, want 2", deltas)
		}
	})
	t.Run("shutdown", func(t *testing.T) {
		cfg := fastConfig()
		cfg.DecodeBase = 5 * time.Millisecond
		h := start(t, cfg)
		resp := h.post("/v1/messages", messagesBody("x", "stream", true), OutputTokensHeader, "1000")
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() && !strings.Contains(sc.Text(), "text_delta") {
		}
		h.stopEngine()
		var last string
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				last = v
			}
		}
		var ev struct {
			Type  string         `json:"type"`
			Error anthropicError `json:"error"`
		}
		if err := json.Unmarshal([]byte(last), &ev); err != nil || ev.Type != "error" || ev.Error.Type != "api_error" {
			t.Errorf("last event %q: %v", last, err)
		}
	})
}
