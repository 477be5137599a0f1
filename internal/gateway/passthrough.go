package gateway

// Pass-through: nothing under /v1/ is invisible. A request the gateway
// does not meter as inference (audio, images, moderations, batches,
// files, …) is relayed to an upstream and recorded like any other:
//
//	handleOther ─┬─ not under /v1/ (or passthrough.disabled) → 404, recorded
//	             └─ passthrough: identity → auth → deny-list (403) → body
//	                (JSON read whole for its model; anything else, multipart
//	                uploads first, streamed) → route → quotas → relay → Record
//
// The Record has the endpoint (a bounded family name, passEndpoint),
// status, bytes, timing, and tokens when the answer carries a usage object
// (image generation, gpt-4o transcriptions). No TTFT: a pass-through
// answer has no tokens to time, so the token marks stay empty and the
// latency figures are E2E and the upstream's header time.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/usage"
)

// Bounds of what pass-through holds in memory, whatever the body's size.
const (
	// peekBytes is how much of a multipart body is read ahead to find a
	// model field placed before the file; the rest streams unread.
	peekBytes = 64 << 10
	// sniffBytes is the largest JSON answer read for its usage; a larger
	// one is relayed without usage.
	sniffBytes = 1 << 20
)

// passFamilies name the first path segment after /v1/; audio and images
// are named by their second segment too, since their operations differ in
// what they cost. Anything else is "other": the endpoint label and the
// Record's endpoint stay a closed set, whatever paths clients invent.
var (
	passFamilies = map[string]bool{
		"chat": true, "completions": true, "embeddings": true, "models": true, "responses": true, "messages": true,
		"moderations": true, "batches": true, "files": true, "uploads": true, "fine_tuning": true,
		"vector_stores": true, "assistants": true, "threads": true, "realtime": true, "containers": true,
		"conversations": true, "evals": true, "videos": true, "organization": true, "audio": true, "images": true,
	}
	passSubFamilies = map[string]string{
		"audio/transcriptions": "audio_transcriptions", "audio/translations": "audio_translations", "audio/speech": "audio_speech",
		"images/generations": "images_generations", "images/edits": "images_edits", "images/variations": "images_variations",
	}
)

// passEndpoint is the endpoint family of a path.
func passEndpoint(path string) string {
	rest, ok := strings.CutPrefix(path, "/v1/")
	if !ok {
		return "other"
	}
	seg, tail, _ := strings.Cut(rest, "/")
	if seg == "audio" || seg == "images" {
		sub, _, _ := strings.Cut(tail, "/")
		if n, ok := passSubFamilies[seg+"/"+sub]; ok {
			return n
		}
	}
	if passFamilies[seg] {
		return seg
	}
	return "other"
}

// passthrough is the compiled pass-through config and its metric.
type passthrough struct {
	cfg      config.Passthrough
	byPrefix map[string]string // path prefix → upstream name, resolved per request (upstreams reload)
	requests *prometheus.CounterVec
}

func newPassthrough(c config.Passthrough) *passthrough {
	p := &passthrough{cfg: c, byPrefix: map[string]string{},
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_passthrough_requests_total",
			Help: "Requests under /v1/ the gateway relays without metering them as inference, and paths it answers 404 itself, by endpoint family (bounded) and status.",
		}, []string{"endpoint", "code"})}
	for prefix, name := range c.Upstreams {
		p.byPrefix[prefix] = name
	}
	return p
}

func (p *passthrough) count(rec *record.Record) {
	code := "other"
	if rec.Status >= 100 && rec.Status <= 599 {
		code = strconv.Itoa(rec.Status)
	}
	p.requests.WithLabelValues(rec.Endpoint, code).Inc()
}

func (p *passthrough) denied(path string) bool {
	for _, d := range p.cfg.Deny {
		if strings.HasPrefix(path, d) || path+"/" == d {
			return true
		}
	}
	return false
}

// upstreamFor routes a pass-through request: the upstream serving the
// body's model, else the longest configured prefix's, else the only
// upstream when it serves every model or the body names none.
func (p *passthrough) upstreamFor(rt *router, path, model string) *upstream {
	if model != "" {
		if c := rt.candidates(model); len(c) > 0 {
			return c[0]
		}
	}
	var best *upstream
	n := 0
	for prefix, name := range p.byPrefix {
		if u := rt.named(name); u != nil && strings.HasPrefix(path, prefix) && len(prefix) > n {
			best, n = u, len(prefix)
		}
	}
	switch {
	case best != nil:
		return best
	case rt.wildcard != nil:
		return rt.wildcard
	case model == "" && len(rt.all) == 1:
		return rt.all[0]
	}
	return nil
}

// begin starts the Record of every request the gateway serves (inference,
// pass-through, unknown paths): tollgate's id, the client's id, the
// trace, and who is asking. The returned error is the identity's (a bad
// key or header), for the caller to answer when it requires one.
func (g *Gateway) begin(w http.ResponseWriter, r *http.Request, endpoint string) (*record.Record, identity, traceContext, func() time.Duration, *apiError) {
	arrival := time.Now()
	rec := &record.Record{Arrival: arrival, Endpoint: endpoint, Attempt: 1}
	since := func() time.Duration { return max(time.Since(arrival), 1) }
	h := g.cfg.Headers
	// tollgate's own id is the ledger's key; the client's X-Request-Id is
	// kept beside it and echoed, never trusted as a key (two clients may
	// send the same one, and a reused id must not drop a request's row).
	id := newRequestID(arrival)
	rec.RequestID, rec.LogicalRequestID = id, id
	if cid := r.Header.Get(h.RequestID); validClientID(cid) {
		rec.ClientRequestID = cid
	}
	tc, ok := parseTraceparent(r.Header.Get("Traceparent"))
	if !ok {
		tc = newTrace(arrival)
	}
	rec.TraceID, rec.SpanID, rec.ParentSpanID = tc.TraceID, tc.SpanID, tc.Parent
	w.Header().Set("X-Request-Id", cmp.Or(rec.ClientRequestID, id))
	w.Header().Set(TollgateRequestIDHeader, id)

	ident, aerr := g.auth().identify(r)
	rec.UserID, rec.KeyID, rec.Team = ident.UserID, ident.KeyID, ident.Team
	// A key's own business line is authoritative for billing; the header
	// only attributes requests whose key has none.
	var herr [4]*apiError
	rec.BizLine = ident.BizLine
	if rec.BizLine == "" {
		rec.BizLine, herr[0] = identHeader(r, h.BizLine)
	}
	rec.SessionID, herr[1] = identHeader(r, h.Session)
	rec.TemplateID, herr[2] = identHeader(r, h.Template)
	rec.Tags, herr[3] = parseTags(h.Tags, r.Header.Get(h.Tags))
	rec.Marks.AuthDone = since()
	return rec, ident, tc, since, cmp.Or(aerr, herr[0], herr[1], herr[2], herr[3])
}

// handleOther serves every path no other route took.
func (g *Gateway) handleOther(w http.ResponseWriter, r *http.Request) {
	if !g.pass.cfg.Disabled && strings.HasPrefix(r.URL.Path, "/v1/") {
		g.handlePassthrough(w, r)
		return
	}
	g.metrics.InFlight().Inc()
	defer g.metrics.InFlight().Dec()
	endpoint := "other"
	if strings.HasPrefix(r.URL.Path, "/v1/") {
		endpoint = passEndpoint(r.URL.Path)
	}
	// Answered whatever the key: the path does not exist. A valid key
	// still attributes the Record.
	rec, _, _, since, _ := g.begin(w, r, endpoint)
	defer g.pass.count(rec)
	g.reject(w, rec, &apiError{Kind: record.ErrUnknownURL, Status: http.StatusNotFound, Type: "invalid_request_error", Code: record.ErrUnknownURL,
		Message: "Unknown request URL: " + echo(r.Method) + " " + echo(r.URL.Path) + "."}, since)
}

// handlePassthrough relays one request under /v1/ to an upstream and
// records it.
func (g *Gateway) handlePassthrough(w http.ResponseWriter, r *http.Request) {
	g.metrics.InFlight().Inc()
	defer g.metrics.InFlight().Dec()
	rec, ident, tc, since, aerr := g.begin(w, r, passEndpoint(r.URL.Path))
	defer g.pass.count(rec)
	if aerr != nil {
		g.reject(w, rec, aerr, since)
		return
	}
	if g.pass.denied(r.URL.Path) {
		g.reject(w, rec, &apiError{Kind: record.ErrPathDenied, Status: http.StatusForbidden, Type: "invalid_request_error", Code: record.ErrPathDenied,
			Message: "The gateway does not pass " + echo(r.Method) + " " + echo(r.URL.Path) + " through (passthrough.deny)."}, since)
		return
	}

	body, aerr := g.passBody(w, r, rec)
	if aerr != nil {
		rec.ClientDisconnect = aerr.Status == record.StatusClientClosed
		g.reject(w, rec, aerr, since)
		return
	}
	u := g.pass.upstreamFor(g.routes(), r.URL.Path, rec.Model)
	if u == nil {
		e := &apiError{Kind: record.ErrNoRoute, Status: http.StatusNotFound, Type: "invalid_request_error", Code: record.ErrNoRoute, Param: "model",
			Message: "The model `" + echo(rec.Model) + "` does not exist or no upstream serves it."}
		if rec.Model == "" {
			e.Param, e.Message = "", "No upstream is configured for "+echo(r.URL.Path)+" (passthrough.upstreams)."
		}
		g.reject(w, rec, e, since)
		return
	}
	rec.Upstream, rec.Engine = u.cfg.Name, u.cfg.Engine

	// Quotas apply as to chat: a key over its quota, or a request its
	// limits refuse, goes no further. The estimate is the JSON body's
	// bytes / 4 (nothing for a streamed upload, whose tokens are the
	// engine's to say); the answer's usage settles it.
	adm, ok := g.admit(w, r, rec, int64(len(body.json))/4, ident.BizLine, since)
	if !ok {
		return
	}
	defer func() { adm.settle([]*record.Record{rec}) }()
	rec.Marks.Admitted = since()

	ex := &exchange{g: g, w: w, r: r, trace: tc, since: since}
	if adm != nil {
		ex.rate = adm.rate
	}
	ex.relay(rec, u, body)
}

// passBody is a pass-through request's body: read whole when it is JSON
// (bounded by limits.max_request_bytes) for its model, streamed otherwise.
type passBody struct {
	json   []byte    // the whole JSON body, nil when streamed or empty
	stream io.Reader // the body to stream upstream, nil when none or JSON
	size   int64     // what the client declared (Content-Length), -1 unknown
	up     *upload   // counts and bounds the streamed bytes
}

// passBody reads what the gateway needs of a pass-through body: a JSON
// body whole, for its model; of a multipart body only the model field
// when it comes before the first file and within peekBytes; of anything
// else nothing.
func (g *Gateway) passBody(w http.ResponseWriter, r *http.Request, rec *record.Record) (passBody, *apiError) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return passBody{}, nil
	}
	ct := r.Header.Get("Content-Type")
	mt, params, _ := mime.ParseMediaType(ct)
	if strings.TrimSpace(ct) == "" || mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json") {
		b, aerr := g.readBody(w, r)
		rec.RequestBytes = int64(len(b))
		if aerr != nil {
			return passBody{}, aerr
		}
		var f struct {
			Model  json.RawMessage `json:"model"`
			Stream *bool           `json:"stream"`
		}
		if json.Unmarshal(b, &f) == nil {
			rec.Model = boundedPrefix(stringValueOf(f.Model), MaxIdentifier)
			rec.Stream = f.Stream != nil && *f.Stream
		}
		return passBody{json: b, size: int64(len(b))}, nil
	}
	limit := g.cfg.Passthrough.MaxUploadBytes
	if r.ContentLength > limit {
		return passBody{}, uploadTooLarge()
	}
	up := &upload{r: r.Body, limit: limit, rc: http.NewResponseController(w), idle: g.cfg.Limits.BodyTimeout}
	var src io.Reader = up
	if mt == "multipart/form-data" && params["boundary"] != "" {
		head := make([]byte, peekBytes)
		n, err := io.ReadFull(up, head)
		switch {
		case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
			head = head[:n] // the whole body was smaller than the peek
		case err != nil:
			rec.RequestBytes = up.n
			return passBody{}, g.uploadError(err)
		}
		rec.Model = boundedPrefix(multipartModel(head[:n], params["boundary"]), MaxIdentifier)
		src = io.MultiReader(bytes.NewReader(head[:n]), up)
	}
	return passBody{stream: src, size: r.ContentLength, up: up}, nil
}

// multipartModel is the value of the form field "model" when it comes
// before any file part within head; "" otherwise (the file comes first,
// or head ends before either).
func multipartModel(head []byte, boundary string) string {
	mr := multipart.NewReader(bytes.NewReader(head), boundary)
	for {
		p, err := mr.NextPart()
		if err != nil {
			return ""
		}
		if p.FileName() != "" {
			return ""
		}
		if p.FormName() == "model" {
			v, err := io.ReadAll(io.LimitReader(p, MaxIdentifier+1))
			if err != nil || len(v) > MaxIdentifier {
				return ""
			}
			return strings.TrimSpace(string(v))
		}
	}
}

func stringValueOf(raw json.RawMessage) string {
	var s string
	if len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
		return s
	}
	return ""
}

var errUploadTooLarge = errors.New("upload larger than passthrough.max_upload_bytes")

func uploadTooLarge() *apiError {
	return &apiError{Kind: record.ErrInvalidRequest, Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "request_too_large",
		Message: "Request body is larger than the gateway's limit for streamed uploads (passthrough.max_upload_bytes)."}
}

// uploadError names why a streamed body could not be read.
func (g *Gateway) uploadError(err error) *apiError {
	if errors.Is(err, errUploadTooLarge) {
		return uploadTooLarge()
	}
	return g.bodyReadError(err, false)
}

// upload is a streamed request body on its way upstream: it counts the
// bytes, refuses more than limit, and keeps the body deadline moving
// while bytes arrive — an upload of hundreds of megabytes may take longer
// than limits.body_timeout as a whole, but may not stall for that long.
// The upstream's total timeout bounds it as a whole. The transport may
// still be reading it after Do returns, hence the lock.
type upload struct {
	r     io.Reader
	limit int64
	rc    *http.ResponseController
	idle  time.Duration

	mu  sync.Mutex
	n   int64
	err error // the first read error other than EOF
}

func (u *upload) Read(p []byte) (int, error) {
	n, err := u.r.Read(p)
	u.mu.Lock()
	defer u.mu.Unlock()
	u.n += int64(n)
	if u.n > u.limit {
		err = errUploadTooLarge
	}
	if n > 0 && err == nil && u.idle > 0 {
		_ = u.rc.SetReadDeadline(time.Now().Add(u.idle))
	}
	if err != nil && err != io.EOF && u.err == nil {
		u.err = err
	}
	return n, err
}

// state is what was read so far and the first failure; nil reads nothing.
func (u *upload) state() (int64, error) {
	if u == nil {
		return 0, nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.n, u.err
}

// relay sends a pass-through request to u and the answer back, unchanged
// and unbuffered, reading a usage object on the side when there is one.
func (ex *exchange) relay(rec *record.Record, u *upstream, body passBody) {
	g, r := ex.g, ex.r
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	if t := u.timeouts.Total; t > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, t, errTotalTimeout)
		defer stop()
	}
	var src io.Reader
	switch {
	case body.json != nil:
		src = bytes.NewReader(body.json)
	case body.stream != nil:
		src = body.stream
	}
	target := u.base + strings.TrimPrefix(r.URL.EscapedPath(), "/v1")
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, target, src)
	if err != nil {
		ex.fail(rec, http.StatusInternalServerError, record.ErrInternal, "could not build the upstream request")
		g.finish(rec)
		return
	}
	if src != nil {
		req.ContentLength = body.size
	}
	copyRequestHeaders(req.Header, r.Header)
	if body.stream != nil {
		// Relayed as sent, so its encoding is the client's.
		if ce := r.Header.Get("Content-Encoding"); ce != "" {
			req.Header.Set("Content-Encoding", ce)
		}
	}
	tc := ex.trace
	tc.SpanID = rec.SpanID
	req.Header.Set("Traceparent", tc.header())
	req.Header.Set("X-Request-Id", rec.RequestID)
	if u.cfg.APIKey != "" || g.auth().open {
		setUpstreamAuth(req, r, u)
	}
	var getConn time.Duration
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GetConn: func(string) { getConn = ex.since() },
		GotConn: func(httptrace.GotConnInfo) { rec.ConnectWait = ex.since() - getConn },
	}))
	rec.Marks.UpstreamSent = ex.since()
	resp, err := u.client.Do(req)
	if err != nil {
		n, uerr := body.up.state()
		rec.RequestBytes = max(rec.RequestBytes, n)
		if uerr != nil {
			// The client's body failed, not the upstream.
			e := g.uploadError(uerr)
			rec.ClientDisconnect = e.Status == record.StatusClientClosed
			g.reject(ex.w, rec, e, ex.since)
			return
		}
		status, typ := ex.classify(ctx, err)
		ex.fail(rec, status, typ, upstreamMessage(typ, u.cfg.Name))
		g.finish(rec)
		return
	}
	defer resp.Body.Close()
	rec.Marks.UpstreamHeaders = ex.since()
	rec.UpstreamStatus = resp.StatusCode

	// From here on the upstream's answer is the client's: an upstream
	// silent for timeouts.idle is cut, as a stalled stream is.
	wd := newWatchdog(u.timeouts.Idle, u.timeouts.Idle, cancel)
	wd.firstToken()
	defer wd.stop()

	h := ex.w.Header()
	copyHeaders(h, resp.Header)
	if ex.rate != nil {
		ex.rate.Write(h)
	}
	if resp.ContentLength >= 0 && resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusNotModified && resp.StatusCode >= 200 {
		h.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	ex.w.WriteHeader(resp.StatusCode)
	sse := isEventStream(resp.Header)
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	sniff := !sse && resp.StatusCode < 400 && (mt == "application/json" || mt == "") && resp.ContentLength <= sniffBytes

	var (
		kept     []byte // a JSON answer, for its usage
		held     []byte // the last byte read, sent once the Record is durable (0 or 1 byte)
		upErr    error
		werr     error
		usageRaw []byte // the last usage an event carried
	)
	rc := http.NewResponseController(ex.w)
	if sse {
		er := usage.NewEventReader(resp.Body, maxEventBytes)
		for werr == nil {
			ev, err := er.Next()
			if err != nil {
				upErr = err
				break
			}
			wd.progress()
			if ev.Data != nil && bytes.Contains(ev.Data, []byte(`"usage"`)) {
				if u := usageOf(ev.Data); u != nil {
					usageRaw = u
				}
			}
			var n int
			n, werr = ex.w.Write(ev.Raw)
			rec.ResponseBytes += int64(n)
			if werr == nil && !er.EventBuffered() {
				werr = rc.Flush()
			}
		}
	} else {
		buf := make([]byte, 32<<10)
		for werr == nil {
			n, err := resp.Body.Read(buf)
			if n > 0 {
				wd.progress()
				chunk := buf[:n]
				if sniff && len(kept)+n <= sniffBytes {
					kept = append(kept, chunk...)
				} else {
					sniff, kept = false, nil
				}
				// Hold back the last byte read so far: whichever chunk is
				// the last, its final byte waits for the ledger.
				var w0, w1 int
				if len(held) > 0 {
					w0, werr = ex.w.Write(held)
				}
				if werr == nil {
					w1, werr = ex.w.Write(chunk[:n-1])
				}
				rec.ResponseBytes += int64(w0 + w1)
				held = append(held[:0], chunk[n-1])
			}
			if err != nil {
				upErr = err
				break
			}
		}
		if werr == nil {
			werr = rc.Flush()
		}
	}
	if sniff && kept != nil {
		usageRaw = usageOf(kept)
		var m struct {
			Model string `json:"model"`
		}
		if json.Unmarshal(kept, &m) == nil {
			rec.ServedModel = boundedPrefix(m.Model, MaxIdentifier)
		}
	}
	// Only an answer that generated something carries tokens of its
	// own: a retrieved or cancelled stored object (GET /v1/chat/
	// completions/{id}, a stored response) repeats the usage its
	// creation was already recorded with.
	if usageRaw != nil && r.Method == http.MethodPost && rec.Endpoint != endpointResponseItem {
		if u, err := usage.Parse(usageRaw); err == nil {
			rec.Usage = u
		}
	}
	if n, _ := body.up.state(); n > 0 {
		rec.RequestBytes = n
	}

	switch {
	case werr != nil && ex.shutDown():
		ex.record(rec, http.StatusServiceUnavailable, record.ErrShutdown, "the gateway shut down before the response was written")
	case werr != nil:
		rec.ClientDisconnect = true
		ex.record(rec, record.StatusClientClosed, record.ErrClientDisconnect, "client closed the connection before the response was written")
	case upErr != nil && !errors.Is(upErr, io.EOF):
		status, typ := ex.classify(ctx, upErr)
		rec.ClientDisconnect = status == record.StatusClientClosed
		ex.record(rec, status, typ, upstreamMessage(typ, u.cfg.Name))
	case resp.StatusCode >= 400:
		ex.record(rec, resp.StatusCode, record.ErrUpstreamStatus, fmt.Sprintf("upstream %s answered %d", u.cfg.Name, resp.StatusCode))
	default:
		// The last byte is counted before it goes: the Record is handed
		// on, and durable, before the client has the whole answer.
		ex.record(rec, resp.StatusCode, record.ErrNone, "")
		rec.ResponseBytes += int64(len(held))
		g.commit(rec)
		if len(held) > 0 {
			_, _ = ex.w.Write(held)
			_ = rc.Flush()
		}
		return
	}
	if len(held) > 0 && werr == nil {
		n, _ := ex.w.Write(held)
		rec.ResponseBytes += int64(n)
		_ = rc.Flush()
	}
	g.finish(rec)
}

// usageOf is the top-level usage object of a JSON document, or of the
// response it wraps (Responses-style events); nil when there is none.
func usageOf(b []byte) []byte {
	var d struct {
		Usage    json.RawMessage `json:"usage"`
		Response *struct {
			Usage json.RawMessage `json:"usage"`
		} `json:"response"`
	}
	if json.Unmarshal(b, &d) != nil {
		return nil
	}
	if !isNullRaw(d.Usage) {
		return d.Usage
	}
	if d.Response != nil && !isNullRaw(d.Response.Usage) {
		return d.Response.Usage
	}
	return nil
}

func isNullRaw(b json.RawMessage) bool { return len(b) == 0 || bytes.Equal(b, []byte("null")) }
