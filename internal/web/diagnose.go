package web

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/tollgate-dev/tollgate/internal/report"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// diagnoseLimit bounds the ledger rows one diagnosis reads (as the CLI's
// default --limit).
const diagnoseLimit = 100000

// diagnose: GET /api/v1/diagnose?from=&to=&model=&biz_line=&limit= — the
// tables of `tollgate diagnose` (latency by input length, cache hit versus
// miss, the long tail, segment shares, token-timeline decay) over the
// successful streamed requests of the period (default the last day), each
// as a JSON report.
func (a *API) diagnose(w http.ResponseWriter, r *http.Request) {
	p := a.params(r)
	from, to := p.period(1)
	limit := diagnoseLimit
	p.limit(&limit, diagnoseLimit)
	if p.err != nil {
		a.writeParamErr(w, p.err, "")
		return
	}
	results, err := report.Diagnose(r.Context(), a.o.Store, from, to, store.Filter{Model: p.q.Get("model"), BizLine: p.q.Get("biz_line")}, limit)
	if err != nil {
		a.storeErr(w, err, "diagnose", "could not read the ledger")
		return
	}
	out := make([]json.RawMessage, 0, len(results))
	for _, res := range results {
		var buf bytes.Buffer
		if err := report.Render(&buf, res, "json"); err != nil {
			writeErr(w, http.StatusInternalServerError, "render_error", err.Error())
			return
		}
		out = append(out, json.RawMessage(bytes.TrimSpace(buf.Bytes())))
	}
	writeJSON(w, map[string]any{"results": out})
}
