package overhead

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// TagHeader carries the arm and round of a request through every proxy to
// the mock, which counts what it sent per tag.
const TagHeader = "X-Overhead-Tag"

// MockOptions shape the mock engine's streams.
type MockOptions struct {
	Frames int           // content frames (one token each) per stream
	TTFT   time.Duration // before the first content frame
	ITL    time.Duration // between content frames
}

// Sent is what the mock answered under one tag.
type Sent struct {
	Requests         int64 `json:"requests"`
	Streams          int64 `json:"streams"`
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	Frames           int64 `json:"frames"` // SSE events written, [DONE] included
}

// Mock is an OpenAI-compatible engine that answers at once (JSON) or with
// a paced stream, and reports its usage exactly: prompt_tokens is the
// request body's length / 4, completion_tokens the frames it sends.
type Mock struct {
	opt  MockOptions
	mu   sync.Mutex
	sent map[string]*Sent
}

// NewMock returns a mock engine.
func NewMock(o MockOptions) *Mock { return &Mock{opt: o, sent: map[string]*Sent{}} }

// jsonCompletion is the non-streamed answer; its completion is always
// jsonCompletionTokens tokens.
const jsonCompletionTokens = 32

const jsonBodyFmt = `{"id":"chatcmpl-overhead","object":"chat.completion","created":1764400000,"model":"bench-model",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"The quick brown fox jumps over the lazy dog. ` +
	`The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog."},"logprobs":null,"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`

const (
	frameContent = `data: {"id":"chatcmpl-overhead","object":"chat.completion.chunk","created":1764400000,"model":"bench-model","choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null}]}` + "\n\n"
	frameFinish  = `data: {"id":"chatcmpl-overhead","object":"chat.completion.chunk","created":1764400000,"model":"bench-model","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}` + "\n\n"
	frameUsage   = `data: {"id":"chatcmpl-overhead","object":"chat.completion.chunk","created":1764400000,"model":"bench-model","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}` + "\n\n"
	frameDone    = "data: [DONE]\n\n"
)

// StreamEvents is how many SSE events a whole stream has: the content
// frames, the finish frame, the usage frame and [DONE].
func (o MockOptions) StreamEvents() int { return o.Frames + 3 }

// Handler serves /v1/chat/completions, /healthz and GET /stats?tag=T.
func (m *Mock) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(m.Sent(r.URL.Query().Get("tag")))
	})
	mux.HandleFunc("POST /v1/chat/completions", m.complete)
	return mux
}

// Sent returns the counts of one tag.
func (m *Mock) Sent(tag string) Sent {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.sent[tag]; s != nil {
		return *s
	}
	return Sent{}
}

func (m *Mock) add(tag string, stream bool, prompt, completion, frames int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sent[tag]
	if s == nil {
		s = &Sent{}
		m.sent[tag] = s
	}
	s.Requests++
	if stream {
		s.Streams++
	}
	s.PromptTokens += prompt
	s.CompletionTokens += completion
	s.Frames += frames
}

func (m *Mock) complete(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var req struct {
		Stream bool `json:"stream"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, `{"error":{"message":"bad JSON","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	tag := r.Header.Get(TagHeader)
	prompt := int64(len(body) / 4)
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_, err := io.WriteString(w, jsonBody(prompt))
		if err == nil {
			m.add(tag, false, prompt, jsonCompletionTokens, 0)
		}
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	rc := http.NewResponseController(w)
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	ctx := r.Context()
	t := time.NewTimer(m.opt.TTFT)
	defer t.Stop()
	var frames int64
	write := func(s string) bool {
		if _, err := io.WriteString(w, s); err != nil {
			return false
		}
		if rc.Flush() != nil {
			return false
		}
		frames++
		return true
	}
	// The pacing is the simulated engine's decode, not synchronisation.
	for i := range m.opt.Frames {
		if i > 0 {
			t.Reset(m.opt.ITL)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !write(frameContent) {
			return
		}
	}
	completion := int64(m.opt.Frames)
	if !write(frameFinish) || !write(usageFrame(prompt, completion)) || !write(frameDone) {
		return
	}
	m.add(tag, true, prompt, completion, frames)
}

func jsonBody(prompt int64) string {
	return fmtUsage(jsonBodyFmt, prompt, jsonCompletionTokens)
}

func usageFrame(prompt, completion int64) string { return fmtUsage(frameUsage, prompt, completion) }

// fmtUsage fills the three %d of a template without fmt's reflection.
func fmtUsage(tmpl string, prompt, completion int64) string {
	vals := [3]int64{prompt, completion, prompt + completion}
	out := make([]byte, 0, len(tmpl)+24)
	n := 0
	for i := 0; i < len(tmpl); i++ {
		if tmpl[i] == '%' && i+1 < len(tmpl) && tmpl[i+1] == 'd' && n < 3 {
			out = strconv.AppendInt(out, vals[n], 10)
			n++
			i++
			continue
		}
		out = append(out, tmpl[i])
	}
	return string(out)
}
