package sim

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// maxBodyBytes bounds a request body; a simulator has no business with more.
const maxBodyBytes = 32 << 20

// Handler serves vLLM's OpenAI-compatible API, /health and /metrics.
func (e *Engine) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /v1/chat/completions", e.adapt(e.chat))
	mux.Handle("POST /v1/completions", e.adapt(e.completions))
	mux.Handle("POST /v1/embeddings", e.adapt(e.embeddings))
	mux.Handle("GET /v1/models", e.adapt(e.listModels))
	mux.Handle("POST /v1/responses", e.adapt(e.responses))
	mux.Handle("GET /v1/responses/{id}", e.adapt(e.getResponse))
	mux.Handle("DELETE /v1/responses/{id}", e.adapt(e.deleteResponse))
	mux.Handle("POST /v1/responses/{id}/cancel", e.adapt(e.cancelResponse))
	mux.Handle("GET /v1/responses/{id}/input_items", e.adapt(e.listInputItems))
	mux.Handle("POST /v1/messages", e.adaptWith(e.messages, writeAnthropicError))
	mux.Handle("POST /v1/messages/count_tokens", e.adaptWith(e.countTokens, writeAnthropicError))
	mux.Handle("POST /v1/images/generations", e.adapt(e.images))
	mux.Handle("POST /v1/audio/transcriptions", e.adapt(e.transcriptions))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {})
	mux.Handle("GET /metrics", promhttp.HandlerFor(e.gatherer, promhttp.HandlerOpts{}))
	return mux
}

// apiError is an error rendered as vLLM's error JSON with its status.
type apiError struct {
	Status  int
	Message string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s", e.Status, e.Message) }

func errorf(status int, format string, args ...any) *apiError {
	return &apiError{Status: status, Message: fmt.Sprintf(format, args...)}
}

// errorBody is vLLM's ErrorResponse.
type errorBody struct {
	Object  string  `json:"object"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

func newErrorBody(status int, msg string) errorBody {
	return errorBody{Object: "error", Message: msg, Type: errorType(status), Code: status}
}

// errorType names a status the way vLLM and the OpenAI SDKs do.
func errorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "BadRequestError"
	case http.StatusUnauthorized:
		return "AuthenticationError"
	case http.StatusForbidden:
		return "PermissionDeniedError"
	case http.StatusNotFound:
		return "NotFoundError"
	case http.StatusUnprocessableEntity:
		return "UnprocessableEntityError"
	case http.StatusTooManyRequests:
		return "RateLimitError"
	case http.StatusInternalServerError:
		return "InternalServerError"
	case http.StatusServiceUnavailable:
		return "ServiceUnavailableError"
	}
	return strings.ReplaceAll(http.StatusText(status), " ", "") + "Error"
}

// adapt is the one place where a handler's error becomes a response, in
// vLLM's error JSON. Handlers return errors only before they have written
// anything; once a stream has started they report failures in the stream
// itself.
func (e *Engine) adapt(h func(http.ResponseWriter, *http.Request) error) http.Handler {
	return e.adaptWith(h, func(w http.ResponseWriter, ae *apiError) {
		writeJSON(w, ae.Status, newErrorBody(ae.Status, ae.Message))
	})
}

// adaptWith is adapt with the error rendered by render, for APIs with an
// error shape of their own.
func (e *Engine) adaptWith(h func(http.ResponseWriter, *http.Request) error, render func(http.ResponseWriter, *apiError)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := h(w, r)
		if err == nil {
			return
		}
		var ae *apiError
		if !errors.As(err, &ae) {
			e.log.Error("request failed", "path", r.URL.Path, "err", err)
			ae = errorf(http.StatusInternalServerError, "%v", err)
		}
		render(w, ae)
	})
}

// marshal encodes like Python's json.dumps used by vLLM: no HTML escaping.
func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only our own response types are encoded; failing here is a bug.
		panic(fmt.Sprintf("sim: encode response: %v", err))
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(marshal(v)) //nolint:errcheck // the client left; nothing to do
}

func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err := dec.Decode(v); err != nil {
		return errorf(http.StatusBadRequest, "invalid JSON body: %v", err)
	}
	return nil
}

// model resolves the requested model; like vLLM, an empty name means the
// first served model.
func (e *Engine) model(name string) (string, error) {
	if name == "" {
		return e.cfg.Models[0], nil
	}
	if !e.models[name] {
		return "", errorf(http.StatusNotFound, "The model `%s` does not exist.", name)
	}
	return name, nil
}

// Request bodies: only the fields the sim acts on; the rest is ignored as
// vLLM ignores unknown fields.
type (
	chatRequest struct {
		Model         string         `json:"model"`
		Messages      []chatMessage  `json:"messages"`
		Stream        bool           `json:"stream"`
		StreamOptions *streamOptions `json:"stream_options"`
		MaxTokens     *int           `json:"max_tokens"`
		MaxCompletion *int           `json:"max_completion_tokens"`
		MinTokens     int            `json:"min_tokens"`
		IgnoreEOS     bool           `json:"ignore_eos"`
		N             *int           `json:"n"`
		Seed          *int64         `json:"seed"`
	}
	chatMessage struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
		texts   []string
	}
	streamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	}
	completionRequest struct {
		Model         string          `json:"model"`
		Prompt        json.RawMessage `json:"prompt"`
		Stream        bool            `json:"stream"`
		StreamOptions *streamOptions  `json:"stream_options"`
		MaxTokens     *int            `json:"max_tokens"`
		MinTokens     int             `json:"min_tokens"`
		IgnoreEOS     bool            `json:"ignore_eos"`
		N             *int            `json:"n"`
		Seed          *int64          `json:"seed"`
	}
	embeddingRequest struct {
		Model          string          `json:"model"`
		Input          json.RawMessage `json:"input"`
		EncodingFormat string          `json:"encoding_format"`
	}
)

// genRequest is a chat or completion request reduced to what the engine
// needs.
type genRequest struct {
	chat         bool
	model        string
	prompts      [][]uint32
	stream       bool
	includeUsage bool
	maxTokens    *int
	minTokens    int
	ignoreEOS    bool
	seed         *int64 // set: each output depends only on model, prompt and seed
	// cache is the explicit prompt caching of a /v1/messages request
	// (one prompt only); nil for the other APIs.
	cache *cacheReq
}

func (e *Engine) chat(w http.ResponseWriter, r *http.Request) error {
	arrival := time.Now()
	var req chatRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	model, err := e.model(req.Model)
	if err != nil {
		return err
	}
	if len(req.Messages) == 0 {
		return errorf(http.StatusBadRequest, "messages: at least one message is required")
	}
	for i := range req.Messages {
		m := &req.Messages[i]
		if m.Role == "" {
			return errorf(http.StatusBadRequest, "messages[%d].role: required", i)
		}
		if m.texts, err = contentTexts(m.Content); err != nil {
			return errorf(http.StatusBadRequest, "messages[%d].content: %v", i, err)
		}
	}
	maxTokens := req.MaxCompletion
	if maxTokens == nil {
		maxTokens = req.MaxTokens
	}
	g := genRequest{
		chat: true, model: model, prompts: [][]uint32{chatTokens(req.Messages)},
		stream: req.Stream, maxTokens: maxTokens, minTokens: req.MinTokens, ignoreEOS: req.IgnoreEOS, seed: req.Seed,
	}
	if err := g.check(req.StreamOptions, req.N); err != nil {
		return err
	}
	return e.generate(w, r, arrival, g)
}

// contentTexts returns the text of a message content: a string, null, or
// an array of parts of which only text parts count.
func contentTexts(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return []string{s}, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, errors.New("must be a string or an array of content parts")
	}
	var texts []string
	for _, p := range parts {
		if p.Type == "text" {
			texts = append(texts, p.Text)
		}
	}
	return texts, nil
}

func (e *Engine) completions(w http.ResponseWriter, r *http.Request) error {
	arrival := time.Now()
	var req completionRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	model, err := e.model(req.Model)
	if err != nil {
		return err
	}
	prompts, err := promptTokens(req.Prompt)
	if err != nil {
		return errorf(http.StatusBadRequest, "prompt: %v", err)
	}
	for i, p := range prompts {
		if len(p) == 0 {
			return errorf(http.StatusBadRequest, "prompt[%d]: the prompt cannot be empty", i)
		}
	}
	if req.MaxTokens == nil {
		// vLLM's (and OpenAI's) default for the legacy completions API.
		def := 16
		req.MaxTokens = &def
	}
	g := genRequest{
		model: model, prompts: prompts, stream: req.Stream,
		maxTokens: req.MaxTokens, minTokens: req.MinTokens, ignoreEOS: req.IgnoreEOS, seed: req.Seed,
	}
	if err := g.check(req.StreamOptions, req.N); err != nil {
		return err
	}
	return e.generate(w, r, arrival, g)
}

// check validates the sampling fields shared by chat and completions.
func (g *genRequest) check(opts *streamOptions, n *int) error {
	if opts != nil {
		if !g.stream {
			return errorf(http.StatusBadRequest, "stream_options: only allowed when stream is true")
		}
		g.includeUsage = opts.IncludeUsage
	}
	if n != nil && *n != 1 {
		return errorf(http.StatusBadRequest, "n: the simulator supports n=1 only, got %d", *n)
	}
	if g.maxTokens != nil && *g.maxTokens < 1 {
		return errorf(http.StatusBadRequest, "max_tokens: must be at least 1, got %d", *g.maxTokens)
	}
	if g.minTokens < 0 {
		return errorf(http.StatusBadRequest, "min_tokens: must be non-negative, got %d", g.minTokens)
	}
	if g.maxTokens != nil && g.minTokens > *g.maxTokens {
		return errorf(http.StatusBadRequest, "min_tokens: must be less than or equal to max_tokens=%d, got %d", *g.maxTokens, g.minTokens)
	}
	return nil
}

// promptTokens reads an OpenAI prompt or input: a string, an array of
// strings, an array of token ids, or an array of token id arrays. Each
// element of an array is its own prompt.
func promptTokens(raw json.RawMessage) ([][]uint32, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, errors.New("required")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return [][]uint32{tokenize(nil, s)}, nil
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil && len(ss) > 0 {
		out := make([][]uint32, len(ss))
		for i, s := range ss {
			out[i] = tokenize(nil, s)
		}
		return out, nil
	}
	var ids []uint32
	if json.Unmarshal(raw, &ids) == nil && len(ids) > 0 {
		return [][]uint32{ids}, nil
	}
	var idss [][]uint32
	if json.Unmarshal(raw, &idss) == nil && len(idss) > 0 {
		return idss, nil
	}
	return nil, errors.New("must be a non-empty string, array of strings, array of token ids or array of token id arrays")
}

// Embeddings do not go through the scheduler: pooling models are cheap and
// nothing in the gateway measures their timing.
func (e *Engine) embeddings(w http.ResponseWriter, r *http.Request) error {
	var req embeddingRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	model, err := e.model(req.Model)
	if err != nil {
		return err
	}
	inputs, err := promptTokens(req.Input)
	if err != nil {
		return errorf(http.StatusBadRequest, "input: %v", err)
	}
	if req.EncodingFormat != "" && req.EncodingFormat != "float" && req.EncodingFormat != "base64" {
		return errorf(http.StatusBadRequest, "encoding_format: must be float or base64, got %q", req.EncodingFormat)
	}
	plan, err := e.headerFaults(r)
	if err != nil {
		return err
	}
	if plan != nil && plan.status != 0 {
		return errorf(plan.status, "%s", faultMessage(plan.status))
	}
	rng := e.requestRand()
	resp := embeddingResponse{
		ID: "embd-" + requestID(r, rng), Object: "list", Created: time.Now().Unix(), Model: model,
		Data: make([]embedding, len(inputs)),
	}
	for i, ids := range inputs {
		vec := embed(e.cfg.Seed, ids)
		d := embedding{Index: i, Object: "embedding", Embedding: vec}
		if req.EncodingFormat == "base64" {
			buf := make([]byte, 4*len(vec))
			for j, f := range vec {
				binary.LittleEndian.PutUint32(buf[4*j:], math.Float32bits(f))
			}
			d.Embedding = base64.StdEncoding.EncodeToString(buf)
		}
		resp.Data[i] = d
		resp.Usage.PromptTokens += len(ids)
	}
	resp.Usage.TotalTokens = resp.Usage.PromptTokens
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// embedDim is small on purpose: the sim's vectors carry no meaning, only
// shape and determinism.
const embedDim = 16

// embed returns a deterministic unit vector for a token sequence.
func embed(seed int64, ids []uint32) []float32 {
	h := fnv.New64a()
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], uint64(seed))
	h.Write(buf[:])
	for _, id := range ids {
		binary.LittleEndian.PutUint32(buf[:4], id)
		h.Write(buf[:4])
	}
	x := h.Sum64()
	vec := make([]float32, embedDim)
	var norm float64
	for i := range vec {
		// xorshift64*: cheap, deterministic, spreads the hash over the vector.
		x ^= x >> 12
		x ^= x << 25
		x ^= x >> 27
		v := float64(int64(x*2685821657736338717)) / math.MaxInt64
		vec[i] = float32(v)
		norm += v * v
	}
	norm = math.Sqrt(norm)
	for i := range vec {
		vec[i] = float32(float64(vec[i]) / norm)
	}
	return vec
}

func (e *Engine) listModels(w http.ResponseWriter, _ *http.Request) error {
	list := modelList{Object: "list", Data: make([]modelCard, len(e.cfg.Models))}
	for i, m := range e.cfg.Models {
		list.Data[i] = modelCard{ID: m, Object: "model", Created: e.created.Unix(), OwnedBy: "vllm", Root: m}
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// requestID is the hex part of a response id. Like vLLM, a client's
// X-Request-Id is used as is.
// The random draw happens either way, so the rest of the request's draws
// (output length, words, faults) do not depend on the header: the same
// seed gives the same output directly and behind a gateway.
func requestID(r *http.Request, rng interface{ Uint64() uint64 }) string {
	generated := fmt.Sprintf("%016x%016x", rng.Uint64(), rng.Uint64())
	if id := r.Header.Get("X-Request-Id"); id != "" {
		return id
	}
	return generated
}

// Response bodies, field order as vLLM writes them.
type (
	usage struct {
		PromptTokens        int            `json:"prompt_tokens"`
		TotalTokens         int            `json:"total_tokens"`
		CompletionTokens    int            `json:"completion_tokens"`
		PromptTokensDetails *promptDetails `json:"prompt_tokens_details"`
	}
	promptDetails struct {
		CachedTokens int `json:"cached_tokens"`
	}
	chatResponse struct {
		ID             string       `json:"id"`
		Object         string       `json:"object"`
		Created        int64        `json:"created"`
		Model          string       `json:"model"`
		Choices        []chatChoice `json:"choices"`
		Usage          *usage       `json:"usage,omitempty"`
		PromptLogprobs *struct{}    `json:"prompt_logprobs"`
		// Metrics only with Config.PerRequestMetrics.
		Metrics *perRequestMetrics `json:"metrics,omitempty"`
		// Timings only as llama-server (DialectLlamaCpp).
		Timings *llamaTimings `json:"timings,omitempty"`
	}
	chatChoice struct {
		Index        int        `json:"index"`
		Message      chatMsgOut `json:"message"`
		Logprobs     *struct{}  `json:"logprobs"`
		FinishReason string     `json:"finish_reason"`
		StopReason   *string    `json:"stop_reason"`
	}
	chatMsgOut struct {
		Role             string     `json:"role"`
		ReasoningContent *string    `json:"reasoning_content"`
		Content          string     `json:"content"`
		ToolCalls        []struct{} `json:"tool_calls"`
	}
	textResponse struct {
		ID      string       `json:"id"`
		Object  string       `json:"object"`
		Created int64        `json:"created"`
		Model   string       `json:"model"`
		Choices []textChoice `json:"choices"`
		Usage   *usage       `json:"usage,omitempty"`
		// Metrics only with Config.PerRequestMetrics.
		Metrics *perRequestMetrics `json:"metrics,omitempty"`
		Timings *llamaTimings      `json:"timings,omitempty"`
	}
	textChoice struct {
		Index          int       `json:"index"`
		Text           string    `json:"text"`
		Logprobs       *struct{} `json:"logprobs"`
		FinishReason   string    `json:"finish_reason"`
		StopReason     *string   `json:"stop_reason"`
		PromptLogprobs *struct{} `json:"prompt_logprobs"`
	}
	// chunk is one streamed event of either endpoint; Choices holds the
	// endpoint's choice type and is empty, not absent, in the usage chunk.
	chunk struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		Model   string `json:"model"`
		Choices []any  `json:"choices"`
		Usage   *usage `json:"usage,omitempty"`
		// Metrics rides on the final usage chunk, with
		// Config.PerRequestMetrics.
		Metrics *chunkMetrics `json:"metrics,omitempty"`
		// Timings rides on the last event, as llama-server sends it.
		Timings *llamaTimings `json:"timings,omitempty"`
	}
	// llamaTimings is llama-server's timings object.
	llamaTimings struct {
		PromptN             int     `json:"prompt_n"`
		PromptMS            float64 `json:"prompt_ms"`
		PromptPerTokenMS    float64 `json:"prompt_per_token_ms"`
		PromptPerSecond     float64 `json:"prompt_per_second"`
		PredictedN          int     `json:"predicted_n"`
		PredictedMS         float64 `json:"predicted_ms"`
		PredictedPerTokenMS float64 `json:"predicted_per_token_ms"`
		PredictedPerSecond  float64 `json:"predicted_per_second"`
		CacheN              int     `json:"cache_n"`
	}
	chatDelta struct {
		Role    string  `json:"role,omitempty"`
		Content *string `json:"content,omitempty"`
	}
	// chatFinalChoiceDelta is vLLM's last chunk when the model stopped by
	// itself: the end-of-sequence token's empty delta with the reason.
	chatFinalChoiceDelta struct {
		Index        int       `json:"index"`
		Delta        chatDelta `json:"delta"`
		Logprobs     *struct{} `json:"logprobs"`
		FinishReason string    `json:"finish_reason"`
	}
	chatChunkChoice struct {
		Index        int       `json:"index"`
		Delta        chatDelta `json:"delta"`
		Logprobs     *struct{} `json:"logprobs"`
		FinishReason *string   `json:"finish_reason"`
	}
	chatFinalChoice struct {
		Index        int       `json:"index"`
		Delta        chatDelta `json:"delta"`
		Logprobs     *struct{} `json:"logprobs"`
		FinishReason string    `json:"finish_reason"`
		StopReason   *string   `json:"stop_reason"`
	}
	textChunkChoice struct {
		Index        int       `json:"index"`
		Text         string    `json:"text"`
		Logprobs     *struct{} `json:"logprobs"`
		FinishReason *string   `json:"finish_reason"`
	}
	textFinalChoice struct {
		Index        int       `json:"index"`
		Text         string    `json:"text"`
		Logprobs     *struct{} `json:"logprobs"`
		FinishReason string    `json:"finish_reason"`
		StopReason   *string   `json:"stop_reason"`
	}
	embeddingResponse struct {
		ID      string      `json:"id"`
		Object  string      `json:"object"`
		Created int64       `json:"created"`
		Model   string      `json:"model"`
		Data    []embedding `json:"data"`
		Usage   usage       `json:"usage"`
	}
	embedding struct {
		Index     int    `json:"index"`
		Object    string `json:"object"`
		Embedding any    `json:"embedding"` // []float32, or a base64 string
	}
	modelList struct {
		Object string      `json:"object"`
		Data   []modelCard `json:"data"`
	}
	modelCard struct {
		ID      string  `json:"id"`
		Object  string  `json:"object"`
		Created int64   `json:"created"`
		OwnedBy string  `json:"owned_by"`
		Root    string  `json:"root"`
		Parent  *string `json:"parent"`
	}
)
