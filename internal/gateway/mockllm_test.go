package gateway

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// The third-party upstream of the fault table: @dwmkerr/mock-llm, an
// OpenAI mock written by someone else (pinned in tools/mockllm's
// package-lock.json, installed by scripts/test.sh with npm ci), run with
// node on a loopback port. It never sends usage, in a stream or not, so
// its rows show the tokenizer's counts; its error rules give an
// OpenAI-shaped 429, a TGI-shaped 503 and its own 500.

const (
	mockLLMDir  = "../../tools/mockllm"
	mockLLMMain = "node_modules/@dwmkerr/mock-llm/dist/main.js"
	// mockAnswer is the mock's one answer, streamed in mockChunk-character
	// chunks.
	mockAnswer = "Returns are accepted within thirty days of delivery, with the receipt and the original packaging."
	mockChunk  = 8 // the config's streaming.chunkSize
)

// mockLLMConfig is the mock's rule file: the answer by default, an error
// when the last user message names one. Rules are matched in order, the
// last match wins.
const mockLLMConfig = `streaming:
  chunkSize: 8 # mockChunk
  chunkIntervalMs: 5
rules:
  - path: "/v1/chat/completions"
    method: "POST"
    match: "@"
    response:
      status: 200
      content: |
        {"id": "chatcmpl-mock", "object": "chat.completion", "created": 1767225600,
         "model": "{{jmes request body.model}}",
         "choices": [{"index": 0, "message": {"role": "assistant", "content": "` + mockAnswer + `"}, "finish_reason": "stop"}]}
  - path: "/v1/chat/completions"
    method: "POST"
    match: "contains(body.messages[-1].content, 'fault:429-openai')"
    response:
      status: 429
      content: |
        {"error": {"message": "Rate limit reached for requests per minute.", "type": "requests", "param": null, "code": "rate_limit_exceeded"}}
  - path: "/v1/chat/completions"
    method: "POST"
    match: "contains(body.messages[-1].content, 'fault:503-tgi')"
    response:
      status: 503
      content: |
        {"error": "Model is overloaded", "error_type": "overloaded"}
  - path: "/v1/chat/completions"
    method: "POST"
    match: "contains(body.messages[-1].content, 'fault:500-mock')"
    response:
      status: 200
      # Not JSON: the mock's own error handler answers 500 in its shape.
      content: "not json"
`

// mockLLM runs the mock until the test ends and returns its base URL
// (…/v1), or why it cannot: node or the installed package is missing.
func mockLLM(t *testing.T) (url, why string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		return "", "mock-llm rows need node (20 or later): run scripts/test.sh or npm ci in tools/mockllm"
	}
	main, err := filepath.Abs(filepath.Join(mockLLMDir, mockLLMMain))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(main); err != nil {
		return "", "mock-llm rows need tools/mockllm/" + mockLLMMain + ": run scripts/test.sh or npm ci in tools/mockllm"
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "mock-llm.yaml")
	if err := os.WriteFile(cfg, []byte(mockLLMConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	var out syncBuffer
	cmd := exec.Command(node, main, "--config", cfg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOST=127.0.0.1", "PORT="+strconv.Itoa(port))
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start mock-llm: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("mock-llm output:\n%s", out.String())
		}
	})

	base := "http://127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("mock-llm exited before answering:\n%s", out.String())
		default:
		}
		if resp, err := http.Get(base + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base + "/v1", ""
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("mock-llm not answering on %s within 30s:\n%s", base, out.String())
		}
		time.Sleep(50 * time.Millisecond) // polling with a deadline
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// cutProxy is a TCP hop in front of an upstream that lets the first
// events of each response through — counted as the blank lines that end
// SSE events — and then resets the connection (RST), or stalls it: holds
// it open and silent until the client gives up or the test ends.
type cutProxy struct {
	target string // host:port
	after  int    // events let through
	stall  bool
	ln     net.Listener
	done   chan struct{}
	wg     sync.WaitGroup
}

// startCutProxy returns the proxy's base URL (…/v1) for an upstream URL.
func startCutProxy(t *testing.T, upstream string, after int, stall bool) string {
	t.Helper()
	target := strings.TrimSuffix(strings.TrimPrefix(upstream, "http://"), "/v1")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{target: target, after: after, stall: stall, ln: ln, done: make(chan struct{})}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		close(p.done)
		ln.Close()
		p.wg.Wait()
	})
	return "http://" + ln.Addr().String() + "/v1"
}

func (p *cutProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.handle(c.(*net.TCPConn))
		}()
	}
}

func (p *cutProxy) handle(c *net.TCPConn) {
	defer c.Close()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.SetLinger(0)
		return
	}
	defer up.Close()
	reqDone := make(chan struct{})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		_, _ = io.Copy(up, c) // the request; ends when either side closes
		close(reqDone)
	}()
	buf := make([]byte, 32<<10)
	events, prev := 0, byte(0)
	for {
		n, err := up.Read(buf)
		cut := -1
		for i := 0; i < n && cut < 0; i++ {
			if buf[i] == '\n' && prev == '\n' {
				events++
				if events == p.after {
					cut = i + 1
				}
			}
			prev = buf[i]
		}
		if cut >= 0 {
			_, _ = c.Write(buf[:cut])
			if p.stall {
				// Silent until the gateway's idle timeout closes its side
				// (the request copy above then ends) or the test ends.
				select {
				case <-reqDone:
				case <-p.done:
				}
				return
			}
			_ = c.SetLinger(0) // close sends RST
			return
		}
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				_ = c.SetLinger(0)
			}
			return
		}
	}
}

// mockGateway is a gateway whose model is served by the mock through url.
func mockGateway(t *testing.T, url string, retry bool) *testGateway {
	t.Helper()
	cfg := faultConfig(&faultSim{URLs: [2]string{url, url}}, retry)
	for i := range cfg.Upstreams {
		cfg.Upstreams[i].Name = "mock-llm-" + string(rune('a'+i))
		cfg.Upstreams[i].Engine = "openai"
	}
	if !retry {
		cfg.Upstreams = cfg.Upstreams[:1]
		cfg.Upstreams[0].Name = "mock-llm"
	}
	tg := newTestGateway(t, cfg)
	tg.waitCounter(t, simModel)
	return tg
}

// mockTokens is what the model's tokenizer counts for the mock's first
// chunks chunks of output (all of it when chunks < 0).
func mockTokens(t *testing.T, tg *testGateway, chunks int) int64 {
	t.Helper()
	s := mockAnswer
	if chunks >= 0 && chunks*mockChunk < len(s) {
		s = s[:chunks*mockChunk]
	}
	return int64(tg.G.counters.get(simModel).TextTokens(s))
}

// mockChunks is how many content chunks the mock streams for its answer.
func mockChunks() int { return (len(mockAnswer) + mockChunk - 1) / mockChunk }

// mockRows are the fault table's rows against mock-llm at url: its
// answers without usage, its error rules, and two faults made by a TCP hop
// in front of it (a reset and a stall after the first events).
func mockRows(t *testing.T, url string) []faultRow {
	t.Helper()
	direct := mockGateway(t, url, false)
	retry := mockGateway(t, url, true)
	reset := mockGateway(t, startCutProxy(t, url, 4, false), false)
	stall := mockGateway(t, startCutProxy(t, url, 3, true), false)
	tok := func(n int64) faultAttempt { return faultAttempt{200, record.ErrNone, n, record.SourceTokenizer} }
	status := func(code int) faultAttempt { return faultAttempt{code, record.ErrUpstreamStatus, 0, record.SourceNone} }
	full := mockTokens(t, direct, -1)
	const (
		text503 = "Model is overloaded (overloaded)"
		text500 = "Unexpected token" // the mock's JSON.parse error, whose wording differs between node versions
	)
	rows := []faultRow{
		{fault: "none: an answer without `usage`", gw: direct, status: 200, attempts: []faultAttempt{tok(full)}},
		{fault: "none: a stream without `usage`", gw: direct, stream: true, status: 200, chunks: mockChunks(), attempts: []faultAttempt{tok(full)}},

		{fault: "429, OpenAI-shaped body", content: "fault:429-openai", gw: direct, status: 429, engineType: "requests",
			attempts: []faultAttempt{status(429)}},
		{fault: "429, OpenAI-shaped body, on every upstream", content: "fault:429-openai", gw: retry, retry: true, status: 429, engineType: "requests",
			attempts: []faultAttempt{status(429), status(429)}},
		{fault: "429, OpenAI-shaped error event", content: "fault:429-openai", gw: direct, stream: true, status: 200, midStream: true, engineType: "requests",
			attempts: []faultAttempt{status(502)}},

		{fault: "503, TGI-shaped body", content: "fault:503-tgi", gw: direct, status: 503, wrapType: "server_error", engineText: text503,
			attempts: []faultAttempt{status(503)}},
		{fault: "503, TGI-shaped body, on every upstream", content: "fault:503-tgi", gw: retry, retry: true, status: 503, wrapType: "server_error", engineText: text503,
			attempts: []faultAttempt{status(503), status(503)}},
		{fault: "503, TGI-shaped error event", content: "fault:503-tgi", gw: direct, stream: true, status: 200, midStream: true, wrapType: "server_error", engineText: text503,
			attempts: []faultAttempt{status(502)}},

		{fault: "500 from the mock's own error handler (`{\"error\":\"SyntaxError\",\"message\":…}`)", content: "fault:500-mock", gw: direct, status: 500,
			wrapType: "server_error", engineText: text500, attempts: []faultAttempt{status(500)}},
		{fault: "500 from the mock's own error handler (`{\"error\":\"SyntaxError\",\"message\":…}`)", content: "fault:500-mock", gw: direct, stream: true, status: 500,
			wrapType: "server_error", engineText: text500, attempts: []faultAttempt{status(500)}},

		{fault: "reset mid-stream (a TCP hop sends RST after 4 events)", gw: reset, stream: true, status: 200, midStream: true, chunks: 4, code: record.ErrUpstreamReset,
			attempts: []faultAttempt{{502, record.ErrUpstreamReset, mockTokens(t, reset, 4), record.SourceTokenizer}}},
		{fault: "stall mid-stream (a TCP hop goes silent after 3 events)", gw: stall, stream: true, status: 200, midStream: true, chunks: 3, code: record.ErrIdleTimeout,
			attempts: []faultAttempt{{504, record.ErrIdleTimeout, mockTokens(t, stall, 3), record.SourceTokenizer}}},
	}
	for i := range rows {
		rows[i].upstream = upMock
	}
	return rows
}

// The http stub stands for what sits in front of an engine or for engines
// the other two upstreams do not imitate: it answers every request with
// the error its stubHeader names, in a shape mock-llm cannot produce (not
// JSON, no body) or with a Retry-After header.
const stubHeader = "X-Test-Stub"

type stubAnswer struct {
	status      int
	contentType string
	body        string
	retryAfter  string
	chunked     bool // sent in two writes, without a Content-Length (a large body is anyway)
}

// bigAnswer is a whole chat completion one byte longer than the stub
// gateway's limits.max_response_bytes.
var bigAnswer = func() string {
	const head, tail = `{"id":"c1","object":"chat.completion","created":1767225600,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"`,
		`"},"finish_reason":"stop"}]}`
	return head + strings.Repeat("a", stubMaxResponse+1-len(head)-len(tail)) + tail
}()

// stubMaxResponse is the stub gateway's limits.max_response_bytes.
const stubMaxResponse = 64 << 10

var stubAnswers = map[string]stubAnswer{
	"html-502": {http.StatusBadGateway, "text/html", "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx/1.24.0</center>\r\n</body>\r\n</html>\r\n", "", false},
	"text-503": {http.StatusServiceUnavailable, "text/plain; charset=utf-8", "upstream overloaded, try again later\n", "7", false},
	"tgi-429":  {http.StatusTooManyRequests, "application/json", `{"error":"Model is overloaded","error_type":"overloaded"}`, "2", false},
	"openai-429": {http.StatusTooManyRequests, "application/json",
		`{"error":{"message":"Rate limit reached for requests","type":"requests","param":null,"code":"rate_limit_exceeded"}}`, "3", false},
	"empty-500": {http.StatusInternalServerError, "", "", "", false},
	"key-401":   {http.StatusUnauthorized, "text/plain", "Incorrect API key provided: sk-live-4f9a8b7c6d5e4f3a. Find your key at https://example.com/keys.", "", false},
	// TGI ends a stream that fails during generation with an error event.
	"tgi-event": {http.StatusOK, "text/event-stream",
		`data: {"id":"c1","object":"chat.completion.chunk","created":1767225600,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Returns"},"finish_reason":null}]}` + "\n\n" +
			`data: {"error":"Request failed during generation: Server error: CUDA out of memory","error_type":"generation"}` + "\n\n", "", false},
	"big-200":         {http.StatusOK, "application/json", bigAnswer, "", false},
	"big-200-chunked": {http.StatusOK, "application/json", bigAnswer, "", true},
	"ok-200":          {http.StatusOK, "application/json", nonStreamBody, "", false},
}

// stubGateway is a gateway whose one upstream, "stub", is the http stub.
func stubGateway(t *testing.T) *testGateway {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		a, ok := stubAnswers[r.Header.Get(stubHeader)]
		if !ok {
			http.Error(w, "unknown stub answer", http.StatusTeapot)
			return
		}
		if a.contentType != "" {
			w.Header().Set("Content-Type", a.contentType)
		}
		if a.retryAfter != "" {
			w.Header().Set("Retry-After", a.retryAfter)
		}
		if !a.chunked && a.contentType != "text/event-stream" {
			w.Header().Set("Content-Length", strconv.Itoa(len(a.body)))
		}
		w.WriteHeader(a.status)
		if a.chunked {
			_, _ = io.WriteString(w, a.body[:len(a.body)/2])
			_ = http.NewResponseController(w).Flush()
			a.body = a.body[len(a.body)/2:]
		}
		_, _ = io.WriteString(w, a.body)
	}))
	t.Cleanup(srv.Close)
	cfg := faultConfig(&faultSim{URLs: [2]string{srv.URL + "/v1", srv.URL + "/v1"}}, false)
	cfg.Upstreams = cfg.Upstreams[:1]
	cfg.Upstreams[0].Name = "stub"
	cfg.Limits.MaxResponseBytes, cfg.Limits.MaxBufferedBytes = stubMaxResponse, 2*stubMaxResponse
	gw := newTestGateway(t, cfg)
	gw.waitCounter(t, simModel)
	return gw
}

func stubRows(t *testing.T) []faultRow {
	t.Helper()
	gw := stubGateway(t)
	status := func(code int) []faultAttempt {
		return []faultAttempt{{code, record.ErrUpstreamStatus, 0, record.SourceNone}}
	}
	rows := []faultRow{
		{fault: "502, a proxy's HTML page", stub: "html-502", status: 502, wrapType: "server_error",
			engineText: "502 Bad Gateway 502 Bad Gateway nginx/1.24.0", attempts: status(502)},
		{fault: "503, plain text, `Retry-After`", stub: "text-503", stream: true, status: 503, wrapType: "server_error",
			engineText: "upstream overloaded, try again later", retryAfter: "7", attempts: status(503)},
		{fault: "429, TGI-shaped body, `Retry-After`", stub: "tgi-429", status: 429, wrapType: "requests",
			engineText: "Model is overloaded (overloaded)", retryAfter: "2", attempts: status(429)},
		{fault: "429, OpenAI-shaped body, `Retry-After`", stub: "openai-429", stream: true, status: 429, engineType: "requests",
			retryAfter: "3", attempts: status(429)},
		{fault: "500, empty body", stub: "empty-500", status: 500, wrapType: "server_error",
			engineText: "500 Internal Server Error with an empty body", attempts: status(500)},
		{fault: "401, plain text echoing a key", stub: "key-401", status: 401, wrapType: "invalid_request_error",
			engineText: "Incorrect API key provided: [redacted]. Find your key at https://example.com/keys.", attempts: status(401)},
		{fault: "TGI-shaped error event after a chunk", stub: "tgi-event", stream: true, status: 200, midStream: true, chunks: 1, wrapType: "server_error",
			engineText: "Request failed during generation: Server error: CUDA out of memory (generation)",
			attempts:   []faultAttempt{{502, record.ErrUpstreamStatus, 1, record.SourceTokenizer}}},
		{fault: "200, an answer over `limits.max_response_bytes` (64 KiB here), its length announced", stub: "big-200", status: 502, code: record.ErrMalformed,
			attempts: []faultAttempt{{502, record.ErrMalformed, 0, record.SourceNone}}},
		{fault: "200, an answer over `limits.max_response_bytes` (64 KiB here), chunked", stub: "big-200-chunked", status: 502, code: record.ErrMalformed,
			attempts: []faultAttempt{{502, record.ErrMalformed, 0, record.SourceNone}}},
		{fault: "200 while other answers hold `limits.max_buffered_bytes`", stub: "ok-200", holdBuffers: true, status: 503, code: record.ErrBufferFull, retryAfter: "1",
			attempts: []faultAttempt{{503, record.ErrBufferFull, 0, record.SourceNone}}},
	}
	for i := range rows {
		rows[i].upstream, rows[i].gw = upStub, gw
	}
	return rows
}

// TestEngineErrorSDK: through OpenAI's own Go SDK, a re-wrapped engine
// error reads as an API error with the engine's words, its type and
// Retry-After, in a stream and not.
func TestEngineErrorSDK(t *testing.T) {
	tg := stubGateway(t)
	client := openai.NewClient(option.WithBaseURL(tg.URL+"/v1"), option.WithAPIKey("sk-sdk-client-key"), option.WithMaxRetries(0))
	params := openai.ChatCompletionNewParams{Model: simModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me about returns.")}}

	for _, tc := range []struct {
		stub, typ, words, retryAfter string
		status                       int
	}{
		{"tgi-429", "requests", "Model is overloaded (overloaded)", "2", 429},
		{"html-502", "server_error", "502 Bad Gateway nginx/1.24.0", "", 502},
		{"text-503", "server_error", "upstream overloaded, try again later", "7", 503},
	} {
		_, err := client.Chat.Completions.New(t.Context(), params, option.WithHeader(stubHeader, tc.stub))
		var ae *openai.Error
		if !errors.As(err, &ae) {
			t.Fatalf("%s: %v, want an API error", tc.stub, err)
		}
		if ae.StatusCode != tc.status || ae.Type != tc.typ || ae.Code != record.ErrUpstreamStatus || !strings.Contains(ae.Message, tc.words) {
			t.Errorf("%s: SDK error %d %q %q %q; want %d %q %q and the words %q", tc.stub, ae.StatusCode, ae.Type, ae.Code, ae.Message, tc.status, tc.typ, record.ErrUpstreamStatus, tc.words)
		}
		if got := ae.Response.Header.Get("Retry-After"); got != tc.retryAfter {
			t.Errorf("%s: Retry-After %q, want %q", tc.stub, got, tc.retryAfter)
		}
		tg.next(t)
	}

	stream := client.Chat.Completions.NewStreaming(t.Context(), params, option.WithHeader(stubHeader, "tgi-event"))
	var got strings.Builder
	for stream.Next() {
		if c := stream.Current(); len(c.Choices) > 0 {
			got.WriteString(c.Choices[0].Delta.Content)
		}
	}
	if err := stream.Err(); err == nil || !strings.Contains(err.Error(), "CUDA out of memory (generation)") || got.String() != "Returns" {
		t.Errorf("stream: %q then %v; want the chunk, then an error with the engine's words", got.String(), err)
	}
	stream.Close()
	if r := tg.next(t); r.Status != http.StatusBadGateway || r.ErrorType != record.ErrUpstreamStatus {
		t.Errorf("stream recorded %d %q", r.Status, r.ErrorType)
	}
}
