package sim

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// sseEvent is one named server-sent event.
type sseEvent struct {
	name string
	data string
}

// readNamedEvents returns the events of a stream that names them
// ("event:" then "data:"), and the error that ended the read.
func readNamedEvents(r io.Reader) ([]sseEvent, error) {
	var events []sseEvent
	var name string
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			name = v
		} else if v, ok := strings.CutPrefix(line, "data: "); ok {
			events = append(events, sseEvent{name, v})
			name = ""
		}
	}
	return events, sc.Err()
}

func responsesBody(input any, extra ...any) map[string]any {
	b := map[string]any{"model": "Qwen/Qwen3-8B", "input": input}
	for i := 0; i+1 < len(extra); i += 2 {
		b[extra[i].(string)] = extra[i+1]
	}
	return b
}

var weatherTool = map[string]any{
	"type": "function", "name": "get_weather", "description": "Current weather in a city",
	"parameters": map[string]any{
		"type": "object", "required": []string{"city"},
		"properties": map[string]any{"city": map[string]any{"type": "string"}},
	},
}

// The parts of a response object the tests look at.
type responseResult struct {
	ID                string `json:"id"`
	Object            string `json:"object"`
	Status            string `json:"status"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Output []struct {
		ID      string `json:"id"`
		Type    string `json:"type"`
		Status  string `json:"status"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		Summary []struct {
			Text string `json:"text"`
		} `json:"summary"`
		Name      string `json:"name"`
		CallID    string `json:"call_id"`
		Arguments string `json:"arguments"`
	} `json:"output"`
	Usage    responseUsage     `json:"usage"`
	Metadata map[string]string `json:"metadata"`
	User     *string           `json:"user"`
}

// kinds lists the output item types of a response.
func (r responseResult) kinds() []string {
	var out []string
	for _, it := range r.Output {
		out = append(out, it.Type)
	}
	return out
}

func (r responseResult) text() string {
	var b strings.Builder
	for _, it := range r.Output {
		for _, c := range it.Content {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

func TestResponsesGoldenShapes(t *testing.T) {
	tests := []struct {
		name   string
		body   any
		header []string
	}{
		{"responses.json", responsesBody("Hello, world", "metadata", map[string]string{"team": "search"}, "user", "u-1"),
			[]string{OutputTokensHeader, "3"}},
		{"responses_stream.txt", responsesBody("Hello, world", "stream", true,
			"reasoning", map[string]any{"effort": "low", "summary": "auto"}), []string{OutputTokensHeader, "5", ReasoningTokensHeader, "2"}},
		{"responses_tool_stream.txt", responsesBody("Weather in Paris?", "stream", true, "tools", []any{weatherTool}),
			[]string{OutputTokensHeader, "4"}},
		{"responses_incomplete.json", responsesBody("Hello, world", "max_output_tokens", 2), []string{OutputTokensHeader, "9"}},
		{"responses_error_404.json", responsesBody("hi", "model", "gpt-5"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, fastConfig())
			resp := h.post("/v1/responses", tt.body, append([]string{"X-Request-Id", "test"}, tt.header...)...)
			defer resp.Body.Close()
			golden(t, tt.name, readAll(t, resp.Body))
		})
	}
}

// TestResponsesStream checks the event stream against OpenAI's rules and
// against the non-streamed answer to the same request.
func TestResponsesStream(t *testing.T) {
	tests := []struct {
		name      string
		body      map[string]any
		header    []string
		wantKinds []string
		wantTerm  string
	}{
		{"text", responsesBody("Tell me a story."), nil, []string{"message"}, "response.completed"},
		{"reasoning summary", responsesBody("Think first.", "reasoning", map[string]any{"summary": "detailed"}),
			nil, []string{"reasoning", "message"}, "response.completed"},
		{"hidden reasoning", responsesBody("Think first.", "reasoning", map[string]any{"effort": "high"}),
			nil, []string{"reasoning", "message"}, "response.completed"},
		{"tool call", responsesBody("Weather?", "tools", []any{weatherTool}), nil, []string{"function_call"}, "response.completed"},
		{"incomplete", responsesBody("Long answer.", "max_output_tokens", 4), []string{OutputTokensHeader, "30"},
			[]string{"message"}, "response.incomplete"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := fastConfig()
			cfg.EOS = true // a hidden end-of-sequence token must count, never show
			h := start(t, cfg)
			// The same request (same seed, same draws) streamed and whole.
			var whole responseResult
			h.postJSON("/v1/responses", tt.body, http.StatusOK, &whole, append([]string{"X-Request-Id", "r1"}, tt.header...)...)
			h.nextStats()
			h2 := start(t, cfg)
			tt.body["stream"] = true
			resp := h2.post("/v1/responses", tt.body, append([]string{"X-Request-Id", "r1"}, tt.header...)...)
			defer resp.Body.Close()
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
				t.Errorf("Content-Type = %q", ct)
			}
			events, err := readNamedEvents(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			st := h2.nextStats()

			var deltas, reasoningDeltas, argDeltas strings.Builder
			shown := 0
			var final struct {
				Response responseResult `json:"response"`
			}
			for i, ev := range events {
				var head struct {
					Type           string `json:"type"`
					SequenceNumber int    `json:"sequence_number"`
					Delta          string `json:"delta"`
				}
				if err := json.Unmarshal([]byte(ev.data), &head); err != nil {
					t.Fatalf("event %d %q: %v", i, ev.data, err)
				}
				if head.Type != ev.name || head.SequenceNumber != i {
					t.Errorf("event %d: event %q, type %q, sequence_number %d", i, ev.name, head.Type, head.SequenceNumber)
				}
				switch head.Type {
				case "response.output_text.delta":
					deltas.WriteString(head.Delta)
					shown++
				case "response.reasoning_summary_text.delta":
					reasoningDeltas.WriteString(head.Delta)
					shown++
				case "response.function_call_arguments.delta":
					argDeltas.WriteString(head.Delta)
					shown++
				}
				if i == len(events)-1 {
					if err := json.Unmarshal([]byte(ev.data), &final); err != nil {
						t.Fatal(err)
					}
				}
			}
			names := make([]string, len(events))
			for i, ev := range events {
				names[i] = ev.name
			}
			if len(names) < 3 || names[0] != "response.created" || names[1] != "response.in_progress" || names[len(names)-1] != tt.wantTerm {
				t.Fatalf("events %v: want response.created, response.in_progress first and %s last", names, tt.wantTerm)
			}
			got := final.Response
			if diff := cmp.Diff(whole, got); diff != "" {
				t.Errorf("streamed response differs from the non-streamed one (-whole +streamed):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantKinds, got.kinds()); diff != "" {
				t.Errorf("output items (-want +got):\n%s", diff)
			}
			u := got.Usage
			if u.OutputTokens != st.OutputTokens || u.InputTokens != st.PromptTokens || u.TotalTokens != u.InputTokens+u.OutputTokens ||
				u.InputTokensDetails.CachedTokens != st.CachedTokens {
				t.Errorf("usage %+v, engine stats %+v", u, st)
			}
			// Every token counted is a delta, but reasoning without a summary
			// and the end-of-sequence token.
			hidden := 0
			if st.FinishReason == finishStop {
				hidden = 1
			}
			if rs, _ := tt.body["reasoning"].(map[string]any); rs["summary"] == nil {
				hidden += u.OutputTokensDetails.ReasoningTokens
			}
			if shown+hidden != u.OutputTokens {
				t.Errorf("%d deltas + %d hidden tokens, usage says %d output tokens", shown, hidden, u.OutputTokens)
			}
			if deltas.String() != got.text() {
				t.Errorf("text deltas %q, final text %q", deltas.String(), got.text())
			}
			for _, it := range got.Output {
				switch it.Type {
				case "reasoning":
					if len(it.Summary) > 0 && it.Summary[0].Text != reasoningDeltas.String() {
						t.Errorf("summary %q, deltas %q", it.Summary[0].Text, reasoningDeltas.String())
					}
				case "function_call":
					var args map[string]string
					if err := json.Unmarshal([]byte(it.Arguments), &args); err != nil || args["city"] == "" || it.Arguments != argDeltas.String() {
						t.Errorf("arguments %q (deltas %q): %v", it.Arguments, argDeltas.String(), err)
					}
					if it.Name != "get_weather" || !strings.HasPrefix(it.CallID, "call_") || !strings.HasPrefix(it.ID, "fc_") {
						t.Errorf("function_call %+v", it)
					}
				}
			}
			if tt.wantTerm == "response.incomplete" {
				if got.Status != "incomplete" || got.IncompleteDetails == nil || got.IncompleteDetails.Reason != "max_output_tokens" ||
					got.Output[len(got.Output)-1].Status != "incomplete" || u.OutputTokens != 4 {
					t.Errorf("incomplete response: %+v", got)
				}
			}
		})
	}
}

func TestResponsesToolChoice(t *testing.T) {
	toolTurn := []any{
		map[string]any{"role": "user", "content": "Weather in Paris?"},
		map[string]any{"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": `{"city":"Paris"}`},
		map[string]any{"type": "function_call_output", "call_id": "call_1", "output": "18C, sunny"},
	}
	tests := []struct {
		name   string
		body   map[string]any
		header []string
		want   []string
	}{
		{"auto calls on a question", responsesBody("Weather?", "tools", []any{weatherTool}), nil, []string{"function_call"}},
		{"auto answers a tool result", responsesBody(toolTurn, "tools", []any{weatherTool}), nil, []string{"message"}},
		{"none", responsesBody("Weather?", "tools", []any{weatherTool}, "tool_choice", "none"), nil, []string{"message"}},
		{"required after a result", responsesBody(toolTurn, "tools", []any{weatherTool}, "tool_choice", "required"), nil, []string{"function_call"}},
		{"named", responsesBody(toolTurn, "tools", []any{weatherTool}, "tool_choice", map[string]any{"type": "function", "name": "get_weather"}),
			nil, []string{"function_call"}},
		{"header forces", responsesBody(toolTurn, "tools", []any{weatherTool}), []string{ToolCallHeader, "get_weather"}, []string{"function_call"}},
		{"header forbids", responsesBody("Weather?", "tools", []any{weatherTool}), []string{ToolCallHeader, "none"}, []string{"message"}},
		{"no tools", responsesBody("Weather?"), nil, []string{"message"}},
		{"reasoning first", responsesBody("Weather?", "tools", []any{weatherTool}, "reasoning", map[string]any{"effort": "medium"}),
			nil, []string{"reasoning", "function_call"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, fastConfig())
			var got responseResult
			h.postJSON("/v1/responses", tt.body, http.StatusOK, &got, tt.header...)
			if diff := cmp.Diff(tt.want, got.kinds()); diff != "" {
				t.Errorf("output items (-want +got):\n%s", diff)
			}
			if st := h.nextStats(); st.OutputTokens != got.Usage.OutputTokens {
				t.Errorf("usage %d output tokens, engine %d", got.Usage.OutputTokens, st.OutputTokens)
			}
		})
	}
}

func TestResponsesEchoAndPrompt(t *testing.T) {
	h := start(t, fastConfig())
	var got responseResult
	h.postJSON("/v1/responses", responsesBody("Hello, world", "metadata", map[string]string{"k": "v"}, "user", "alice",
		"instructions", "Be brief."), http.StatusOK, &got)
	if got.Object != "response" || !strings.HasPrefix(got.ID, "resp_") || got.Metadata["k"] != "v" || got.User == nil || *got.User != "alice" {
		t.Errorf("response %+v", got)
	}
	// Like a chat prompt: (content + 4) per message, plus 3.
	// "Be brief." is 4 tokens (Be, bri, ef, .), "Hello, world" 5.
	if want := (4 + 4) + (5 + 4) + 3; got.Usage.InputTokens != want {
		t.Errorf("input_tokens %d, want %d", got.Usage.InputTokens, want)
	}
	if got.Usage.OutputTokensDetails.ReasoningTokens != 0 {
		t.Errorf("reasoning tokens without reasoning: %+v", got.Usage)
	}
}

func TestResponsesStoredRoutes(t *testing.T) {
	h := start(t, fastConfig())
	input := []any{
		map[string]any{"role": "system", "content": "Be brief."},
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "input_text", "text": "First question"}}},
	}
	var first responseResult
	h.postJSON("/v1/responses", responsesBody(input), http.StatusOK, &first)

	status, body := h.get("/v1/responses/" + first.ID)
	var again responseResult
	if status != http.StatusOK || json.Unmarshal([]byte(body), &again) != nil {
		t.Fatalf("GET: %d %s", status, body)
	}
	if diff := cmp.Diff(first, again); diff != "" {
		t.Errorf("stored response differs (-created +retrieved):\n%s", diff)
	}

	type list struct {
		Object string `json:"object"`
		Data   []struct {
			ID      string `json:"id"`
			Role    string `json:"role"`
			Content []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
		} `json:"data"`
		FirstID string `json:"first_id"`
		LastID  string `json:"last_id"`
		HasMore bool   `json:"has_more"`
	}
	var items list
	status, body = h.get("/v1/responses/" + first.ID + "/input_items")
	if status != http.StatusOK || json.Unmarshal([]byte(body), &items) != nil {
		t.Fatalf("input_items: %d %s", status, body)
	}
	// Newest first, string content turned into input_text parts.
	if len(items.Data) != 2 || items.Data[0].Role != "user" || items.Data[1].Role != "system" ||
		items.Data[1].Content[0].Type != "input_text" || items.Data[1].Content[0].Text != "Be brief." ||
		items.FirstID != items.Data[0].ID || items.LastID != items.Data[1].ID || items.HasMore {
		t.Errorf("input_items: %s", body)
	}
	status, body = h.get("/v1/responses/" + first.ID + "/input_items?order=asc&limit=1")
	if status != http.StatusOK || json.Unmarshal([]byte(body), &items) != nil || len(items.Data) != 1 ||
		items.Data[0].Role != "system" || !items.HasMore {
		t.Errorf("input_items?order=asc&limit=1: %d %s", status, body)
	}

	// A follow-up carries the conversation: its prompt holds the first
	// turn's input and output.
	var second responseResult
	h.postJSON("/v1/responses", responsesBody("Second question", "previous_response_id", first.ID), http.StatusOK, &second)
	if second.Usage.InputTokens <= first.Usage.InputTokens+first.Usage.OutputTokens {
		t.Errorf("follow-up input_tokens %d do not include the first turn (%d in, %d out)",
			second.Usage.InputTokens, first.Usage.InputTokens, first.Usage.OutputTokens)
	}
	if second.Usage.InputTokensDetails.CachedTokens == 0 {
		t.Errorf("follow-up reused no prefix: %+v", second.Usage)
	}

	resp := h.request(t.Context(), "/v1/responses/"+first.ID+"/cancel", map[string]any{})
	var e errorBody
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || resp.StatusCode != http.StatusBadRequest ||
		e.Message != "Cannot cancel a synchronous response." {
		t.Errorf("cancel: %d %+v %v", resp.StatusCode, e, err)
	}
	resp.Body.Close()

	req, _ := http.NewRequest(http.MethodDelete, h.srv.URL+"/v1/responses/"+first.ID, nil)
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, resp.Body); resp.StatusCode != http.StatusOK ||
		b != `{"id":"`+first.ID+`","object":"response","deleted":true}` {
		t.Errorf("DELETE: %d %s", resp.StatusCode, b)
	}
	resp.Body.Close()
	if status, body := h.get("/v1/responses/" + first.ID); status != http.StatusNotFound ||
		!strings.Contains(body, "Response with id '"+first.ID+"' not found.") {
		t.Errorf("GET after DELETE: %d %s", status, body)
	}

	var unstored responseResult
	h.postJSON("/v1/responses", responsesBody("x", "store", false), http.StatusOK, &unstored)
	if status, _ := h.get("/v1/responses/" + unstored.ID); status != http.StatusNotFound {
		t.Errorf("store: false was stored: %d", status)
	}
}

func TestResponseStoreBounded(t *testing.T) {
	s := newResponseStore()
	for i := range storedResponses + 10 {
		id := "resp_" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		s.put(nil, nil, responseObject{ID: id})
		if i%2 == 0 {
			s.remove(id)
		}
	}
	if len(s.byID) > storedResponses || len(s.order) > 2*storedResponses+1 {
		t.Errorf("store holds %d responses, %d ids in order", len(s.byID), len(s.order))
	}
}

func TestResponsesErrors(t *testing.T) {
	tests := []struct {
		name       string
		body       any
		header     []string
		wantStatus int
		wantMsg    string
	}{
		{"unknown model", responsesBody("hi", "model", "nope"), nil, 404, "The model `nope` does not exist."},
		{"no input", map[string]any{"model": "Qwen/Qwen3-8B"}, nil, 400, "input: required"},
		{"empty input", responsesBody([]any{}), nil, 400, "input: at least one item"},
		{"bad role", responsesBody([]any{map[string]any{"role": "robot", "content": "x"}}), nil, 400, "input[0].role"},
		{"bad content", responsesBody([]any{map[string]any{"role": "user", "content": 3}}), nil, 400, "input[0].content"},
		{"function_call without call_id", responsesBody([]any{map[string]any{"type": "function_call", "name": "f", "arguments": "{}"}}),
			nil, 400, "input[0].call_id"},
		{"max_output_tokens 0", responsesBody("hi", "max_output_tokens", 0), nil, 400, "max_output_tokens"},
		{"bad effort", responsesBody("hi", "reasoning", map[string]any{"effort": "huge"}), nil, 400, "reasoning.effort"},
		{"bad tool_choice", responsesBody("hi", "tool_choice", "sometimes"), nil, 400, "tool_choice"},
		{"unknown named tool", responsesBody("hi", "tools", []any{weatherTool}, "tool_choice", map[string]any{"type": "function", "name": "x"}),
			nil, 400, "tool_choice"},
		{"tool without name", responsesBody("hi", "tools", []any{map[string]any{"type": "function"}}), nil, 400, "tools[0].name"},
		{"unknown previous", responsesBody("hi", "previous_response_id", "resp_nope"), nil, 404, "resp_nope"},
		{"background", responsesBody("hi", "background", true), nil, 400, "background"},
		{"tool header without tool", responsesBody("hi"), []string{ToolCallHeader, "get_weather"}, 400, ToolCallHeader},
		{"reasoning header without reasoning", responsesBody("hi"), []string{ReasoningTokensHeader, "3"}, 400, ReasoningTokensHeader},
		{"fault", responsesBody("hi", "stream", true), []string{FaultHeader, "status=429"}, 429, "rate limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, fastConfig())
			var got errorBody
			h.postJSON("/v1/responses", tt.body, tt.wantStatus, &got, tt.header...)
			if got.Object != "error" || got.Code != tt.wantStatus || !strings.Contains(got.Message, tt.wantMsg) {
				t.Errorf("got %+v; want code %d, message containing %q", got, tt.wantStatus, tt.wantMsg)
			}
		})
	}
	h := start(t, fastConfig())
	for _, path := range []string{"/v1/responses/resp_nope", "/v1/responses/resp_nope/input_items"} {
		if status, body := h.get(path); status != http.StatusNotFound || !strings.Contains(body, "Response with id 'resp_nope' not found.") {
			t.Errorf("GET %s: %d %s", path, status, body)
		}
	}
}

// A stream reset after N deltas: the client has seen exactly N, and the
// created events came before the engine produced anything.
func TestResponsesFaultReset(t *testing.T) {
	h := start(t, fastConfig())
	resp := h.post("/v1/responses", responsesBody("x", "stream", true), OutputTokensHeader, "10", FaultHeader, "reset-after=3")
	defer resp.Body.Close()
	events, err := readNamedEvents(resp.Body)
	if !isUnexpectedEOF(err) {
		t.Fatalf("read ended with %v, want an unexpected EOF", err)
	}
	deltas := 0
	for _, ev := range events {
		if ev.name == "response.output_text.delta" {
			deltas++
		}
	}
	if deltas != 3 || events[0].name != "response.created" {
		t.Errorf("%d deltas before the reset, first event %q", deltas, events[0].name)
	}
}
