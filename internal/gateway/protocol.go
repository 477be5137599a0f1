package gateway

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/usage"
)

// The APIs agents speak beside chat: OpenAI's Responses API
// (POST /v1/responses) and Anthropic's Messages API (POST /v1/messages,
// POST /v1/messages/count_tokens). They go through the same path as chat —
// handleInference → attempt → the tap → finish — and differ in three
// places, all here: which upstreams speak them (speaks), how their
// requests name their features (agentRequest), and how their answers and
// events are read (answerParser, events.go). Errors on the Messages paths
// are in Anthropic's shape (anthropicErrors). Nothing is translated from
// one protocol to another: an upstream that does not speak the request's
// API gets no request, and the client a 400 that names it.

// Endpoints of the agent APIs, as Record.Endpoint names them.
const (
	endpointResponses   = "responses"
	endpointMessages    = "messages"
	endpointCountTokens = "count_tokens"
	// endpointResponseItem: GET/DELETE /v1/responses/{id},
	// POST /v1/responses/{id}/cancel, GET /v1/responses/{id}/input_items
	// — passed through, recorded apart from the answers that use tokens.
	endpointResponseItem = "responses_item"
)

// anthropicAPI says whether an endpoint is one of Anthropic's: its errors
// are rendered in Anthropic's shape.
func anthropicAPI(endpoint string) bool {
	return endpoint == endpointMessages || endpoint == endpointCountTokens
}

// agentAPI says whether an endpoint streams typed events (Responses,
// Messages) rather than chat chunks.
func agentAPI(endpoint string) bool {
	return endpoint == endpointResponses || endpoint == endpointMessages
}

// speaks says whether an upstream of the given engine kind serves an
// endpoint, as each engine's own server registers its routes (checked
// against their docs and route tables, 2026-12): vLLM, SGLang, Ollama
// (since 0.13.3 and 0.14) and llama.cpp's server serve the OpenAI APIs,
// Responses and Anthropic's Messages with count_tokens on the same base
// URL — Ollama's and llama.cpp's Responses are stateless, so retrieving a
// stored response is answered by the engine itself; TGI neither; OpenAI's API serves
// Responses, not Messages; Anthropic's API serves Messages only (its
// OpenAI-compatible chat is a translation, which tollgate does not
// rely on). The chat-era endpoints keep going everywhere but to
// Anthropic, as before this table existed.
func speaks(engine, endpoint string) bool {
	switch endpoint {
	case endpointResponses, endpointResponseItem:
		return slices.Contains([]string{"vllm", "sglang", "ollama", "llamacpp", "openai"}, engine)
	case endpointMessages, endpointCountTokens:
		return slices.Contains([]string{"vllm", "sglang", "ollama", "llamacpp", "anthropic"}, engine)
	}
	return engine != "anthropic"
}

// apiName is how an error message names an endpoint.
func apiName(endpoint string) string {
	switch endpoint {
	case endpointResponses, endpointResponseItem:
		return "the Responses API (/v1/responses)"
	case endpointMessages:
		return "Anthropic's Messages API (/v1/messages)"
	case endpointCountTokens:
		return "Anthropic's token counting (/v1/messages/count_tokens)"
	}
	return "/v1" + endpointPath[endpoint]
}

// unsupported is the 400 for a model whose upstreams do not speak the
// request's API: it names them, and says no translation is made.
func unsupported(endpoint string, ups []*upstream) *apiError {
	names := make([]string, 0, len(ups))
	for _, u := range ups {
		names = append(names, u.cfg.Name+" (engine "+u.cfg.Engine+")")
	}
	return &apiError{Kind: record.ErrUnsupported, Status: http.StatusBadRequest, Type: "invalid_request_error", Code: record.ErrUnsupported,
		Message: "upstream " + strings.Join(names, ", ") + " does not serve " + apiName(endpoint) +
			"; tollgate does not translate between APIs: send this request to an upstream that serves it"}
}

// maxEndUser bounds Record.EndUser: OpenAI's safety_identifier is at most
// 64 characters; twice that leaves room for other providers' ids.
const maxEndUser = 128

// agentFields are the request fields of the Responses and Messages APIs
// tollgate reads (and chat's user): part of clientRequest, so a body is
// decoded once.
type agentFields struct {
	User             *string         `json:"user"`
	SafetyIdentifier *string         `json:"safety_identifier"`
	Metadata         json.RawMessage `json:"metadata"`
	MaxOutputTokens  *int64          `json:"max_output_tokens"` // Responses
	System           json.RawMessage `json:"system"`            // Messages
	Instructions     json.RawMessage `json:"instructions"`      // Responses
	Background       *bool           `json:"background"`        // Responses
}

// endUser is the end user a request body names: safety_identifier (what
// OpenAI now asks for), user (its older name, also chat's), or
// metadata.user_id (Anthropic's; a Responses request's metadata may carry
// one too). Bounded; "" when none is a non-empty string.
func (f *agentFields) endUser() string {
	for _, p := range []*string{f.SafetyIdentifier, f.User} {
		if p != nil && *p != "" {
			return boundedPrefix(*p, maxEndUser)
		}
	}
	if len(f.Metadata) > 0 && f.Metadata[0] == '{' {
		var m map[string]json.RawMessage
		if json.Unmarshal(f.Metadata, &m) == nil {
			for _, k := range []string{"user_id", "user"} {
				var s string
				if json.Unmarshal(m[k], &s) == nil && s != "" {
					return boundedPrefix(s, maxEndUser)
				}
			}
		}
	}
	return ""
}

// agentRequest validates a Responses or Messages request and fills the
// Record's input features; prompt is what its hash and size cover.
func agentRequest(endpoint string, cr *clientRequest, rec *record.Record) (prompt []byte, e *apiError) {
	f := &cr.agentFields
	switch endpoint {
	case endpointResponses:
		// A background response is answered "queued" without usage, and
		// its tokens would only show in a later GET: refused until that
		// is metered, rather than served unmetered and outside quotas.
		if f.Background != nil && *f.Background {
			return nil, badRequest("background", "background responses are not supported by this gateway: its ledger could not meter them; send the request without 'background'")
		}
		// input may be left out (a stored prompt, a conversation carry
		// it); when given it is text or a list of items.
		if len(cr.Input) > 0 && cr.Input[0] != '"' && cr.Input[0] != '[' && string(cr.Input) != "null" {
			return nil, badRequest("input", "'input' must be a string or an array of input items")
		}
		rec.MaxTokens = f.MaxOutputTokens
		prompt = concat(f.Instructions, cr.Input)
		if len(cr.Input) > 0 && cr.Input[0] == '[' {
			var items []json.RawMessage
			if json.Unmarshal(cr.Input, &items) == nil {
				rec.Messages = len(items)
			}
		} else if len(cr.Input) > 0 && cr.Input[0] == '"' {
			rec.Messages = 1
		}
	case endpointMessages, endpointCountTokens:
		var msgs []json.RawMessage
		if len(cr.Messages) == 0 || cr.Messages[0] != '[' || json.Unmarshal(cr.Messages, &msgs) != nil || len(msgs) == 0 {
			return nil, badRequest("messages", "messages: must be a non-empty array")
		}
		if endpoint == endpointMessages && cr.MaxTokens == nil {
			return nil, badRequest("max_tokens", "max_tokens: Field required")
		}
		rec.Messages = len(msgs)
		prompt = concat(f.System, cr.Messages)
	}
	return prompt, nil
}

func concat(a, b []byte) []byte {
	if len(a) == 0 {
		return b
	}
	return append(append(slices.Clip(a), '\n'), b...)
}

// answerParser reads a whole (non-streamed) answer of an agent API.
func answerParser(endpoint string) func([]byte) (usage.Answer, error) {
	switch endpoint {
	case endpointResponses:
		return usage.ParseResponsesBody
	case endpointMessages:
		return usage.ParseMessagesBody
	}
	return nil
}

// eventParser reads the events of one streamed agent-API answer.
type eventParser interface {
	Parse(data []byte) (usage.StreamEvent, error)
	Answer() usage.Answer
}

func newEventParser(endpoint string) eventParser {
	switch endpoint {
	case endpointResponses:
		return &usage.ResponsesStream{}
	case endpointMessages:
		return &usage.MessagesStream{}
	}
	return nil
}

// applyAnswer puts what an agent API's answer says about itself into the
// Record. outputs is the output events counted by the tap (0 for a whole
// answer): when the answer's own output count is missing (a Messages
// stream cut before message_delta) or absent altogether (a Responses
// stream cut before its last event), the output is those events, one
// token each, as for a cut chat stream.
func applyAnswer(rec *record.Record, a usage.Answer, outputs int) {
	if rec.ServedModel == "" {
		rec.ServedModel = boundedPrefix(a.Model, MaxIdentifier)
	}
	if rec.ResponseID == "" {
		rec.ResponseID = responseID(a.ID)
	}
	rec.FinishReason = boundedPrefix(a.FinishReason, 64)
	if a.NativeFinish != a.FinishReason {
		rec.NativeFinish = boundedPrefix(a.NativeFinish, 64)
	}
	switch {
	case a.Usage != nil && !a.OutputUnknown:
		rec.Usage = *a.Usage
	case a.Usage != nil:
		// The engine's input and cache counts, the output counted here.
		rec.Usage = *a.Usage
		rec.Usage.OutputTokens, rec.Usage.ReasoningTokens = max(int64(outputs), 0), 0
		rec.Usage.Source = record.SourceMerged
	case outputs > 0:
		rec.Usage = record.Usage{OutputTokens: int64(outputs), Source: record.SourceChunks}
	}
	rec.Usage.ToolCalls = a.ToolCalls
}

// anthropicErrors marks a response writer whose gateway errors are
// rendered in Anthropic's shape: writeError, the one adapter, looks for
// it. Unwrap keeps http.ResponseController's Flush reaching the real
// writer.
type anthropicErrors struct{ http.ResponseWriter }

func (a anthropicErrors) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// anthropicType is Anthropic's error type for a status.
func anthropicType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable, 529:
		return "overloaded_error"
	}
	if status >= 400 && status < 500 {
		return "invalid_request_error"
	}
	return "api_error"
}

// anthropicBody is e in Anthropic's error shape:
// {"type":"error","error":{"type":…,"message":…}}.
func (e *apiError) anthropicBody() []byte {
	var v struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	v.Type, v.Error.Type, v.Error.Message = "error", anthropicType(e.Status), e.Message
	b, _ := json.Marshal(v)
	return b
}

// agentStreamError is the event that ends an agent-API stream the gateway
// has to cut after the client already received some events: Anthropic's
// error event, or the Responses API's error event.
func agentStreamError(endpoint string, e *apiError) []byte {
	var b []byte
	if anthropicAPI(endpoint) {
		b = append([]byte("event: error\ndata: "), e.anthropicBody()...)
	} else {
		ev := struct {
			Type    string  `json:"type"`
			Code    string  `json:"code"`
			Message string  `json:"message"`
			Param   *string `json:"param"`
		}{"error", e.Code, e.Message, nil}
		j, _ := json.Marshal(ev)
		b = append([]byte("event: error\ndata: "), j...)
	}
	return append(b, "\n\n"...)
}

// upstreamFor picks the upstream of a pass-through request about a stored
// response (GET/DELETE /v1/responses/{id}, …), which names no model: the
// one the X-Tollgate-Upstream header names, else the first configured
// upstream that serves the Responses API. A response lives on the engine
// that made it, so with several such upstreams the client names it.
func (rt *router) upstreamFor(name string) (*upstream, *apiError) {
	for _, u := range rt.all {
		if name != "" && u.cfg.Name != name {
			continue
		}
		if speaks(u.cfg.Engine, endpointResponseItem) {
			return u, nil
		}
		if name != "" {
			return nil, unsupported(endpointResponseItem, []*upstream{u})
		}
	}
	if name != "" {
		return nil, &apiError{Kind: record.ErrNoRoute, Status: http.StatusNotFound, Type: "invalid_request_error", Code: record.ErrNoRoute,
			Message: "No upstream is named " + strconv.Quote(echo(name)) + " (header " + UpstreamHeader + ")."}
	}
	return nil, &apiError{Kind: record.ErrNoRoute, Status: http.StatusNotFound, Type: "invalid_request_error", Code: record.ErrNoRoute,
		Message: "No upstream serves " + apiName(endpointResponseItem) + "."}
}

// UpstreamHeader names the upstream of a request about a stored response.
const UpstreamHeader = "X-Tollgate-Upstream"

// speaking keeps the candidates that serve endpoint; when none does, the
// error names them.
func speaking(endpoint string, cands []*upstream) ([]*upstream, *apiError) {
	all := true
	for _, u := range cands {
		all = all && speaks(u.cfg.Engine, endpoint)
	}
	if all { // the usual case: no copy on the request path
		return cands, nil
	}
	var out []*upstream
	for _, u := range cands {
		if speaks(u.cfg.Engine, endpoint) {
			out = append(out, u)
		}
	}
	if len(out) == 0 {
		return nil, unsupported(endpoint, cands)
	}
	return out, nil
}

// agentRoutes adds the agent APIs to the gateway's mux.
func (g *Gateway) agentRoutes(mux *http.ServeMux) {
	for _, ep := range []struct{ pattern, endpoint string }{
		{"POST /v1/responses", endpointResponses},
		{"POST /v1/messages", endpointMessages},
		{"POST /v1/messages/count_tokens", endpointCountTokens},
	} {
		mux.HandleFunc(ep.pattern, func(w http.ResponseWriter, r *http.Request) { g.handleInference(w, r, ep.endpoint) })
	}
	for _, p := range []string{"GET /v1/responses/{id}", "DELETE /v1/responses/{id}", "POST /v1/responses/{id}/cancel", "GET /v1/responses/{id}/input_items"} {
		mux.HandleFunc(p, g.handleResponseItem)
	}
}
