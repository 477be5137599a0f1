package gateway

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/tokenizer"
)

// Engines are the authority on tokens; tollgate counts with the served
// model's own tokenizer only when an engine said nothing (a stream cut
// off, an engine that does not report usage), and checks a sample of the
// engine's counts against its own to catch a tokenizer or model version
// that changed underneath (seed 001 §5.1).

// autoTokenizers maps well-known model families to built-in tokenizers
// when the configuration names none. Explicit `tokenizers:` entries win.
var autoTokenizers = []struct{ contains, builtin string }{
	{"qwen3", "qwen3"},
	{"deepseek-v3", "deepseek-v3"}, {"deepseek-r1", "deepseek-v3"}, {"deepseek-chat", "deepseek-v3"}, {"deepseek-reasoner", "deepseek-v3"},
	{"gpt-4o", "o200k_base"}, {"gpt-4.1", "o200k_base"}, {"gpt-5", "o200k_base"}, {"o1", "o200k_base"}, {"o3", "o200k_base"}, {"o4-", "o200k_base"},
	{"gpt-4", "cl100k_base"}, {"gpt-3.5", "cl100k_base"},
}

// SpecFor returns the tokenizer of a model: configured, else the built-in
// its family uses, else none.
func SpecFor(model string, configured map[string]tokenizer.Spec) (tokenizer.Spec, bool) {
	if s, ok := configured[model]; ok {
		return s, true
	}
	m := strings.ToLower(model)
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:] // "Qwen/Qwen3-8B" → "qwen3-8b"
	}
	for _, a := range autoTokenizers {
		if strings.HasPrefix(m, a.contains) {
			return tokenizer.Spec{Tokenizer: a.builtin}, true
		}
	}
	return tokenizer.Spec{}, false
}

// counters hands out loaded counters without ever blocking admission: a
// model's first request starts the load in the background and goes on
// without a counter; later requests find it ready. The configured models'
// tokenizers are loaded at start (preload), and /readyz answers 503 until
// they are (loading). A request that finds its model's tokenizer still
// loading keeps what it needs to count, and waits for it when its Record
// is finished (await), so the first requests after start are counted,
// not recorded with an unknown input for good.
type counters struct {
	configured map[string]tokenizer.Spec
	log        *slog.Logger
	open       func(tokenizer.Spec) (*tokenizer.Counter, error) // tokenizer.Open
	// patience bounds how long a Record waits for a tokenizer still
	// loading (config tokenizer_wait).
	patience time.Duration
	mu       sync.Mutex
	ready    map[string]*tokenizer.Counter // nil value: no tokenizer for this model
	loading  map[string]chan struct{}      // closed when the model's load ends
	failed   map[string]error              // configured tokenizers that did not load
	done     chan string                   // load completions, for tests; may be nil
	loads    sync.WaitGroup
}

// newCounters returns the counters of the configured models (and of the
// families with a built-in); a finishing request waits up to patience for
// a tokenizer still loading (config tokenizer_wait: a tokenizer.json takes
// about a second, a few on a busy host). The answer's content has gone
// out by then: only its last bytes, held until the Record is durable,
// wait. Past it the input is recorded unknown (docs/metrics.md, "Tokens
// and their provenance").
func newCounters(configured map[string]tokenizer.Spec, patience time.Duration, log *slog.Logger) *counters {
	return &counters{configured: configured, log: log, open: tokenizer.Open, patience: patience,
		ready: map[string]*tokenizer.Counter{}, loading: map[string]chan struct{}{}, failed: map[string]error{}}
}

// get returns the model's counter if it is loaded, nil otherwise.
func (c *counters) get(model string) *tokenizer.Counter {
	ct, _ := c.lookup(model)
	return ct
}

// lookup returns the model's counter if it is loaded; otherwise it starts
// the load if none has, and says whether one is under way.
func (c *counters) lookup(model string) (ct *tokenizer.Counter, loading bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ct, ok := c.ready[model]; ok {
		return ct, false
	}
	if c.loading[model] == nil {
		end := make(chan struct{})
		c.loading[model] = end
		c.loads.Go(func() { c.load(model, end) })
	}
	return nil, true
}

// await returns the model's counter, waiting up to the patience for a
// load under way; nil when the model has none or its load has not ended
// in time.
func (c *counters) await(model string) *tokenizer.Counter {
	ct, loading := c.lookup(model)
	if !loading {
		return ct
	}
	c.mu.Lock()
	end := c.loading[model]
	c.mu.Unlock()
	t := time.NewTimer(c.patience)
	defer t.Stop()
	select {
	case <-end:
		return c.get(model)
	case <-t.C:
		return nil
	}
}

// preload loads the configured models' counters, e.g. at start-up.
func (c *counters) preload() {
	for m := range c.configured {
		c.get(m)
	}
}

// unready lists, sorted, the configured models whose tokenizer is still
// loading, and notes the ones that failed: /readyz is not ready while the
// first list is not empty. A failed load does not hold readiness (it
// would never end); it is said, and those models' inputs are recorded
// unknown when their engine reports no usage.
func (c *counters) unready() (loading, failed []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for m, spec := range c.configured {
		if _, ok := c.ready[m]; !ok {
			loading = append(loading, fmt.Sprintf("%s (%s)", m, spec.Tokenizer))
		} else if err := c.failed[m]; err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", m, err))
		}
	}
	slices.Sort(loading)
	slices.Sort(failed)
	return loading, failed
}

// wait returns when no load is running, so that a closed gateway leaves
// no goroutine behind (a tokenizer file cannot be abandoned half read).
func (c *counters) wait() { c.loads.Wait() }

func (c *counters) load(model string, end chan struct{}) {
	var ct *tokenizer.Counter
	var failed error
	if spec, ok := SpecFor(model, c.configured); ok {
		var err error
		if ct, err = c.open(spec); err != nil {
			c.log.Warn("tokenizer not available; usage the engine does not report will be estimated from chunks, input unknown", "model", model, "tokenizer", spec.Tokenizer, "err", err)
			ct, failed = nil, err
		} else {
			c.log.Info("tokenizer loaded", "model", model, "tokenizer", spec.Tokenizer)
		}
	}
	c.mu.Lock()
	c.ready[model] = ct
	if failed != nil {
		c.failed[model] = failed
	}
	c.mu.Unlock()
	close(end)
	if c.done != nil {
		c.done <- model
	}
}

// promptTokens counts a request's prompt as the engine would: the chat
// template applied to the messages, or the completion prompt's text.
func promptTokens(ct *tokenizer.Counter, endpoint string, body []byte) (int64, bool) {
	switch endpoint {
	case "chat":
		n, err := ct.ChatPromptTokens(body)
		return int64(n), err == nil
	case "responses":
		chat, err := responsesAsChat(body)
		if err != nil {
			return 0, false
		}
		n, err := ct.ChatPromptTokens(chat)
		return int64(n), err == nil
	case "completions", "embeddings":
		var req struct {
			Prompt json.RawMessage `json:"prompt"`
			Input  json.RawMessage `json:"input"`
		}
		if json.Unmarshal(body, &req) != nil {
			return 0, false
		}
		raw := req.Prompt
		if endpoint == "embeddings" {
			raw = req.Input
		}
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return int64(ct.TextTokens(s)), true
		}
		var ss []string
		if json.Unmarshal(raw, &ss) == nil {
			var n int64
			for _, x := range ss {
				n += int64(ct.TextTokens(x))
			}
			return n, true
		}
	}
	return 0, false
}

// responsesAsChat turns a Responses request into the chat request an
// engine renders with its chat template, as vLLM's Responses server does:
// the instructions a system message, a string input one user message,
// input items messages (their input_text and output_text parts as text
// parts), function calls an assistant's tool calls and their outputs tool
// messages; function tools in chat's nested shape. Items without text
// (reasoning, images) are left out: the count is then a floor, as a
// tokenizer's count of a multimodal prompt is.
func responsesAsChat(body []byte) ([]byte, error) {
	var req struct {
		Instructions string            `json:"instructions"`
		Input        json.RawMessage   `json:"input"`
		Tools        []json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, err
	}
	type part struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	type toolCall struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	type message struct {
		Role       string     `json:"role"`
		Content    any        `json:"content"`
		ToolCalls  []toolCall `json:"tool_calls,omitempty"`
		ToolCallID string     `json:"tool_call_id,omitempty"`
	}
	var msgs []message
	if req.Instructions != "" {
		msgs = append(msgs, message{Role: "system", Content: req.Instructions})
	}
	var text string
	if json.Unmarshal(req.Input, &text) == nil {
		msgs = append(msgs, message{Role: "user", Content: text})
	} else {
		var items []struct {
			Type      string          `json:"type"`
			Role      string          `json:"role"`
			Content   json.RawMessage `json:"content"`
			Name      string          `json:"name"`
			Arguments string          `json:"arguments"`
			CallID    string          `json:"call_id"`
			Output    json.RawMessage `json:"output"`
		}
		if err := json.Unmarshal(req.Input, &items); err != nil {
			return nil, fmt.Errorf("input: %w", err)
		}
		for _, it := range items {
			switch it.Type {
			case "", "message":
				m := message{Role: it.Role}
				var parts []part
				if json.Unmarshal(it.Content, &text) == nil {
					m.Content = text
				} else if json.Unmarshal(it.Content, &parts) == nil {
					var ps []part
					for _, p := range parts {
						if p.Type == "input_text" || p.Type == "output_text" || p.Type == "text" {
							ps = append(ps, part{Type: "text", Text: p.Text})
						}
					}
					m.Content = ps
				}
				msgs = append(msgs, m)
			case "function_call":
				tc := toolCall{ID: it.CallID, Type: "function"}
				tc.Function.Name, tc.Function.Arguments = it.Name, it.Arguments
				msgs = append(msgs, message{Role: "assistant", ToolCalls: []toolCall{tc}})
			case "function_call_output":
				m := message{Role: "tool", ToolCallID: it.CallID, Content: ""}
				if json.Unmarshal(it.Output, &text) == nil {
					m.Content = text
				} else {
					m.Content = string(it.Output)
				}
				msgs = append(msgs, m)
			}
		}
	}
	var tools []any
	for _, raw := range req.Tools {
		var t struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description string          `json:"description,omitempty"`
			Parameters  json.RawMessage `json:"parameters,omitempty"`
		}
		if json.Unmarshal(raw, &t) != nil || t.Type != "function" {
			continue
		}
		tools = append(tools, map[string]any{"type": "function", "function": map[string]any{
			"name": t.Name, "description": t.Description, "parameters": t.Parameters}})
	}
	out := map[string]any{"messages": msgs}
	if len(tools) > 0 {
		out["tools"] = tools
	}
	return json.Marshal(out)
}

// streamText collects the generated text of a stream, for counting when
// the engine never reports usage. Only kept while a counter exists.
type streamText struct {
	b []byte
}

type contentChunk struct {
	Choices []struct {
		Delta *struct {
			Content          string `json:"content"`
			ReasoningContent string `json:"reasoning_content"`
			Reasoning        string `json:"reasoning"`
			ToolCalls        []struct {
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		Text string `json:"text"`
	} `json:"choices"`
}

func (st *streamText) add(data []byte) {
	var c contentChunk
	if json.Unmarshal(data, &c) != nil {
		return
	}
	for _, ch := range c.Choices {
		st.b = append(st.b, ch.Text...)
		if d := ch.Delta; d != nil {
			st.b = append(st.b, d.ReasoningContent...)
			st.b = append(st.b, d.Reasoning...)
			st.b = append(st.b, d.Content...)
			for _, tc := range d.ToolCalls {
				st.b = append(st.b, tc.Function.Name...)
				st.b = append(st.b, tc.Function.Arguments...)
			}
		}
	}
}

// eventText collects the generated text of an agent API's stream: the
// delta of Responses' output events (text, reasoning, function-call
// arguments) and of Anthropic's content_block_delta (text, thinking,
// tool input).
type eventText struct {
	b []byte
}

func (et *eventText) add(data []byte) {
	var ev struct {
		Delta json.RawMessage `json:"delta"`
	}
	if json.Unmarshal(data, &ev) != nil || len(ev.Delta) == 0 {
		return
	}
	var s string
	if json.Unmarshal(ev.Delta, &s) == nil {
		et.b = append(et.b, s...)
		return
	}
	var d struct {
		Text        string `json:"text"`
		Thinking    string `json:"thinking"`
		PartialJSON string `json:"partial_json"`
	}
	if json.Unmarshal(ev.Delta, &d) == nil {
		et.b = append(et.b, d.Thinking...)
		et.b = append(et.b, d.Text...)
		et.b = append(et.b, d.PartialJSON...)
	}
}

// responseText is the generated text of a non-streamed answer.
func responseText(body []byte) string {
	var r struct {
		Choices []struct {
			Message *struct {
				Content          string `json:"content"`
				ReasoningContent string `json:"reasoning_content"`
			} `json:"message"`
			Text string `json:"text"`
		} `json:"choices"`
	}
	if json.Unmarshal(body, &r) != nil {
		return ""
	}
	var sb strings.Builder
	for _, c := range r.Choices {
		sb.WriteString(c.Text)
		if m := c.Message; m != nil {
			sb.WriteString(m.ReasoningContent)
			sb.WriteString(m.Content)
		}
	}
	return sb.String()
}

// countUsage fills usage the engine did not report, with the model's own
// tokenizer: output from the text streamed or returned, input from the
// request. Without a counter, or for a prompt the tokenizer cannot render
// (non-text parts, no chat template), the usage stays as it is — the
// chunk count (source chunks) or nothing — and the input unknown:
// source tokenizer always means both sides were counted.
func countUsage(rec *record.Record, ct *tokenizer.Counter, body []byte, text string) {
	if ct == nil {
		return
	}
	in, ok := promptTokens(ct, rec.Endpoint, body)
	if !ok {
		return
	}
	rec.Usage = record.Usage{Source: record.SourceTokenizer, InputTokens: in, OutputTokens: int64(ct.TextTokens(text)),
		ToolCalls: rec.Usage.ToolCalls}
}

// endToken adds to an output count made by tollgate (the engine sent no
// usage) the token that ended a generation that stopped by itself: the
// end-of-sequence token, or the one that completed a stop string or was a
// stop token. The engines count it in their completion_tokens while the
// text never shows it — vLLM (V1: the stop token stays in token_ids and
// streams as an empty delta carrying the finish reason), SGLang (output
// ids through the stop position), llama-server (n_decoded counts it
// before the end-of-generation check) and Ollama (llama-server's
// predicted_n); TGI counts it in generated_tokens. Without it a counted
// output was one low on every natural stop. Tokens of a stop string
// beyond the last one are not recovered (docs/metrics.md).
func endToken(rec *record.Record) {
	switch rec.Engine {
	case "vllm", "sglang", "llamacpp", "ollama", "tgi":
	default:
		return // hosted APIs report usage; their rule is not known
	}
	if rec.FinishReason == "stop" || rec.FinishReason == "eos_token" {
		rec.Usage.OutputTokens++
	}
}

// mismatch compares the engine's prompt count with the local one and says
// whether they differ beyond tolerance: 1 % or 2 tokens, whichever is
// larger (chat templates differ in small ways between engine versions).
func mismatch(engine, local int64) bool {
	d := math.Abs(float64(engine - local))
	return d > math.Max(2, 0.01*float64(engine))
}
