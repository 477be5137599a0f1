package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"
)

// POST /v1/messages: Anthropic's Messages API as vLLM serves it, with
// the message object, usage (prompt caching included) and stream events
// of Anthropic's API. See the package doc.

type (
	messagesRequest struct {
		Model      string               `json:"model"`
		MaxTokens  *int                 `json:"max_tokens"`
		Messages   []anthropicMessage   `json:"messages"`
		System     json.RawMessage      `json:"system"`
		Tools      []anthropicTool      `json:"tools"`
		ToolChoice *anthropicToolChoice `json:"tool_choice"`
		Thinking   *anthropicThinking   `json:"thinking"`
		Metadata   *struct {
			UserID *string `json:"user_id"`
		} `json:"metadata"`
		StopSequences []string `json:"stop_sequences"`
		Stream        bool     `json:"stream"`
	}
	anthropicMessage struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	// anthropicBlock is an input content block; only the fields the sim
	// counts are read.
	anthropicBlock struct {
		Type         string          `json:"type"`
		Text         string          `json:"text"`
		Name         string          `json:"name"`
		Input        json.RawMessage `json:"input"`
		Content      json.RawMessage `json:"content"`
		CacheControl *cacheControl   `json:"cache_control"`
	}
	cacheControl struct {
		Type string `json:"type"`
		TTL  string `json:"ttl"`
	}
	anthropicTool struct {
		Type         string          `json:"type"`
		Name         string          `json:"name"`
		Description  string          `json:"description"`
		InputSchema  json.RawMessage `json:"input_schema"`
		CacheControl *cacheControl   `json:"cache_control"`
	}
	anthropicToolChoice struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	anthropicThinking struct {
		Type         string `json:"type"`
		BudgetTokens *int   `json:"budget_tokens"`
	}
)

// Response bodies, field order as Anthropic writes them.
type (
	anthropicResponse struct {
		ID           string         `json:"id"`
		Type         string         `json:"type"`
		Role         string         `json:"role"`
		Model        string         `json:"model"`
		Content      []any          `json:"content"`
		StopReason   *string        `json:"stop_reason"`
		StopSequence *string        `json:"stop_sequence"`
		Usage        anthropicUsage `json:"usage"`
	}
	anthropicUsage struct {
		InputTokens              int `json:"input_tokens"`
		CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     int `json:"cache_read_input_tokens"`
		CacheCreation            struct {
			Ephemeral5m int `json:"ephemeral_5m_input_tokens"`
			Ephemeral1h int `json:"ephemeral_1h_input_tokens"`
		} `json:"cache_creation"`
		OutputTokens int    `json:"output_tokens"`
		ServiceTier  string `json:"service_tier"`
	}
	// deltaUsage is message_delta's cumulative usage.
	deltaUsage struct {
		InputTokens              int `json:"input_tokens"`
		CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     int `json:"cache_read_input_tokens"`
		OutputTokens             int `json:"output_tokens"`
	}
	textBlock struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	thinkingBlock struct {
		Type      string  `json:"type"`
		Thinking  string  `json:"thinking"`
		Signature *string `json:"signature,omitempty"`
	}
	toolUseBlock struct {
		Type  string          `json:"type"`
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	}
	anthropicEvent struct {
		Type         string             `json:"type"`
		Message      *anthropicResponse `json:"message,omitempty"`
		Index        *int               `json:"index,omitempty"`
		ContentBlock any                `json:"content_block,omitempty"`
		Delta        any                `json:"delta,omitempty"`
		Usage        *deltaUsage        `json:"usage,omitempty"`
		Error        *anthropicError    `json:"error,omitempty"`
	}
	blockDelta struct {
		Type        string  `json:"type"`
		Text        *string `json:"text,omitempty"`
		Thinking    *string `json:"thinking,omitempty"`
		Signature   *string `json:"signature,omitempty"`
		PartialJSON *string `json:"partial_json,omitempty"`
	}
	messageDelta struct {
		StopReason   string  `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	}
	anthropicError struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
)

// writeAnthropicError renders an error as Anthropic does.
func writeAnthropicError(w http.ResponseWriter, ae *apiError) {
	writeJSON(w, ae.Status, struct {
		Type  string         `json:"type"`
		Error anthropicError `json:"error"`
	}{"error", anthropicError{Type: anthropicErrorType(ae.Status), Message: ae.Message}})
}

// anthropicErrorType names a status as Anthropic's API does.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusPaymentRequired:
		return "billing_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	case statusOverloaded:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// maxBreakpoints is Anthropic's limit on cache_control blocks.
const maxBreakpoints = 4

// messagesPrompt is a Messages request's prompt as the engine sees it.
type messagesPrompt struct {
	ids   []uint32
	cache *cacheReq
	tools []functionTool
	auto  bool // the last message is the user's question, not a tool result
}

// buildMessagesPrompt lays out tools, system and messages, in the order
// Anthropic caches them, and validates what it reads.
func buildMessagesPrompt(model string, req *messagesRequest) (*messagesPrompt, error) {
	if req.Messages == nil {
		return nil, errorf(http.StatusBadRequest, "messages: Field required")
	}
	if len(req.Messages) == 0 {
		return nil, errorf(http.StatusBadRequest, "messages: at least one message is required")
	}
	out := &messagesPrompt{}
	breakpoints := 0
	ttl := func(where string, cc *cacheControl) (time.Duration, error) {
		if cc == nil {
			return 0, nil
		}
		breakpoints++
		if cc.Type != "ephemeral" {
			return 0, errorf(http.StatusBadRequest, "%s.cache_control.type: want ephemeral, got %q", where, cc.Type)
		}
		switch cc.TTL {
		case "", "5m":
			return 5 * time.Minute, nil
		case "1h":
			return time.Hour, nil
		}
		return 0, errorf(http.StatusBadRequest, "%s.cache_control.ttl: want 5m or 1h, got %q", where, cc.TTL)
	}
	p := promptBuilder{model: model}
	if len(req.Tools) > 0 {
		p.open("tools")
		for i, t := range req.Tools {
			where := fmt.Sprintf("tools.%d", i)
			if t.Name == "" {
				return nil, errorf(http.StatusBadRequest, "%s.name: Field required", where)
			}
			d, err := ttl(where, t.CacheControl)
			if err != nil {
				return nil, err
			}
			p.block(t.Name+" "+t.Description+" "+compactJSON(t.InputSchema), d)
			// Server tools (web search…) have a type and no schema; the
			// simulated model only calls custom tools.
			if t.Type == "" || t.Type == "custom" {
				out.tools = append(out.tools, functionTool{name: t.Name, schema: t.InputSchema})
			}
		}
		p.close()
	}
	if len(req.System) > 0 && string(req.System) != "null" {
		var s string
		var blocks []anthropicBlock
		switch {
		case json.Unmarshal(req.System, &s) == nil:
			p.message("system", s)
		case json.Unmarshal(req.System, &blocks) == nil:
			p.open("system")
			for i, b := range blocks {
				d, err := ttl(fmt.Sprintf("system.%d", i), b.CacheControl)
				if err != nil {
					return nil, err
				}
				p.block(b.Text, d)
			}
			p.close()
		default:
			return nil, errorf(http.StatusBadRequest, "system: must be a string or an array of text blocks")
		}
	}
	for i, m := range req.Messages {
		where := fmt.Sprintf("messages.%d", i)
		if m.Role == "" {
			return nil, errorf(http.StatusBadRequest, "%s.role: Field required", where)
		}
		p.open(m.Role)
		var s string
		var blocks []anthropicBlock
		toolResult := false
		switch {
		case json.Unmarshal(m.Content, &s) == nil:
			p.block(s, 0)
		case json.Unmarshal(m.Content, &blocks) == nil:
			for j, b := range blocks {
				d, err := ttl(fmt.Sprintf("%s.content.%d", where, j), b.CacheControl)
				if err != nil {
					return nil, err
				}
				toolResult = toolResult || b.Type == "tool_result"
				p.block(blockText(b), d)
			}
		default:
			return nil, errorf(http.StatusBadRequest, "%s.content: must be a string or an array of content blocks", where)
		}
		p.close()
		out.auto = m.Role == "user" && !toolResult
	}
	if breakpoints > maxBreakpoints {
		return nil, errorf(http.StatusBadRequest, "A maximum of %d blocks with cache_control may be provided. Found %d.", maxBreakpoints, breakpoints)
	}
	out.ids, out.cache = p.finish()
	return out, nil
}

// blockText is what a content block adds to the prompt: text, a tool
// call's name and input, a tool result's text. Images and documents count
// nothing, and neither do earlier turns' thinking blocks, which Anthropic
// leaves out of the context.
func blockText(b anthropicBlock) string {
	switch b.Type {
	case "text":
		return b.Text
	case "tool_use":
		return b.Name + " " + compactJSON(b.Input)
	case "tool_result":
		texts, _ := contentTexts(b.Content)
		return strings.Join(texts, "\n")
	}
	return ""
}

func (e *Engine) countTokens(w http.ResponseWriter, r *http.Request) error {
	var req messagesRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	model, err := e.model(req.Model)
	if err != nil {
		return err
	}
	p, err := buildMessagesPrompt(model, &req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, struct {
		InputTokens int `json:"input_tokens"`
	}{len(p.ids)})
	return nil
}

func (e *Engine) messages(w http.ResponseWriter, r *http.Request) error {
	arrival := time.Now()
	var req messagesRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	if req.Model == "" {
		return errorf(http.StatusBadRequest, "model: Field required")
	}
	model, err := e.model(req.Model)
	if err != nil {
		return err
	}
	if req.MaxTokens == nil {
		return errorf(http.StatusBadRequest, "max_tokens: Field required")
	}
	if *req.MaxTokens < 1 {
		return errorf(http.StatusBadRequest, "max_tokens: Input should be greater than or equal to 1")
	}
	p, err := buildMessagesPrompt(model, &req)
	if err != nil {
		return err
	}
	spec := turnSpec{maxTokens: req.MaxTokens, eos: e.cfg.EOS, stops: req.StopSequences}
	if th := req.Thinking; th != nil {
		switch th.Type {
		case "enabled":
			if th.BudgetTokens == nil {
				return errorf(http.StatusBadRequest, "thinking.enabled.budget_tokens: Field required")
			}
			if *th.BudgetTokens < 1024 {
				return errorf(http.StatusBadRequest, "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
			}
			if *th.BudgetTokens >= *req.MaxTokens {
				return errorf(http.StatusBadRequest, "`max_tokens` must be greater than `thinking.budget_tokens`")
			}
			spec.reasoning, spec.share, spec.budget = true, 0.5, *th.BudgetTokens
		case "adaptive":
			spec.reasoning, spec.share = true, 0.5
		case "disabled":
		default:
			return errorf(http.StatusBadRequest, "thinking.type: want enabled, adaptive or disabled, got %q", th.Type)
		}
	}
	forced := ""
	if tc := req.ToolChoice; tc != nil {
		switch tc.Type {
		case "auto":
		case "none":
			forced = "-"
		case "any":
			forced = "*"
		case "tool":
			forced = tc.Name
			if !hasTool(p.tools, tc.Name) {
				return errorf(http.StatusBadRequest, "tool_choice.name: no tool named %q", tc.Name)
			}
		default:
			return errorf(http.StatusBadRequest, "tool_choice.type: want auto, any, tool or none, got %q", tc.Type)
		}
		if (forced == "*" || tc.Type == "tool") && spec.reasoning {
			return errorf(http.StatusBadRequest, "Thinking may not be enabled when tool_choice forces tool use.")
		}
	}
	if spec.pinned, err = reasoningTokens(r, spec.reasoning); err != nil {
		return err
	}
	if spec.tool, err = chooseTool(r, p.tools, forced, p.auto); err != nil {
		return err
	}
	spec.argKey = argKey(p.tools, spec.tool)

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	var t turn
	g := genRequest{model: model, prompts: [][]uint32{p.ids}, stream: req.Stream, maxTokens: req.MaxTokens, cache: p.cache}
	q, err := e.enqueue(ctx, r, arrival, g, "msg_", func(_, want int, words *rand.Rand) (int, string) {
		t = spec.plan(want, words)
		return len(t.script), t.engineReason()
	})
	if err != nil {
		return err
	}
	mt := &msgTurn{q: q, t: t, w: w, cache: p.cache, tool: spec.tool}
	q.plan.clamp(t.count(pieceReasoning) + t.count(pieceText) + t.count(pieceArgs))
	if req.Stream {
		return q.follow(ctx, w, false, mt)
	}
	if write, err := q.settle(ctx, w); !write {
		return err
	}
	writeJSON(w, http.StatusOK, mt.final())
	return nil
}

func hasTool(tools []functionTool, name string) bool {
	for _, t := range tools {
		if t.name == name {
			return true
		}
	}
	return false
}

// msgTurn writes one Messages API turn, streamed or whole.
type msgTurn struct {
	q     *gen
	t     turn
	w     http.ResponseWriter
	cache *cacheReq // nil without cache_control
	tool  string

	open   bool      // a content block is open
	cur    pieceKind // its kind
	index  int       // its index
	pinged bool
	acc    strings.Builder
}

// usage splits the prompt as Anthropic reports it: input_tokens are the
// tokens neither read from nor written to the cache.
func (mt *msgTurn) usage(output int) anthropicUsage {
	u := anthropicUsage{InputTokens: len(mt.q.seqs[0].prompt), OutputTokens: output, ServiceTier: "standard"}
	if c := mt.cache; c != nil {
		u.CacheReadInputTokens = c.read
		u.CacheCreation.Ephemeral5m, u.CacheCreation.Ephemeral1h = c.write5m, c.write1h
		u.CacheCreationInputTokens = c.write5m + c.write1h
		u.InputTokens -= u.CacheReadInputTokens + u.CacheCreationInputTokens
	}
	return u
}

// stopReason maps the turn's end to Anthropic's stop_reason.
func (mt *msgTurn) stopReason() (string, *string) {
	switch {
	case mt.t.reason == finishLength:
		return "max_tokens", nil
	case mt.t.reason == finishStopSequence:
		return "stop_sequence", &mt.t.stop
	case mt.tool != "":
		return "tool_use", nil
	}
	return "end_turn", nil
}

func (mt *msgTurn) signature() string { return itemID("", mt.q.id, "signature") }

func (mt *msgTurn) toolUseID() string { return itemID("toolu_", mt.q.id, "tool_use") }

// block is a finished content block of one kind.
func (mt *msgTurn) block(kind pieceKind, text string) any {
	switch kind {
	case pieceReasoning:
		return thinkingBlock{Type: "thinking", Thinking: text, Signature: ptr(mt.signature())}
	case pieceText:
		return textBlock{Type: "text", Text: text}
	}
	input := json.RawMessage(text)
	if !json.Valid(input) {
		input = json.RawMessage(`{}`) // cut by max_tokens
	}
	return toolUseBlock{Type: "tool_use", ID: mt.toolUseID(), Name: mt.tool, Input: input}
}

func (mt *msgTurn) final() anthropicResponse {
	st := mt.q.seqs[0].stats
	reason, stop := mt.stopReason()
	resp := anthropicResponse{ID: mt.q.id, Type: "message", Role: "assistant", Model: mt.q.model,
		Content: []any{}, StopReason: &reason, StopSequence: stop, Usage: mt.usage(st.OutputTokens)}
	var kind pieceKind
	var b strings.Builder
	flush := func() {
		if b.Len() > 0 {
			resp.Content = append(resp.Content, mt.block(kind, b.String()))
			b.Reset()
		}
	}
	for _, p := range mt.t.script {
		if p.kind == pieceHidden {
			continue
		}
		if p.kind != kind {
			flush()
			kind = p.kind
		}
		b.WriteString(p.text)
	}
	flush()
	return resp
}

func (mt *msgTurn) emit(ev anthropicEvent) error { return mt.q.sse(mt.w, ev.Type, ev) }

func (mt *msgTurn) begin() error {
	return mt.emit(anthropicEvent{Type: "message_start", Message: &anthropicResponse{
		ID: mt.q.id, Type: "message", Role: "assistant", Model: mt.q.model, Content: []any{}, Usage: mt.usage(1),
	}})
}

func (mt *msgTurn) token(i int) (bool, error) {
	p := mt.t.script[i]
	if p.kind == pieceHidden {
		return false, nil
	}
	if !mt.open || mt.cur != p.kind {
		if mt.open {
			if err := mt.closeBlock(); err != nil {
				return false, err
			}
			mt.index++
		}
		if err := mt.openBlock(p.kind); err != nil {
			return false, err
		}
	}
	mt.acc.WriteString(p.text)
	d := blockDelta{}
	switch p.kind {
	case pieceReasoning:
		d.Type, d.Thinking = "thinking_delta", ptr(p.text)
	case pieceText:
		d.Type, d.Text = "text_delta", ptr(p.text)
	default:
		d.Type, d.PartialJSON = "input_json_delta", ptr(p.text)
	}
	return true, mt.emit(anthropicEvent{Type: "content_block_delta", Index: ptr(mt.index), Delta: d})
}

func (mt *msgTurn) openBlock(kind pieceKind) error {
	mt.open, mt.cur = true, kind
	mt.acc.Reset()
	var cb any
	switch kind {
	case pieceReasoning:
		cb = thinkingBlock{Type: "thinking"}
	case pieceText:
		cb = textBlock{Type: "text"}
	default:
		cb = toolUseBlock{Type: "tool_use", ID: mt.toolUseID(), Name: mt.tool, Input: json.RawMessage(`{}`)}
	}
	if err := mt.emit(anthropicEvent{Type: "content_block_start", Index: ptr(mt.index), ContentBlock: cb}); err != nil {
		return err
	}
	if !mt.pinged {
		// Anthropic's stream pings once its first block has started.
		mt.pinged = true
		return mt.emit(anthropicEvent{Type: "ping"})
	}
	return nil
}

func (mt *msgTurn) closeBlock() error {
	mt.open = false
	if mt.cur == pieceReasoning {
		d := blockDelta{Type: "signature_delta", Signature: ptr(mt.signature())}
		if err := mt.emit(anthropicEvent{Type: "content_block_delta", Index: ptr(mt.index), Delta: d}); err != nil {
			return err
		}
	}
	return mt.emit(anthropicEvent{Type: "content_block_stop", Index: ptr(mt.index)})
}

func (mt *msgTurn) end() error {
	if mt.open {
		if err := mt.closeBlock(); err != nil {
			return err
		}
	}
	u := mt.usage(mt.q.seqs[0].stats.OutputTokens)
	reason, stop := mt.stopReason()
	if err := mt.emit(anthropicEvent{Type: "message_delta", Delta: messageDelta{StopReason: reason, StopSequence: stop},
		Usage: &deltaUsage{InputTokens: u.InputTokens, CacheCreationInputTokens: u.CacheCreationInputTokens,
			CacheReadInputTokens: u.CacheReadInputTokens, OutputTokens: u.OutputTokens}}); err != nil {
		return err
	}
	return mt.emit(anthropicEvent{Type: "message_stop"})
}

func (mt *msgTurn) fail(err error) {
	mt.emit(anthropicEvent{Type: "error", Error: &anthropicError{Type: anthropicErrorType(http.StatusServiceUnavailable), Message: err.Error()}}) //nolint:errcheck
}
