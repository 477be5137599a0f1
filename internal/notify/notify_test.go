package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"

	"github.com/tollgate-dev/tollgate/internal/alert"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// server is a loopback HTTP server that records every request and
// answers with reply, given the request's 1-based number.
type server struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []received
}

type received struct {
	path   string
	query  url.Values
	raw    string // the raw query
	header http.Header
	body   []byte
}

// newServer starts a server; with reply nil it answers 200 "ok".
func newServer(t *testing.T, reply func(n int, w http.ResponseWriter, r *http.Request)) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.reqs = append(s.reqs, received{r.URL.Path, r.URL.Query(), r.URL.RawQuery, r.Header.Clone(), body})
		n := len(s.reqs)
		s.mu.Unlock()
		if reply == nil {
			io.WriteString(w, "ok")
			return
		}
		reply(n, w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) requests() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

// answer is a reply that writes status and body, whatever the request.
func answer(status int, body string) func(int, http.ResponseWriter, *http.Request) {
	return func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// okBody is what each type's service answers on success.
var okBody = map[string]string{
	TypeWebhook:  "",
	TypeSlack:    "ok",
	TypeDingTalk: `{"errcode":0,"errmsg":"ok"}`,
	TypeWeCom:    `{"errcode":0,"errmsg":"ok"}`,
	TypeFeishu:   `{"code":0,"data":{},"msg":"success"}`,
}

// logBuffer collects log output from several goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// harness is a Dispatcher with its registry and log.
type harness struct {
	*Dispatcher
	reg *prometheus.Registry
	log *logBuffer
}

// start makes a Dispatcher. Inside a synctest bubble pass bubble true: its
// client then keeps no idle connections, whose reading goroutines would
// keep the bubble from ever being idle (and the fake clock from moving).
func start(t *testing.T, cfg Config, opts Options, bubble bool) *harness {
	t.Helper()
	h := &harness{reg: prometheus.NewRegistry(), log: &logBuffer{}}
	opts.Registerer = h.reg
	opts.Log = slog.New(slog.NewTextHandler(h.log, nil))
	if bubble && opts.Client == nil {
		opts.Client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	}
	d, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	h.Dispatcher = d
	t.Cleanup(func() { d.Close() })
	return h
}

// count is tollgate_notifications_total for one notifier and result.
func (h *harness) count(t *testing.T, notifier, result string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "tollgate_notifications_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["notifier"] == notifier && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no tollgate_notifications_total{notifier=%q,result=%q}", notifier, result)
	return 0
}

// counts checks sent, failed and dropped of one notifier.
func (h *harness) counts(t *testing.T, notifier string, sent, failed, dropped float64) {
	t.Helper()
	got := [3]float64{h.count(t, notifier, ResultSent), h.count(t, notifier, ResultFailed), h.count(t, notifier, ResultDropped)}
	if want := [3]float64{sent, failed, dropped}; got != want {
		t.Errorf("%s: sent, failed, dropped = %v; want %v", notifier, got, want)
	}
}

func (h *harness) status(t *testing.T, name string) Status {
	t.Helper()
	for _, s := range h.Status() {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no status for %q", name)
	return Status{}
}

// sample is an alert that started 12 minutes ago over the last 5 minutes.
func sample(sev alert.Severity, state alert.State) alert.Alert {
	now := time.Now()
	a := alert.Alert{
		Rule:        "ttft_p95_high",
		Severity:    sev,
		State:       state,
		Labels:      map[string]string{"model": "qwen2.5-7b", "biz_line": "search"},
		Summary:     "p95 time to first token of qwen2.5-7b is 3.2 s, above 2 s: look at the engine's queue.",
		Value:       3.2,
		Threshold:   2,
		Baseline:    1.1,
		Unit:        "s",
		StartsAt:    now.Add(-12 * time.Minute),
		From:        now.Add(-5 * time.Minute),
		To:          now,
		Link:        "/api/v1/requests?model=qwen2.5-7b&slow=1",
		Fingerprint: "f00d",
	}
	if state == alert.Resolved {
		a.EndsAt = now
	}
	return a
}

func TestValidate(t *testing.T) {
	ok := Target{Name: "ok", Type: TypeWebhook, URL: "https://hooks.example.com/x"}
	cases := []struct {
		name string
		t    Target
		want string
	}{
		{"no name", Target{Type: TypeLog}, "notifiers[1].name: required"},
		{"no type", Target{Name: "b", URL: "https://x"}, "notifiers[1].type: required; one of webhook, slack, dingtalk, feishu, wecom, log"},
		{"unknown type", Target{Name: "b", Type: "pagerduty", URL: "https://x"},
			`notifiers[1].type: unknown type "pagerduty"; one of webhook, slack, dingtalk, feishu, wecom, log`},
		{"no url", Target{Name: "b", Type: TypeDingTalk}, "notifiers[1].url: required for type dingtalk"},
		{"url for log", Target{Name: "b", Type: TypeLog, URL: "https://x"}, "notifiers[1].url: not used by type log"},
		{"scheme", Target{Name: "b", Type: TypeWeCom, URL: "ftp://x/?key=SECRET"}, `notifiers[1].url: scheme must be http or https; got "ftp"`},
		{"no host", Target{Name: "b", Type: TypeSlack, URL: "https:///services/SECRET"}, "notifiers[1].url: has no host"},
		{"unparsable", Target{Name: "b", Type: TypeSlack, URL: "https://x/%zzSECRET"}, "notifiers[1].url: not a URL"},
		{"secret elsewhere", Target{Name: "b", Type: TypeSlack, URL: "https://x", Secret: "s"}, "notifiers[1].secret: only dingtalk and feishu sign their requests"},
		{"severity", Target{Name: "b", Type: TypeLog, Severities: []alert.Severity{alert.Critical, "info"}},
			`notifiers[1].severities[1]: unknown severity "info"; one of warning, critical`},
		{"headers elsewhere", Target{Name: "b", Type: TypeSlack, URL: "https://x", Headers: map[string]string{"X-A": "1"}},
			"notifiers[1].headers: only type webhook sends headers"},
		{"header name", Target{Name: "b", Type: TypeWebhook, URL: "https://x", Headers: map[string]string{"Bad Name": "1"}},
			"notifiers[1].headers.Bad Name: not a valid header name"},
		{"header value", Target{Name: "b", Type: TypeWebhook, URL: "https://x", Headers: map[string]string{"X-A": "a\nb"}},
			"notifiers[1].headers.X-A: not a valid header value"},
		{"timeout", Target{Name: "b", Type: TypeLog, Timeout: -time.Second}, "notifiers[1].timeout: must not be negative"},
		{"language", Target{Name: "b", Type: TypeLog, Language: "fr"}, `notifiers[1].language: unknown language "fr"; one of en, zh`},
		{"duplicate", Target{Name: "ok", Type: TypeLog}, `notifiers[1].name: "ok" is already the name of notifiers[0]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Config{ok, c.t}.Validate("notifiers")
			if err == nil {
				t.Fatalf("no error; want %q", c.want)
			}
			if err.Error() != c.want {
				t.Errorf("error\n%s\nwant\n%s", err, c.want)
			}
			if strings.Contains(err.Error(), "SECRET") {
				t.Errorf("error quotes the URL: %s", err)
			}
		})
	}

	t.Run("several", func(t *testing.T) {
		err := Config{{Name: "a", Type: TypeDingTalk}, {Type: "x"}}.Validate("notifiers")
		for _, want := range []string{"notifiers[0].url: required for type dingtalk", "notifiers[1].name: required", `notifiers[1].type: unknown type "x"`} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error %v; want it to say %q", err, want)
			}
		}
	})
}

func TestConfigYAML(t *testing.T) {
	const doc = `
- name: oncall-ding
  type: dingtalk
  url: https://oapi.dingtalk.com/robot/send?access_token=abc
  secret: SEC123
  severities: [critical]
  timeout: 5s
- name: audit
  type: webhook
  url: https://hooks.example.com/alerts
  headers: {Authorization: Bearer t0k}
  send_resolved: false
- name: logs
  type: log
`
	var c Config
	if err := yaml.Unmarshal([]byte(doc), &c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate("notifiers"); err != nil {
		t.Fatal(err)
	}
	if len(c) != 3 {
		t.Fatalf("%d notifiers; want 3", len(c))
	}
	if c[0].Secret != "SEC123" || c[0].Timeout != 5*time.Second || !slices.Equal(c[0].Severities, []alert.Severity{alert.Critical}) || c[0].SendResolved != nil {
		t.Errorf("notifiers[0] = %+v", c[0])
	}
	if c[1].Headers["Authorization"] != "Bearer t0k" || c[1].SendResolved == nil || *c[1].SendResolved {
		t.Errorf("notifiers[1] = %+v", c[1])
	}
	if c[0].language() != Chinese || c[2].language() != English {
		t.Errorf("default languages %s, %s; want zh, en", c[0].language(), c[2].language())
	}
}

func TestNewRejects(t *testing.T) {
	if _, err := New(Config{{Name: "a", Type: "x"}}, Options{}); err == nil || !strings.Contains(err.Error(), "notifiers[0].type") {
		t.Errorf("bad config: %v", err)
	}
	if _, err := New(Config{{Name: "a", Type: TypeLog}}, Options{BaseURL: "tollgate.local"}); err == nil {
		t.Error("a base URL without scheme was accepted")
	}
}

// TestRouting: each notifier gets the severities it takes, resolved
// alerts only if send_resolved, and pending alerts never.
func TestRouting(t *testing.T) {
	srv := newServer(t, nil)
	no := false
	cfg := Config{
		{Name: "critical-only", Type: TypeWebhook, URL: srv.URL + "/critical", Severities: []alert.Severity{alert.Critical}},
		{Name: "all", Type: TypeWebhook, URL: srv.URL + "/all"},
		{Name: "no-resolved", Type: TypeWebhook, URL: srv.URL + "/quiet", SendResolved: &no},
	}
	synctest.Test(t, func(t *testing.T) {
		h := start(t, cfg, Options{}, true)
		for _, a := range []alert.Alert{
			sample(alert.Warning, alert.Firing),
			sample(alert.Critical, alert.Firing),
			sample(alert.Critical, alert.Resolved),
			sample(alert.Warning, alert.Resolved),
			sample(alert.Critical, alert.Pending),
		} {
			h.Notify(t.Context(), a)
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		h.counts(t, "critical-only", 2, 0, 0)
		h.counts(t, "all", 4, 0, 0)
		h.counts(t, "no-resolved", 2, 0, 0)
	})
	got := map[string][]string{}
	for _, r := range srv.requests() {
		var a alert.Alert
		if err := json.Unmarshal(r.body, &a); err != nil {
			t.Fatal(err)
		}
		got[r.path] = append(got[r.path], string(a.Severity)+"/"+string(a.State))
	}
	want := map[string][]string{
		"/critical": {"critical/firing", "critical/resolved"},
		"/all":      {"warning/firing", "critical/firing", "critical/resolved", "warning/resolved"},
		"/quiet":    {"warning/firing", "critical/firing"},
	}
	for path, w := range want {
		if !slices.Equal(got[path], w) {
			t.Errorf("%s got %v; want %v", path, got[path], w)
		}
	}
}

// TestRetryThenSuccess: two 500s, then 200: delivered once, after backoffs
// of 1s and 2s on the fake clock.
func TestRetryThenSuccess(t *testing.T) {
	srv := newServer(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n <= 2 {
			http.Error(w, "upstream hiccup", http.StatusInternalServerError)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Config{{Name: "hook", Type: TypeWebhook, URL: srv.URL}}, Options{BaseDelay: time.Second}, true)
		begin := time.Now()
		h.Notify(t.Context(), sample(alert.Critical, alert.Firing))
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(begin); d != 3*time.Second {
			t.Errorf("delivered after %v; want 1s + 2s of backoff", d)
		}
		h.counts(t, "hook", 1, 0, 0)
		st := h.status(t, "hook")
		if st.Sent != 1 || !st.LastSuccess.Equal(begin.Add(3*time.Second)) || st.LastError != "" {
			t.Errorf("status %+v", st)
		}
		if strings.Contains(h.log.String(), "failed") {
			t.Errorf("a retried success was logged as a failure:\n%s", h.log)
		}
	})
	if n := len(srv.requests()); n != 3 {
		t.Errorf("%d requests; want 3", n)
	}
}

// TestRetryGivesUp: a server that keeps failing gets Attempts requests,
// then the alert counts as failed with the server's words, and is logged.
func TestRetryGivesUp(t *testing.T) {
	srv := newServer(t, answer(http.StatusServiceUnavailable, "maintenance window"))
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Config{{Name: "hook", Type: TypeWebhook, URL: srv.URL}}, Options{Attempts: 3}, true)
		h.Notify(t.Context(), sample(alert.Critical, alert.Firing))
		h.Close()
		h.counts(t, "hook", 0, 1, 0)
		st := h.status(t, "hook")
		if st.LastError != "HTTP 503: maintenance window" || st.LastFailure.IsZero() {
			t.Errorf("status %+v", st)
		}
		if log := h.log.String(); !strings.Contains(log, `msg="alert notification failed"`) || !strings.Contains(log, "attempts=3") {
			t.Errorf("log:\n%s", log)
		}
	})
	if n := len(srv.requests()); n != 3 {
		t.Errorf("%d requests; want 3", n)
	}
}

// TestClientErrorNotRetried: a 4xx other than 429 is the request's fault;
// sending it again cannot help.
func TestClientErrorNotRetried(t *testing.T) {
	for _, status := range []int{http.StatusBadRequest, http.StatusForbidden, http.StatusNotFound} {
		srv := newServer(t, answer(status, "invalid_payload"))
		synctest.Test(t, func(t *testing.T) {
			h := start(t, Config{{Name: "slack", Type: TypeSlack, URL: srv.URL}}, Options{}, true)
			h.Notify(t.Context(), sample(alert.Warning, alert.Firing))
			h.Close()
			h.counts(t, "slack", 0, 1, 0)
			if st := h.status(t, "slack"); !strings.Contains(st.LastError, "invalid_payload") {
				t.Errorf("status %+v", st)
			}
		})
		if n := len(srv.requests()); n != 1 {
			t.Errorf("HTTP %d: %d requests; want 1", status, n)
		}
	}
}

// TestRetryAfter: a 429's (or 503's) Retry-After is waited, not the
// shorter backoff.
func TestRetryAfter(t *testing.T) {
	for _, c := range []struct {
		status int
		after  time.Duration
	}{{http.StatusTooManyRequests, 30 * time.Second}, {http.StatusServiceUnavailable, 20 * time.Second}} {
		srv := newServer(t, func(n int, w http.ResponseWriter, _ *http.Request) {
			if n == 1 {
				w.Header().Set("Retry-After", strconv.Itoa(int(c.after/time.Second)))
				http.Error(w, "slow down", c.status)
			}
		})
		synctest.Test(t, func(t *testing.T) {
			h := start(t, Config{{Name: "hook", Type: TypeWebhook, URL: srv.URL}},
				Options{BaseDelay: time.Second, DrainTimeout: time.Minute}, true)
			begin := time.Now()
			h.Notify(t.Context(), sample(alert.Critical, alert.Firing))
			// Advance the fake clock to just before Retry-After ends: no retry yet.
			time.Sleep(c.after - time.Second)
			synctest.Wait()
			if n := len(srv.requests()); n != 1 {
				t.Errorf("HTTP %d: %d requests before Retry-After passed; want 1", c.status, n)
			}
			if err := h.Close(); err != nil {
				t.Fatal(err)
			}
			if d := h.status(t, "hook").LastSuccess.Sub(begin); d != c.after {
				t.Errorf("HTTP %d: delivered %v after the alert; want Retry-After's %v", c.status, d, c.after)
			}
			h.counts(t, "hook", 1, 0, 0)
		})
		if n := len(srv.requests()); n != 2 {
			t.Errorf("HTTP %d: %d requests; want 2", c.status, n)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":                              0,
		"120":                           2 * time.Minute,
		"-5":                            0,
		"soon":                          0,
		"Fri, 01 May 2026 10:00:45 GMT": 45 * time.Second,
		"Fri, 01 May 2026 09:00:00 GMT": 0,
	} {
		if got := retryAfter(v, now); got != want {
			t.Errorf("retryAfter(%q) = %v; want %v", v, got, want)
		}
	}
}

// TestVendorErrorCodes: DingTalk, Feishu and WeCom refuse a message with
// HTTP 200 and an error code in the body. That is a failure with the
// vendor's message; a "too many requests" code is retried.
func TestVendorErrorCodes(t *testing.T) {
	cases := []struct {
		typ      string
		reply    func(int, http.ResponseWriter, *http.Request)
		requests int
		sent     bool
		lastErr  string
	}{
		{TypeDingTalk, answer(200, `{"errcode":310000,"errmsg":"keywords not in content"}`), 1, false,
			"dingtalk error 310000: keywords not in content"},
		{TypeWeCom, answer(200, `{"errcode":93000,"errmsg":"invalid webhook url"}`), 1, false,
			"wecom error 93000: invalid webhook url"},
		{TypeFeishu, answer(200, `{"code":19021,"data":{},"msg":"sign match fail or timestamp is not within one hour from current time"}`), 1, false,
			"feishu error 19021: sign match fail or timestamp is not within one hour from current time"},
		{TypeFeishu, answer(200, `{"Extra":null,"StatusCode":19001,"StatusMessage":"param invalid: incoming webhook access token invalid"}`), 1, false,
			"feishu error 19001: param invalid: incoming webhook access token invalid"},
		{TypeDingTalk, answer(200, `<html>captive portal</html>`), 1, false,
			"dingtalk reply is not JSON: <html>captive portal</html>"},
		{TypeWeCom, answer(200, `{}`), 1, false, "wecom reply has no error code: {}"},
		// Rate limited: retried, then delivered.
		{TypeDingTalk, func(n int, w http.ResponseWriter, _ *http.Request) {
			if n == 1 {
				io.WriteString(w, `{"errcode":130101,"errmsg":"send too fast, exceed 20 times per minute"}`)
				return
			}
			io.WriteString(w, okBody[TypeDingTalk])
		}, 2, true, ""},
		{TypeFeishu, func(n int, w http.ResponseWriter, _ *http.Request) {
			if n == 1 {
				w.WriteHeader(http.StatusBadRequest)
				io.WriteString(w, `{"code":9499,"msg":"too many request","data":{}}`)
				return
			}
			io.WriteString(w, okBody[TypeFeishu])
		}, 2, true, ""},
	}
	for _, c := range cases {
		srv := newServer(t, c.reply)
		synctest.Test(t, func(t *testing.T) {
			h := start(t, Config{{Name: "robot", Type: c.typ, URL: srv.URL}}, Options{}, true)
			h.Notify(t.Context(), sample(alert.Critical, alert.Firing))
			h.Close()
			if c.sent {
				h.counts(t, "robot", 1, 0, 0)
			} else {
				h.counts(t, "robot", 0, 1, 0)
			}
			if st := h.status(t, "robot"); st.LastError != c.lastErr {
				t.Errorf("%s: last error %q; want %q", c.typ, st.LastError, c.lastErr)
			}
			if c.lastErr != "" && !strings.Contains(h.log.String(), c.lastErr) {
				t.Errorf("%s: the log does not say %q:\n%s", c.typ, c.lastErr, h.log)
			}
		})
		if n := len(srv.requests()); n != c.requests {
			t.Errorf("%s: %d requests; want %d", c.typ, n, c.requests)
		}
	}
}

// TestErrorsHideURL: robot URLs carry their token; a connection error
// must not bring it into the log or Status.
func TestErrorsHideURL(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	dead := srv.URL + "/cgi-bin/webhook/send?key=SECRET-TOKEN"
	srv.Close() // nothing listens there now
	h := start(t, Config{{Name: "wecom", Type: TypeWeCom, URL: dead}}, Options{Attempts: 1}, false)
	h.Notify(t.Context(), sample(alert.Critical, alert.Firing))
	h.Close()
	st := h.status(t, "wecom")
	if st.Failed != 1 || st.LastError == "" {
		t.Fatalf("status %+v", st)
	}
	if strings.Contains(st.LastError, "SECRET") || strings.Contains(h.log.String(), "SECRET") {
		t.Errorf("the token leaked:\n%s\n%s", st.LastError, h.log)
	}
}

// TestQueueFull: while the notifier is stuck on one alert, QueueSize more
// wait and the next is dropped, counted and logged; Notify never blocks.
func TestQueueFull(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	srv := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			close(entered)
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	})
	t.Cleanup(releaseOnce)
	h := start(t, Config{{Name: "hook", Type: TypeWebhook, URL: srv.URL}}, Options{QueueSize: 2}, false)

	h.Notify(t.Context(), sample(alert.Critical, alert.Firing))
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first alert never reached the server")
	}
	for range 3 {
		h.Notify(t.Context(), sample(alert.Critical, alert.Firing))
	}
	h.counts(t, "hook", 0, 0, 1)
	if st := h.status(t, "hook"); st.Queued != 2 || st.Dropped != 1 {
		t.Errorf("status %+v; want 2 queued, 1 dropped", st)
	}
	if log := h.log.String(); !strings.Contains(log, `msg="alert notification dropped"`) || !strings.Contains(log, `reason="queue full"`) {
		t.Errorf("log:\n%s", log)
	}

	releaseOnce()
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	h.counts(t, "hook", 3, 0, 1)
	if n := len(srv.requests()); n != 3 {
		t.Errorf("%d requests; want 3", n)
	}
}

// TestCloseDrains: Close delivers everything queued before it returns;
// alerts after Close are dropped.
func TestCloseDrains(t *testing.T) {
	srv := newServer(t, nil)
	cfg := Config{
		{Name: "a", Type: TypeWebhook, URL: srv.URL + "/a"},
		{Name: "b", Type: TypeSlack, URL: srv.URL + "/b"},
	}
	h := start(t, cfg, Options{QueueSize: 100}, false)
	for range 50 {
		h.Notify(t.Context(), sample(alert.Warning, alert.Firing))
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	h.counts(t, "a", 50, 0, 0)
	h.counts(t, "b", 50, 0, 0)
	if n := len(srv.requests()); n != 100 {
		t.Errorf("%d requests; want 100", n)
	}

	h.Notify(t.Context(), sample(alert.Warning, alert.Firing))
	h.counts(t, "a", 50, 0, 1)
	if !strings.Contains(h.log.String(), `reason="dispatcher closed"`) {
		t.Errorf("log:\n%s", h.log)
	}
	if err := h.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestCloseDeadline: a server that never answers cannot hold Close past
// DrainTimeout; what was lost is counted and Close says so.
func TestCloseDeadline(t *testing.T) {
	entered := make(chan struct{}, 1)
	srv := newServer(t, func(_ int, _ http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-r.Context().Done() // until the client gives up
	})
	h := start(t, Config{{Name: "hook", Type: TypeWebhook, URL: srv.URL}}, Options{DrainTimeout: 200 * time.Millisecond}, false)
	for range 3 {
		h.Notify(t.Context(), sample(alert.Critical, alert.Firing))
	}
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first alert never reached the server")
	}
	err := h.Close()
	if err == nil || !strings.Contains(err.Error(), "3 alert notifications not delivered") {
		t.Errorf("Close: %v", err)
	}
	h.counts(t, "hook", 0, 1, 2) // the one in flight failed, two never left
}

// TestRun: Run returns when its context ends, after closing.
func TestRun(t *testing.T) {
	h := start(t, Config{{Name: "log", Type: TypeLog}}, Options{}, false)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- h.Run(ctx) }()
	h.Notify(ctx, sample(alert.Critical, alert.Firing))
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	h.counts(t, "log", 1, 0, 0)
}

func TestAbsolute(t *testing.T) {
	for _, c := range []struct{ base, link, want string }{
		{"", "/api/v1/requests?x=1", "/api/v1/requests?x=1"},
		{"https://tg.example.com", "/api/v1/requests?x=1", "https://tg.example.com/api/v1/requests?x=1"},
		{"https://tg.example.com/tollgate", "api/v1/requests", "https://tg.example.com/tollgate/api/v1/requests"},
		{"https://tg.example.com", "http://elsewhere/x", "http://elsewhere/x"},
		{"https://tg.example.com", "", ""},
	} {
		base := strings.TrimSuffix(c.base, "/")
		if got := absolute(base, c.link); got != c.want {
			t.Errorf("absolute(%q, %q) = %q; want %q", c.base, c.link, got, c.want)
		}
	}
}
