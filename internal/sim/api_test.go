package sim

import (
	"encoding/base64"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// created (created_at in the agent APIs) is the only part of a response
// that depends on the wall clock.
var createdRE = regexp.MustCompile(`"created(_at)?":\d+`)

// golden compares a response body with testdata/name, byte for byte apart
// from "created". The golden files are the reviewed vLLM shapes.
func golden(t *testing.T, name, got string) {
	t.Helper()
	got = createdRE.ReplaceAllString(got, `"created${1}":0`)
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", name, diff)
	}
}

func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return string(b)
}

func TestGoldenShapes(t *testing.T) {
	tests := []struct {
		name, path string
		body       any
		header     []string
	}{
		{"chat.json", "/v1/chat/completions", chatBody("Hello, world"), []string{OutputTokensHeader, "5"}},
		{"chat_length.json", "/v1/chat/completions", chatBody("Hello, world", "max_tokens", 3), nil},
		{"chat_stream.txt", "/v1/chat/completions", chatBody("Hello, world", "stream", true,
			"stream_options", map[string]any{"include_usage": true}), []string{OutputTokensHeader, "3"}},
		{"chat_stream_no_usage.txt", "/v1/chat/completions", chatBody("Hello, world", "stream", true), []string{OutputTokensHeader, "2"}},
		{"completion.json", "/v1/completions", map[string]any{"model": "Qwen/Qwen3-8B", "prompt": "Once upon a time"}, []string{OutputTokensHeader, "4"}},
		{"completion_batch.json", "/v1/completions", map[string]any{"prompt": []string{"one", "two three"}, "max_tokens": 3}, []string{OutputTokensHeader, "2"}},
		{"completion_stream.txt", "/v1/completions", map[string]any{"prompt": "Once upon a time", "stream": true,
			"stream_options": map[string]any{"include_usage": true}}, []string{OutputTokensHeader, "2"}},
		{"embedding.json", "/v1/embeddings", map[string]any{"input": "hello world"}, nil},
		{"error_404.json", "/v1/chat/completions", chatBody("hi", "model", "gpt-4o"), nil},
		{"error_bad_json.json", "/v1/chat/completions", `{"model": `, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, fastConfig())
			header := append([]string{"X-Request-Id", "test"}, tt.header...)
			resp := h.post(tt.path, tt.body, header...)
			defer resp.Body.Close()
			golden(t, tt.name, readAll(t, resp.Body))
		})
	}
}

func TestModelsAndHealth(t *testing.T) {
	h := start(t, Config{Models: []string{"a/one", "b/two"}})
	status, body := h.get("/v1/models")
	if status != http.StatusOK {
		t.Fatalf("GET /v1/models: %d", status)
	}
	golden(t, "models.json", body)
	if status, body := h.get("/health"); status != http.StatusOK || body != "" {
		t.Errorf("GET /health = %d %q, want 200 and an empty body", status, body)
	}
}

func TestChatStream(t *testing.T) {
	for _, includeUsage := range []bool{false, true} {
		t.Run(map[bool]string{false: "no_usage", true: "include_usage"}[includeUsage], func(t *testing.T) {
			h := start(t, fastConfig())
			body := chatBody("Tell me a story.", "stream", true)
			if includeUsage {
				body["stream_options"] = map[string]any{"include_usage": true}
			}
			resp := h.post("/v1/chat/completions", body)
			defer resp.Body.Close()
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
				t.Errorf("Content-Type = %q", ct)
			}
			events, err := readEvents(resp.Body)
			if err != nil {
				t.Fatalf("read stream: %v", err)
			}
			chunks := decodeChunks(t, events)
			st := h.nextStats()

			first := chunks[0]
			if len(first.Choices) != 1 || first.Choices[0].Delta == nil ||
				first.Choices[0].Delta.Role == nil || *first.Choices[0].Delta.Role != "assistant" ||
				first.Choices[0].Delta.Content == nil || *first.Choices[0].Delta.Content != "" ||
				first.Choices[0].FinishReason != nil {
				t.Errorf("first chunk is not role-only: %s", events[0])
			}
			rest := chunks[1:]
			if includeUsage {
				last := rest[len(rest)-1]
				if last.Usage == nil || len(last.Choices) != 0 {
					t.Fatalf("last chunk is not usage-only: %s", events[len(events)-2])
				}
				if last.Usage.CompletionTokens != st.OutputTokens || last.Usage.PromptTokens != st.PromptTokens {
					t.Errorf("usage %+v, engine stats %+v", *last.Usage, st)
				}
				rest = rest[:len(rest)-1]
			}
			final := rest[len(rest)-1]
			if len(final.Choices) != 1 || final.Choices[0].FinishReason == nil || *final.Choices[0].FinishReason != "stop" ||
				final.Choices[0].Delta == nil || final.Choices[0].Delta.Content != nil || final.Choices[0].Delta.Role != nil {
				t.Errorf("final chunk: %s", events[len(events)-2])
			}
			content := rest[:len(rest)-1]
			for i, c := range content {
				if c.Usage != nil || c.Choices[0].FinishReason != nil || c.Choices[0].Delta.Role != nil {
					t.Errorf("content chunk %d carries more than content", i)
				}
				if tok := *c.Choices[0].Delta.Content; !vocabSet[tok] {
					t.Errorf("content chunk %d = %q, not one vocabulary token", i, tok)
				}
				if c.ID != first.ID || !strings.HasPrefix(c.ID, "chatcmpl-") || c.Object != "chat.completion.chunk" {
					t.Errorf("content chunk %d: id %q object %q", i, c.ID, c.Object)
				}
			}
			if len(content) != st.OutputTokens || st.OutputTokens == 0 {
				t.Errorf("%d content chunks, engine generated %d", len(content), st.OutputTokens)
			}
			for _, c := range chunks {
				if c.Usage != nil && !includeUsage {
					t.Errorf("usage sent without include_usage")
				}
			}
		})
	}
}

type chatResult struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Text         string `json:"text"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage usage `json:"usage"`
}

func TestOutputLength(t *testing.T) {
	tests := []struct {
		name       string
		body       map[string]any
		header     []string
		wantTokens int
		wantReason string
	}{
		{"max_tokens caps", chatBody("hi", "max_tokens", 5), []string{OutputTokensHeader, "50"}, 5, "length"},
		{"max_completion_tokens caps", chatBody("hi", "max_completion_tokens", 4, "max_tokens", 100), []string{OutputTokensHeader, "50"}, 4, "length"},
		{"pinned below max_tokens", chatBody("hi", "max_tokens", 10), []string{OutputTokensHeader, "3"}, 3, "stop"},
		{"pinned at max_tokens", chatBody("hi", "max_tokens", 3), []string{OutputTokensHeader, "3"}, 3, "length"},
		{"pinned", chatBody("hi"), []string{OutputTokensHeader, "70"}, 70, "stop"},
		{"min_tokens raises", chatBody("hi", "min_tokens", 30), []string{OutputTokensHeader, "2"}, 30, "stop"},
		{"ignore_eos runs to max_tokens", chatBody("hi", "min_tokens", 25, "max_tokens", 25, "ignore_eos", true), nil, 25, "length"},
		{"max_tokens 1", chatBody("hi", "max_tokens", 1), []string{OutputTokensHeader, "9"}, 1, "length"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, fastConfig())
			var got chatResult
			h.postJSON("/v1/chat/completions", tt.body, http.StatusOK, &got, tt.header...)
			words := strings.Count(got.Choices[0].Message.Content, " ")
			if got.Usage.CompletionTokens != tt.wantTokens || words != tt.wantTokens || got.Choices[0].FinishReason != tt.wantReason {
				t.Errorf("got %d tokens (%d words), %q; want %d, %q",
					got.Usage.CompletionTokens, words, got.Choices[0].FinishReason, tt.wantTokens, tt.wantReason)
			}
			if st := h.nextStats(); st.OutputTokens != tt.wantTokens || st.FinishReason != tt.wantReason {
				t.Errorf("OnFinish: %d tokens, %q", st.OutputTokens, st.FinishReason)
			}
		})
	}
}

func TestCompletions(t *testing.T) {
	h := start(t, fastConfig())

	// vLLM's default max_tokens for completions is 16.
	var got chatResult
	h.postJSON("/v1/completions", map[string]any{"prompt": "Say something"}, http.StatusOK, &got, OutputTokensHeader, "100")
	if got.Object != "text_completion" || got.Usage.CompletionTokens != 16 || got.Choices[0].FinishReason != "length" ||
		strings.Count(got.Choices[0].Text, " ") != 16 {
		t.Errorf("default max_tokens: %+v", got)
	}

	// Token-id prompts count one token per id.
	h.postJSON("/v1/completions", map[string]any{"prompt": []int{1, 2, 3, 4, 5}, "max_tokens": 2}, http.StatusOK, &got)
	if got.Usage.PromptTokens != 5 {
		t.Errorf("token id prompt: prompt_tokens %d, want 5", got.Usage.PromptTokens)
	}

	// A batch of prompts streams one choice per prompt.
	resp := h.post("/v1/completions", map[string]any{"prompt": []string{"a b", "c d e"}, "stream": true, "max_tokens": 3,
		"stream_options": map[string]any{"include_usage": true}}, OutputTokensHeader, "3")
	defer resp.Body.Close()
	events, err := readEvents(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	perChoice := map[int]int{}
	finished := map[int]string{}
	var u *usage
	for _, c := range decodeChunks(t, events) {
		if c.Usage != nil {
			u = c.Usage
			continue
		}
		ch := c.Choices[0]
		if ch.FinishReason != nil {
			finished[ch.Index] = *ch.FinishReason
		} else if vocabSet[*ch.Text] {
			perChoice[ch.Index]++
		} else {
			t.Errorf("chunk text %q", *ch.Text)
		}
	}
	if diff := cmp.Diff(map[int]int{0: 3, 1: 3}, perChoice); diff != "" {
		t.Errorf("tokens per choice (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[int]string{0: "length", 1: "length"}, finished); diff != "" {
		t.Errorf("finish reasons (-want +got):\n%s", diff)
	}
	if u == nil || u.PromptTokens != 5 || u.CompletionTokens != 6 || u.TotalTokens != 11 {
		t.Errorf("usage %+v, want 5 prompt + 6 completion", u)
	}
	ids := map[string]bool{}
	for range 4 {
		ids[h.nextStats().RequestID] = true
	}
	for _, want := range []string{"-0", "-1"} {
		found := false
		for id := range ids {
			found = found || strings.HasSuffix(id, want)
		}
		if !found {
			t.Errorf("no sub-request id ending in %q among %v", want, ids)
		}
	}
}

func TestEmbeddings(t *testing.T) {
	h := start(t, fastConfig())
	type result struct {
		Data []struct {
			Index     int             `json:"index"`
			Embedding json.RawMessage `json:"embedding"`
		} `json:"data"`
		Usage usage `json:"usage"`
	}
	var floats, again, b64 result
	body := map[string]any{"input": []string{"hello world", "bye"}}
	h.postJSON("/v1/embeddings", body, http.StatusOK, &floats)
	h.postJSON("/v1/embeddings", body, http.StatusOK, &again)
	body["encoding_format"] = "base64"
	h.postJSON("/v1/embeddings", body, http.StatusOK, &b64)

	if len(floats.Data) != 2 || floats.Usage.PromptTokens != 5 || floats.Usage.TotalTokens != 5 {
		t.Fatalf("got %d vectors, usage %+v; want 2 and 5 tokens", len(floats.Data), floats.Usage)
	}
	if diff := cmp.Diff(floats, again); diff != "" {
		t.Errorf("embeddings are not deterministic:\n%s", diff)
	}
	var vec []float32
	if err := json.Unmarshal(floats.Data[0].Embedding, &vec); err != nil || len(vec) != embedDim {
		t.Fatalf("embedding %s: %v", floats.Data[0].Embedding, err)
	}
	var s string
	if err := json.Unmarshal(b64.Data[0].Embedding, &s); err != nil {
		t.Fatal(err)
	}
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(raw) != 4*embedDim {
		t.Errorf("base64 embedding: %d bytes, %v", len(raw), err)
	}
}

func TestRequestErrors(t *testing.T) {
	tests := []struct {
		name       string
		path       string
		body       any
		header     []string
		wantStatus int
		wantType   string
		wantMsg    string // substring
	}{
		{"unknown model", "/v1/chat/completions", chatBody("hi", "model", "nope"), nil, 404, "NotFoundError", "The model `nope` does not exist."},
		{"unknown model completions", "/v1/completions", map[string]any{"model": "nope", "prompt": "x"}, nil, 404, "NotFoundError", "nope"},
		{"unknown model embeddings", "/v1/embeddings", map[string]any{"model": "nope", "input": "x"}, nil, 404, "NotFoundError", "nope"},
		{"bad JSON", "/v1/chat/completions", `{"messages": [`, nil, 400, "BadRequestError", "invalid JSON"},
		{"wrong field type", "/v1/chat/completions", `{"messages": [{"role":"user","content":"x"}], "max_tokens": "ten"}`, nil, 400, "BadRequestError", "max_tokens"},
		{"no messages", "/v1/chat/completions", map[string]any{"messages": []any{}}, nil, 400, "BadRequestError", "messages"},
		{"no role", "/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"content": "x"}}}, nil, 400, "BadRequestError", "messages[0].role"},
		{"bad content", "/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": 7}}}, nil, 400, "BadRequestError", "messages[0].content"},
		{"max_tokens 0", "/v1/chat/completions", chatBody("hi", "max_tokens", 0), nil, 400, "BadRequestError", "max_tokens"},
		{"min above max", "/v1/chat/completions", chatBody("hi", "max_tokens", 2, "min_tokens", 3), nil, 400, "BadRequestError", "min_tokens"},
		{"n 2", "/v1/chat/completions", chatBody("hi", "n", 2), nil, 400, "BadRequestError", "n:"},
		{"stream_options without stream", "/v1/chat/completions", chatBody("hi", "stream_options", map[string]any{"include_usage": true}), nil, 400, "BadRequestError", "stream_options"},
		{"empty prompt", "/v1/completions", map[string]any{"prompt": ""}, nil, 400, "BadRequestError", "empty"},
		{"no prompt", "/v1/completions", map[string]any{}, nil, 400, "BadRequestError", "prompt"},
		{"bad encoding_format", "/v1/embeddings", map[string]any{"input": "x", "encoding_format": "hex"}, nil, 400, "BadRequestError", "encoding_format"},
		{"bad fault header", "/v1/chat/completions", chatBody("hi"), []string{FaultHeader, "explode"}, 400, "BadRequestError", FaultHeader},
		{"bad output header", "/v1/chat/completions", chatBody("hi"), []string{OutputTokensHeader, "0"}, 400, "BadRequestError", OutputTokensHeader},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, fastConfig())
			var got errorBody
			h.postJSON(tt.path, tt.body, tt.wantStatus, &got, tt.header...)
			if got.Object != "error" || got.Type != tt.wantType || got.Code != tt.wantStatus || got.Param != nil ||
				!strings.Contains(got.Message, tt.wantMsg) {
				t.Errorf("got %+v; want type %s, code %d, message containing %q", got, tt.wantType, tt.wantStatus, tt.wantMsg)
			}
		})
	}
}

func TestDeterminism(t *testing.T) {
	run := func(seed int64) []string {
		cfg := fastConfig()
		cfg.Seed = seed
		h := start(t, cfg)
		defer h.close()
		var bodies []string
		for _, p := range []string{"first question", "second question", "first question"} {
			resp := h.post("/v1/chat/completions", chatBody(p))
			bodies = append(bodies, createdRE.ReplaceAllString(readAll(t, resp.Body), ""))
			resp.Body.Close()
		}
		return bodies
	}
	a, b, c := run(7), run(7), run(8)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("same seed, different responses:\n%s", diff)
	}
	if cmp.Equal(a, c) {
		t.Errorf("seeds 7 and 8 gave the same responses")
	}
	if a[0] == a[2] {
		t.Errorf("repeated prompt gave an identical response, including its id")
	}
}

func TestTraceParent(t *testing.T) {
	h := start(t, fastConfig())
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	resp := h.post("/v1/chat/completions", chatBody("hi", "stream", true), "traceparent", tp)
	readAll(t, resp.Body)
	resp.Body.Close()
	if st := h.nextStats(); st.TraceParent != tp || !st.Stream || st.Model != "Qwen/Qwen3-8B" {
		t.Errorf("stats %+v, want traceparent %s, stream", st, tp)
	}
}

func TestMetricsNames(t *testing.T) {
	h := start(t, fastConfig())
	resp := h.post("/v1/chat/completions", chatBody("warm up the metrics"), OutputTokensHeader, "3")
	readAll(t, resp.Body)
	resp.Body.Close()
	h.nextStats()

	status, body := h.get("/metrics")
	if status != http.StatusOK {
		t.Fatalf("GET /metrics: %d", status)
	}
	for _, name := range []string{
		`vllm:num_requests_running{model_name="Qwen/Qwen3-8B"} 0`,
		`vllm:num_requests_waiting{model_name="Qwen/Qwen3-8B"} 0`,
		`vllm:kv_cache_usage_perc{model_name="Qwen/Qwen3-8B"}`,
		`vllm:prompt_tokens_total{model_name="Qwen/Qwen3-8B"} 12`,
		`vllm:generation_tokens_total{model_name="Qwen/Qwen3-8B"} 3`,
		`vllm:prefix_cache_queries_total{model_name="Qwen/Qwen3-8B"} 12`,
		`vllm:prefix_cache_hits_total{model_name="Qwen/Qwen3-8B"} 0`,
		`vllm:request_success_total{finished_reason="stop",model_name="Qwen/Qwen3-8B"} 1`,
		`vllm:time_to_first_token_seconds_count{model_name="Qwen/Qwen3-8B"} 1`,
		`vllm:inter_token_latency_seconds_count{model_name="Qwen/Qwen3-8B"} 2`,
		`vllm:e2e_request_latency_seconds_bucket{model_name="Qwen/Qwen3-8B",le="0.3"}`,
		`vllm:request_queue_time_seconds_sum{model_name="Qwen/Qwen3-8B"}`,
		`vllm:request_prefill_time_seconds_count{model_name="Qwen/Qwen3-8B"} 1`,
		`vllm:request_decode_time_seconds_count{model_name="Qwen/Qwen3-8B"} 1`,
	} {
		if !strings.Contains(body, name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}

// A gateway adds X-Request-Id; the output must not depend on it, so that a
// request gets the same answer directly and behind the gateway.
func TestRequestIDHeaderKeepsOutput(t *testing.T) {
	content := func(header ...string) string {
		h := start(t, fastConfig())
		defer h.close()
		var got chatResult
		h.postJSON("/v1/chat/completions", chatBody("same"), http.StatusOK, &got, header...)
		if len(header) > 0 && got.ID != "chatcmpl-"+header[1] {
			t.Errorf("id %q does not use X-Request-Id %q", got.ID, header[1])
		}
		return got.Choices[0].Message.Content
	}
	if direct, behind := content(), content("X-Request-Id", "from-gateway"); direct != behind {
		t.Errorf("output %q directly, %q with X-Request-Id", direct, behind)
	}
}

// TestSeedMakesAnswersDeterministic: with a seed, the same prompt gets the
// same answer (length and words) however many other requests came between,
// and another seed or prompt gets another; without one, answers vary.
func TestSeedMakesAnswersDeterministic(t *testing.T) {
	h := start(t, Config{Seed: 1, OutputMean: 40})
	answer := func(body map[string]any) string {
		var got chatResponse
		h.postJSON("/v1/chat/completions", body, http.StatusOK, &got)
		return got.Choices[0].Message.Content + "|" + got.Choices[0].FinishReason
	}
	a1 := answer(chatBody("summarise the report", "seed", 7))
	answer(chatBody("something else"))
	a2 := answer(chatBody("summarise the report", "seed", 7))
	if a1 != a2 {
		t.Errorf("same prompt and seed, two answers:\n%s\n%s", a1, a2)
	}
	if b := answer(chatBody("summarise the report", "seed", 8)); b == a1 {
		t.Errorf("another seed gave the same answer: %s", b)
	}
	if b := answer(chatBody("summarise the memo", "seed", 7)); b == a1 {
		t.Errorf("another prompt gave the same answer: %s", b)
	}
	if u1, u2 := answer(chatBody("summarise the report")), answer(chatBody("summarise the report")); u1 == u2 {
		t.Errorf("without a seed, two identical answers: %s", u1)
	}
}

// TestNoUsage: with DialectNoUsage the engine says nothing about tokens,
// even when the client asks: no usage chunk in a stream with
// include_usage, no usage object in a whole chat or completions answer.
func TestNoUsage(t *testing.T) {
	cfg := fastConfig()
	cfg.Dialect = DialectNoUsage
	h := start(t, cfg)

	resp := h.post("/v1/chat/completions", chatBody("Tell me a story.", "stream", true, "stream_options", map[string]any{"include_usage": true}), OutputTokensHeader, "5")
	events, err := readEvents(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("read stream: %v", err)
	}
	h.nextStats()
	if events[len(events)-1] != "[DONE]" {
		t.Errorf("stream does not end with [DONE]: %q", events[len(events)-1])
	}
	content := 0
	for _, ev := range events[:len(events)-1] {
		var c map[string]json.RawMessage
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("%q: %v", ev, err)
		}
		if _, ok := c["usage"]; ok {
			t.Errorf("a chunk carries usage: %s", ev)
		}
		if strings.Contains(ev, `"content":" `) {
			content++
		}
	}
	if content != 5 {
		t.Errorf("%d content chunks, want 5", content)
	}

	for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
		body := any(chatBody("hello"))
		if path == "/v1/completions" {
			body = map[string]any{"prompt": "hello"}
		}
		var got map[string]json.RawMessage
		h.postJSON(path, body, http.StatusOK, &got, OutputTokensHeader, "3")
		h.nextStats()
		if u, ok := got["usage"]; ok {
			t.Errorf("%s: usage %s, want none", path, u)
		}
		if _, ok := got["choices"]; !ok {
			t.Errorf("%s: no choices", path)
		}
	}
}
