package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/quota"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/tokenizer"
	"github.com/tollgate-dev/tollgate/internal/usage"
)

// Causes of an upstream exchange being cut by the gateway's own timers.
var (
	errFirstTokenTimeout = errors.New("no first token within the first_token timeout")
	errIdleTimeout       = errors.New("stream idle longer than the idle timeout")
	errTotalTimeout      = errors.New("request exceeded the total timeout")
	errMalformed         = errors.New("upstream sent a malformed stream chunk")
	errEndedEarly        = errors.New("upstream stream ended before its end marker")
)

// maxEventBytes bounds one SSE event; a chunk is normally a few hundred
// bytes, so anything near this is an engine gone wrong.
const maxEventBytes = 4 << 20

var endpointPath = map[string]string{
	"chat":        "/chat/completions",
	"completions": "/completions",
	"embeddings":  "/embeddings",
	// The agent APIs (protocol.go).
	endpointResponses:   "/responses",
	endpointMessages:    "/messages",
	endpointCountTokens: "/messages/count_tokens",
}

// exchange is one logical request's trip through the gateway; attempt is
// called once per upstream tried.
type exchange struct {
	g          *Gateway
	w          http.ResponseWriter
	r          *http.Request
	body       []byte // as sent upstream
	clientBody []byte // as the client sent it
	ct         *tokenizer.Counter
	rate       *quota.Rate // the client's remaining quota, sent as x-ratelimit-* headers
	injected   bool        // include_usage added by the gateway: strip the usage chunk
	cacheKey   [32]byte    // response cache key; zero when not cacheable
	trace      traceContext
	since      func() time.Duration
	finished   bool        // the current attempt's Record was already handed on
	prio       int         // place in upstream queues (admission.priorities)
	inTokens   int64       // input estimate; picks the long-input lane (0 when no lane needs it)
	capBuf     *captureBuf // what a capture would keep; nil unless capture.enabled

	// Usage the engine did not report: ct is the model's tokenizer when
	// loaded at admission; counting, that one is loaded or loading, so the
	// generated text is kept; uncounted, the current attempt's usage is
	// to be counted from text as its Record is finished (countUsage).
	counting, uncounted bool
	text                string
}

// complete ends a successful response: the Record is finished and made
// durable first, then the final bytes go out — so no client ever sees a
// whole answer whose ledger row a crash could lose.
func (ex *exchange) complete(rec *record.Record, final []byte) {
	rec.ResponseBytes += int64(len(final))
	ex.finished = true
	ex.countUsage(rec)
	ex.g.commit(rec)
	if len(final) > 0 {
		_, _ = ex.w.Write(final)
		_ = http.NewResponseController(ex.w).Flush()
	}
}

// countUsage counts, with the model's tokenizer, the usage the engine
// did not report. It runs as the attempt's Record is finished — after the
// answer's content went out, before the Record is rated and stored — so
// a tokenizer still loading (the first requests after start) can be
// waited for there, bounded (tokenizer_wait), rather than the input being
// recorded unknown for good. The wait overlaps nothing the client needs
// but the answer's last bytes, which wait for the ledger anyway.
func (ex *exchange) countUsage(rec *record.Record) {
	if !ex.uncounted {
		return
	}
	ct := ex.ct
	if ct == nil {
		ct = ex.g.counters.await(rec.Model)
	}
	if countUsage(rec, ct, ex.clientBody, ex.text); rec.Usage.Source == record.SourceTokenizer {
		endToken(rec)
	}
	ex.uncounted, ex.text = false, ""
}

// watchdog enforces the first-token and idle timeouts with one timer
// whose meaning changes with the phase, so the per-chunk cost is a Reset.
type watchdog struct {
	t     *time.Timer
	phase atomic.Int32 // 0 waiting for the first token, 1 streaming
	idle  time.Duration
}

func newWatchdog(first, idle time.Duration, cancel context.CancelCauseFunc) *watchdog {
	wd := &watchdog{idle: idle}
	if first <= 0 {
		first = 1<<63 - 1
	}
	wd.t = time.AfterFunc(first, func() {
		if wd.phase.Load() == 0 {
			cancel(errFirstTokenTimeout)
		} else {
			cancel(errIdleTimeout)
		}
	})
	return wd
}

// firstToken switches from the first-token to the idle timeout.
func (wd *watchdog) firstToken() {
	wd.phase.Store(1)
	wd.progress()
}

// progress re-arms the idle timeout once streaming has begun.
func (wd *watchdog) progress() {
	if wd.phase.Load() == 0 {
		return
	}
	if wd.idle > 0 {
		wd.t.Reset(wd.idle)
	} else {
		wd.t.Stop()
	}
}

func (wd *watchdog) stop() { wd.t.Stop() }

// attempt sends the request to u and relays the answer to the client. It
// returns true when the attempt failed before anything reached the client,
// in a way that may be retried on another upstream, and canRetry allows it.
func (ex *exchange) attempt(rec *record.Record, u *upstream, canRetry bool) (retry bool) {
	t := u.timeouts
	ctx, cancel := context.WithCancelCause(ex.r.Context())
	defer cancel(nil)
	if t.Total > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, t.Total, errTotalTimeout)
		defer stop()
	}
	wd := newWatchdog(t.FirstToken, t.Idle, cancel)
	defer wd.stop()

	ln := u.slots.laneOf(ex.inTokens)
	queued := ex.since()
	sl, err := u.slots.acquire(ctx, ex.prio, ln)
	rec.Marks.Admitted = ex.since() // left the gateway queue
	if u.slots != nil {
		u.slots.waitObs[ln].Observe((rec.Marks.Admitted - queued).Seconds())
	}
	if err != nil {
		if e := queueRefusal(u, err); e != nil {
			ex.w.Header().Set("Retry-After", "1")
			rec.ResponseBytes = int64(writeError(ex.w, e))
			ex.record(rec, e.Status, e.Code, e.Message)
			return false
		}
		status, typ := ex.classify(ctx, err)
		ex.fail(rec, status, typ, upstreamMessage(typ, u.cfg.Name))
		return false
	}
	defer sl.release()

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.base+endpointPath[rec.Endpoint], bytes.NewReader(ex.body))
	if err != nil {
		ex.fail(rec, http.StatusInternalServerError, record.ErrInternal, "could not build the upstream request")
		return false
	}
	copyRequestHeaders(req.Header, ex.r.Header)
	req.Header.Set("Content-Type", "application/json")
	tc := ex.trace
	tc.SpanID = rec.SpanID
	req.Header.Set("Traceparent", tc.header())
	req.Header.Set("X-Request-Id", rec.RequestID)
	if u.cfg.APIKey != "" || ex.g.auth().open {
		setUpstreamAuth(req, ex.r, u)
	}
	if u.cfg.Engine == "anthropic" && req.Header.Get("Anthropic-Version") == "" {
		req.Header.Set("Anthropic-Version", AnthropicVersion)
	}

	var getConn time.Duration
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GetConn: func(string) { getConn = ex.since() },
		GotConn: func(httptrace.GotConnInfo) { rec.ConnectWait = ex.since() - getConn },
	}))
	rec.Marks.UpstreamSent = ex.since()
	resp, err := u.client.Do(req)
	if err != nil {
		status, typ := ex.classify(ctx, err)
		if dial, _ := isDialError(err); dial && canRetry {
			ex.record(rec, status, typ, "could not connect to upstream "+u.cfg.Name)
			return true
		}
		ex.fail(rec, status, typ, upstreamMessage(typ, u.cfg.Name))
		return false
	}
	defer resp.Body.Close()
	rec.Marks.UpstreamHeaders = ex.since()
	rec.UpstreamStatus = resp.StatusCode

	if resp.StatusCode >= 400 && canRetry && slices.Contains(ex.g.cfg.Retry.OnStatus, resp.StatusCode) {
		// Nothing reached the client yet: answer from another upstream.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		ex.record(rec, resp.StatusCode, record.ErrUpstreamStatus, "upstream "+u.cfg.Name+" answered "+strconv.Itoa(resp.StatusCode))
		return true
	}
	if p := newEventParser(rec.Endpoint); p != nil && resp.StatusCode < 400 && isEventStream(resp.Header) {
		ex.streamEvents(ctx, rec, resp, wd, p)
	} else if resp.StatusCode < 400 && isEventStream(resp.Header) {
		ex.streamResponse(ctx, rec, resp, wd, u)
	} else {
		wd.stop()
		ex.bufferedResponse(ctx, rec, resp, u)
	}
	return false
}

// streamResponse is the SSE tap: each event goes to the client as it
// arrives, unchanged, while the same bytes are read for tokens and usage.
// (An engine's error event not in OpenAI's shape is re-wrapped.)
func (ex *exchange) streamResponse(ctx context.Context, rec *record.Record, resp *http.Response, wd *watchdog, u *upstream) {
	w := ex.w
	copyHeaders(w.Header(), resp.Header)
	if ex.rate != nil {
		ex.rate.Write(w.Header())
	}
	w.Header().Set("Server-Timing", serverTiming(rec, false))
	w.WriteHeader(resp.StatusCode)
	rec.Status = resp.StatusCode
	rc := http.NewResponseController(w)
	clientGone := rc.Flush() != nil

	er := usage.NewEventReader(resp.Body, maxEventBytes)
	var (
		tl        timeline
		upErr     error
		done      bool
		engErr    string
		finished  bool
		text      streamText // only with a tokenizer (or one loading), for usage the engine never sends
		cwAtLast  time.Duration
		parser    usage.ChunkParser // reuses the model string across chunks
		doneEvent []byte
	)
	for !clientGone {
		ev, err := er.Next()
		if err != nil {
			upErr = err
			break
		}
		out := ev.Raw
		if ev.Data != nil {
			if ev.Done() {
				// Held back until the Record is durable (see complete).
				done = true
				doneEvent = append(doneEvent[:0], ev.Raw...)
				_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10)) // let the connection be reused
				break
			} else {
				c, perr := parser.Parse(ev.Data)
				if perr != nil {
					upErr = errMalformed
					break
				}
				if rec.ServedModel == "" {
					rec.ServedModel = boundedPrefix(c.Model, MaxIdentifier)
				}
				if rec.ResponseID == "" {
					rec.ResponseID = responseID(c.ID)
				}
				if c.Usage != nil {
					rec.Usage = *c.Usage
				}
				if c.FinishReason != "" {
					rec.FinishReason, finished = c.FinishReason, true
				}
				if c.Error != "" {
					engErr = c.Error
					if e := engineEventError(ev.Data, rec.Upstream, ex.secrets(u)...); e != nil {
						out = streamError(e)
					} else {
						out = redactBody(out, ex.secrets(u))
					}
				}
				// Engines put their timings on the final chunks only —
				// llama-server on the usage-only chunk, which the client may
				// not receive: read every signal before a chunk is dropped.
				if c.FinishReason != "" || c.Usage != nil {
					if et := engineFromBody(ev.Data); et != nil {
						rec.EngineTiming = et
					}
				}
				if ex.injected {
					if c.UsageOnly {
						wd.progress()
						continue // the client did not ask for it
					}
					out = stripUsageNull(out)
				}
				if c.HasContent {
					if ex.counting {
						text.add(ev.Data)
					}
					if ex.capBuf != nil {
						ex.capBuf.chunk(ev.Data)
					}
					if tl.written == 0 {
						rec.Marks.FirstUpstreamToken = ex.since()
						rec.FirstChunkBytes = c.Content
						wd.firstToken()
					}
					rec.ContentBytes += int64(c.Content)
					tl.written++
					rec.Marks.LastUpstreamToken = ex.since()
					cwAtLast = rec.ClientWrite
				}
			}
		}
		wd.progress()
		// Time blocked on the client is measured around each write and
		// flush: it is the client_write segment, not the engine's decode.
		w0 := ex.since()
		n, werr := w.Write(out)
		rec.ResponseBytes += int64(n)
		if werr != nil {
			clientGone = true
			break
		}
		// Events that arrived together leave in one flush; an event is
		// never held back waiting for one that has not arrived.
		if !er.EventBuffered() {
			if rc.Flush() != nil {
				clientGone = true
				break
			}
			at := ex.since()
			rec.ClientWrite += at - w0
			tl.flushed(rec, at)
		} else {
			rec.ClientWrite += ex.since() - w0
		}
	}
	if !clientGone && rc.Flush() == nil {
		tl.flushed(rec, ex.since())
	}
	tl.close(rec)
	rec.ContentChunks = tl.written
	rec.ClientWriteTail = rec.ClientWrite - cwAtLast
	if rec.Usage.Source == "" && tl.written > 0 {
		// The engine never reported usage (stream cut, or an engine that
		// does not): one token per chunk, input unknown, until the
		// model's tokenizer counts what was streamed (countUsage).
		rec.Usage = record.Usage{OutputTokens: int64(tl.written), Source: record.SourceChunks}
		endToken(rec)
		ex.uncounted, ex.text = ex.counting, string(text.b)
	}

	switch {
	case clientGone && ex.shutDown():
		// The write failed because shutdown closed the connection after
		// the grace period, not because the client left.
		ex.record(rec, http.StatusServiceUnavailable, record.ErrShutdown, "the gateway shut down before the stream ended")
	case clientGone:
		ex.record(rec, record.StatusClientClosed, record.ErrClientDisconnect, "client closed the connection mid-stream")
		rec.ClientDisconnect = true
	case engErr != "":
		ex.record(rec, http.StatusBadGateway, record.ErrUpstreamStatus, "the engine sent an error event: "+engErr)
	case upErr == nil || (errors.Is(upErr, io.EOF) && (done || finished)):
		ex.record(rec, resp.StatusCode, record.ErrNone, "")
		ex.complete(rec, doneEvent)
	default:
		if errors.Is(upErr, io.EOF) {
			upErr = errEndedEarly
		}
		status, typ := ex.classify(ctx, upErr)
		if status == record.StatusClientClosed {
			rec.ClientDisconnect = true
			ex.record(rec, status, typ, "client closed the connection mid-stream")
			break
		}
		msg := upstreamMessage(typ, rec.Upstream)
		ex.record(rec, status, typ, msg)
		// Tell the client the answer is incomplete rather than ending as if
		// it were whole.
		n, _ := w.Write(streamError(&apiError{Kind: typ, Type: "server_error", Code: typ, Message: msg}))
		rec.ResponseBytes += int64(n)
		_ = rc.Flush()
	}
}

// timeline turns "written" content chunks into client-side marks at the
// moment they are flushed: the token timeline keeps the first chunk,
// every 10th and the last.
type timeline struct {
	written int // content chunks written to the client
	marked  int // content chunks whose flush time is known
}

func (tl *timeline) flushed(rec *record.Record, at time.Duration) {
	for i := tl.marked; i < tl.written; i++ {
		if i == 0 {
			rec.Marks.FirstClientToken = at
		}
		if i%10 == 0 {
			rec.Timeline = append(rec.Timeline, record.TimelinePoint{Index: i, Offset: at})
		}
		rec.Marks.LastToken = at
	}
	tl.marked = tl.written
}

func (tl *timeline) close(rec *record.Record) {
	last := tl.marked - 1
	if last > 0 && last%10 != 0 {
		rec.Timeline = append(rec.Timeline, record.TimelinePoint{Index: last, Offset: rec.Marks.LastToken})
	}
}

// bufferedResponse relays a non-streamed answer (or any error answer):
// read whole, parsed for usage, then written with its Content-Length.
//
// The answer is held in memory until it is written: its bytes come out of
// the gateway's budget for buffered answers (limits.max_buffered_bytes) as
// they arrive, and go back when this returns.
func (ex *exchange) bufferedResponse(ctx context.Context, rec *record.Record, resp *http.Response, u *upstream) {
	limit := ex.g.cfg.Limits.MaxResponseBytes
	if resp.ContentLength > limit { // known to be too large: not a byte read
		ex.fail(rec, http.StatusBadGateway, record.ErrMalformed, "upstream response is larger than limits.max_response_bytes")
		return
	}
	buf, err := ex.g.buffers.read(resp.Body, limit, resp.ContentLength)
	defer buf.release()
	switch {
	case errors.Is(err, errTooLarge):
		ex.fail(rec, http.StatusBadGateway, record.ErrMalformed, "upstream response is larger than limits.max_response_bytes")
		return
	case errors.Is(err, errBufferFull):
		ex.w.Header().Set("Retry-After", "1")
		ex.fail(rec, http.StatusServiceUnavailable, record.ErrBufferFull,
			"the gateway holds as many buffered answers as limits.max_buffered_bytes allows; retry")
		return
	case err != nil:
		status, typ := ex.classify(ctx, err)
		ex.fail(rec, status, typ, upstreamMessage(typ, rec.Upstream))
		return
	}
	body := buf.b
	if ex.capBuf != nil {
		ex.capBuf.resp = body
	}
	ok := resp.StatusCode < 400
	if parse := answerParser(rec.Endpoint); ok && parse != nil {
		rec.Marks.FirstUpstreamToken = ex.since()
		a, perr := parse(body)
		if perr != nil {
			ex.fail(rec, http.StatusBadGateway, record.ErrMalformed, "upstream "+rec.Upstream+" sent a response that is not valid JSON")
			return
		}
		applyAnswer(rec, a, 0)
		rec.ContentBytes = int64(a.Content)
	} else if ok && rec.Endpoint != endpointCountTokens { // counting tokens generates none: no first token
		rec.Marks.FirstUpstreamToken = ex.since()
		pr, perr := usage.ParseResponse(body)
		if perr != nil {
			ex.fail(rec, http.StatusBadGateway, record.ErrMalformed, "upstream "+rec.Upstream+" sent a response that is not valid JSON")
			return
		}
		rec.ServedModel, rec.FinishReason, rec.ResponseID = boundedPrefix(pr.Model, MaxIdentifier), pr.FinishReason, responseID(pr.ID)
		if et := engineFromBody(body); et != nil {
			rec.EngineTiming = et
		} else if rec.Engine == "tgi" {
			rec.EngineTiming = engineFromTGI(resp.Header)
		}
		rec.ContentBytes = int64(pr.Content)
		if pr.Usage != nil {
			rec.Usage = *pr.Usage
		} else if ex.counting {
			ex.uncounted, ex.text = true, responseText(body) // counted by countUsage
		}
	}
	if !ok {
		if e := engineError(resp.StatusCode, body, rec.Upstream, ex.secrets(u)...); e != nil {
			ex.relayEngineError(rec, resp, e)
			return
		}
		body = redactBody(body, ex.secrets(u))
	}
	h := ex.w.Header()
	copyHeaders(h, resp.Header)
	if ex.rate != nil {
		ex.rate.Write(h)
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Server-Timing", serverTiming(rec, true))
	w0 := ex.since()
	if ok {
		rec.Marks.LastUpstreamToken = w0
	}
	ex.w.WriteHeader(resp.StatusCode)
	// A successful answer's last byte is held back until its Record is
	// durable (see complete); errors go out whole.
	held := 0
	if ok && len(body) > 0 {
		held = 1
	}
	n, werr := ex.w.Write(body[:len(body)-held])
	rec.ResponseBytes = int64(n)
	if werr == nil {
		werr = http.NewResponseController(ex.w).Flush()
	}
	rec.ClientWrite = ex.since() - w0
	rec.ClientWriteTail = rec.ClientWrite
	switch {
	case werr != nil && ex.shutDown():
		ex.record(rec, http.StatusServiceUnavailable, record.ErrShutdown, "the gateway shut down before the response was written")
	case werr != nil:
		rec.ClientDisconnect = true
		ex.record(rec, record.StatusClientClosed, record.ErrClientDisconnect, "client closed the connection before the response was written")
	case !ok:
		ex.record(rec, resp.StatusCode, record.ErrUpstreamStatus, "upstream "+rec.Upstream+" answered "+strconv.Itoa(resp.StatusCode))
	default:
		at := ex.since()
		if rec.Endpoint != endpointCountTokens {
			rec.Marks.FirstClientToken, rec.Marks.LastToken = at, at
		}
		ex.record(rec, resp.StatusCode, record.ErrNone, "")
		if c := ex.g.cache; c != nil && ex.cacheKey != ([32]byte{}) && resp.StatusCode == http.StatusOK {
			c.put(ex.cacheKey, body, resp.Header.Get("Content-Type"))
		}
		ex.complete(rec, body[len(body)-held:])
	}
}

// relayEngineError answers an engine's error in a shape other than
// OpenAI's with e, its re-wrapping: the engine's status, and its
// Retry-After, which tells SDKs when a 429 or 503 is worth retrying.
func (ex *exchange) relayEngineError(rec *record.Record, resp *http.Response, e *apiError) {
	h := ex.w.Header()
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		h.Set("Retry-After", ra)
	}
	if ex.rate != nil {
		ex.rate.Write(h)
	}
	h.Set("Server-Timing", serverTiming(rec, true))
	w0 := ex.since()
	rec.ResponseBytes = int64(writeError(ex.w, e))
	rec.ClientWrite = ex.since() - w0
	rec.ClientWriteTail = rec.ClientWrite
	ex.record(rec, resp.StatusCode, record.ErrUpstreamStatus, "upstream "+rec.Upstream+" answered "+strconv.Itoa(resp.StatusCode))
}

// secrets are the credentials an engine's error text must not carry back
// to the client or the logs: the upstream's key and the client's own.
func (ex *exchange) secrets(u *upstream) []string {
	var s []string
	if u != nil && u.cfg.APIKey != "" {
		s = append(s, u.cfg.APIKey)
	}
	if v, ok := strings.CutPrefix(ex.r.Header.Get("Authorization"), "Bearer "); ok && v != "" {
		s = append(s, v)
	}
	if v := ex.r.Header.Get("X-Api-Key"); v != "" {
		s = append(s, v)
	}
	return s
}

// fail answers the client with a gateway error (when nothing was sent yet)
// and records the outcome.
func (ex *exchange) fail(rec *record.Record, status int, typ, msg string) {
	if status != record.StatusClientClosed {
		e := &apiError{Kind: typ, Status: status, Type: "server_error", Code: typ, Message: msg}
		if status == http.StatusServiceUnavailable && typ == record.ErrShutdown {
			ex.w.Header().Set("Retry-After", "1")
		}
		rec.ResponseBytes = int64(writeError(ex.w, e))
	} else {
		rec.ClientDisconnect = true
	}
	ex.record(rec, status, typ, msg)
}

func (ex *exchange) record(rec *record.Record, status int, typ, msg string) {
	rec.Status, rec.ErrorType, rec.ErrorMessage = status, typ, msg
	rec.Marks.End = ex.since()
}

// shutDown says whether the gateway's shutdown cancelled the request (its
// grace period over), which also closes the client's connection.
func (ex *exchange) shutDown() bool {
	return errors.Is(context.Cause(ex.r.Context()), ErrShutdown)
}

// classify names why an exchange failed, in order of who ended it: the
// client, the gateway's shutdown, the gateway's timers, the network.
func (ex *exchange) classify(ctx context.Context, err error) (int, string) {
	if cctx := ex.r.Context(); cctx.Err() != nil {
		if ex.shutDown() {
			return http.StatusServiceUnavailable, record.ErrShutdown
		}
		return record.StatusClientClosed, record.ErrClientDisconnect
	}
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errFirstTokenTimeout):
		return http.StatusGatewayTimeout, record.ErrFirstTokenTimeout
	case errors.Is(cause, errIdleTimeout):
		return http.StatusGatewayTimeout, record.ErrIdleTimeout
	case errors.Is(cause, errTotalTimeout):
		return http.StatusGatewayTimeout, record.ErrTotalTimeout
	}
	if errors.Is(err, errMalformed) || errors.Is(err, usage.ErrEventTooLarge) {
		return http.StatusBadGateway, record.ErrMalformed
	}
	if dial, timeout := isDialError(err); dial {
		if timeout {
			return http.StatusGatewayTimeout, record.ErrConnectTimeout
		}
		return http.StatusBadGateway, record.ErrConnect
	}
	return http.StatusBadGateway, record.ErrUpstreamReset
}

func upstreamMessage(typ, name string) string {
	switch typ {
	case record.ErrConnect:
		return "could not connect to upstream " + name
	case record.ErrConnectTimeout:
		return "timed out connecting to upstream " + name
	case record.ErrFirstTokenTimeout:
		return "upstream " + name + " sent no first token within the first_token timeout"
	case record.ErrIdleTimeout:
		return "upstream " + name + " stalled longer than the idle timeout"
	case record.ErrTotalTimeout:
		return "upstream " + name + " did not finish within the total timeout"
	case record.ErrMalformed:
		return "upstream " + name + " sent a malformed response"
	case record.ErrShutdown:
		return "the gateway is shutting down; retry"
	case record.ErrClientDisconnect:
		return "client closed the connection"
	default:
		return "upstream " + name + " ended the response unexpectedly"
	}
}

func isEventStream(h http.Header) bool {
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	return err == nil && mt == "text/event-stream"
}

// serverTiming renders what the gateway knows so far as a Server-Timing
// header: auth (arrival → key checked), queue (→ admitted: reading and
// validating the body, and admission), upstream (request sent → headers
// for a stream, → whole body otherwise).
func serverTiming(rec *record.Record, whole bool) string {
	m := rec.Marks
	up := m.UpstreamHeaders - m.UpstreamSent
	if whole && m.FirstUpstreamToken > 0 {
		up = m.FirstUpstreamToken - m.UpstreamSent
	}
	b := make([]byte, 0, 96)
	b = appendTiming(b, "auth", m.AuthDone)
	b = append(b, ", "...)
	b = appendTiming(b, "queue", m.Admitted-m.AuthDone)
	b = append(b, ", "...)
	b = appendTiming(b, "upstream", up)
	return string(b)
}

func appendTiming(b []byte, name string, d time.Duration) []byte {
	b = append(b, name...)
	b = append(b, ";dur="...)
	return strconv.AppendFloat(b, float64(d)/float64(time.Millisecond), 'f', 3, 64)
}
