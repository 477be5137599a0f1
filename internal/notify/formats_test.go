package notify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/tollgate-dev/tollgate/internal/alert"
)

const baseURL = "https://tollgate.example.com/"

// drillDown is sample's Link made absolute by baseURL.
const drillDown = "https://tollgate.example.com/api/v1/requests?model=qwen2.5-7b&slow=1"

// deliverOne sends alerts through one notifier of type typ at a loopback
// server answering the vendor's success reply, inside a synctest bubble
// (so time.Now in the bubble is the time the payload was made), and
// returns what the server received and the bubble's time.
func deliverOne(t *testing.T, target Target, alerts ...alert.Alert) ([]received, time.Time) {
	t.Helper()
	srv := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { io.WriteString(w, okBody[target.Type]) })
	target.URL = srv.URL + target.URL
	var at time.Time
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Config{target}, Options{BaseURL: baseURL}, true)
		at = time.Now()
		for _, a := range alerts {
			h.Notify(t.Context(), a)
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		h.counts(t, target.Name, float64(len(alerts)), 0, 0)
	})
	reqs := srv.requests()
	if len(reqs) != len(alerts) {
		t.Fatalf("%d requests; want %d", len(reqs), len(alerts))
	}
	for _, r := range reqs {
		if ct := r.header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
			t.Errorf("Content-Type %q", ct)
		}
	}
	return reqs, at
}

func decode(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%v in %s", err, b)
	}
}

func contains(t *testing.T, what, s string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(s, w) {
			t.Errorf("%s does not contain %q:\n%s", what, w, s)
		}
	}
}

// TestWebhookPayload: the alert's own JSON plus version, absolute link,
// configured headers.
func TestWebhookPayload(t *testing.T) {
	var want alert.Alert
	synctest.Test(t, func(t *testing.T) { want = sample(alert.Critical, alert.Firing) })
	reqs, _ := deliverOne(t, Target{Name: "hook", Type: TypeWebhook, URL: "/alerts",
		Headers: map[string]string{"Authorization": "Bearer t0k"}}, want)
	r := reqs[0]
	if r.path != "/alerts" || r.header.Get("Authorization") != "Bearer t0k" {
		t.Errorf("path %q, Authorization %q", r.path, r.header.Get("Authorization"))
	}
	var raw map[string]any
	decode(t, r.body, &raw)
	for k, v := range map[string]any{
		"version": "1", "rule": "ttft_p95_high", "severity": "critical", "state": "firing",
		"value": 3.2, "threshold": 2.0, "baseline": 1.1, "unit": "s", "fingerprint": "f00d",
		"link": drillDown, "summary": want.Summary,
	} {
		if raw[k] != v {
			t.Errorf("%s = %v; want %v", k, raw[k], v)
		}
	}
	if _, ok := raw["ends_at"]; ok {
		t.Error("a firing alert has ends_at")
	}
	var got alert.Alert
	decode(t, r.body, &got)
	if got.Labels["model"] != "qwen2.5-7b" || got.Labels["biz_line"] != "search" ||
		!got.StartsAt.Equal(want.StartsAt) || !got.From.Equal(want.From) || !got.To.Equal(want.To) {
		t.Errorf("decoded %+v; want %+v", got, want)
	}
}

// TestSlackPayload: text carries the whole message (what notifications
// and Slack-compatible services show), blocks a header and a section.
func TestSlackPayload(t *testing.T) {
	var a alert.Alert
	synctest.Test(t, func(t *testing.T) { a = sample(alert.Critical, alert.Firing) })
	a.Labels["team"] = "search & ads <core>"
	reqs, _ := deliverOne(t, Target{Name: "slack", Type: TypeSlack, URL: "/services/T0/B0/x"}, a)
	var p struct {
		Text   string `json:"text"`
		Blocks []struct {
			Type string `json:"type"`
			Text struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"text"`
		} `json:"blocks"`
	}
	decode(t, reqs[0].body, &p)
	const title = "[tollgate] CRITICAL: ttft_p95_high (biz_line=search, model=qwen2.5-7b, team=search & ads <core>)"
	if len(p.Blocks) != 2 {
		t.Fatalf("%d blocks; want 2: %s", len(p.Blocks), reqs[0].body)
	}
	if b := p.Blocks[0]; b.Type != "header" || b.Text.Type != "plain_text" || b.Text.Text != title {
		t.Errorf("header block %+v", b)
	}
	section := p.Blocks[1]
	if section.Type != "section" || section.Text.Type != "mrkdwn" {
		t.Errorf("section block %+v", section)
	}
	contains(t, "section", section.Text.Text,
		"*Severity:* critical\n",
		"*Rule:* ttft_p95_high\n",
		"*Labels:* biz_line=search, model=qwen2.5-7b, team=search &amp; ads &lt;core&gt;\n",
		"*Value:* 3.2 s (threshold 2 s, baseline 1.1 s)\n",
		"*Since:* 1999-12-31 23:48:00 UTC (for 12m)\n",
		"*Window:* 1999-12-31 23:55:00 UTC – 2000-01-01 00:00:00 UTC (5m)",
		"<"+drillDown+"|Details>")
	if !strings.HasPrefix(p.Text, "*[tollgate] CRITICAL: ttft_p95_high") || !strings.Contains(p.Text, section.Text.Text) {
		t.Errorf("text %q does not hold title and body", p.Text)
	}
}

// TestDingTalkPayload: markdown message; a signed robot gets timestamp
// (ms) and sign in the query, checked here from the documented recipe.
func TestDingTalkPayload(t *testing.T) {
	const secret = "SEC0123456789abcdef"
	var a alert.Alert
	synctest.Test(t, func(t *testing.T) { a = sample(alert.Critical, alert.Firing) })
	reqs, at := deliverOne(t, Target{Name: "ding", Type: TypeDingTalk, URL: "/robot/send?access_token=tok3n", Secret: secret}, a)
	r := reqs[0]
	if r.path != "/robot/send" || r.query.Get("access_token") != "tok3n" {
		t.Errorf("path %q query %q", r.path, r.raw)
	}
	ts := r.query.Get("timestamp")
	if want := strconv.FormatInt(at.UnixMilli(), 10); ts != want {
		t.Errorf("timestamp %q; want %q (ms)", ts, want)
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "\n" + secret))
	sign := base64.StdEncoding.EncodeToString(mac.Sum(nil))
	if r.query.Get("sign") != sign {
		t.Errorf("sign %q; want %q", r.query.Get("sign"), sign)
	}
	if !strings.Contains(r.raw, "sign="+url.QueryEscape(sign)) {
		t.Errorf("sign is not URL-encoded in %q", r.raw)
	}

	var p struct {
		MsgType  string `json:"msgtype"`
		Markdown struct {
			Title string `json:"title"`
			Text  string `json:"text"`
		} `json:"markdown"`
	}
	decode(t, r.body, &p)
	const title = "[tollgate] 严重告警：ttft_p95_high（biz_line=search, model=qwen2.5-7b）"
	if p.MsgType != "markdown" || p.Markdown.Title != title {
		t.Errorf("msgtype %q title %q", p.MsgType, p.Markdown.Title)
	}
	contains(t, "markdown.text", p.Markdown.Text,
		"#### "+title+"\n\n"+a.Summary+"\n\n",
		"- **级别**：严重（critical）\n",
		"- **规则**：ttft_p95_high\n",
		"- **对象**：biz_line=search, model=qwen2.5-7b\n",
		"- **当前值**：3.2 s（阈值 2 s，基线 1.1 s）\n",
		"- **开始时间**：1999-12-31 23:48:00 UTC（已持续 12分钟）\n",
		"- **统计窗口**：1999-12-31 23:55:00 UTC – 2000-01-01 00:00:00 UTC（5分钟）\n",
		"[查看明细]("+drillDown+")")
}

// TestDingTalkUnsigned: without a secret the URL is left as configured.
func TestDingTalkUnsigned(t *testing.T) {
	var a alert.Alert
	synctest.Test(t, func(t *testing.T) { a = sample(alert.Warning, alert.Firing) })
	reqs, _ := deliverOne(t, Target{Name: "ding", Type: TypeDingTalk, URL: "/robot/send?access_token=tok3n"}, a)
	if reqs[0].raw != "access_token=tok3n" {
		t.Errorf("query %q", reqs[0].raw)
	}
}

// TestFeishuPayload: an interactive card, red when critical and green when
// resolved; a signed bot gets timestamp (s) and sign in the body, checked
// here from the documented recipe.
func TestFeishuPayload(t *testing.T) {
	const secret = "feishu-s3cret"
	var firing, resolved alert.Alert
	synctest.Test(t, func(t *testing.T) {
		firing, resolved = sample(alert.Critical, alert.Firing), sample(alert.Critical, alert.Resolved)
	})
	reqs, at := deliverOne(t, Target{Name: "lark", Type: TypeFeishu, URL: "/open-apis/bot/v2/hook/abc", Secret: secret}, firing, resolved)

	type card struct {
		Timestamp *string `json:"timestamp"`
		Sign      *string `json:"sign"`
		MsgType   string  `json:"msg_type"`
		Card      struct {
			Header struct {
				Title struct {
					Tag     string `json:"tag"`
					Content string `json:"content"`
				} `json:"title"`
				Template string `json:"template"`
			} `json:"header"`
			Elements []struct {
				Tag     string `json:"tag"`
				Content string `json:"content"`
			} `json:"elements"`
		} `json:"card"`
	}
	for i, want := range []struct{ title, template string }{
		{"[tollgate] 严重告警：ttft_p95_high（biz_line=search, model=qwen2.5-7b）", "red"},
		{"[tollgate] 已恢复：ttft_p95_high（biz_line=search, model=qwen2.5-7b）", "green"},
	} {
		var p card
		decode(t, reqs[i].body, &p)
		if p.MsgType != "interactive" {
			t.Errorf("msg_type %q", p.MsgType)
		}
		if p.Timestamp == nil || p.Sign == nil {
			t.Fatalf("no timestamp or sign: %s", reqs[i].body)
		}
		if ts := strconv.FormatInt(at.Unix(), 10); *p.Timestamp != ts {
			t.Errorf("timestamp %q; want %q (s)", *p.Timestamp, ts)
		}
		mac := hmac.New(sha256.New, []byte(*p.Timestamp+"\n"+secret))
		if sign := base64.StdEncoding.EncodeToString(mac.Sum(nil)); *p.Sign != sign {
			t.Errorf("sign %q; want %q", *p.Sign, sign)
		}
		h := p.Card.Header
		if h.Title.Tag != "plain_text" || h.Title.Content != want.title || h.Template != want.template {
			t.Errorf("header %+v; want %q, %s", h, want.title, want.template)
		}
		if len(p.Card.Elements) != 1 || p.Card.Elements[0].Tag != "markdown" {
			t.Fatalf("elements %+v", p.Card.Elements)
		}
		contains(t, "card markdown", p.Card.Elements[0].Content, "- **当前值**：3.2 s（阈值 2 s，基线 1.1 s）\n", "[查看明细]("+drillDown+")")
	}
	var p card
	decode(t, reqs[1].body, &p)
	contains(t, "resolved card", p.Card.Elements[0].Content,
		"- **开始时间**：1999-12-31 23:48:00 UTC\n",
		"- **恢复时间**：2000-01-01 00:00:00 UTC（共持续 12分钟）\n")
	if strings.Contains(p.Card.Elements[0].Content, "已持续") {
		t.Errorf("a resolved alert says it is still going:\n%s", p.Card.Elements[0].Content)
	}
}

// TestFeishuUnsigned: no secret, no timestamp or sign keys.
func TestFeishuUnsigned(t *testing.T) {
	var a alert.Alert
	synctest.Test(t, func(t *testing.T) { a = sample(alert.Warning, alert.Firing) })
	reqs, _ := deliverOne(t, Target{Name: "lark", Type: TypeFeishu, URL: "/hook"}, a)
	var raw map[string]any
	decode(t, reqs[0].body, &raw)
	if _, ok := raw["sign"]; ok {
		t.Errorf("unsigned body has sign: %s", reqs[0].body)
	}
	if _, ok := raw["timestamp"]; ok {
		t.Errorf("unsigned body has timestamp: %s", reqs[0].body)
	}
	if tpl := raw["card"].(map[string]any)["header"].(map[string]any)["template"]; tpl != "orange" {
		t.Errorf("warning template %v; want orange", tpl)
	}
}

// TestWeComPayload: markdown content with a coloured title, cut to the
// robot's 4096 bytes on a character boundary.
func TestWeComPayload(t *testing.T) {
	var a, long alert.Alert
	synctest.Test(t, func(t *testing.T) {
		a, long = sample(alert.Critical, alert.Firing), sample(alert.Warning, alert.Firing)
	})
	long.Summary = strings.Repeat("首字延迟过高。", 400) // 8400 bytes
	reqs, _ := deliverOne(t, Target{Name: "wecom", Type: TypeWeCom, URL: "/cgi-bin/webhook/send?key=k3y"}, a, long)
	if reqs[0].query.Get("key") != "k3y" {
		t.Errorf("query %q", reqs[0].raw)
	}
	if !strings.Contains(string(reqs[0].body), `<font color=\"warning\">`) {
		t.Errorf("the <font> tag is escaped: %s", reqs[0].body)
	}
	var p struct {
		MsgType  string `json:"msgtype"`
		Markdown struct {
			Content string `json:"content"`
		} `json:"markdown"`
	}
	decode(t, reqs[0].body, &p)
	if p.MsgType != "markdown" {
		t.Errorf("msgtype %q", p.MsgType)
	}
	contains(t, "markdown.content", p.Markdown.Content,
		"## <font color=\"warning\">[tollgate] 严重告警：ttft_p95_high（biz_line=search, model=qwen2.5-7b）</font>\n",
		"- **当前值**：3.2 s（阈值 2 s，基线 1.1 s）\n",
		"[查看明细]("+drillDown+")")

	decode(t, reqs[1].body, &p)
	if n := len(p.Markdown.Content); n > 4096 || n < 4000 || !utf8.ValidString(p.Markdown.Content) || !strings.HasSuffix(p.Markdown.Content, "…") {
		t.Errorf("long content: %d bytes, valid UTF-8 %v", n, utf8.ValidString(p.Markdown.Content))
	}
}

// TestLogNotifier: one line per alert, its title as the message and the
// figures as attributes; warn when firing, info when resolved.
func TestLogNotifier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Config{{Name: "log", Type: TypeLog}}, Options{BaseURL: baseURL}, true)
		h.Notify(t.Context(), sample(alert.Critical, alert.Firing))
		h.Notify(t.Context(), sample(alert.Critical, alert.Resolved))
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		h.counts(t, "log", 2, 0, 0)
		lines := strings.Split(strings.TrimSpace(h.log.String()), "\n")
		if len(lines) != 2 {
			t.Fatalf("log:\n%s", h.log)
		}
		contains(t, "firing line", lines[0], "level=WARN",
			`msg="[tollgate] CRITICAL: ttft_p95_high (biz_line=search, model=qwen2.5-7b)"`,
			"rule=ttft_p95_high", "severity=critical", "state=firing", `labels="biz_line=search,model=qwen2.5-7b"`,
			"value=3.2", "threshold=2", "baseline=1.1", "unit=s", "link="+`"`+drillDown+`"`)
		contains(t, "resolved line", lines[1], "level=INFO", `msg="[tollgate] RESOLVED: ttft_p95_high`, "state=resolved", "ends_at=")
	})
}

// TestEnglishMessage pins the whole English wording of a resolved alert.
func TestEnglishMessage(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	a := alert.Alert{
		Rule: "error_rate", Severity: alert.Warning, State: alert.Resolved,
		Labels:  map[string]string{"upstream": "vllm-a"},
		Summary: "5xx share of vllm-a is back under 2%.",
		Value:   0.0123, Threshold: 0.02, Unit: "ratio",
		StartsAt: t0, EndsAt: t0.Add(75 * time.Minute),
		From: t0.Add(70 * time.Minute), To: t0.Add(75 * time.Minute),
		Link: "/api/v1/requests?upstream=vllm-a",
	}
	shanghai := time.FixedZone("CST", 8*3600)
	m := compose(a, English, shanghai, t0.Add(2*time.Hour))
	if want := "[tollgate] RESOLVED: error_rate (upstream=vllm-a)"; m.title != want {
		t.Errorf("title %q; want %q", m.title, want)
	}
	want := "5xx share of vllm-a is back under 2%.\n\n" +
		"- **Severity**: warning\n" +
		"- **Rule**: error_rate\n" +
		"- **Labels**: upstream=vllm-a\n" +
		"- **Value**: 1.23% (threshold 2%)\n" +
		"- **Since**: 2026-05-01 18:00:00 CST\n" +
		"- **Resolved**: 2026-05-01 19:15:00 CST (after 1h15m)\n" +
		"- **Window**: 2026-05-01 19:10:00 – 19:15:00 CST (5m)\n" +
		"\nDetails: `/api/v1/requests?upstream=vllm-a`\n"
	if got := m.markdown(); got != want {
		t.Errorf("markdown\n%s\nwant\n%s", got, want)
	}
}

func TestFormatHelpers(t *testing.T) {
	en, zh := languages[English], languages[Chinese]
	for _, c := range []struct {
		d      time.Duration
		en, zh string
	}{
		{0, "0s", "0秒"},
		{45 * time.Second, "45s", "45秒"},
		{12 * time.Minute, "12m", "12分钟"},
		{12*time.Minute + 30*time.Second, "12m30s", "12分钟30秒"},
		{65 * time.Minute, "1h5m", "1小时5分钟"},
		{2*time.Hour + 10*time.Second, "2h", "2小时"},
		{51 * time.Hour, "2d3h", "2天3小时"},
		{-time.Minute, "0s", "0秒"},
	} {
		if got := humanDuration(c.d, en); got != c.en {
			t.Errorf("humanDuration(%v, en) = %q; want %q", c.d, got, c.en)
		}
		if got := humanDuration(c.d, zh); got != c.zh {
			t.Errorf("humanDuration(%v, zh) = %q; want %q", c.d, got, c.zh)
		}
	}
	for _, c := range []struct {
		v    float64
		unit string
		want string
	}{
		{3.2, "s", "3.2 s"},
		{0.123456, "s", "0.1235 s"},
		{1234.5, "tokens", "1234 tokens"},
		{1234567, "tokens", "1234567 tokens"},
		{0.5, "ratio", "50%"},
		{12.5, "USD/h", "12.5 USD/h"},
		{7, "", "7"},
	} {
		if got := formatValue(c.v, c.unit); got != c.want {
			t.Errorf("formatValue(%v, %q) = %q; want %q", c.v, c.unit, got, c.want)
		}
	}
	if got := truncate("首字延迟", 7); got != "首…" {
		t.Errorf("truncate = %q", got)
	}
}
