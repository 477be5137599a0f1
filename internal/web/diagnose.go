package web

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"

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
	q := r.URL.Query()
	from, to, err := report.ParsePeriod(q.Get("from"), q.Get("to"), a.o.Loc, a.o.Now(), 1)
	if err != nil {
		writeErr(w, http.StatusBadRequest, "bad_period", err.Error())
		return
	}
	limit := diagnoseLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > diagnoseLimit {
			writeErr(w, http.StatusBadRequest, "bad_limit", "limit must be 1–100000")
			return
		}
		limit = n
	}
	results, err := report.Diagnose(r.Context(), a.o.Store, from, to, store.Filter{Model: q.Get("model"), BizLine: q.Get("biz_line")}, limit)
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
