package notify

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tollgate-dev/tollgate/internal/alert"
)

// WebhookVersion is the version field of the generic webhook's JSON: it
// changes when a field changes meaning or goes away.
const WebhookVersion = "1"

// webhookPayload is the generic webhook's body: the alert's own JSON
// (see alert.Alert) plus version.
type webhookPayload struct {
	Version string `json:"version"`
	alert.Alert
}

// Vendor limits on message size.
const (
	wecomMaxBytes   = 4096 // markdown.content, bytes
	slackMaxHeader  = 150  // header block text, characters
	slackMaxSection = 3000 // section block text, characters
)

// request is the URL and JSON body that deliver alert a to notifier t,
// signed when t has a secret.
func request(t *Target, a alert.Alert, loc *time.Location, now time.Time) (string, []byte, error) {
	target := t.URL
	var v any
	if t.Type == TypeWebhook {
		v = webhookPayload{Version: WebhookVersion, Alert: a}
	} else {
		m := compose(a, t.language(), loc, now)
		switch t.Type {
		case TypeSlack:
			v = slackPayload(m)
		case TypeDingTalk:
			v = dingtalkPayload(m)
			if t.Secret != "" {
				var err error
				if target, err = signDingTalk(t.URL, t.Secret, now); err != nil {
					return "", nil, err
				}
			}
		case TypeFeishu:
			v = feishuPayload(m, t.Secret, now)
		case TypeWeCom:
			v = wecomPayload(m)
		default:
			return "", nil, fmt.Errorf("notify: no format for type %q", t.Type)
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // WeCom's <font> tags read better unescaped
	if err := enc.Encode(v); err != nil {
		return "", nil, fmt.Errorf("notify: encode %s payload: %w", t.Type, err)
	}
	return target, bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// message is an alert in words, before any vendor's markup.
type message struct {
	state    alert.State
	severity alert.Severity
	title    string  // one line: what, how bad, for what
	summary  string  // the alert's own sentence
	fields   []field // name: value lines
	details  string  // the word for the drill-down link
	link     string  // the drill-down link; may be relative
	colon    string  // between a field's name and value
}

type field struct{ name, value string }

// words are one language's wording of a message.
type words struct {
	firing                                            map[alert.Severity]string
	resolved                                          string
	severity                                          map[alert.Severity]string
	fSeverity, fRule, fLabels, fValue, fSince, fEnded string
	fWindow, details                                  string
	threshold, baseline                               string
	ago, lasted                                       string // %s is a duration
	colon, sep, lparen, rparen                        string
	day, hour, minute, second                         string
	withEnglishSeverity                               bool
}

var languages = map[string]*words{
	English: {
		firing:    map[alert.Severity]string{alert.Critical: "CRITICAL", alert.Warning: "WARNING"},
		resolved:  "RESOLVED",
		severity:  map[alert.Severity]string{alert.Critical: "critical", alert.Warning: "warning"},
		fSeverity: "Severity", fRule: "Rule", fLabels: "Labels", fValue: "Value",
		fSince: "Since", fEnded: "Resolved", fWindow: "Window", details: "Details",
		threshold: "threshold", baseline: "baseline",
		ago: "for %s", lasted: "after %s",
		colon: ": ", sep: ", ", lparen: " (", rparen: ")",
		day: "d", hour: "h", minute: "m", second: "s",
	},
	Chinese: {
		firing:    map[alert.Severity]string{alert.Critical: "严重告警", alert.Warning: "警告"},
		resolved:  "已恢复",
		severity:  map[alert.Severity]string{alert.Critical: "严重", alert.Warning: "警告"},
		fSeverity: "级别", fRule: "规则", fLabels: "对象", fValue: "当前值",
		fSince: "开始时间", fEnded: "恢复时间", fWindow: "统计窗口", details: "查看明细",
		threshold: "阈值", baseline: "基线",
		ago: "已持续 %s", lasted: "共持续 %s",
		colon: "：", sep: "，", lparen: "（", rparen: "）",
		day: "天", hour: "小时", minute: "分钟", second: "秒",
		withEnglishSeverity: true,
	},
}

// compose words alert a in language lang, times in loc, durations up to now.
func compose(a alert.Alert, lang string, loc *time.Location, now time.Time) message {
	w := languages[lang]
	if w == nil {
		w = languages[English]
	}
	labels := labelText(a.Labels, ", ")
	m := message{state: a.State, severity: a.Severity, summary: a.Summary, details: w.details, link: a.Link, colon: w.colon}

	tag := w.firing[a.Severity]
	if tag == "" {
		tag = strings.ToUpper(string(a.Severity))
	}
	if a.State == alert.Resolved {
		tag = w.resolved
	}
	m.title = "[tollgate] " + tag + w.colon + a.Rule
	if labels != "" {
		m.title += w.lparen + labels + w.rparen
	}

	sev := w.severity[a.Severity]
	if sev == "" {
		sev = string(a.Severity)
	} else if w.withEnglishSeverity {
		sev += w.lparen + string(a.Severity) + w.rparen
	}
	m.add(w.fSeverity, sev)
	m.add(w.fRule, a.Rule)
	if labels != "" {
		m.add(w.fLabels, labels)
	}

	value := formatValue(a.Value, a.Unit)
	refs := []string{w.threshold + " " + formatValue(a.Threshold, a.Unit)}
	if a.Baseline != 0 {
		refs = append(refs, w.baseline+" "+formatValue(a.Baseline, a.Unit))
	}
	m.add(w.fValue, value+w.lparen+strings.Join(refs, w.sep)+w.rparen)

	if !a.StartsAt.IsZero() {
		since := formatTime(a.StartsAt, loc)
		if a.State != alert.Resolved {
			since += w.lparen + fmt.Sprintf(w.ago, humanDuration(now.Sub(a.StartsAt), w)) + w.rparen
		}
		m.add(w.fSince, since)
	}
	if a.State == alert.Resolved && !a.EndsAt.IsZero() {
		ended := formatTime(a.EndsAt, loc)
		if !a.StartsAt.IsZero() {
			ended += w.lparen + fmt.Sprintf(w.lasted, humanDuration(a.EndsAt.Sub(a.StartsAt), w)) + w.rparen
		}
		m.add(w.fEnded, ended)
	}
	if !a.From.IsZero() && !a.To.IsZero() {
		m.add(w.fWindow, formatWindow(a.From, a.To, loc)+w.lparen+humanDuration(a.To.Sub(a.From), w)+w.rparen)
	}
	return m
}

func (m *message) add(name, value string) { m.fields = append(m.fields, field{name, value}) }

// labelText is the labels as k=v, sorted by key.
func labelText(labels map[string]string, sep string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		parts = append(parts, k+"="+labels[k])
	}
	return strings.Join(parts, sep)
}

// formatValue is a figure with its unit; a ratio reads as a percentage.
func formatValue(v float64, unit string) string {
	if unit == "ratio" {
		return formatNumber(v*100) + "%"
	}
	s := formatNumber(v)
	if unit != "" {
		s += " " + unit
	}
	return s
}

// formatNumber keeps four significant digits, and whole numbers whole.
func formatNumber(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return strconv.FormatFloat(v, 'g', -1, 64)
	case math.Abs(v) >= 1e4:
		return strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

const timeLayout = "2006-01-02 15:04:05 MST"

func formatTime(t time.Time, loc *time.Location) string { return t.In(loc).Format(timeLayout) }

// formatWindow is from–to, with the date once when both fall on one day.
func formatWindow(from, to time.Time, loc *time.Location) string {
	from, to = from.In(loc), to.In(loc)
	if from.Format(time.DateOnly) == to.Format(time.DateOnly) {
		return from.Format(time.DateTime) + " – " + to.Format("15:04:05 MST")
	}
	return from.Format(timeLayout) + " – " + to.Format(timeLayout)
}

// humanDuration is d in at most its two largest units, rounded to the
// second: "45s", "12m", "1h5m", "2d3h"; "1小时5分钟" in Chinese.
func humanDuration(d time.Duration, w *words) string {
	s := int64(max(d.Round(time.Second), 0) / time.Second)
	units := []struct {
		n    int64
		name string
	}{{s / 86400, w.day}, {s / 3600 % 24, w.hour}, {s / 60 % 60, w.minute}, {s % 60, w.second}}
	i := 0
	for i < len(units)-1 && units[i].n == 0 {
		i++
	}
	out := strconv.FormatInt(units[i].n, 10) + units[i].name
	if i+1 < len(units) && units[i+1].n > 0 {
		out += strconv.FormatInt(units[i+1].n, 10) + units[i+1].name
	}
	return out
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// truncateRunes cuts s to at most n characters, marking the cut.
func truncateRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// isWebLink reports whether a link can be opened from a chat message.
func isWebLink(link string) bool {
	u, err := url.Parse(link)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// markdown renders the message body for the markdown dialects of
// DingTalk, Feishu cards and WeCom: bold field names, a link when the
// link is absolute (a relative one is shown as text).
func (m message) markdown() string {
	var b strings.Builder
	if m.summary != "" {
		b.WriteString(m.summary + "\n\n")
	}
	for _, f := range m.fields {
		fmt.Fprintf(&b, "- **%s**%s%s\n", f.name, m.colon, f.value)
	}
	if m.link != "" {
		if isWebLink(m.link) {
			fmt.Fprintf(&b, "\n[%s](%s)\n", m.details, m.link)
		} else {
			fmt.Fprintf(&b, "\n%s%s`%s`\n", m.details, m.colon, m.link)
		}
	}
	return b.String()
}

// DingTalk robot: {"msgtype":"markdown","markdown":{"title","text"}};
// title is what the notification preview shows.
type dingtalkMessage struct {
	MsgType  string `json:"msgtype"`
	Markdown struct {
		Title string `json:"title"`
		Text  string `json:"text"`
	} `json:"markdown"`
}

func dingtalkPayload(m message) dingtalkMessage {
	var p dingtalkMessage
	p.MsgType = "markdown"
	p.Markdown.Title = m.title
	p.Markdown.Text = "#### " + m.title + "\n\n" + m.markdown()
	return p
}

// signDingTalk adds timestamp (ms) and sign to a DingTalk robot URL:
// sign = base64(HMAC-SHA256(key=secret, timestamp+"\n"+secret)).
func signDingTalk(raw, secret string, now time.Time) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("notify: dingtalk URL does not parse")
	}
	ts := strconv.FormatInt(now.UnixMilli(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "\n" + secret))
	q := u.Query()
	q.Set("timestamp", ts)
	q.Set("sign", base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// Feishu/Lark custom bot: an interactive card whose header carries the
// title, coloured by severity, and one markdown element; timestamp and
// sign sit beside msg_type when the bot checks signatures.
type feishuMessage struct {
	Timestamp string     `json:"timestamp,omitempty"`
	Sign      string     `json:"sign,omitempty"`
	MsgType   string     `json:"msg_type"`
	Card      feishuCard `json:"card"`
}

type feishuCard struct {
	Config struct {
		WideScreenMode bool `json:"wide_screen_mode"`
	} `json:"config"`
	Header struct {
		Title    feishuText `json:"title"`
		Template string     `json:"template"`
	} `json:"header"`
	Elements []feishuElement `json:"elements"`
}

type feishuText struct {
	Tag     string `json:"tag"`
	Content string `json:"content"`
}

type feishuElement struct {
	Tag     string `json:"tag"`
	Content string `json:"content"`
}

func feishuPayload(m message, secret string, now time.Time) feishuMessage {
	p := feishuMessage{MsgType: "interactive"}
	p.Card.Config.WideScreenMode = true
	p.Card.Header.Title = feishuText{Tag: "plain_text", Content: m.title}
	p.Card.Header.Template = colour(m, "red", "orange", "green")
	p.Card.Elements = []feishuElement{{Tag: "markdown", Content: m.markdown()}}
	if secret != "" {
		p.Timestamp, p.Sign = signFeishu(secret, now)
	}
	return p
}

// signFeishu is the timestamp (seconds) and sign of a Feishu request:
// sign = base64(HMAC-SHA256(key=timestamp+"\n"+secret, empty message)).
func signFeishu(secret string, now time.Time) (ts, sign string) {
	ts = strconv.FormatInt(now.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(ts+"\n"+secret))
	return ts, base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// colour picks by state and severity: critical, warning, resolved.
func colour(m message, critical, warning, resolved string) string {
	switch {
	case m.state == alert.Resolved:
		return resolved
	case m.severity == alert.Critical:
		return critical
	}
	return warning
}

// WeCom group robot: {"msgtype":"markdown","markdown":{"content"}},
// content at most 4096 bytes; <font color> has info (green), comment
// (grey) and warning (orange-red).
type wecomMessage struct {
	MsgType  string `json:"msgtype"`
	Markdown struct {
		Content string `json:"content"`
	} `json:"markdown"`
}

func wecomPayload(m message) wecomMessage {
	var p wecomMessage
	p.MsgType = "markdown"
	head := fmt.Sprintf("## <font color=\"%s\">%s</font>\n", colour(m, "warning", "warning", "info"), m.title)
	p.Markdown.Content = truncate(head+m.markdown(), wecomMaxBytes)
	return p
}

// Slack incoming webhook: text is the whole message in mrkdwn (what the
// notification shows, and all that Slack-compatible services such as
// Mattermost read), blocks the header and body for Slack itself.
type slackMessage struct {
	Text   string       `json:"text"`
	Blocks []slackBlock `json:"blocks"`
}

type slackBlock struct {
	Type string    `json:"type"`
	Text slackText `json:"text"`
}

type slackText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

func slackPayload(m message) slackMessage {
	var b strings.Builder
	if m.summary != "" {
		b.WriteString(slackEscape(m.summary) + "\n")
	}
	for _, f := range m.fields {
		fmt.Fprintf(&b, "*%s:* %s\n", slackEscape(f.name), slackEscape(f.value))
	}
	if m.link != "" {
		if isWebLink(m.link) {
			fmt.Fprintf(&b, "<%s|%s>\n", slackURL.Replace(m.link), slackEscape(m.details))
		} else {
			fmt.Fprintf(&b, "*%s:* `%s`\n", slackEscape(m.details), slackEscape(m.link))
		}
	}
	body := strings.TrimSuffix(b.String(), "\n")
	return slackMessage{
		Text: "*" + slackEscape(m.title) + "*\n" + body,
		Blocks: []slackBlock{
			{Type: "header", Text: slackText{Type: "plain_text", Text: truncateRunes(m.title, slackMaxHeader)}},
			{Type: "section", Text: slackText{Type: "mrkdwn", Text: truncateRunes(body, slackMaxSection)}},
		},
	}
}

// slackURL keeps a URL from ending Slack's <url|text> markup early.
var slackURL = strings.NewReplacer("<", "%3C", ">", "%3E", "|", "%7C")

// slackEscape escapes the three characters Slack's mrkdwn reserves.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// vendorReply is the JSON reply of DingTalk and WeCom (errcode, errmsg)
// and of Feishu (code, msg; StatusCode, StatusMessage in older replies).
type vendorReply struct {
	ErrCode       *int   `json:"errcode"`
	ErrMsg        string `json:"errmsg"`
	Code          *int   `json:"code"`
	Msg           string `json:"msg"`
	StatusCode    *int   `json:"StatusCode"`
	StatusMessage string `json:"StatusMessage"`
}

// rateLimitCodes are the vendor codes that mean "too many requests",
// worth a retry after a backoff.
var rateLimitCodes = map[string][]int{
	TypeDingTalk: {130101},      // send too fast
	TypeWeCom:    {45009},       // API frequency out of limit
	TypeFeishu:   {9499, 11232}, // too many request / frequency limited
}

// vendorError reads the error code of a DingTalk, Feishu or WeCom reply:
// nil when it says success (or the type has no such codes), else an error
// with the vendor's own message, and whether the code means rate limited.
// These robots answer HTTP 200 even when they refuse a message, so a
// reply without a code is an error too.
func vendorError(typ string, body []byte) (rateLimited bool, err error) {
	if typ != TypeDingTalk && typ != TypeFeishu && typ != TypeWeCom {
		return false, nil
	}
	var r vendorReply
	if err := json.Unmarshal(body, &r); err != nil {
		return false, fmt.Errorf("%s reply is not JSON: %s", typ, snippet(body))
	}
	var code *int
	var msg string
	switch {
	case r.ErrCode != nil:
		code, msg = r.ErrCode, r.ErrMsg
	case r.Code != nil:
		code, msg = r.Code, r.Msg
	case r.StatusCode != nil:
		code, msg = r.StatusCode, r.StatusMessage
	default:
		return false, fmt.Errorf("%s reply has no error code: %s", typ, snippet(body))
	}
	if *code == 0 {
		return false, nil
	}
	return slices.Contains(rateLimitCodes[typ], *code), fmt.Errorf("%s error %d: %s", typ, *code, msg)
}

// logAlert is the log notifier: one line per alert, its title as the
// message and the figures as attributes.
func (d *Dispatcher) logAlert(w *worker, a alert.Alert, now time.Time) {
	m := compose(a, w.language(), d.loc, now)
	level := slog.LevelWarn
	if a.State == alert.Resolved {
		level = slog.LevelInfo
	}
	attrs := []any{"notifier", w.Name, "rule", a.Rule, "severity", a.Severity, "state", a.State,
		"labels", labelText(a.Labels, ","), "value", a.Value, "threshold", a.Threshold}
	if a.Baseline != 0 {
		attrs = append(attrs, "baseline", a.Baseline)
	}
	if a.Unit != "" {
		attrs = append(attrs, "unit", a.Unit)
	}
	attrs = append(attrs, "starts_at", a.StartsAt)
	if !a.EndsAt.IsZero() {
		attrs = append(attrs, "ends_at", a.EndsAt)
	}
	attrs = append(attrs, "from", a.From, "to", a.To)
	if a.Link != "" {
		attrs = append(attrs, "link", a.Link)
	}
	if a.Summary != "" {
		attrs = append(attrs, "summary", a.Summary)
	}
	d.log.Log(d.ctx, level, m.title, attrs...)
}
