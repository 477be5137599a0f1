package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tollgate-dev/tollgate/internal/record"
)

func TestEngineError(t *testing.T) {
	long := strings.Repeat("overloaded ", 100)
	tests := []struct {
		name    string
		status  int
		body    string
		secrets []string
		wantNil bool   // OpenAI-shaped: relayed unchanged
		typ     string // the re-wrapping's type
		msg     string // its whole message
	}{
		{name: "OpenAI shape", status: 429, body: `{"error":{"message":"slow down","type":"requests","param":null,"code":"rate_limit_exceeded"}}`, wantNil: true},
		{name: "llama.cpp shape", status: 500, body: `{"error":{"code":500,"message":"failed to decode","type":"server_error"}}`, wantNil: true},
		{name: "vLLM flat shape", status: 400, body: `{"object":"error","message":"This model's maximum context length is 32768 tokens.","type":"BadRequestError","param":null,"code":400}`,
			typ: "invalid_request_error", msg: "upstream a answered 400 Bad Request: This model's maximum context length is 32768 tokens. (BadRequestError)"},
		{name: "TGI shape", status: 429, body: `{"error":"Model is overloaded","error_type":"overloaded"}`,
			typ: "requests", msg: "upstream a answered 429 Too Many Requests: Model is overloaded (overloaded)"},
		{name: "FastAPI detail", status: 503, body: `{"detail":"Service is starting"}`,
			typ: "server_error", msg: "upstream a answered 503 Service Unavailable: Service is starting"},
		{name: "error object without message", status: 500, body: `{"error":{"code":"boom"}}`,
			typ: "server_error", msg: `upstream a answered 500 Internal Server Error: {"error":{"code":"boom"}}`},
		{name: "other JSON kept compact", status: 502, body: "[1, 2,\n 3]",
			typ: "server_error", msg: "upstream a answered 502 Bad Gateway: [1,2,3]"},
		{name: "JSON string", status: 503, body: `"warming up"`,
			typ: "server_error", msg: "upstream a answered 503 Service Unavailable: warming up"},
		{name: "HTML page", status: 502, body: "<html><head><title>502 Bad Gateway</title><style>h1{color:red}</style><script>x<1</script></head>\n<body><h1>Bad&nbsp;Gateway &amp; more</h1></body></html>",
			typ: "server_error", msg: "upstream a answered 502 Bad Gateway: 502 Bad Gateway Bad Gateway & more"},
		{name: "plain text", status: 504, body: "  upstream\ttimed out\r\n\r\n",
			typ: "server_error", msg: "upstream a answered 504 Gateway Timeout: upstream timed out"},
		{name: "empty", status: 500, body: "", typ: "server_error", msg: "upstream a answered 500 Internal Server Error with an empty body"},
		{name: "whitespace only", status: 503, body: " \n", typ: "server_error", msg: "upstream a answered 503 Service Unavailable with an empty body"},
		{name: "unknown status", status: 599, body: "x", typ: "server_error", msg: "upstream a answered 599: x"},
		{name: "configured key and client key", status: 401, body: "bad key upstream-secret-1 from client-key-22", secrets: []string{"upstream-secret-1", "client-key-22"},
			typ: "invalid_request_error", msg: "upstream a answered 401 Unauthorized: bad key [redacted] from [redacted]"},
		{name: "key-like text", status: 401, body: "Incorrect API key provided: sk-proj-abcdef123456. Authorization: Bearer eyJhbGciOi.J9.x",
			typ: "invalid_request_error", msg: "upstream a answered 401 Unauthorized: Incorrect API key provided: [redacted]. Authorization: [redacted]"},
		{name: "bounded", status: 503, body: long, typ: "server_error",
			msg: "upstream a answered 503 Service Unavailable: " + strings.TrimSpace(long)[:maxEngineText] + "…"},
		// Redacted before it is cut: no piece of the key is left.
		{name: "secret across the bound", status: 503, body: strings.Repeat("a", maxEngineText-5) + " sk-0123456789abcdef", typ: "server_error",
			msg: "upstream a answered 503 Service Unavailable: " + strings.Repeat("a", maxEngineText-5) + " [red…"},
		{name: "invalid UTF-8", status: 500, body: "bad \xff\xfe bytes", typ: "server_error", msg: "upstream a answered 500 Internal Server Error: bad \uFFFD bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := engineError(tt.status, []byte(tt.body), "a", tt.secrets...)
			if tt.wantNil {
				if e != nil {
					t.Fatalf("an OpenAI-shaped body was re-wrapped: %+v", e)
				}
				return
			}
			if e == nil {
				t.Fatal("not re-wrapped")
			}
			if e.Status != tt.status || e.Type != tt.typ || e.Code != record.ErrUpstreamStatus || e.Message != tt.msg {
				t.Errorf("got %d %q %q\n%q\nwant %d %q %q\n%q", e.Status, e.Type, e.Code, e.Message, tt.status, tt.typ, record.ErrUpstreamStatus, tt.msg)
			}
			// The re-wrapping is itself what it stands for: OpenAI-shaped.
			if !openAIShaped(e.body()) {
				t.Errorf("re-wrapped body %s is not OpenAI-shaped", e.body())
			}
		})
	}
}

func TestEngineEventError(t *testing.T) {
	if e := engineEventError([]byte(`{"error":{"message":"x","type":"server_error"}}`), "a"); e != nil {
		t.Errorf("an OpenAI-shaped event was re-wrapped: %+v", e)
	}
	e := engineEventError([]byte(`{"error":"Request failed during generation: CUDA out of memory","error_type":"generation"}`), "a")
	want := "upstream a sent an error event: Request failed during generation: CUDA out of memory (generation)"
	if e == nil || e.Type != "server_error" || e.Code != record.ErrUpstreamStatus || e.Message != want {
		t.Errorf("got %+v, want message %q", e, want)
	}
	ev := streamError(e)
	var back errorBody
	if !strings.HasPrefix(string(ev), "data: ") || !strings.HasSuffix(string(ev), "\n\n") ||
		json.Unmarshal(ev[len("data: "):], &back) != nil || back.Error.Message != want {
		t.Errorf("event %q", ev)
	}
}

// FuzzEngineError: any engine body gives a bounded, valid UTF-8,
// OpenAI-shaped error (or is OpenAI-shaped already), never a panic.
func FuzzEngineError(f *testing.F) {
	for _, s := range []string{"", `{"error":"x","error_type":"y"}`, `{"error":{"message":"m"}}`, "<html><script>", "<a", `"s"`, "\xff", "sk-aaaaaaaaaaaa",
		"<p>\xff\xff\xff\xff</p><script>x</script>", "<p>İİİİ</p><style>a{}</style>ok"} {
		f.Add(http.StatusServiceUnavailable, s)
	}
	f.Fuzz(func(t *testing.T, status int, body string) {
		e := engineError(status, []byte(body), "u", "secret-key")
		if e == nil {
			if !openAIShaped([]byte(body)) {
				t.Fatalf("nil for a body not in OpenAI's shape: %q", body)
			}
			return
		}
		if !utf8.ValidString(e.Message) {
			t.Fatalf("message not UTF-8: %q", e.Message)
		}
		if len(e.Message) > 120+maxEngineText+len("…") {
			t.Fatalf("message of %d bytes", len(e.Message))
		}
		if !openAIShaped(e.body()) {
			t.Fatalf("body %s", e.body())
		}
	})
}

// TestHTMLTextLengthChanges: strings.ToLower changes the length of
// invalid bytes and of some letters; tag indexes found in a lowered copy
// must still fit the original (a 502 page in Latin-1 with a script used
// to panic the request's goroutine: slice bounds out of range).
func TestHTMLTextLengthChanges(t *testing.T) {
	for _, page := range []string{
		"<html><p>Serveur indisponible</p><script>var a='\xe9\xe9\xe9\xe9\xe9\xe9\xe9\xe9\xe9\xe9\xe9\xe9';</script><p>r\xe9essayez</p></html>",
		"<html><STYLE>p{content:'İİİİİİİİİİİİİİİİİİİİ'}</STYLE><p>hata</p></html>",
	} {
		got := htmlText([]byte(page))
		if strings.Contains(got, "var a") || strings.Contains(got, "p{") {
			t.Errorf("htmlText(%q) = %q: script or style kept", page, got)
		}
		if !strings.Contains(got, "hata") && !strings.Contains(got, "essayez") {
			t.Errorf("htmlText(%q) = %q: text after the script lost", page, got)
		}
	}
}

// TestEngineTextBounded: a megabyte error page is read to maxEngineBody
// only (its text is cut to maxEngineText anyway).
func TestEngineTextBounded(t *testing.T) {
	page := "<html><title>502 Bad Gateway</title>" + strings.Repeat("<div>x</div>", 100000) + "<p>END-MARK</p></html>"
	got := engineText([]byte(page))
	if !strings.HasPrefix(got, "502 Bad Gateway") || strings.Contains(got, "END-MARK") {
		t.Errorf("engineText of a %d-byte page: %.80q… (want its start only)", len(page), got)
	}
}

// TestRedactBodyKeepsJSON: an OpenAI-shaped error relayed as is loses the
// secrets it echoes and stays valid JSON in the same shape.
func TestRedactBodyKeepsJSON(t *testing.T) {
	body := []byte(`{"error":{"message":"Incorrect API key provided: sk-upstream-SECRET-4242. Authorization: Bearer abcdefgh12345678","type":"invalid_request_error"}}`)
	got := redactBody(body, []string{"sk-upstream-SECRET-4242"})
	if bytes.Contains(got, []byte("SECRET")) || bytes.Contains(got, []byte("abcdefgh12345678")) || !openAIShaped(got) {
		t.Errorf("redactBody = %s", got)
	}
	plain := []byte(`{"error":{"message":"model not found"}}`)
	if got := redactBody(plain, []string{"sk-upstream-SECRET-4242"}); &got[0] != &plain[0] {
		t.Error("a body without secrets was copied")
	}
}
