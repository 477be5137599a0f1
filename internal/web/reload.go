package web

import (
	"net/http"

	"github.com/tollgate-dev/tollgate/internal/budget"
)

// reload serves POST /api/v1/admin/reload: the same live reload as
// SIGHUP (serve's Options.Reload), for admins only. A config that does
// not load or validate answers 422 with the error naming the field, and
// the running configuration stays in force.
func (a *API) reload(w http.ResponseWriter, r *http.Request) {
	if a.role(r) != RoleAdmin {
		writeErr(w, http.StatusForbidden, "forbidden", "reloading the configuration needs an admin token (api.tokens[].role: admin)")
		return
	}
	if a.o.Reload == nil {
		writeErr(w, http.StatusNotFound, "not_found", "this server cannot reload: it was started without a config file")
		return
	}
	restart, err := a.o.Reload()
	if err != nil {
		writeErr(w, http.StatusUnprocessableEntity, "invalid_config", "configuration not reloaded, the running one is kept: "+err.Error())
		return
	}
	if restart == nil {
		restart = []string{}
	}
	writeJSON(w, map[string]any{"status": "reloaded", "needs_restart": restart})
}

// budgets serves GET /api/v1/budgets: each budget's burn in its current
// period, as of the tracker's last read of the store.
func (a *API) budgets(w http.ResponseWriter, r *http.Request) {
	list := []budget.Status{}
	if a.o.Budgets != nil {
		list = append(list, a.o.Budgets()...)
	}
	writeJSON(w, map[string]any{"budgets": list})
}
