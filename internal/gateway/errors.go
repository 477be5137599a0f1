package gateway

import (
	"bytes"
	"encoding/json"
	"html"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// apiError is an error the gateway answers itself, rendered in the OpenAI
// error shape so every SDK surfaces it the way it surfaces OpenAI's own.
type apiError struct {
	Status  int
	Type    string // OpenAI error type, e.g. invalid_request_error
	Code    string // the machine-readable code on the wire
	Kind    string // the Record's error type (record.Err*): one vocabulary, set where the error is made
	Param   string // the request field at fault, if any
	Message string
}

func (e *apiError) Error() string { return e.Message }

type errorBody struct {
	Error errorObject `json:"error"`
}

type errorObject struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *apiError) body() []byte {
	o := errorObject{Message: e.Message, Type: e.Type}
	if e.Param != "" {
		o.Param = &e.Param
	}
	if e.Code != "" {
		o.Code = &e.Code
	}
	b, _ := json.Marshal(errorBody{Error: o})
	return b
}

// writeError is the one adapter from a gateway error to the wire: in
// OpenAI's shape, or Anthropic's on its API's paths (anthropicErrors).
func writeError(w http.ResponseWriter, e *apiError) int {
	b := e.body()
	if _, ok := w.(anthropicErrors); ok {
		b = e.anthropicBody()
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(e.Status)
	_, _ = w.Write(b)
	return len(b)
}

// streamError is the event that ends a stream the gateway has to cut
// after the client already received 200 and some chunks: OpenAI's SDKs
// raise it as an API error instead of silently returning a short answer.
func streamError(e *apiError) []byte {
	b := e.body()
	out := make([]byte, 0, len(b)+8)
	out = append(out, "data: "...)
	out = append(out, b...)
	return append(out, "\n\n"...)
}

func badRequest(param, msg string) *apiError {
	return &apiError{Kind: record.ErrInvalidRequest, Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_request", Param: param, Message: msg}
}

// maxEngineText bounds how much of an engine's error text a re-wrapped
// error carries: enough for "context length exceeded" or an nginx title,
// not a whole HTML page.
const maxEngineText = 300

// engineError re-wraps an engine's error answer (status >= 400) that is
// not in OpenAI's shape — vLLM's flat {"object":"error",…}, TGI's
// {"error":"…","error_type":…}, an HTML page from a proxy, plain text, an
// empty body — into an OpenAI-style error with the same status, so SDKs
// surface the engine's words instead of a parse failure or an empty
// message. It returns nil for a body already in OpenAI's shape
// ({"error":{"message":…}}), which is relayed unchanged. secrets (the
// upstream's key, the client's credential) are cut out of the text.
func engineError(status int, body []byte, upstream string, secrets ...string) *apiError {
	if openAIShaped(body) {
		return nil
	}
	typ := "server_error"
	switch {
	case status == http.StatusTooManyRequests:
		typ = "requests" // OpenAI's type for rate limits, as the gateway's own 429s
	case status < 500:
		typ = "invalid_request_error"
	}
	msg := "upstream " + upstream + " answered " + strconv.Itoa(status)
	if st := http.StatusText(status); st != "" {
		msg += " " + st
	}
	return &apiError{Kind: record.ErrUpstreamStatus, Status: status, Type: typ, Code: record.ErrUpstreamStatus, Message: withEngineText(msg, body, secrets)}
}

// engineEventError is engineError for an error event in a stream (TGI
// sends {"error":"…","error_type":…} events): nil when the event is
// already OpenAI-shaped, else the event that replaces it.
func engineEventError(data []byte, upstream string, secrets ...string) *apiError {
	if openAIShaped(data) {
		return nil
	}
	msg := withEngineText("upstream "+upstream+" sent an error event", data, secrets)
	return &apiError{Kind: record.ErrUpstreamStatus, Status: http.StatusBadGateway, Type: "server_error", Code: record.ErrUpstreamStatus, Message: msg}
}

func withEngineText(msg string, body []byte, secrets []string) string {
	if text := bound(redact(engineText(body), secrets)); text != "" {
		return msg + ": " + text
	}
	return msg + " with an empty body"
}

// openAIShaped says whether body is {"error":{"message":"…",…}}.
func openAIShaped(body []byte) bool {
	var v struct {
		Error *struct {
			Message *string `json:"message"`
		} `json:"error"`
	}
	return json.Unmarshal(body, &v) == nil && v.Error != nil && v.Error.Message != nil
}

// maxEngineBody bounds how much of an engine's error body is read for
// its text: the message is cut to maxEngineText anyway, and a proxy's
// error page can be megabytes (the body may be up to max_response_bytes).
const maxEngineBody = 16 << 10

// engineText is the human part of an engine's error body, on one line.
func engineText(body []byte) string {
	if len(body) > maxEngineBody {
		body = body[:maxEngineBody] // not JSON any more: read as HTML or text
	}
	body = bytes.TrimSpace(body)
	var s string
	var v any
	switch {
	case len(body) == 0:
		return ""
	case json.Unmarshal(body, &v) == nil:
		s = jsonErrorText(v, body)
	case body[0] == '<':
		s = htmlText(body)
	default:
		s = string(body)
	}
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }), " ")
	return strings.ToValidUTF8(s, "\uFFFD")
}

// bound cuts s to maxEngineText bytes on a rune boundary. It runs after
// redact so that a secret is never cut into a piece redact cannot see.
func bound(s string) string {
	if len(s) > maxEngineText {
		cut := maxEngineText
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// jsonErrorText takes the message out of the error shapes engines use:
// {"message":…} (vLLM before 0.10, with "type"), {"error":"…"} (TGI with
// "error_type", Ollama), {"detail":…} (FastAPI), a bare string; any other
// JSON is kept whole (compacted).
func jsonErrorText(v any, raw []byte) string {
	if s, ok := v.(string); ok {
		return s
	}
	m, _ := v.(map[string]any)
	for _, k := range []string{"message", "error", "detail"} {
		s, ok := m[k].(string)
		if !ok || s == "" {
			continue
		}
		for _, tk := range []string{"error_type", "type"} {
			if t, ok := m[tk].(string); ok && t != "" && t != s {
				return s + " (" + t + ")"
			}
		}
		return s
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// htmlText is the text of an HTML error page (a proxy's 502 page): tags,
// scripts and styles dropped, entities decoded. Tags are matched in an
// ASCII-lowered copy of the same length, made once: strings.ToLower may
// change a string's length (invalid bytes, "İ"), which would put indexes
// found in the copy outside the original, and lowering at every tag made
// the scan quadratic.
func htmlText(b []byte) string {
	var out strings.Builder
	s, lower := string(b), asciiLower(b)
	for len(s) > 0 {
		i := strings.IndexByte(s, '<')
		if i < 0 {
			out.WriteString(s)
			break
		}
		out.WriteString(s[:i])
		out.WriteByte(' ')
		s, lower = s[i:], lower[i:]
		for _, skip := range []string{"script", "style"} {
			if strings.HasPrefix(lower, "<"+skip) {
				if j := strings.Index(lower, "</"+skip); j >= 0 {
					s, lower = s[j:], lower[j:]
				}
			}
		}
		j := strings.IndexByte(s, '>')
		if j < 0 {
			break
		}
		s, lower = s[j+1:], lower[j+1:]
	}
	return html.UnescapeString(out.String())
}

// asciiLower lowers ASCII letters only, so the result has b's length and
// every index in it is an index in b.
func asciiLower(b []byte) string {
	out := make([]byte, len(b))
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		out[i] = c
	}
	return string(out)
}

// tokenLike matches bearer tokens and OpenAI-style keys an engine or a
// proxy might echo back in an error ("Incorrect API key provided: sk-…").
var tokenLike = regexp.MustCompile(`(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}|\bsk-[A-Za-z0-9_-]{8,}`)

func redact(s string, secrets []string) string {
	for _, sec := range secrets {
		if len(sec) >= 4 {
			s = strings.ReplaceAll(s, sec, "[redacted]")
		}
	}
	return tokenLike.ReplaceAllString(s, "[redacted]")
}

// redactBody cuts secrets out of an engine's error that is relayed as the
// engine wrote it (OpenAI-shaped: "Incorrect API key provided: sk-…" is
// that shape). The replacement holds no JSON metacharacter, so a JSON
// body stays valid; a body without secrets is returned as is.
func redactBody(b []byte, secrets []string) []byte {
	for _, sec := range secrets {
		if len(sec) >= 4 && bytes.Contains(b, []byte(sec)) {
			b = bytes.ReplaceAll(b, []byte(sec), []byte("[redacted]"))
		}
	}
	if tokenLike.Match(b) {
		b = tokenLike.ReplaceAll(b, []byte("[redacted]"))
	}
	return b
}
