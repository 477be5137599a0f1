package gateway

import (
	"cmp"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// handleResponseItem passes a request about a stored response through to
// the upstream that holds it — GET and DELETE /v1/responses/{id},
// POST /v1/responses/{id}/cancel, GET /v1/responses/{id}/input_items —
// and records it (endpoint responses_item: status, bytes, timing; no
// tokens, since nothing is generated). The upstream is the one the
// X-Tollgate-Upstream header names, else the first that serves the
// Responses API (router.upstreamFor).
func (g *Gateway) handleResponseItem(w http.ResponseWriter, r *http.Request) {
	arrival := time.Now()
	since := func() time.Duration { return max(time.Since(arrival), 1) }
	id := newRequestID()
	rec := &record.Record{Arrival: arrival, Endpoint: endpointResponseItem, Attempt: 1, RequestID: id, LogicalRequestID: id}
	if cid := r.Header.Get(g.cfg.Headers.RequestID); validClientID(cid) {
		rec.ClientRequestID = cid
	}
	tc, ok := parseTraceparent(r.Header.Get("Traceparent"))
	if !ok {
		tc = newTrace()
	}
	rec.TraceID, rec.SpanID, rec.ParentSpanID = tc.TraceID, tc.SpanID, tc.Parent
	rec.ResponseID = responseID(r.PathValue("id"))
	w.Header().Set("X-Request-Id", cmp.Or(rec.ClientRequestID, id))
	w.Header().Set(TollgateRequestIDHeader, id)

	ident, aerr := g.auth.identify(r)
	rec.UserID, rec.KeyID, rec.Team, rec.BizLine = ident.UserID, ident.KeyID, ident.Team, ident.BizLine
	rec.Marks.AuthDone = since()
	if aerr != nil {
		g.reject(w, rec, aerr, since)
		return
	}
	u, aerr := g.routes.upstreamFor(r.Header.Get(UpstreamHeader))
	if aerr != nil {
		g.reject(w, rec, aerr, since)
		return
	}
	rec.Upstream, rec.Engine = u.cfg.Name, u.cfg.Engine
	rec.Marks.Admitted = since()

	ctx := r.Context()
	if t := u.timeouts.Total; t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, t, errTotalTimeout)
		defer cancel()
	}
	target := u.base + strings.TrimPrefix(r.URL.EscapedPath(), "/v1")
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	// The few bytes a cancel may carry are not needed: these requests
	// have no body in the API.
	req, err := http.NewRequestWithContext(ctx, r.Method, target, http.NoBody)
	if err != nil {
		g.reject(w, rec, &apiError{Kind: record.ErrInvalidRequest, Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_request", Message: "bad response id"}, since)
		return
	}
	copyRequestHeaders(req.Header, r.Header)
	tc.SpanID = rec.SpanID
	req.Header.Set("Traceparent", tc.header())
	req.Header.Set("X-Request-Id", rec.RequestID)
	if u.cfg.APIKey != "" || g.auth.open {
		setUpstreamAuth(req, r, u)
	}
	rec.Marks.UpstreamSent = since()
	resp, err := u.client.Do(req)
	if err != nil {
		ex := &exchange{g: g, w: w, r: r, since: since}
		status, typ := ex.classify(ctx, err)
		ex.fail(rec, status, typ, upstreamMessage(typ, u.cfg.Name))
		g.finish(rec)
		return
	}
	defer resp.Body.Close()
	rec.Marks.UpstreamHeaders = since()
	rec.UpstreamStatus = resp.StatusCode
	copyHeaders(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	n, err := io.Copy(w, io.LimitReader(resp.Body, g.cfg.Limits.MaxResponseBytes))
	rec.ResponseBytes = n
	rec.Status, rec.Marks.End = resp.StatusCode, since()
	switch {
	case err != nil && r.Context().Err() != nil:
		rec.Status, rec.ErrorType, rec.ClientDisconnect = record.StatusClientClosed, record.ErrClientDisconnect, true
		rec.ErrorMessage = "client closed the connection"
	case err != nil:
		rec.ErrorType, rec.ErrorMessage = record.ErrUpstreamReset, upstreamMessage(record.ErrUpstreamReset, u.cfg.Name)
	case resp.StatusCode >= 400:
		rec.ErrorType, rec.ErrorMessage = record.ErrUpstreamStatus, "upstream "+u.cfg.Name+" answered "+strconv.Itoa(resp.StatusCode)
	}
	g.finish(rec)
}
