package capture

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate-dev/tollgate/internal/record"
)

func presets(t testing.TB) *Redactor {
	t.Helper()
	var rules []Rule
	for _, p := range PresetNames {
		rules = append(rules, Rule{Preset: p})
	}
	r, err := NewRedactor(rules)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestPresets(t *testing.T) {
	r := presets(t)
	for _, c := range []struct{ in, want string }{
		{"call 13800138000 now", "call [REDACTED:cn_mobile] now"},
		{"电话13912345678，谢谢", "电话[REDACTED:cn_mobile]，谢谢"},
		{"+86 13800138000", "[REDACTED:cn_mobile]"},
		{"身份证 11010519491231002X 号", "身份证 [REDACTED:cn_id_card] 号"},
		{"id 110105194912310021", "id [REDACTED:cn_id_card]"},
		{"mail ops.team+llm@example.co.uk.", "mail [REDACTED:email]."},
		// Near misses stay: 12 digits, a 2 after the leading 1, an
		// 18-digit number whose month is 13, an @ without a domain.
		{"order 138001380001", "order 138001380001"},
		{"12800138000", "12800138000"},
		{"110105194913310021", "110105194913310021"},
		{"@home, a@b", "@home, a@b"},
	} {
		if got := r.String(c.in); got != c.want {
			t.Errorf("%q → %q, want %q", c.in, got, c.want)
		}
	}
}

func TestBodyKeepsJSON(t *testing.T) {
	r, err := NewRedactor([]Rule{{Preset: "cn_mobile"}, {Name: "order", Pattern: `ORD-\d+`}})
	if err != nil {
		t.Fatal(err)
	}
	in := `{"model":"m","messages":[{"role":"user","content":"my \"phone\" is 13800138000, order ORD-991"}],"user_phone":13900001111,"max_tokens":7}`
	out := r.Body([]byte(in))
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("not JSON any more: %v\n%s", err, out)
	}
	want := map[string]any{
		"model":      "m",
		"messages":   []any{map[string]any{"role": "user", "content": `my "phone" is [REDACTED:cn_mobile], order [REDACTED:order]`}},
		"user_phone": "[REDACTED:cn_mobile]",
		"max_tokens": float64(7),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}

	sse := "data: {\"choices\":[{\"delta\":{\"content\":\"13800138000\"}}]}\n\ndata: [DONE]\n\n"
	if got, want := string(r.Body([]byte(sse))), "data: {\"choices\":[{\"delta\":{\"content\":\"[REDACTED:cn_mobile]\"}}]}\n\ndata: [DONE]\n\n"; got != want {
		t.Errorf("stream:\n got %q\nwant %q", got, want)
	}
	if got := string(r.Body([]byte("plain 13800138000"))); got != "plain [REDACTED:cn_mobile]" {
		t.Errorf("text body: %q", got)
	}
}

func TestValidate(t *testing.T) {
	ok := Config{Enabled: true, Retention: 72 * time.Hour, Redact: []Rule{{Preset: "email"}, {Name: "ord", Pattern: `ORD-\d+`}}}
	if err := ok.Validate("capture"); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no retention", Config{Enabled: true}, "capture.retention: must be positive when capture is enabled: captured text needs an end"},
		{"negative slow", Config{Slow: -time.Second}, "capture.slow: must not be negative (0: failed requests only)"},
		{"negative max", Config{MaxBytes: -1}, "capture.max_bytes: must not be negative (0: 65536)"},
		{"huge max", Config{MaxBytes: 1<<20 + 1}, "capture.max_bytes: must be at most 1048576 (1 MiB): the gateway holds 4 × max_bytes of each captured body in memory"},
		{"unknown preset", Config{Redact: []Rule{{Preset: "ssn"}}}, `capture.redact[0].preset: unknown preset "ssn"; one of cn_id_card, cn_mobile, email`},
		{"both", Config{Redact: []Rule{{Preset: "email", Pattern: "x"}}}, "capture.redact[0]: give preset or pattern, not both"},
		{"neither", Config{Redact: []Rule{{Name: "x"}}}, "capture.redact[0]: needs preset or pattern"},
		{"no name", Config{Redact: []Rule{{Pattern: "x"}}}, "capture.redact[0].name: required with pattern (it names the placeholder)"},
		{"bad regexp", Config{Redact: []Rule{{Name: "x", Pattern: "a(b"}}}, "capture.redact[0].pattern: error parsing regexp: missing closing ): `a(b`"},
		{"empty match", Config{Redact: []Rule{{Name: "x", Pattern: "a*"}}}, "capture.redact[0].pattern: matches the empty string"},
		{"duplicate", Config{Redact: []Rule{{Preset: "email"}, {Name: "email", Pattern: "x"}}}, `capture.redact[1].name: duplicate rule name "email"`},
	} {
		if err := c.cfg.Validate("capture"); err == nil || err.Error() != c.want {
			t.Errorf("%s:\n got %v\nwant %s", c.name, err, c.want)
		}
	}
}

func TestTake(t *testing.T) {
	r := presets(t)
	c := Config{Enabled: true, Slow: 5 * time.Second, MaxBytes: 40, Retention: time.Hour}
	fast := &record.Record{RequestID: "a", Status: 200, Derived: record.Derived{E2E: time.Second}}
	slow := &record.Record{RequestID: "b", Status: 200, Derived: record.Derived{E2E: 5 * time.Second}}
	failed := &record.Record{RequestID: "c", Status: 502, ErrorType: record.ErrUpstreamStatus, Derived: record.Derived{E2E: time.Millisecond}}
	if got := c.Take(r, fast, []byte("x"), []byte("y")); got != nil {
		t.Errorf("fast, successful request captured: %+v", got)
	}
	if got := (Config{Slow: time.Second}).Take(r, failed, nil, nil); got != nil {
		t.Errorf("captured while disabled: %+v", got)
	}
	if got := c.Take(r, failed, []byte(`{"p":"13800138000"}`), []byte("upstream said no")); got == nil || got.Reason != "failed" ||
		string(got.Request) != `{"p":"[REDACTED:cn_mobile]"}` || got.RequestTruncated || got.ResponseTruncated {
		t.Errorf("failed request: %+v", got)
	}
	// Redaction before the cut: the phone straddles byte 40.
	long := strings.Repeat("好", 10) + " 13800138000 " + strings.Repeat("x", 50)
	got := c.Take(r, slow, []byte(long), nil)
	if got == nil || got.Reason != "slow" || !got.RequestTruncated || got.ResponseTruncated || len(got.Request) > 40 || !utf8.Valid(got.Request) {
		t.Fatalf("slow request: %+v", got)
	}
	if strings.ContainsAny(string(got.Request), "0123456789") {
		t.Errorf("digits of the phone left after the cut: %q", got.Request)
	}
	// A cut inside a three-byte rune steps back to its start.
	if b, cutOff := cut([]byte(strings.Repeat("好", 14)), 40); len(b) != 39 || !cutOff || !utf8.Valid(b) {
		t.Errorf("cut mid-rune: %d bytes, truncated %v", len(b), cutOff)
	}
}

// FuzzRedact: whatever the text, no rule matches what String returns.
func FuzzRedact(f *testing.F) {
	for _, s := range []string{"13800138000", "a@b.co", "11010519491231002X", "1380013a@b.co8000", "x@y.com13800138000"} {
		f.Add(s)
	}
	r := presets(f)
	f.Fuzz(func(t *testing.T, s string) {
		out := r.String(s)
		for i, re := range r.res {
			if m := re.FindString(out); m != "" {
				t.Fatalf("%q → %q still matches rule %d: %q", s, out, i, m)
			}
		}
		if b := r.Body([]byte(s)); json.Valid([]byte(s)) && !json.Valid(b) {
			t.Fatalf("valid JSON %q became invalid %q", s, b)
		}
	})
}

// TestClip: a body longer than the raw limit is copied short before
// redaction, redacted whole, and only then loses its last rawSlack bytes,
// so a phone number straddling limit − rawSlack (where the kept text now
// ends) is redacted, not cut in half; Raw cuts a stream the same way.
func TestClip(t *testing.T) {
	r := presets(t)
	c := Config{Enabled: true, MaxBytes: 1000, Retention: time.Hour}
	limit := c.RawLimit()
	// Ten long emails shrink to 170 bytes when redacted, so what is kept
	// up to the phone number fits in MaxBytes; the number's first six
	// digits end exactly at limit − rawSlack.
	before := limit - rawSlack - 6
	var head strings.Builder
	for i := range 10 {
		local := (before - 10*len("@example.com ")) / 10
		if i == 0 {
			local += (before - 10*len("@example.com ")) % 10
		}
		head.WriteString(strings.Repeat("a", local) + "@example.com ")
	}
	if head.Len() != before {
		t.Fatalf("setup: %d bytes before the number, want %d", head.Len(), before)
	}
	body := []byte(head.String() + "13800138000" + strings.Repeat(" b", 1000))
	p := Clip(body, limit)
	if !p.Over || len(p.Bytes) != limit || &p.Bytes[0] == &body[0] {
		t.Fatalf("Clip: %d bytes, over %v, copied %v", len(p.Bytes), p.Over, &p.Bytes[0] != &body[0])
	}
	if whole := Clip([]byte("short"), limit); whole.Over || string(whole.Bytes) != "short" {
		t.Errorf("Clip of a short body: %+v", whole)
	}
	w := NewRaw(limit)
	for i := 0; i < len(body); i += 7 {
		w.Add(body[i:min(i+7, len(body))])
	}
	if !w.Full() || !w.Part().Over || string(w.Part().Bytes) != string(p.Bytes) {
		t.Errorf("Raw kept %d bytes (full %v), Clip %d", len(w.Part().Bytes), w.Full(), len(p.Bytes))
	}
	got := c.Keep(r, "id", time.Time{}, "slow", p, w.Part())
	if !got.RequestTruncated || !got.ResponseTruncated || len(got.Request) > c.MaxBytes {
		t.Fatalf("Keep: %+v", got)
	}
	for _, b := range [][]byte{got.Request, got.Response} {
		// The text kept reaches the number: ten placeholders and more.
		if n := strings.Count(string(b), "[REDACTED:email]"); n != 10 || len(b) < 10*17+6 {
			t.Errorf("kept %d bytes with %d emails, want all ten and what follows: %q", len(b), n, b)
		}
		if strings.ContainsAny(string(b), "0123456789") {
			t.Errorf("digits of a phone number cut before redaction were kept: %q", b)
		}
	}
	// A match cut in half at the raw limit itself lies in the dropped end.
	atLimit := []byte(strings.Repeat("x", limit-6) + "13800138000")
	if got := c.Keep(r, "id", time.Time{}, "slow", Clip(atLimit, limit), Part{}); strings.ContainsAny(string(got.Request), "0123456789") {
		t.Errorf("half of a number cut at the limit was kept: %q", got.Request)
	}
	w.Reset()
	w.Add([]byte("x 13800138000"))
	if got := c.Keep(r, "id", time.Time{}, "slow", Part{}, w.Part()); got.ResponseTruncated || string(got.Response) != "x [REDACTED:cn_mobile]" {
		t.Errorf("after Reset: %+v", got)
	}
}

// TestClippedJSON: a JSON body larger than RawLimit is clipped, so it no
// longer parses and is redacted as text. Its strings are decoded first:
// in raw JSON a number after an escape (\n, \t, \r, \uXXXX) follows a
// word character, and the presets' \b would not match there.
func TestClippedJSON(t *testing.T) {
	r := presets(t)
	c := Config{Enabled: true, Retention: time.Hour}
	content := "Customer record:\n13812345678\nID:\n11010519491231002X\tphone\t13912345678\r\n" +
		`tel \u0031\u0033\u0037\u0031\u0032\u0033\u0034\u0035\u0036\u0037\u0038 \"quoted\" \ud83d\ude00 `
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + content +
		strings.Repeat("lorem ipsum ", 320<<10/12) + `"}],"user":13700001111}`)
	if len(body) <= c.RawLimit() {
		t.Fatalf("setup: body of %d bytes fits in the raw limit %d", len(body), c.RawLimit())
	}
	got := c.Keep(r, "id", time.Time{}, "failed", Clip(body, c.RawLimit()), Part{})
	if !got.RequestTruncated || len(got.Request) > c.MaxBytes && c.MaxBytes > 0 {
		t.Fatalf("Keep: truncated %v, %d bytes", got.RequestTruncated, len(got.Request))
	}
	s := string(got.Request)
	for _, leak := range []string{"13812345678", "11010519491231002X", "13912345678", "13712345678", `\u0031\u0033`} {
		if strings.Contains(s, leak) {
			t.Errorf("%s kept in clear", leak)
		}
	}
	wantHead := `{"model":"m","messages":[{"role":"user","content":"Customer record:\n[REDACTED:cn_mobile]\nID:\n[REDACTED:cn_id_card]\tphone\t[REDACTED:cn_mobile]\r\ntel [REDACTED:cn_mobile] \"quoted\" 😀 lorem ipsum `
	if !strings.HasPrefix(s, wantHead) {
		t.Errorf("head:\n got %.300q\nwant %q", s, wantHead)
	}

	// Text that is not JSON at all, a cut-off last string, numbers between
	// strings and a stream's cut data line are redacted the same way.
	for _, tc := range []struct{ in, want string }{
		{`{"a":"x\n13812345678","n":13812345678,"b":"y\n1381234`, `{"a":"x\n[REDACTED:cn_mobile]","n":[REDACTED:cn_mobile],"b":"y\n1381234`},
		{`{"a":"x\n13812345678`, `{"a":"x\n[REDACTED:cn_mobile]`},
		{`[1, "x\t11010519491231002X\u`, `[1, "x\t[REDACTED:cn_id_card]`},
		{"data: {\"c\":\"a\\n13812345678\"}\n\ndata: {\"c\":\"\\n1381234567", "data: {\"c\":\"a\\n[REDACTED:cn_mobile]\"}\n\ndata: {\"c\":\"\\n1381234567"},
	} {
		if got := string(r.Body([]byte(tc.in))); got != tc.want {
			t.Errorf("%q\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
}
