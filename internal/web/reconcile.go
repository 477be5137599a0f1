package web

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/tollgate-dev/tollgate/internal/billing"
)

// Reconciliations reads the reconciliation runs kept by tollgate reconcile
// (billing.Runs).
type Reconciliations interface {
	List(ctx context.Context, limit int) ([]billing.Run, error)
	Get(ctx context.Context, id int64) (billing.Run, json.RawMessage, error)
}

// listReconciliations: GET /api/v1/reconciliations?limit= — the kept runs,
// newest first (default 50, at most 500).
func (a *API) listReconciliations(w http.ResponseWriter, r *http.Request) {
	limit := 50
	if p := a.params(r); p.limit(&limit, 500) != nil {
		a.writeParamErr(w, p.err, "")
		return
	}
	runs := []billing.Run{}
	if a.o.Reconciliations != nil {
		var err error
		if runs, err = a.o.Reconciliations.List(r.Context(), limit); err != nil {
			a.o.Log.Error("list reconciliations", "err", err)
			writeErr(w, http.StatusInternalServerError, "store_error", "could not read the reconciliation runs")
			return
		}
	}
	writeJSON(w, map[string]any{"reconciliations": runs})
}

// getReconciliation: GET /api/v1/reconciliations/{id} — one run and its
// report, with every line.
func (a *API) getReconciliation(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		writeErr(w, http.StatusBadRequest, "bad_id", "a reconciliation id is a positive integer, not "+strconv.Quote(r.PathValue("id")))
		return
	}
	notFound := func() {
		writeErr(w, http.StatusNotFound, "not_found", "no reconciliation run "+strconv.FormatInt(id, 10))
	}
	if a.o.Reconciliations == nil {
		notFound()
		return
	}
	run, rep, err := a.o.Reconciliations.Get(r.Context(), id)
	switch {
	case errors.Is(err, billing.ErrNoRun):
		notFound()
	case err != nil:
		a.o.Log.Error("get reconciliation", "id", id, "err", err)
		writeErr(w, http.StatusInternalServerError, "store_error", "could not read the reconciliation run")
	default:
		writeJSON(w, map[string]any{"reconciliation": run, "report": rep})
	}
}
