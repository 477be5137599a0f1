// Package capture is the opt-in capture of prompt and response text for
// slow or failed requests (issue 10, point 6): which requests qualify, and
// the redaction applied before any text is kept. tollgate stores no prompt
// or completion text by default; a capture is the one exception, kept
// apart from the ledger with its own retention and access.
//
// Where it sits: the configuration's capture block is a Config; the
// gateway keeps a bounded raw copy of each body (Clip, Raw) only while
// capture is enabled, asks Reason when a request finishes, and hands
// qualifying ones to a worker off the request path that calls Keep and
// writes the result to the store's captures table (store.Captures), read
// back by the admin-only /api/v1/captures.
package capture

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// Config says which requests are captured and how their text is redacted.
type Config struct {
	Enabled bool `yaml:"enabled"`
	// Slow captures requests whose E2E is at least this; 0 captures failed
	// requests only. Failed requests (anything but a 2xx without an error
	// type) are always captured when enabled.
	Slow time.Duration `yaml:"slow"`
	// MaxBytes caps each kept body, after redaction (default 64 KiB).
	MaxBytes int `yaml:"max_bytes"`
	// Retention is how long captures are kept; it must be set, so captured
	// text never lives as long as the ledger by accident.
	Retention time.Duration `yaml:"retention"`
	// Redact rules run in order on every string of the request and the
	// response; each match becomes [REDACTED:name].
	Redact []Rule `yaml:"redact"`
}

// Rule is one redaction: a preset by name, or a regular expression (RE2
// syntax) with a name for its placeholder.
type Rule struct {
	Name    string `yaml:"name"`
	Preset  string `yaml:"preset"`
	Pattern string `yaml:"pattern"`
}

// Presets are the common kinds of personal data. An ID-card number runs
// before the mobile number so that its digits are named as what they are.
var Presets = map[string]string{
	// 18-character PRC resident ID: 6-digit area, birth date 18xx–20xx,
	// 3-digit sequence, check digit or X.
	"cn_id_card": `\b[1-9]\d{5}(?:18|19|20)\d{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])\d{3}[\dXx]\b`,
	// Mainland mobile numbers, optionally with +86 or 86.
	"cn_mobile": `(?:\+?86[- ]?)?\b1[3-9]\d{9}\b`,
	"email":     `[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}`,
}

// PresetNames lists the presets in their recommended order.
var PresetNames = []string{"cn_id_card", "cn_mobile", "email"}

// DefaultMaxBytes is MaxBytes when unset.
const DefaultMaxBytes = 64 << 10

// MaxMaxBytes is the largest MaxBytes accepted.
const MaxMaxBytes = 1 << 20

// Validate names the YAML path of the first bad value under path.
func (c Config) Validate(path string) error {
	var errs []error
	bad := func(p, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", path, p, fmt.Sprintf(format, args...)))
	}
	if c.Slow < 0 {
		bad("slow", "must not be negative (0: failed requests only)")
	}
	if c.MaxBytes < 0 {
		bad("max_bytes", "must not be negative (0: %d)", DefaultMaxBytes)
	}
	if c.MaxBytes > MaxMaxBytes {
		bad("max_bytes", "must be at most %d (1 MiB): the gateway holds 4 × max_bytes of each captured body in memory", MaxMaxBytes)
	}
	if c.Enabled && c.Retention <= 0 {
		bad("retention", "must be positive when capture is enabled: captured text needs an end")
	}
	names := map[string]bool{}
	for i, r := range c.Redact {
		p := fmt.Sprintf("redact[%d]", i)
		if _, rerr := r.compile(); rerr != nil {
			bad(p+rerr.field, "%s", rerr.msg)
			continue
		}
		n := r.label()
		if names[n] {
			bad(p+".name", "duplicate rule name %q", n)
		}
		names[n] = true
	}
	return errors.Join(errs...)
}

// ruleError is a rule's fault: the field under redact[i] ("" for the
// rule as a whole) and what is wrong.
type ruleError struct{ field, msg string }

func (r Rule) label() string {
	if r.Name != "" {
		return r.Name
	}
	return r.Preset
}

func (r Rule) compile() (*regexp.Regexp, *ruleError) {
	switch {
	case r.Preset != "" && r.Pattern != "":
		return nil, &ruleError{"", "give preset or pattern, not both"}
	case r.Preset != "":
		p, ok := Presets[r.Preset]
		if !ok {
			return nil, &ruleError{".preset", fmt.Sprintf("unknown preset %q; one of %s", r.Preset, strings.Join(PresetNames, ", "))}
		}
		return regexp.MustCompile(p), nil
	case r.Pattern == "":
		return nil, &ruleError{"", "needs preset or pattern"}
	case r.Name == "":
		return nil, &ruleError{".name", "required with pattern (it names the placeholder)"}
	case strings.ContainsAny(r.Name, "[]"):
		return nil, &ruleError{".name", "must not contain [ or ]"}
	}
	re, err := regexp.Compile(r.Pattern)
	if err != nil {
		return nil, &ruleError{".pattern", err.Error()}
	}
	if re.MatchString("") {
		return nil, &ruleError{".pattern", "matches the empty string"}
	}
	return re, nil
}

// Redactor applies a rule list.
type Redactor struct {
	res   []*regexp.Regexp
	repls []string
}

// NewRedactor compiles rules; call Validate first for errors with paths.
func NewRedactor(rules []Rule) (*Redactor, error) {
	r := &Redactor{}
	for i, rule := range rules {
		re, rerr := rule.compile()
		if rerr != nil {
			return nil, fmt.Errorf("redact[%d]%s: %s", i, rerr.field, rerr.msg)
		}
		r.res = append(r.res, re)
		r.repls = append(r.repls, "[REDACTED:"+rule.label()+"]")
	}
	return r, nil
}

// String redacts one text. Rules run in order, and the list is run again
// until nothing matches, so a removal can never join two halves into a
// new match that is kept.
func (r *Redactor) String(s string) string {
	for range 4 {
		changed := false
		for i, re := range r.res {
			if re.MatchString(s) {
				s = re.ReplaceAllLiteralString(s, r.repls[i])
				changed = true
			}
		}
		if !changed {
			return s
		}
	}
	return s
}

// Body redacts a request or response body. JSON is walked and every
// string (and number) redacted on its own, so the result is still JSON
// with the same shape. A server-sent event stream has each data line
// treated that way. Anything else is redacted as text.
func (r *Redactor) Body(b []byte) []byte {
	if out, ok := r.json(b); ok {
		return out
	}
	if bytes.HasPrefix(bytes.TrimSpace(b), []byte("data:")) {
		lines := bytes.SplitAfter(b, []byte("\n"))
		for i, l := range lines {
			payload, ok := bytes.CutPrefix(l, []byte("data:"))
			if !ok {
				lines[i] = []byte(r.String(string(l)))
				continue
			}
			trimmed := bytes.TrimSpace(payload)
			if out, ok := r.json(trimmed); ok {
				lines[i] = slices.Concat([]byte("data: "), out, payload[len(bytes.TrimRight(payload, " \r\n")):])
			} else {
				lines[i] = slices.Concat([]byte("data:"), r.jsonish(payload))
			}
		}
		return bytes.Join(lines, nil)
	}
	if t := bytes.TrimSpace(b); len(t) > 0 && (t[0] == '{' || t[0] == '[') {
		return r.jsonish(b)
	}
	return []byte(r.String(string(b)))
}

// jsonish redacts text that looks like JSON but does not parse, most often
// a body clipped at RawLimit. Raw JSON text cannot be redacted as it
// stands: an escape such as \n puts a word character before the digits
// that follow, so a \b in a pattern no longer matches, and \uXXXX can
// spell any digit. So each JSON string, the cut-off last one included, is
// decoded, redacted as text and encoded again; what lies between strings
// (numbers among them) is redacted as text.
func (r *Redactor) jsonish(b []byte) []byte {
	var out []byte
	for len(b) > 0 {
		q := bytes.IndexByte(b, '"')
		if q < 0 {
			return append(out, r.String(string(b))...)
		}
		out = append(out, r.String(string(b[:q]))...)
		s, n, closed := decodeString(b[q+1:])
		out = append(out, '"')
		out = appendString(out, r.String(s))
		if closed {
			out = append(out, '"')
		}
		b = b[q+1+n:]
	}
	return out
}

// decodeString decodes a JSON string's body from b (just past its opening
// quote) and returns the text, the bytes consumed (the closing quote
// included) and whether the string was closed. A string cut off at the
// end is decoded as far as it goes, a cut-off escape dropped; an invalid
// escape is kept as its letter.
func decodeString(b []byte) (string, int, bool) {
	var sb strings.Builder
	i := 0
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			return sb.String(), i + 1, true
		case c != '\\':
			sb.WriteByte(c)
			i++
			continue
		case i+1 >= len(b):
			return sb.String(), len(b), false
		}
		e := b[i+1]
		i += 2
		switch e {
		case 'n':
			sb.WriteByte('\n')
		case 't':
			sb.WriteByte('\t')
		case 'r':
			sb.WriteByte('\r')
		case 'b':
			sb.WriteByte('\b')
		case 'f':
			sb.WriteByte('\f')
		case 'u':
			if i+4 > len(b) {
				return sb.String(), len(b), false
			}
			v, err := strconv.ParseUint(string(b[i:i+4]), 16, 16)
			if err != nil {
				sb.WriteByte('u')
				continue
			}
			i += 4
			ru := rune(v)
			if utf16.IsSurrogate(ru) && i+6 <= len(b) && b[i] == '\\' && b[i+1] == 'u' {
				if v2, err := strconv.ParseUint(string(b[i+2:i+6]), 16, 16); err == nil {
					if pair := utf16.DecodeRune(ru, rune(v2)); pair != utf8.RuneError {
						ru = pair
						i += 6
					}
				}
			}
			sb.WriteRune(ru)
		default: // " \ / and anything invalid
			sb.WriteByte(e)
		}
	}
	return sb.String(), len(b), false
}

// appendString appends s JSON-encoded, without its quotes.
func appendString(out []byte, s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	e := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	return append(out, e[1:len(e)-1]...)
}

func (r *Redactor) json(b []byte) ([]byte, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return nil, false
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r.walk(v)); err != nil {
		return nil, false
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), true
}

func (r *Redactor) walk(v any) any {
	switch x := v.(type) {
	case string:
		return r.String(x)
	case json.Number:
		if s := r.String(x.String()); s != x.String() {
			return s // a phone number sent as a number becomes a string
		}
		return x
	case []any:
		for i := range x {
			x[i] = r.walk(x[i])
		}
	case map[string]any:
		for k, e := range x {
			x[k] = r.walk(e)
		}
	}
	return v
}

// Reason says why a finished request qualifies for capture: "failed",
// "slow", or "" when it does not.
func (c Config) Reason(rec *record.Record) string {
	switch {
	case !c.Enabled:
		return ""
	case !rec.OK():
		return "failed"
	case c.Slow > 0 && rec.Derived.E2E >= c.Slow:
		return "slow"
	}
	return ""
}

// Capture is one kept request: its bodies redacted, then cut to MaxBytes.
// A streamed response is the text the stream carried (deltas assembled),
// not its events.
type Capture struct {
	RequestID         string
	At                time.Time
	Reason            string
	Request           []byte
	Response          []byte
	RequestTruncated  bool
	ResponseTruncated bool
	// RequestBytes and ResponseBytes are the stored bodies' lengths, set
	// by the store when it reads a capture; a listing (store.Captures)
	// leaves the bodies themselves out.
	RequestBytes, ResponseBytes int
}

// Take builds the capture of a finished request, or nil when it does not
// qualify. Redaction runs before the cut, so a cut can never leave the
// unredacted start of a match behind.
func (c Config) Take(r *Redactor, rec *record.Record, request, response []byte) *Capture {
	reason := c.Reason(rec)
	if reason == "" {
		return nil
	}
	return c.Keep(r, rec.RequestID, rec.Arrival, reason, Part{Bytes: request}, Part{Bytes: response})
}

// Part is one body as the gateway kept it: its first bytes, and whether
// more was left out before redaction (see Clip). When Over, the last
// rawSlack bytes of the redacted text are dropped (see Keep).
type Part struct {
	Bytes []byte
	Over  bool
}

// Keep redacts and cuts two kept bodies into a Capture.
func (c Config) Keep(r *Redactor, id string, at time.Time, reason string, request, response Part) *Capture {
	limit := c.maxBytes()
	req, t1 := cut(redactPart(r, request), limit)
	resp, t2 := cut(redactPart(r, response), limit)
	return &Capture{RequestID: id, At: at, Reason: reason, Request: req, Response: resp,
		RequestTruncated: t1 || request.Over, ResponseTruncated: t2 || response.Over}
}

// redactPart redacts a kept body. A body cut at the raw limit is redacted
// whole first and only then loses its last rawSlack bytes: a match cut in
// half at the limit no longer matches, so its first half is still in
// clear, and it lies in the dropped end. Cutting before redaction would
// instead leave the first half of a match straddling the new cut.
func redactPart(r *Redactor, p Part) []byte {
	b := r.Body(p.Bytes)
	if p.Over {
		b, _ = cut(b, max(len(b)-rawSlack, 0))
	}
	return b
}

func (c Config) maxBytes() int {
	if c.MaxBytes <= 0 {
		return DefaultMaxBytes
	}
	return c.MaxBytes
}

// rawSlack is how much is dropped from the end of a redacted body that
// was cut before redaction: a match cut in half at the cut would no
// longer match, so its first half would be kept in clear. Matches of
// personal data are far shorter than this.
const rawSlack = 1 << 10

// RawLimit is how much of a body the gateway keeps before redaction:
// enough that redaction, which can shrink text, still leaves MaxBytes in
// most cases, and a bound on what a capture holds in memory.
func (c Config) RawLimit() int { return 4*c.maxBytes() + rawSlack }

// Clip returns b whole when it fits in limit, or else a copy of its
// first limit bytes (on a rune boundary) marked Over: the copy lets the
// rest of b be freed; Keep drops rawSlack bytes from its redacted end.
func Clip(b []byte, limit int) Part {
	if len(b) <= limit {
		return Part{Bytes: b}
	}
	head, _ := cut(b, limit)
	return Part{Bytes: slices.Clone(head), Over: true}
}

// Raw accumulates text (a stream's deltas) up to a limit; past it the
// rest is counted as left out, never kept.
type Raw struct {
	b     []byte
	limit int
	over  bool
}

// NewRaw returns an empty Raw keeping at most limit bytes.
func NewRaw(limit int) *Raw { return &Raw{limit: limit} }

// Full reports whether nothing more will be kept.
func (w *Raw) Full() bool { return w.over }

// Add keeps as much of p as fits.
func (w *Raw) Add(p []byte) {
	if w.over {
		return
	}
	if room := w.limit - len(w.b); len(p) > room {
		w.b = append(w.b, p[:room]...)
		w.over = true
		return
	}
	w.b = append(w.b, p...)
}

// Part is what was kept, as Clip would have cut it.
func (w *Raw) Part() Part {
	if !w.over {
		return Part{Bytes: w.b}
	}
	return Part{Bytes: w.b, Over: true} // a rune cut at the end lies in the dropped slack
}

// Reset empties w for the next attempt, keeping its memory.
func (w *Raw) Reset() { w.b, w.over = w.b[:0], false }

// cut shortens b to at most n bytes on a UTF-8 boundary.
func cut(b []byte, n int) ([]byte, bool) {
	if len(b) <= n {
		return b, false
	}
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return b[:n:n], true
}
