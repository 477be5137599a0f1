package gateway

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/record"
)

// identity is who a request is billed to.
type identity struct {
	UserID, KeyID, BizLine, Team string
}

// auth resolves API keys. Only SHA-256 hashes of keys are held; a lookup
// hashes the presented key and finds it in a map, so no stored secret is
// ever compared byte by byte. The map's comparison may stop at the first
// differing byte, but what it compares is the digest of the attacker's own
// guess: learning how many leading digest bytes matched a stored digest
// does not help choose a key with more of them (that is a preimage search
// on SHA-256), which is why a timing-safe compare buys nothing here. The
// API's token check (internal/web) still uses subtle.ConstantTimeCompare
// over its short list.
type auth struct {
	byHash map[string]identity
	open   bool
}

func newAuth(keys []config.Key) *auth {
	a := &auth{byHash: make(map[string]identity, len(keys)), open: len(keys) == 0}
	for _, k := range keys {
		h := k.Hash()
		a.byHash[h] = identity{UserID: k.UserID, KeyID: h[:12], BizLine: k.BizLine, Team: k.Team}
	}
	return a
}

// presentedKey reads the client's key from Authorization: Bearer, or the
// api-key / x-api-key headers some SDKs use.
func presentedKey(r *http.Request) string {
	if v := r.Header.Get("Authorization"); v != "" {
		if k, ok := strings.CutPrefix(v, "Bearer "); ok {
			return strings.TrimSpace(k)
		}
		return ""
	}
	if v := r.Header.Get("X-Api-Key"); v != "" {
		return v
	}
	return r.Header.Get("Api-Key")
}

func (a *auth) identify(r *http.Request) (identity, *apiError) {
	key := presentedKey(r)
	if a.open {
		if key == "" {
			return identity{UserID: "anonymous"}, nil
		}
		h := config.HashKey(key)
		return identity{UserID: "key-" + h[:12], KeyID: h[:12]}, nil
	}
	if key == "" {
		return identity{}, &apiError{Kind: record.ErrAuth, Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "invalid_api_key",
			Message: "Missing API key. Send it as 'Authorization: Bearer <key>' (or 'x-api-key: <key>')."}
	}
	id, ok := a.byHash[config.HashKey(key)]
	if !ok {
		return identity{}, &apiError{Kind: record.ErrAuth, Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "invalid_api_key",
			Message: "Incorrect API key provided."}
	}
	return id, nil
}

// clientRequest holds the few request fields tollgate reads; the body is
// forwarded as sent (bar the include_usage injection).
type clientRequest struct {
	Model               string          `json:"model"`
	Stream              *bool           `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	MaxTokens           *int64          `json:"max_tokens"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	Messages            json.RawMessage `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	Input               json.RawMessage `json:"input"`
	agentFields
	// system is the system prompt's text (systemText), counted and
	// hashed, never kept.
	system string
}

type streamOptions struct {
	IncludeUsage *bool `json:"include_usage"`
}

// parseRequest validates the body's shape and fills the Record's input
// features. Field-type errors name the field, as OpenAI does.
func parseRequest(body []byte, endpoint string, rec *record.Record) (*clientRequest, *apiError) {
	var cr clientRequest
	if err := json.Unmarshal(body, &cr); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			f := strings.TrimPrefix(te.Field, "agentFields.") // the embedded struct is no part of the API
			return nil, badRequest(f, fmt.Sprintf("Invalid type for '%s': expected %s, got %s.", f, jsonKind(te.Type.Kind().String()), te.Value))
		}
		return nil, badRequest("", "We could not parse the JSON body of your request: "+err.Error())
	}
	if cr.Model == "" {
		return nil, badRequest("model", "you must provide a model parameter")
	}
	if len(cr.Model) > MaxIdentifier {
		rec.Model = boundedPrefix(cr.Model, MaxIdentifier)
		return nil, badRequest("model", fmt.Sprintf("'model' is %d bytes long; the limit is %d (it starts %q)", len(cr.Model), MaxIdentifier, echo(cr.Model)))
	}
	rec.Model = cr.Model
	rec.Stream = cr.Stream != nil && *cr.Stream
	if endpoint == "embeddings" && rec.Stream {
		return nil, badRequest("stream", "embeddings cannot be streamed")
	}
	rec.IncludeUsage = cr.StreamOptions != nil && cr.StreamOptions.IncludeUsage != nil && *cr.StreamOptions.IncludeUsage
	rec.MaxTokens = cr.MaxCompletionTokens
	if rec.MaxTokens == nil {
		rec.MaxTokens = cr.MaxTokens
	}
	rec.Temperature, rec.TopP = cr.Temperature, cr.TopP

	prompt := cr.Messages
	switch endpoint {
	case "chat":
		if len(cr.Messages) == 0 || cr.Messages[0] != '[' {
			return nil, badRequest("messages", "'messages' must be a non-empty array")
		}
		var msgs []json.RawMessage
		if err := json.Unmarshal(cr.Messages, &msgs); err != nil || len(msgs) == 0 {
			return nil, badRequest("messages", "'messages' must be a non-empty array")
		}
		rec.Messages = len(msgs)
	case "completions":
		prompt = cr.Prompt
		if len(prompt) == 0 {
			return nil, badRequest("prompt", "you must provide a prompt")
		}
	case "embeddings":
		prompt = cr.Input
		if len(prompt) == 0 {
			return nil, badRequest("input", "you must provide an input")
		}
	case endpointResponses, endpointMessages, endpointCountTokens:
		var e *apiError
		if prompt, e = agentRequest(endpoint, &cr, rec); e != nil {
			return nil, e
		}
	}
	rec.EndUser = cr.endUser()
	cr.system = systemText(endpoint, &cr)
	setSystem(rec, cr.system)
	// The prompt is identified by hash and size only: its text is never kept.
	sum := sha256.Sum256(prompt)
	rec.PromptSHA256 = hex.EncodeToString(sum[:])
	rec.PromptBytes = int64(len(prompt))
	rec.RequestBytes = int64(len(body))
	return &cr, nil
}

func jsonKind(goKind string) string {
	switch goKind {
	case "bool":
		return "a boolean"
	case "string":
		return "a string"
	case "slice", "array":
		return "an array"
	case "struct", "map":
		return "an object"
	default:
		return "a number"
	}
}

// withIncludeUsage returns the body with stream_options.include_usage set,
// so the engine reports usage even when the client did not ask for it.
// The common case (no stream_options) is spliced in place, keeping every
// other byte as the client sent it.
func withIncludeUsage(body []byte, cr *clientRequest) ([]byte, error) {
	if cr.StreamOptions == nil {
		i := bytes.IndexByte(body, '{')
		if i < 0 {
			return nil, errors.New("body is not an object")
		}
		const ins = `"stream_options":{"include_usage":true},`
		out := make([]byte, 0, len(body)+len(ins))
		out = append(out, body[:i+1]...)
		out = append(out, ins...)
		return append(out, body[i+1:]...), nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	var so map[string]json.RawMessage
	if raw := m["stream_options"]; len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &so); err != nil {
			return nil, err
		}
	}
	if so == nil {
		so = map[string]json.RawMessage{}
	}
	so["include_usage"] = json.RawMessage("true")
	b, err := json.Marshal(so)
	if err != nil {
		return nil, err
	}
	m["stream_options"] = b
	return json.Marshal(m)
}

// stripUsageNull removes a `"usage":null` member that some engines put on
// every chunk once include_usage is on, so a client that did not ask for
// usage receives the bytes it would have received without it.
func stripUsageNull(data []byte) []byte {
	const member = `"usage":null`
	i := bytes.Index(data, []byte(member))
	if i < 0 {
		return data
	}
	j := i + len(member)
	// Remove one adjacent comma so the object stays valid.
	switch {
	case i > 0 && data[i-1] == ',':
		i--
	case j < len(data) && data[j] == ',':
		j++
	}
	out := make([]byte, 0, len(data)-(j-i))
	out = append(out, data[:i]...)
	return append(out, data[j:]...)
}

// traceContext is the W3C trace context of a request: the trace continued
// from the client's traceparent or started here, the gateway's span, and
// its parent, the client's span ("" for a trace started here).
type traceContext struct {
	TraceID, SpanID, Parent, Flags string
}

func (t traceContext) header() string { return "00-" + t.TraceID + "-" + t.SpanID + "-" + t.Flags }

func parseTraceparent(v string) (traceContext, bool) {
	// version-traceid-parentid-flags, lower-case hex, ids not all zeros.
	if len(v) < 55 || v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return traceContext{}, false
	}
	ver, tid, flags := v[0:2], v[3:35], v[53:55]
	if ver == "ff" || !isLowerHex(ver) || !isLowerHex(tid) || !isLowerHex(v[36:52]) || !isLowerHex(flags) {
		return traceContext{}, false
	}
	if ver == "00" && len(v) != 55 {
		return traceContext{}, false
	}
	if strings.Trim(tid, "0") == "" || strings.Trim(v[36:52], "0") == "" {
		return traceContext{}, false
	}
	return traceContext{TraceID: tid, SpanID: newSpanID(), Parent: v[36:52], Flags: flags}, true
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// newTrace starts a trace at t. Its id leads with t's Unix seconds (see
// record.NewTraceID: the ledger's trace_id index then grows at its right
// edge) and keeps 96 random bits; flags stay "sampled" only, since the
// id is not random throughout.
func newTrace(t time.Time) traceContext {
	return traceContext{TraceID: record.NewTraceID(t, rand.Uint32(), rand.Uint64()), SpanID: newSpanID(), Flags: "01"}
}

func newSpanID() string { return randHex(8) }

// randHex uses math/rand/v2's ChaCha8-based global source: unpredictable
// enough for ids, and lock-free.
func randHex(n int) string {
	var b [16]byte
	for i := 0; i < n; i += 8 {
		u := rand.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(u >> (8 * j))
		}
	}
	return hex.EncodeToString(b[:n])
}

// newRequestID is tollgate's id for a request arriving at t: time-ordered,
// so the ledger's key index grows at its right edge, and 64 random bits
// per millisecond, so replicas need no coordination (record.NewRequestID).
func newRequestID(t time.Time) string { return record.NewRequestID(t, rand.Uint64()) }

// validClientID accepts a client's X-Request-Id when it is short and plain,
// so it can be echoed, stored and used in URLs safely.
func validClientID(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return false
		}
	}
	return true
}

// MaxIdentifier bounds, in bytes, every identifier a client chooses that
// the ledger keeps (model, business line, session, template, tag values):
// longer ones are refused, so a client cannot make the ledger, the
// windows or an error message carry megabytes per request.
const MaxIdentifier = 256

// Tag bounds: a tag header holds at most maxTags pairs, keys at most
// maxTagKey bytes.
const maxTags, maxTagKey = 16, 64

// identHeader reads a header that names something the ledger keeps. A
// value that is not UTF-8 or longer than MaxIdentifier is refused with a
// 400 naming the header; the value returned with the error is a bounded,
// valid prefix, kept in the refused request's row. (A plain cut at a byte
// count could split a character, and an invalid string makes Prometheus
// panic when it becomes a label.)
func identHeader(r *http.Request, name string) (string, *apiError) {
	v := strings.TrimSpace(r.Header.Get(name))
	if !utf8.ValidString(v) {
		return boundedPrefix(v, MaxIdentifier), badHeader(name, "is not valid UTF-8")
	}
	if len(v) > MaxIdentifier {
		return boundedPrefix(v, MaxIdentifier), badHeader(name, fmt.Sprintf("is %d bytes long; the limit is %d", len(v), MaxIdentifier))
	}
	return v, nil
}

func badHeader(name, what string) *apiError {
	return &apiError{Kind: record.ErrInvalidRequest, Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_header",
		Message: "Header " + name + " " + what + "."}
}

// boundedPrefix is s made valid UTF-8 and cut to at most n bytes on a
// character boundary.
func boundedPrefix(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// echo is what an error message may quote of a client's value: a short
// valid prefix, so a 4 MiB model name is not sent back whole.
func echo(s string) string {
	const n = 64
	if len(s) <= n && utf8.ValidString(s) {
		return s
	}
	return boundedPrefix(s, n) + "…"
}

// parseTags reads "k=v,k2=v2". More than maxTags pairs, a key longer than
// maxTagKey or a value longer than MaxIdentifier is refused naming the
// header, as is a header that is not UTF-8; the tags returned with the
// error are the ones that fit.
func parseTags(name, v string) (map[string]string, *apiError) {
	if v == "" {
		return nil, nil
	}
	var bad *apiError
	if !utf8.ValidString(v) {
		v, bad = strings.ToValidUTF8(v, "\uFFFD"), badHeader(name, "is not valid UTF-8")
	}
	tags := map[string]string{}
	for part := range strings.SplitSeq(v, ",") {
		k, val, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch {
		case k == "":
			continue
		case len(tags) == maxTags:
			return tags, cmp.Or(bad, badHeader(name, fmt.Sprintf("has more than %d tags", maxTags)))
		case len(k) > maxTagKey:
			bad = cmp.Or(bad, badHeader(name, fmt.Sprintf("has a key of %d bytes; the limit is %d", len(k), maxTagKey)))
			continue
		case len(val) > MaxIdentifier:
			bad = cmp.Or(bad, badHeader(name, fmt.Sprintf("has a value of %d bytes; the limit is %d", len(val), MaxIdentifier)))
			continue
		}
		tags[k] = val
	}
	return tags, bad
}

// responseID is the engine's id of its answer as the Record keeps it:
// valid UTF-8 and at most MaxIdentifier bytes, for the engine chooses it
// as freely as a client chooses its identifiers.
func responseID(id string) string { return boundedPrefix(id, MaxIdentifier) }
