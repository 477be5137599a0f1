package web

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/tollgate-dev/tollgate/internal/capture"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// The captures (capture.enabled: the redacted text of slow or failed
// requests) are the API's one admin-only resource: a read token, which
// sees every figure of the ledger, gets 403 here.

// admin lets admin tokens through; read tokens get 403, no token 401.
// With no api.tokens configured, loopback clients are admin for the rest
// of the API but never here: a sidecar or reverse proxy on the same host
// makes every client loopback, so captured text needs a real admin token
// (config validation refuses capture.enabled without one, too).
func (a *API) admin(h http.HandlerFunc) http.HandlerFunc {
	return a.read(func(w http.ResponseWriter, r *http.Request) {
		if len(a.o.Tokens) == 0 {
			writeErr(w, http.StatusForbidden, "forbidden", "captured request text needs an admin token; configure api.tokens with role admin (anonymous loopback clients never read captures)")
			return
		}
		if a.role(r) != RoleAdmin {
			writeErr(w, http.StatusForbidden, "forbidden", "captured request text needs an admin token (api.tokens[].role: admin)")
			return
		}
		h(w, r)
	})
}

// captureView is a capture as the API shows it; the bodies are omitted
// from listings.
type captureView struct {
	RequestID         string    `json:"request_id"`
	At                time.Time `json:"at"`
	Reason            string    `json:"reason"`
	RequestBytes      int       `json:"request_bytes"`
	ResponseBytes     int       `json:"response_bytes"`
	RequestTruncated  bool      `json:"request_truncated"`
	ResponseTruncated bool      `json:"response_truncated"`
	Request           *string   `json:"request,omitempty"`
	Response          *string   `json:"response,omitempty"`
}

func viewCapture(c *capture.Capture, bodies bool) captureView {
	v := captureView{RequestID: c.RequestID, At: c.At, Reason: c.Reason, RequestBytes: c.RequestBytes, ResponseBytes: c.ResponseBytes,
		RequestTruncated: c.RequestTruncated, ResponseTruncated: c.ResponseTruncated}
	if bodies {
		req, resp := string(c.Request), string(c.Response)
		v.Request, v.Response = &req, &resp
	}
	return v
}

func (a *API) noCaptures(w http.ResponseWriter) bool {
	if a.o.Captures == nil {
		writeErr(w, http.StatusNotFound, "not_found", "this store keeps no captures")
		return true
	}
	return false
}

// listCaptures: GET /api/v1/captures?since=&until=&reason=failed|slow&limit=
// (admin only) — newest first, without bodies.
func (a *API) listCaptures(w http.ResponseWriter, r *http.Request) {
	if a.noCaptures(w) {
		return
	}
	p := a.params(r)
	f := store.CaptureFilter{Reason: p.q.Get("reason")}
	p.time("since", &f.Since)
	p.time("until", &f.Until)
	p.limit(&f.Limit, 1000)
	p.oneOf("reason", "failed", "slow")
	if p.err != nil {
		a.writeParamErr(w, p.err, "")
		return
	}
	cs, err := a.o.Captures.Captures(r.Context(), f)
	if err != nil {
		a.storeErr(w, err, "list captures", "could not read the captures")
		return
	}
	out := make([]captureView, 0, len(cs))
	for _, c := range cs {
		out = append(out, viewCapture(c, false))
	}
	writeJSON(w, map[string]any{"captures": out})
}

// getCapture: GET /api/v1/captures/{id} (admin only) — one capture with
// its redacted bodies.
func (a *API) getCapture(w http.ResponseWriter, r *http.Request) {
	if a.noCaptures(w) {
		return
	}
	c, err := a.o.Captures.Capture(r.Context(), r.PathValue("id"))
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeErr(w, http.StatusNotFound, "not_found", "no capture of request "+strconv.Quote(r.PathValue("id")))
	case err != nil:
		a.storeErr(w, err, "get capture", "could not read the captures")
	default:
		writeJSON(w, viewCapture(c, true))
	}
}
