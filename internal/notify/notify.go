// Package notify delivers alerts to people. It sits after internal/alert:
// the evaluator hands every firing and resolved alert to a Dispatcher (an
// alert.Notifier), which routes it by severity to the configured notifiers
// — a generic JSON webhook, a Slack-compatible incoming webhook, a DingTalk,
// Feishu/Lark or WeCom group robot, or the log — and delivers it in the
// background, so that a slow or dead chat service never holds up evaluation.
//
// Delivery is best effort and visible when it fails. Each notifier has a
// bounded queue and one goroutine that posts what it holds, retrying with
// exponential backoff (and the server's Retry-After on 429). An alert that
// finds the queue full is dropped; one that still fails after its last
// attempt is given up. Both are counted in
// tollgate_notifications_total{notifier,type,result} (result sent, failed
// or dropped), logged, and shown by Dispatcher.Status.
package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http/httpguts"

	"github.com/tollgate-dev/tollgate/internal/alert"
)

// Notifier types.
const (
	TypeWebhook  = "webhook"  // the alert as JSON, for machines
	TypeSlack    = "slack"    // Slack-compatible incoming webhook
	TypeDingTalk = "dingtalk" // DingTalk (钉钉) group robot
	TypeFeishu   = "feishu"   // Feishu/Lark (飞书) custom bot
	TypeWeCom    = "wecom"    // WeCom (企业微信) group robot
	TypeLog      = "log"      // a log line; nothing is sent
)

// Types are the valid notifier types.
var Types = []string{TypeWebhook, TypeSlack, TypeDingTalk, TypeFeishu, TypeWeCom, TypeLog}

// Languages of the messages people read.
const (
	English = "en"
	Chinese = "zh"
)

// Defaults of Options and Target.
const (
	DefaultQueueSize    = 256
	DefaultAttempts     = 5
	DefaultBaseDelay    = time.Second
	DefaultMaxDelay     = time.Minute
	DefaultDrainTimeout = 10 * time.Second
	DefaultTimeout      = 10 * time.Second
)

const (
	// maxRetryAfter caps the wait that a server's Retry-After asks for, so
	// that a wrong header cannot stall a notifier for hours.
	maxRetryAfter = 5 * time.Minute
	// maxReplyBytes bounds what is read of a reply: enough for any vendor's
	// error message.
	maxReplyBytes = 64 << 10
)

// Config is the notifiers section of tollgate's configuration
// (`notifiers: [...]`): one Target per destination.
type Config []Target

// Target is one destination of alerts.
type Target struct {
	// Name identifies the notifier in logs, metrics and Status; unique.
	Name string `yaml:"name"`
	// Type is one of Types.
	Type string `yaml:"type"`
	// URL is where alerts are posted: the robot's or webhook's address,
	// tokens included. Not used by type log.
	URL string `yaml:"url"`
	// Secret signs each request, for DingTalk and Feishu robots whose
	// security setting is "signature" (加签 / 签名校验).
	Secret string `yaml:"secret"`
	// Severities this notifier receives; empty means all.
	Severities []alert.Severity `yaml:"severities"`
	// SendResolved also sends an alert when it resolves; default true.
	SendResolved *bool `yaml:"send_resolved"`
	// Headers are added to each request of a webhook (Authorization, …).
	Headers map[string]string `yaml:"headers"`
	// Timeout bounds one request; default DefaultTimeout.
	Timeout time.Duration `yaml:"timeout"`
	// Language of the message: "en" or "zh". Default "zh" for DingTalk,
	// Feishu and WeCom, "en" otherwise. The webhook sends JSON, not words.
	Language string `yaml:"language"`
}

// Validate checks the section and names the YAML path of every bad value,
// path being where the section sits ("notifiers").
func (c Config) Validate(path string) error {
	var errs []error
	seen := map[string]int{}
	for i, t := range c {
		p := fmt.Sprintf("%s[%d]", path, i)
		if err := t.Validate(p); err != nil {
			errs = append(errs, err)
		}
		if j, dup := seen[t.Name]; dup && t.Name != "" {
			errs = append(errs, fmt.Errorf("%s.name: %q is already the name of %s[%d]", p, t.Name, path, j))
		} else {
			seen[t.Name] = i
		}
	}
	return errors.Join(errs...)
}

// Validate checks one notifier; path names it ("notifiers[1]"). Messages
// never quote the URL or the secret: both may hold credentials.
func (t Target) Validate(path string) error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", path, key, fmt.Sprintf(format, args...)))
	}
	if strings.TrimSpace(t.Name) == "" {
		bad("name", "required")
	}
	valid := "one of " + strings.Join(Types, ", ")
	switch {
	case t.Type == "":
		bad("type", "required; %s", valid)
	case !slices.Contains(Types, t.Type):
		bad("type", "unknown type %q; %s", t.Type, valid)
	}
	switch {
	case t.Type == TypeLog:
		if t.URL != "" {
			bad("url", "not used by type log")
		}
	case t.URL == "":
		if t.Type != "" {
			bad("url", "required for type %s", t.Type)
		} else {
			bad("url", "required")
		}
	default:
		u, err := url.Parse(t.URL)
		switch {
		case err != nil:
			bad("url", "not a URL")
		case u.Scheme != "http" && u.Scheme != "https":
			bad("url", "scheme must be http or https; got %q", u.Scheme)
		case u.Host == "":
			bad("url", "has no host")
		}
	}
	if t.Secret != "" && t.Type != TypeDingTalk && t.Type != TypeFeishu {
		bad("secret", "only dingtalk and feishu sign their requests")
	}
	for i, s := range t.Severities {
		if s != alert.Warning && s != alert.Critical {
			bad(fmt.Sprintf("severities[%d]", i), "unknown severity %q; one of %s, %s", s, alert.Warning, alert.Critical)
		}
	}
	if len(t.Headers) > 0 && t.Type != TypeWebhook {
		bad("headers", "only type webhook sends headers")
	}
	for _, k := range slices.Sorted(maps.Keys(t.Headers)) {
		if !httpguts.ValidHeaderFieldName(k) {
			bad("headers."+k, "not a valid header name")
		} else if !httpguts.ValidHeaderFieldValue(t.Headers[k]) {
			bad("headers."+k, "not a valid header value")
		}
	}
	if t.Timeout < 0 {
		bad("timeout", "must not be negative")
	}
	if t.Language != "" && t.Language != English && t.Language != Chinese {
		bad("language", "unknown language %q; one of %s, %s", t.Language, English, Chinese)
	}
	return errors.Join(errs...)
}

// receives reports whether the notifier takes alert a.
func (t *Target) receives(a alert.Alert) bool {
	if a.State == alert.Resolved && t.SendResolved != nil && !*t.SendResolved {
		return false
	}
	return len(t.Severities) == 0 || slices.Contains(t.Severities, a.Severity)
}

// language is the language of the notifier's messages.
func (t *Target) language() string {
	switch {
	case t.Language != "":
		return t.Language
	case t.Type == TypeDingTalk || t.Type == TypeFeishu || t.Type == TypeWeCom:
		return Chinese
	}
	return English
}

// Options are the Dispatcher's settings beyond the list of notifiers.
// Zero values take the defaults.
type Options struct {
	// BaseURL is tollgate's address as people reach it
	// (https://tollgate.example.com); it makes an alert's relative
	// drill-down Link absolute, so that a chat client can open it.
	BaseURL string
	// Location is the time zone of the times in messages; default UTC.
	Location *time.Location
	// QueueSize bounds each notifier's queue (DefaultQueueSize).
	QueueSize int
	// Attempts is how often one alert is tried, the first included
	// (DefaultAttempts).
	Attempts int
	// BaseDelay is the wait before the first retry, doubled before each
	// later one up to MaxDelay (DefaultBaseDelay, DefaultMaxDelay). A 429's
	// or 503's Retry-After, when longer, is waited instead (up to 5 minutes).
	BaseDelay time.Duration
	MaxDelay  time.Duration
	// DrainTimeout bounds how long Close keeps delivering what is queued
	// (DefaultDrainTimeout).
	DrainTimeout time.Duration
	// Client sends the requests; default a client of the Dispatcher's own.
	Client *http.Client
	// Log receives a line per failed or dropped notification, and the
	// alerts of log notifiers; default: discard.
	Log *slog.Logger
	// Registerer, when not nil, gets tollgate_notifications_total.
	Registerer prometheus.Registerer
}

// Results of a notification: the result label of tollgate_notifications_total.
const (
	ResultSent    = "sent"
	ResultFailed  = "failed"
	ResultDropped = "dropped"
)

// Status is what one notifier has done since the Dispatcher started.
type Status struct {
	Name    string `json:"name"`
	Type    string `json:"type"`
	Queued  int    `json:"queued"` // waiting for delivery now
	Sent    uint64 `json:"sent"`
	Failed  uint64 `json:"failed"`  // given up after the last attempt
	Dropped uint64 `json:"dropped"` // never attempted: queue full or shut down
	// LastSuccess is when an alert was last delivered. LastError is the
	// last failure's reason, kept after later successes: compare
	// LastFailure with LastSuccess to know whether it still fails.
	LastSuccess time.Time `json:"last_success,omitzero"`
	LastFailure time.Time `json:"last_failure,omitzero"`
	LastError   string    `json:"last_error,omitempty"`
}

// Dispatcher routes alerts to notifiers by severity and delivers them in
// the background. Create it with New, which starts one goroutine per
// notifier; stop it with Close (or Run).
type Dispatcher struct {
	workers []*worker
	client  *http.Client
	ownHTTP bool // client is ours: close its idle connections on Close
	log     *slog.Logger

	base                string
	loc                 *time.Location
	attempts            int
	baseDelay, maxDelay time.Duration
	drainTimeout        time.Duration

	// mu orders Notify's enqueueing before Close's closing: once closed is
	// set no alert enters a queue, so draining the queues empties them.
	mu       sync.RWMutex
	closed   bool
	closing  chan struct{} // closed by Close: drain, then stop
	deadline time.Time     // of the drain; set before closing is closed
	// ctx is cancelled when the drain deadline passes: in-flight requests
	// and backoff waits end, and what is still queued is dropped.
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	lost      atomic.Uint64 // alerts not delivered because of shutdown
}

// worker is one notifier: its queue and what Status reports of it.
type worker struct {
	Target
	queue                 chan alert.Alert
	sent, failed, dropped prometheus.Counter

	mu sync.Mutex
	st Status
}

// New validates the notifiers, then starts a goroutine per notifier that
// delivers what Notify queues for it. The caller must Close it.
func New(cfg Config, opts Options) (*Dispatcher, error) {
	if err := cfg.Validate("notifiers"); err != nil {
		return nil, err
	}
	if opts.BaseURL != "" {
		u, err := url.Parse(opts.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("notify: base URL %q is not an absolute http(s) URL", opts.BaseURL)
		}
	}
	d := &Dispatcher{
		client:       opts.Client,
		log:          opts.Log,
		base:         strings.TrimSuffix(opts.BaseURL, "/"),
		loc:          opts.Location,
		attempts:     orDefault(opts.Attempts, DefaultAttempts),
		baseDelay:    orDefault(opts.BaseDelay, DefaultBaseDelay),
		maxDelay:     orDefault(opts.MaxDelay, DefaultMaxDelay),
		drainTimeout: orDefault(opts.DrainTimeout, DefaultDrainTimeout),
		closing:      make(chan struct{}),
	}
	if d.client == nil {
		d.client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
		d.ownHTTP = true
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	if d.loc == nil {
		d.loc = time.UTC
	}
	total := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_notifications_total",
		Help: "Alert notifications by notifier and result: sent, failed (given up after the last attempt) or dropped (queue full or shut down before an attempt).",
	}, []string{"notifier", "type", "result"})
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(total); err != nil {
			// A reload builds a new Dispatcher on the same registry: it
			// counts on the series of the one it replaces.
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, fmt.Errorf("notify: register metrics: %w", err)
			}
			prev, ok := are.ExistingCollector.(*prometheus.CounterVec)
			if !ok {
				return nil, fmt.Errorf("notify: register metrics: %w", err)
			}
			total = prev
		}
	}
	queueSize := orDefault(opts.QueueSize, DefaultQueueSize)
	for _, t := range cfg {
		d.workers = append(d.workers, &worker{
			Target:  t,
			queue:   make(chan alert.Alert, queueSize),
			sent:    total.WithLabelValues(t.Name, t.Type, ResultSent),
			failed:  total.WithLabelValues(t.Name, t.Type, ResultFailed),
			dropped: total.WithLabelValues(t.Name, t.Type, ResultDropped),
			st:      Status{Name: t.Name, Type: t.Type},
		})
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	for _, w := range d.workers {
		d.wg.Go(func() { d.run(w) })
	}
	return d, nil
}

// orDefault is v, or def when v is not positive.
func orDefault[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// Notify queues alert a for each notifier that takes its severity (and, if
// it is resolved, takes resolved alerts) and returns at once: it never
// waits on the network. A notifier whose queue is full drops the alert,
// counts it and logs it. Pending alerts are not sent (a rule's `for:` is
// there to keep them quiet). ctx is not used: delivery outlives the
// caller's tick and ends only with Close.
func (d *Dispatcher) Notify(_ context.Context, a alert.Alert) {
	if a.State == alert.Pending {
		return
	}
	a.Labels = maps.Clone(a.Labels) // the caller may reuse its map
	a.Link = absolute(d.base, a.Link)
	d.mu.RLock()
	defer d.mu.RUnlock()
	for _, w := range d.workers {
		if !w.receives(a) {
			continue
		}
		if d.closed {
			d.drop(w, a, "dispatcher closed")
			continue
		}
		select {
		case w.queue <- a:
		default:
			d.drop(w, a, "queue full")
		}
	}
}

// Run waits until ctx is done, then closes the Dispatcher: it returns
// Close's error.
func (d *Dispatcher) Run(ctx context.Context) error {
	<-ctx.Done()
	return d.Close()
}

// Close stops taking alerts and keeps delivering those queued, retries
// included, for up to DrainTimeout; then it cancels what is in flight,
// drops what is left and returns once every goroutine has stopped. Its
// error says how many alerts shutdown cost, if any. Later calls return nil.
func (d *Dispatcher) Close() error {
	var err error
	d.closeOnce.Do(func() {
		d.mu.Lock()
		d.closed = true
		d.deadline = time.Now().Add(d.drainTimeout)
		close(d.closing)
		d.mu.Unlock()
		stop := time.AfterFunc(d.drainTimeout, d.cancel)
		d.wg.Wait()
		stop.Stop()
		d.cancel()
		if d.ownHTTP {
			d.client.CloseIdleConnections()
		}
		if n := d.lost.Load(); n > 0 {
			err = fmt.Errorf("notify: %d alert notifications not delivered within the %v shutdown deadline", n, d.drainTimeout)
		}
	})
	return err
}

// Status reports each notifier, in the order of the configuration.
func (d *Dispatcher) Status() []Status {
	out := make([]Status, len(d.workers))
	for i, w := range d.workers {
		w.mu.Lock()
		out[i] = w.st
		w.mu.Unlock()
		out[i].Queued = len(w.queue)
	}
	return out
}

// run is a notifier's goroutine: it delivers alerts in queue order until
// Close, then drains the queue until it is empty or the deadline passed.
func (d *Dispatcher) run(w *worker) {
	for {
		select {
		case a := <-w.queue:
			d.deliver(w, a)
		case <-d.closing:
			for {
				select {
				case a := <-w.queue:
					d.deliver(w, a)
				default:
					return
				}
			}
		}
	}
}

// deliver tries to send a until it is sent, fails for good, or runs out
// of attempts or time. Past the drain deadline it drops a untried.
func (d *Dispatcher) deliver(w *worker, a alert.Alert) {
	if d.ctx.Err() != nil {
		d.lost.Add(1)
		d.drop(w, a, "shutdown deadline passed")
		return
	}
	var err error
	attempt := 1
	for ; ; attempt++ {
		err = d.send(w, a)
		if err == nil {
			w.sent.Inc()
			w.mu.Lock()
			w.st.Sent++
			w.st.LastSuccess = time.Now()
			w.mu.Unlock()
			return
		}
		var f *failure
		if !errors.As(err, &f) || !f.retry || attempt >= d.attempts {
			break
		}
		wait := d.baseDelay << (attempt - 1)
		if wait <= 0 || wait > d.maxDelay { // <= 0: shifted past int64
			wait = d.maxDelay
		}
		wait = max(wait, min(f.retryAfter, maxRetryAfter))
		if !d.sleep(wait) {
			err = fmt.Errorf("%w (no retry: shutting down)", err)
			break
		}
	}
	if d.ctx.Err() != nil {
		d.lost.Add(1)
	}
	w.failed.Inc()
	w.mu.Lock()
	w.st.Failed++
	w.st.LastFailure = time.Now()
	w.st.LastError = err.Error()
	w.mu.Unlock()
	d.log.Error("alert notification failed", "notifier", w.Name, "type", w.Type,
		"rule", a.Rule, "severity", a.Severity, "state", a.State, "fingerprint", a.Fingerprint,
		"attempts", attempt, "err", err)
}

// sleep waits for a backoff, and reports false when shutdown cuts it
// short: at the drain deadline, or at once during the drain if the wait
// would end after the deadline anyway.
func (d *Dispatcher) sleep(wait time.Duration) bool {
	end := time.Now().Add(wait)
	t := time.NewTimer(wait)
	defer t.Stop()
	closing := d.closing
	for {
		select {
		case <-t.C:
			return true
		case <-d.ctx.Done():
			return false
		case <-closing:
			if end.After(d.deadline) {
				return false
			}
			closing = nil // wait on
		}
	}
}

// drop counts and logs an alert that no attempt will be made to send.
func (d *Dispatcher) drop(w *worker, a alert.Alert, reason string) {
	w.dropped.Inc()
	w.mu.Lock()
	w.st.Dropped++
	w.mu.Unlock()
	d.log.Warn("alert notification dropped", "notifier", w.Name, "type", w.Type,
		"rule", a.Rule, "severity", a.Severity, "state", a.State, "fingerprint", a.Fingerprint,
		"reason", reason)
}

// failure is a failed attempt, with whether another may succeed.
type failure struct {
	err        error
	retry      bool
	retryAfter time.Duration // the server's Retry-After, 0 if none
}

func (f *failure) Error() string { return f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

// send makes one attempt to deliver a to w.
func (d *Dispatcher) send(w *worker, a alert.Alert) error {
	now := time.Now()
	if w.Type == TypeLog {
		d.logAlert(w, a, now)
		return nil
	}
	target, body, err := request(&w.Target, a, d.loc, now)
	if err != nil {
		return err // a bug or a bad secret URL: retrying cannot help
	}
	ctx, cancel := context.WithTimeout(d.ctx, orDefault(w.Timeout, DefaultTimeout))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build request: %w", redact(err))
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("User-Agent", "tollgate")
	for k, v := range w.Headers {
		req.Header.Set(k, v)
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return &failure{err: redact(err), retry: true}
	}
	defer resp.Body.Close()
	reply, err := io.ReadAll(io.LimitReader(resp.Body, maxReplyBytes))
	if err != nil {
		return &failure{err: fmt.Errorf("read reply: %w", redact(err)), retry: true}
	}
	return checkReply(w.Type, resp, reply, now)
}

// checkReply turns a reply into nil or a failure: 429 and 5xx are
// retried (after Retry-After, if a 429 or 503 has one), other statuses
// from 300 up are not, and a 2xx of DingTalk,
// Feishu or WeCom fails when its JSON carries an error code (retried when
// the code means "too many requests"). The vendor's message is kept.
func checkReply(typ string, resp *http.Response, body []byte, now time.Time) error {
	rateLimited, verr := vendorError(typ, body)
	code := resp.StatusCode
	if code < 200 || code > 299 {
		detail := snippet(body)
		if verr != nil {
			detail = verr.Error()
		}
		err := fmt.Errorf("HTTP %d: %s", code, detail)
		switch {
		case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable:
			return &failure{err: err, retry: true, retryAfter: retryAfter(resp.Header.Get("Retry-After"), now)}
		case code >= 500:
			return &failure{err: err, retry: true}
		}
		return &failure{err: err, retry: rateLimited}
	}
	if verr != nil {
		return &failure{err: verr, retry: rateLimited}
	}
	return nil
}

// retryAfter parses a Retry-After header: seconds or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil {
		return max(time.Duration(s)*time.Second, 0)
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}

// snippet is the start of a reply body, for an error message.
func snippet(body []byte) string {
	s := strings.TrimSpace(string(body))
	if s == "" {
		return "empty reply"
	}
	return truncate(strings.Join(strings.Fields(s), " "), 200)
}

// redact drops the URL from a client error: robot URLs carry their
// access token, and errors end up in logs and the Status API.
func redact(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}

// absolute joins a relative link to base: prefix-aware, so that a base of
// https://host/tollgate keeps its path.
func absolute(base, link string) string {
	if base == "" || link == "" {
		return link
	}
	if u, err := url.Parse(link); err == nil && u.IsAbs() {
		return link
	}
	return base + "/" + strings.TrimPrefix(link, "/")
}
