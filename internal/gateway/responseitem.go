package gateway

import "net/http"

// handleResponseItem passes a request about a stored response through to
// the upstream that holds it — GET and DELETE /v1/responses/{id},
// POST /v1/responses/{id}/cancel, GET /v1/responses/{id}/input_items —
// and records it (endpoint responses_item: status, bytes, timing; no
// tokens, since nothing is generated). The upstream is the one the
// X-Tollgate-Upstream header names, else the first that serves the
// Responses API (router.upstreamFor).
func (g *Gateway) handleResponseItem(w http.ResponseWriter, r *http.Request) {
	g.metrics.InFlight().Inc()
	defer g.metrics.InFlight().Dec()
	rec, _, tc, since, aerr := g.begin(w, r, endpointResponseItem)
	rec.ResponseID = responseID(r.PathValue("id"))
	if aerr != nil {
		g.reject(w, rec, aerr, since)
		return
	}
	u, aerr := g.routes().upstreamFor(r.Header.Get(UpstreamHeader))
	if aerr != nil {
		g.reject(w, rec, aerr, since)
		return
	}
	rec.Upstream, rec.Engine = u.cfg.Name, u.cfg.Engine
	rec.Marks.Admitted = since()
	// Relayed like any pass-through request (flushed, bounded, the last
	// bytes after the Record is durable). The few bytes a cancel may
	// carry are not needed: these requests have no body in the API.
	ex := &exchange{g: g, w: w, r: r, trace: tc, since: since}
	ex.relay(rec, u, passBody{})
}
