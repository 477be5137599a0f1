package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"
)

// POST /v1/responses: OpenAI's Responses API as vLLM serves it, with the
// response object and stream events of OpenAI's API. See the package doc.

type (
	responsesRequest struct {
		Model              string             `json:"model"`
		Input              json.RawMessage    `json:"input"`
		Instructions       *string            `json:"instructions"`
		MaxOutputTokens    *int               `json:"max_output_tokens"`
		Tools              []json.RawMessage  `json:"tools"`
		ToolChoice         json.RawMessage    `json:"tool_choice"`
		Reasoning          *responseReasoning `json:"reasoning"`
		Metadata           map[string]string  `json:"metadata"`
		User               *string            `json:"user"`
		SafetyIdentifier   *string            `json:"safety_identifier"`
		PreviousResponseID *string            `json:"previous_response_id"`
		Store              *bool              `json:"store"`
		Stream             bool               `json:"stream"`
		Background         bool               `json:"background"`
		Temperature        *float64           `json:"temperature"`
		TopP               *float64           `json:"top_p"`
		ParallelToolCalls  *bool              `json:"parallel_tool_calls"`
	}
	responseReasoning struct {
		Effort  *string `json:"effort"`
		Summary *string `json:"summary"`
	}
	// item is an input or output item, kept as JSON objects: the sim reads
	// a few fields and hands the rest back untouched.
	item = map[string]any
)

// Response bodies, field order as OpenAI writes them.
type (
	responseObject struct {
		ID                 string             `json:"id"`
		Object             string             `json:"object"`
		CreatedAt          int64              `json:"created_at"`
		Status             string             `json:"status"`
		Background         bool               `json:"background"`
		Error              *responseError     `json:"error"`
		IncompleteDetails  *incompleteDetails `json:"incomplete_details"`
		Instructions       *string            `json:"instructions"`
		MaxOutputTokens    *int               `json:"max_output_tokens"`
		Model              string             `json:"model"`
		Output             []any              `json:"output"`
		ParallelToolCalls  bool               `json:"parallel_tool_calls"`
		PreviousResponseID *string            `json:"previous_response_id"`
		Reasoning          responseReasoning  `json:"reasoning"`
		SafetyIdentifier   *string            `json:"safety_identifier,omitempty"`
		Store              bool               `json:"store"`
		Temperature        *float64           `json:"temperature"`
		Text               responseTextConfig `json:"text"`
		ToolChoice         json.RawMessage    `json:"tool_choice"`
		Tools              []json.RawMessage  `json:"tools"`
		TopP               *float64           `json:"top_p"`
		Truncation         string             `json:"truncation"`
		Usage              *responseUsage     `json:"usage"`
		User               *string            `json:"user"`
		Metadata           map[string]string  `json:"metadata"`
	}
	responseError struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	incompleteDetails struct {
		Reason string `json:"reason"`
	}
	responseTextConfig struct {
		Format struct {
			Type string `json:"type"`
		} `json:"format"`
	}
	responseUsage struct {
		InputTokens        int `json:"input_tokens"`
		InputTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"input_tokens_details"`
		OutputTokens        int `json:"output_tokens"`
		OutputTokensDetails struct {
			ReasoningTokens int `json:"reasoning_tokens"`
		} `json:"output_tokens_details"`
		TotalTokens int `json:"total_tokens"`
	}
	outputMessage struct {
		ID      string       `json:"id"`
		Type    string       `json:"type"`
		Status  string       `json:"status"`
		Role    string       `json:"role"`
		Content []outputText `json:"content"`
	}
	outputText struct {
		Type        string     `json:"type"`
		Annotations []struct{} `json:"annotations"`
		Logprobs    []struct{} `json:"logprobs"`
		Text        string     `json:"text"`
	}
	reasoningItem struct {
		ID      string        `json:"id"`
		Type    string        `json:"type"`
		Summary []summaryText `json:"summary"`
	}
	summaryText struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	functionCall struct {
		ID        string `json:"id"`
		Type      string `json:"type"`
		Status    string `json:"status"`
		Arguments string `json:"arguments"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
	}
	// responseEvent is every streamed event; each carries the fields of
	// its type only.
	responseEvent struct {
		Type           string          `json:"type"`
		SequenceNumber int             `json:"sequence_number"`
		Response       *responseObject `json:"response,omitempty"`
		ItemID         string          `json:"item_id,omitempty"`
		OutputIndex    *int            `json:"output_index,omitempty"`
		ContentIndex   *int            `json:"content_index,omitempty"`
		SummaryIndex   *int            `json:"summary_index,omitempty"`
		Item           any             `json:"item,omitempty"`
		Part           any             `json:"part,omitempty"`
		Delta          *string         `json:"delta,omitempty"`
		Text           *string         `json:"text,omitempty"`
		Arguments      *string         `json:"arguments,omitempty"`
		Logprobs       *[]struct{}     `json:"logprobs,omitempty"`
	}
)

func ptr[T any](v T) *T { return &v }

// reasoningShare is the share of the answer each effort spends reasoning.
var reasoningShare = map[string]float64{
	"minimal": 0.1, "low": 0.25, "medium": 0.5, "high": 0.75, "xhigh": 0.9,
}

func (e *Engine) responses(w http.ResponseWriter, r *http.Request) error {
	arrival := time.Now()
	var req responsesRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	model, err := e.model(req.Model)
	if err != nil {
		return err
	}
	if req.Background {
		return errorf(http.StatusBadRequest, "background: the simulator answers synchronously only")
	}
	if req.MaxOutputTokens != nil && *req.MaxOutputTokens < 1 {
		return errorf(http.StatusBadRequest, "max_output_tokens: must be at least 1, got %d", *req.MaxOutputTokens)
	}
	tools, err := responseTools(req.Tools)
	if err != nil {
		return err
	}
	forced, toolChoice, err := responseToolChoice(req.ToolChoice, tools)
	if err != nil {
		return err
	}
	input, err := responseInput(req.Input, req.PreviousResponseID != nil)
	if err != nil {
		return err
	}
	var convo []item
	if req.PreviousResponseID != nil {
		prev, ok := e.stored.get(*req.PreviousResponseID)
		if !ok {
			return errorf(http.StatusNotFound, "Previous response with id '%s' not found.", *req.PreviousResponseID)
		}
		convo = prev.convo
	}
	spec := turnSpec{maxTokens: req.MaxOutputTokens, eos: e.cfg.EOS}
	summary := false
	if rs := req.Reasoning; rs != nil {
		if rs.Effort == nil {
			rs.Effort = ptr("medium") // OpenAI's default, echoed as such
		}
		effort := *rs.Effort
		if share, ok := reasoningShare[effort]; ok {
			spec.reasoning, spec.share = true, share
		} else if effort != "none" {
			return errorf(http.StatusBadRequest, "reasoning.effort: want none, minimal, low, medium, high or xhigh, got %q", effort)
		}
		summary = spec.reasoning && rs.Summary != nil && *rs.Summary != ""
	}
	if spec.pinned, err = reasoningTokens(r, spec.reasoning); err != nil {
		return err
	}
	// The model calls a tool of its own accord when the user just spoke.
	auto := len(input) > 0 && input[len(input)-1]["type"] == "message" && input[len(input)-1]["role"] == "user"
	if spec.tool, err = chooseTool(r, tools, forced, auto); err != nil {
		return err
	}
	spec.argKey = argKey(tools, spec.tool)

	p := promptBuilder{model: model}
	if len(req.Tools) > 0 {
		p.open("tools")
		for _, raw := range req.Tools {
			p.block(compactJSON(raw), 0)
		}
		p.close()
	}
	if req.Instructions != nil && *req.Instructions != "" {
		p.message("system", *req.Instructions)
	}
	for _, it := range append(append([]item(nil), convo...), input...) {
		if role, texts := itemTexts(it); role != "" {
			p.open(role)
			for _, t := range texts {
				p.block(t, 0)
			}
			p.close()
		}
	}
	prompt, _ := p.finish()

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	var t turn
	g := genRequest{model: model, prompts: [][]uint32{prompt}, stream: req.Stream, maxTokens: req.MaxOutputTokens}
	q, err := e.enqueue(ctx, r, arrival, g, "resp_", func(_, want int, words *rand.Rand) (int, string) {
		t = spec.plan(want, words)
		return len(t.script), t.engineReason()
	})
	if err != nil {
		return err
	}
	rt := &respTurn{q: q, t: t, w: w, summary: summary, tool: spec.tool, e: e, input: input, convo: convo}
	rt.base = responseObject{
		ID: q.id, Object: "response", CreatedAt: q.created, Status: "in_progress",
		Instructions: req.Instructions, MaxOutputTokens: req.MaxOutputTokens, Model: model, Output: []any{},
		ParallelToolCalls:  req.ParallelToolCalls == nil || *req.ParallelToolCalls,
		PreviousResponseID: req.PreviousResponseID, SafetyIdentifier: req.SafetyIdentifier,
		Store: req.Store == nil || *req.Store, Temperature: req.Temperature,
		ToolChoice: toolChoice, Tools: make([]json.RawMessage, len(req.Tools)), TopP: req.TopP,
		Truncation: "disabled", User: req.User, Metadata: req.Metadata,
	}
	rt.base.Text.Format.Type = "text"
	for i, raw := range req.Tools {
		rt.base.Tools[i] = json.RawMessage(compactJSON(raw))
	}
	if rs := req.Reasoning; rs != nil {
		rt.base.Reasoning = *rs
	}
	if rt.base.Metadata == nil {
		rt.base.Metadata = map[string]string{}
	}
	q.plan.clamp(rt.shown())
	if req.Stream {
		return q.follow(ctx, w, true, rt)
	}
	if write, err := q.settle(ctx, w); !write {
		return err
	}
	resp := rt.final()
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// responseTools returns the function tools of a request; other tools
// (built-in ones) count as prompt but are never called.
func responseTools(raws []json.RawMessage) ([]functionTool, error) {
	var tools []functionTool
	for i, raw := range raws {
		var t struct {
			Type       string          `json:"type"`
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		}
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, errorf(http.StatusBadRequest, "tools[%d]: %v", i, err)
		}
		if t.Type != "function" {
			continue
		}
		if t.Name == "" {
			return nil, errorf(http.StatusBadRequest, "tools[%d].name: required", i)
		}
		tools = append(tools, functionTool{name: t.Name, schema: t.Parameters})
	}
	return tools, nil
}

// responseToolChoice reads tool_choice: "none", "auto", "required" or a
// named function. forced is what chooseTool takes; echo is what the
// response object shows.
func responseToolChoice(raw json.RawMessage, tools []functionTool) (forced string, echo json.RawMessage, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", json.RawMessage(`"auto"`), nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "none":
			return "-", raw, nil
		case "auto":
			return "", raw, nil
		case "required":
			return "*", raw, nil
		}
		return "", nil, errorf(http.StatusBadRequest, "tool_choice: want none, auto, required or an object, got %q", s)
	}
	var obj struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", nil, errorf(http.StatusBadRequest, "tool_choice: %v", err)
	}
	echo = json.RawMessage(compactJSON(raw))
	if obj.Type != "function" {
		return "", echo, nil // allowed_tools, built-in tools: the model decides
	}
	for _, t := range tools {
		if t.name == obj.Name {
			return obj.Name, echo, nil
		}
	}
	return "", nil, errorf(http.StatusBadRequest, "tool_choice: no function tool named %q", obj.Name)
}

// responseInput reads input: a string (one user message) or an array of
// items, normalised as OpenAI lists them (typed, content as parts).
func responseInput(raw json.RawMessage, optional bool) ([]item, error) {
	if len(raw) == 0 || string(raw) == "null" {
		if optional {
			return nil, nil // the conversation goes on from the previous response
		}
		return nil, errorf(http.StatusBadRequest, "input: required")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []item{{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": s}}}}, nil
	}
	var items []item
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, errorf(http.StatusBadRequest, "input: must be a string or an array of items")
	}
	if len(items) == 0 {
		return nil, errorf(http.StatusBadRequest, "input: at least one item is required")
	}
	for i, it := range items {
		if err := normaliseItem(it); err != nil {
			return nil, errorf(http.StatusBadRequest, "input[%d]%v", i, err)
		}
	}
	return items, nil
}

func normaliseItem(it item) error {
	typ, _ := it["type"].(string)
	if typ == "" {
		if _, ok := it["role"]; !ok {
			return errors.New(".type: required")
		}
		typ = "message"
		it["type"] = typ
	}
	switch typ {
	case "message":
		role, _ := it["role"].(string)
		partType := "input_text"
		switch role {
		case "user", "system", "developer":
		case "assistant":
			partType = "output_text"
		default:
			return fmt.Errorf(".role: want user, assistant, system or developer, got %q", role)
		}
		switch c := it["content"].(type) {
		case string:
			it["content"] = []any{map[string]any{"type": partType, "text": c}}
		case []any:
		default:
			return errors.New(".content: must be a string or an array of content parts")
		}
	case "function_call":
		for _, k := range []string{"call_id", "name", "arguments"} {
			if _, ok := it[k].(string); !ok {
				return fmt.Errorf(".%s: required", k)
			}
		}
	case "function_call_output":
		if _, ok := it["call_id"].(string); !ok {
			return errors.New(".call_id: required")
		}
		if _, ok := it["output"]; !ok {
			return errors.New(".output: required")
		}
	}
	return nil
}

// itemTexts returns the role and texts an item adds to the prompt; role
// is "" for items that add nothing (reasoning, references).
func itemTexts(it item) (role string, texts []string) {
	parts := func(v any) []string {
		switch c := v.(type) {
		case string:
			return []string{c}
		case []any:
			var out []string
			for _, p := range c {
				if m, ok := p.(map[string]any); ok {
					if t, ok := m["text"].(string); ok {
						out = append(out, t)
					}
				}
			}
			return out
		}
		return nil
	}
	switch it["type"] {
	case "message":
		role, _ = it["role"].(string)
		return role, parts(it["content"])
	case "function_call":
		name, _ := it["name"].(string)
		args, _ := it["arguments"].(string)
		return "assistant", []string{name, args}
	case "function_call_output":
		return "tool", parts(it["output"])
	}
	return "", nil
}

// respTurn writes one Responses API turn, streamed or whole.
type respTurn struct {
	q       *gen
	t       turn
	e       *Engine
	w       http.ResponseWriter
	base    responseObject // as created: in progress, no output, no usage
	summary bool           // reasoning is shown as a summary
	tool    string
	input   []item // this request's
	convo   []item // the earlier turns, with previous_response_id

	seq   int       // sequence_number of the next event
	open  bool      // an output item is open
	cur   pieceKind // its kind
	index int       // its output_index
	acc   strings.Builder
}

// shown counts the events that carry tokens, where faults are placed.
func (rt *respTurn) shown() int {
	n := rt.t.count(pieceText) + rt.t.count(pieceArgs)
	if rt.summary {
		n += rt.t.count(pieceReasoning)
	}
	return n
}

func (rt *respTurn) ids() (rs, msg, fc, call string) {
	id := rt.q.id
	return itemID("rs_", id, "reasoning"), itemID("msg_", id, "message"), itemID("fc_", id, "function_call"), itemID("call_", id, "call")
}

// item builds the output item of one kind from its text.
func (rt *respTurn) item(kind pieceKind, text, status string) any {
	rs, msg, fc, call := rt.ids()
	switch kind {
	case pieceReasoning:
		it := reasoningItem{ID: rs, Type: "reasoning", Summary: []summaryText{}}
		if rt.summary && text != "" {
			it.Summary = append(it.Summary, summaryText{Type: "summary_text", Text: text})
		}
		return it
	case pieceText:
		m := outputMessage{ID: msg, Type: "message", Status: status, Role: "assistant", Content: []outputText{}}
		if status != "in_progress" {
			m.Content = append(m.Content, textPart(text))
		}
		return m
	}
	return functionCall{ID: fc, Type: "function_call", Status: status, Arguments: text, CallID: call, Name: rt.tool}
}

func textPart(text string) outputText {
	return outputText{Type: "output_text", Annotations: []struct{}{}, Logprobs: []struct{}{}, Text: text}
}

// final is the finished response: its output, status and usage. It is
// stored for GET /v1/responses/{id} unless the request said store: false.
func (rt *respTurn) final() responseObject {
	resp := rt.base
	status := "completed"
	if rt.t.reason == finishLength {
		status = "incomplete"
		resp.IncompleteDetails = &incompleteDetails{Reason: "max_output_tokens"}
	}
	resp.Status = status
	// Group the script into items: a run of pieces of one kind is one item.
	var kinds []pieceKind
	var texts []*strings.Builder
	for _, p := range rt.t.script {
		if p.kind == pieceHidden {
			continue
		}
		if len(kinds) == 0 || kinds[len(kinds)-1] != p.kind {
			kinds = append(kinds, p.kind)
			texts = append(texts, &strings.Builder{})
		}
		texts[len(texts)-1].WriteString(p.text)
	}
	resp.Output = make([]any, len(kinds))
	for i, k := range kinds {
		st := "completed"
		if i == len(kinds)-1 {
			st = status
		}
		resp.Output[i] = rt.item(k, texts[i].String(), st)
	}
	st := rt.q.seqs[0].stats
	u := &responseUsage{InputTokens: st.PromptTokens, OutputTokens: st.OutputTokens, TotalTokens: st.PromptTokens + st.OutputTokens}
	u.InputTokensDetails.CachedTokens = st.CachedTokens
	u.OutputTokensDetails.ReasoningTokens = rt.t.count(pieceReasoning)
	resp.Usage = u
	if resp.Store {
		rt.e.stored.put(rt.input, rt.convo, resp)
	}
	return resp
}

func (rt *respTurn) emit(ev responseEvent) error {
	ev.SequenceNumber = rt.seq
	rt.seq++
	return rt.q.sse(rt.w, ev.Type, ev)
}

func (rt *respTurn) begin() error {
	created := rt.base
	if err := rt.emit(responseEvent{Type: "response.created", Response: &created}); err != nil {
		return err
	}
	return rt.emit(responseEvent{Type: "response.in_progress", Response: &created})
}

func (rt *respTurn) token(i int) (bool, error) {
	p := rt.t.script[i]
	if p.kind == pieceHidden {
		return false, nil
	}
	if !rt.open || rt.cur != p.kind {
		if rt.open {
			if err := rt.closeItem("completed"); err != nil {
				return false, err
			}
			rt.index++
		}
		if err := rt.openItem(p.kind); err != nil {
			return false, err
		}
	}
	rt.acc.WriteString(p.text)
	rs, msg, fc, _ := rt.ids()
	switch {
	case p.kind == pieceText:
		return true, rt.emit(responseEvent{Type: "response.output_text.delta", ItemID: msg, OutputIndex: ptr(rt.index),
			ContentIndex: ptr(0), Delta: ptr(p.text), Logprobs: &[]struct{}{}})
	case p.kind == pieceArgs:
		return true, rt.emit(responseEvent{Type: "response.function_call_arguments.delta", ItemID: fc, OutputIndex: ptr(rt.index),
			Delta: ptr(p.text)})
	case rt.summary:
		return true, rt.emit(responseEvent{Type: "response.reasoning_summary_text.delta", ItemID: rs, OutputIndex: ptr(rt.index),
			SummaryIndex: ptr(0), Delta: ptr(p.text)})
	}
	return false, nil // hidden reasoning: the tokens pass, nothing shows
}

func (rt *respTurn) openItem(kind pieceKind) error {
	rt.open, rt.cur = true, kind
	rt.acc.Reset()
	if err := rt.emit(responseEvent{Type: "response.output_item.added", OutputIndex: ptr(rt.index),
		Item: rt.item(kind, "", "in_progress")}); err != nil {
		return err
	}
	rs, msg, _, _ := rt.ids()
	switch {
	case kind == pieceText:
		return rt.emit(responseEvent{Type: "response.content_part.added", ItemID: msg, OutputIndex: ptr(rt.index),
			ContentIndex: ptr(0), Part: textPart("")})
	case kind == pieceReasoning && rt.summary:
		return rt.emit(responseEvent{Type: "response.reasoning_summary_part.added", ItemID: rs, OutputIndex: ptr(rt.index),
			SummaryIndex: ptr(0), Part: summaryText{Type: "summary_text"}})
	}
	return nil
}

func (rt *respTurn) closeItem(status string) error {
	rt.open = false
	text := rt.acc.String()
	rs, msg, fc, _ := rt.ids()
	var err error
	switch {
	case rt.cur == pieceText:
		err = errors.Join(
			rt.emit(responseEvent{Type: "response.output_text.done", ItemID: msg, OutputIndex: ptr(rt.index),
				ContentIndex: ptr(0), Text: ptr(text), Logprobs: &[]struct{}{}}),
			rt.emit(responseEvent{Type: "response.content_part.done", ItemID: msg, OutputIndex: ptr(rt.index),
				ContentIndex: ptr(0), Part: textPart(text)}))
	case rt.cur == pieceArgs:
		err = rt.emit(responseEvent{Type: "response.function_call_arguments.done", ItemID: fc, OutputIndex: ptr(rt.index),
			Arguments: ptr(text)})
	case rt.summary:
		err = errors.Join(
			rt.emit(responseEvent{Type: "response.reasoning_summary_text.done", ItemID: rs, OutputIndex: ptr(rt.index),
				SummaryIndex: ptr(0), Text: ptr(text)}),
			rt.emit(responseEvent{Type: "response.reasoning_summary_part.done", ItemID: rs, OutputIndex: ptr(rt.index),
				SummaryIndex: ptr(0), Part: summaryText{Type: "summary_text", Text: text}}))
	}
	if err != nil {
		return err
	}
	return rt.emit(responseEvent{Type: "response.output_item.done", OutputIndex: ptr(rt.index), Item: rt.item(rt.cur, text, status)})
}

func (rt *respTurn) end() error {
	resp := rt.final()
	if rt.open {
		if err := rt.closeItem(resp.Status); err != nil {
			return err
		}
	}
	typ := "response.completed"
	if resp.Status == "incomplete" {
		typ = "response.incomplete"
	}
	return rt.emit(responseEvent{Type: typ, Response: &resp})
}

func (rt *respTurn) fail(err error) {
	resp := rt.base
	resp.Status = "failed"
	resp.Error = &responseError{Code: "server_error", Message: err.Error()}
	rt.emit(responseEvent{Type: "response.failed", Response: &resp}) //nolint:errcheck // the stream ends either way
}
