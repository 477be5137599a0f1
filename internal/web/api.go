// Package web serves tollgate's JSON API under /api/v1/ (and, later, the
// dashboard that reads it). It sits after the store: every answer comes
// from the ledger and its rollups, never from the proxy's hot path. The
// API has its own bearer tokens with roles; proxy keys never open it.
package web

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/alert"
	"github.com/tollgate-dev/tollgate/internal/budget"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/notify"
	"github.com/tollgate-dev/tollgate/internal/quota"
	"github.com/tollgate-dev/tollgate/internal/report"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/window"
)

// Store is what the API reads: the ledger, reports, events, engine
// samples and the stored alerting windows. Captures are apart (Options).
type Store interface {
	store.Store
	store.Reports
	store.EventLog
	store.EngineLog
	store.WindowLog
}

// Options wire the API.
type Options struct {
	Store  Store
	Tokens []config.APIToken // only hashes are read
	Loc    *time.Location    // report time zone
	Log    *slog.Logger
	Now    func() time.Time
	// Alerts lists the alerts now pending or firing, and Notifiers the
	// notifiers' delivery status; either may be nil.
	Alerts    func() []alert.Alert
	Notifiers func() []notify.Status
	// Windows are the alerting windows in memory, for percentiles; nil
	// leaves /api/v1/percentiles answering 404 and the overview without
	// latency percentiles.
	Windows Windows
	// Quotas reports today's daily-quota usage; nil when no quota is
	// configured (GET /api/v1/quotas then answers an empty list).
	Quotas quota.UsageReader
	// Reconciliations are the kept bill reconciliation runs; nil answers
	// an empty list.
	Reconciliations Reconciliations
	// Captures are the captured text of slow or failed requests, read by
	// admin tokens only (captures.go); nil answers 404.
	Captures store.Captures
	// Reload re-reads the config file and puts what can change live in
	// force (POST /api/v1/admin/reload, admin only); it returns the keys
	// that changed but need a restart. Nil answers 404.
	Reload func() (needsRestart []string, err error)
	// Budgets lists the budgets' burn (GET /api/v1/budgets); nil answers
	// an empty list.
	Budgets func() []budget.Status
}

// API is the /api/v1/ handler.
type API struct {
	o       Options
	mux     *http.ServeMux
	windows *window.Reader // the alerting windows, stored and in memory
}

// Roles, weakest first.
const (
	RoleRead  = "read"
	RoleAdmin = "admin"
)

// NewAPI builds the handler.
func NewAPI(o Options) *API {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Loc == nil {
		o.Loc = time.UTC
	}
	a := &API{o: o, mux: http.NewServeMux(), windows: newWindowReader(o)}
	a.mux.HandleFunc("GET /api/v1/reports", a.read(a.listReports))
	a.mux.HandleFunc("GET /api/v1/reports/{kind}", a.read(a.getReport))
	a.mux.HandleFunc("GET /api/v1/requests", a.read(a.listRequests))
	a.mux.HandleFunc("GET /api/v1/requests/{id}", a.read(a.getRequest))
	a.mux.HandleFunc("GET /api/v1/events", a.read(a.listEvents))
	a.mux.HandleFunc("GET /api/v1/engine", a.read(a.engineSamples))
	a.mux.HandleFunc("GET /api/v1/alerts", a.read(a.listAlerts))
	a.mux.HandleFunc("GET /api/v1/series", a.read(a.series))
	a.mux.HandleFunc("GET /api/v1/percentiles", a.read(a.percentiles))
	a.mux.HandleFunc("GET /api/v1/overview", a.read(a.overview))
	a.mux.HandleFunc("GET /api/v1/diagnose", a.read(a.diagnose))
	a.mux.HandleFunc("GET /api/v1/why", a.read(a.whyChanged))
	a.mux.HandleFunc("GET /api/v1/quotas", a.read(a.quotas))
	a.mux.HandleFunc("GET /api/v1/reconciliations", a.read(a.listReconciliations))
	a.mux.HandleFunc("GET /api/v1/reconciliations/{id}", a.read(a.getReconciliation))
	a.mux.HandleFunc("GET /api/v1/captures", a.admin(a.listCaptures))
	a.mux.HandleFunc("GET /api/v1/captures/{id}", a.admin(a.getCapture))
	a.mux.HandleFunc("POST /api/v1/admin/reload", a.read(a.reload))
	a.mux.HandleFunc("GET /api/v1/budgets", a.read(a.budgets))
	a.mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, http.StatusNotFound, "not_found", "no such API endpoint: "+r.Method+" "+r.URL.Path)
	})
	return a
}

func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

// proxyHeaders are the request headers a reverse proxy adds. With no
// api.tokens a loopback client is trusted, and a proxy on the same host
// makes every client behind it loopback; a request carrying one of these
// came through such a proxy, so it is refused. A proxy that adds none of
// them cannot be told from a local client: serve warns at start.
var proxyHeaders = []string{"Forwarded", "X-Forwarded-For", "X-Real-IP", "X-Forwarded-Host", "X-Forwarded-Proto", "Via"}

// proxiedBy names the first proxy header r carries, or "".
func proxiedBy(r *http.Request) string {
	for _, h := range proxyHeaders {
		if len(r.Header.Values(h)) > 0 {
			return h
		}
	}
	return ""
}

// role returns the caller's role, or "" when it has none. Tokens are
// compared by their SHA-256 in constant time. With no tokens a loopback
// client that came through no proxy is admin.
func (a *API) role(r *http.Request) string {
	if len(a.o.Tokens) == 0 {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if ip := net.ParseIP(host); err == nil && ip != nil && ip.IsLoopback() && proxiedBy(r) == "" {
			return RoleAdmin
		}
		return ""
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return ""
	}
	h := config.HashKey(strings.TrimSpace(tok))
	role := ""
	for _, t := range a.o.Tokens {
		if subtle.ConstantTimeCompare([]byte(h), []byte(t.Hash())) == 1 {
			role = t.Role
		}
	}
	return role
}

func (a *API) read(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch a.role(r) {
		case RoleRead, RoleAdmin:
			h(w, r)
		default:
			if len(a.o.Tokens) == 0 {
				if h := proxiedBy(r); h != "" {
					w.Header().Set("WWW-Authenticate", `Bearer realm="tollgate api"`)
					writeErr(w, http.StatusUnauthorized, "unauthorized", "the API has no tokens configured (api.tokens) and this request came through a proxy (it carries "+
						h+"): without tokens the API answers local clients only, and a proxy makes its clients look local. Configure api.tokens and send one as a bearer token")
					return
				}
				writeErr(w, http.StatusForbidden, "forbidden", "the API answers loopback clients only until api.tokens are configured")
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="tollgate api"`)
			writeErr(w, http.StatusUnauthorized, "unauthorized", "send an API token: Authorization: Bearer <token> (proxy keys do not open the API)")
		}
	}
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

// storeErr answers a failed store call: 503 store_not_connected while the
// store has not reached its server yet (serve started during a ClickHouse
// outage and keeps connecting: retry later), else 500 store_error with
// msg, the error logged as op.
func (a *API) storeErr(w http.ResponseWriter, err error, op, msg string) {
	if errors.Is(err, store.ErrNotConnected) {
		w.Header().Set("Retry-After", "10")
		writeErr(w, http.StatusServiceUnavailable, "store_not_connected",
			"the store is not connected yet: this gateway started while it was unreachable and keeps trying (finished requests wait in its queue); retry later")
		return
	}
	a.o.Log.Error(op, "err", err)
	writeErr(w, http.StatusInternalServerError, "store_error", msg)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func (a *API) listReports(w http.ResponseWriter, r *http.Request) {
	// zone is the report time zone (days, months, the "store" zone the
	// dashboard offers beside the browser's and UTC).
	writeJSON(w, map[string]any{"reports": report.Kinds, "formats": report.Formats, "zone": a.o.Loc.String()})
}

// getReport: GET /api/v1/reports/{kind}?from=&to=&user=&biz_line=&model=&template=&upstream=&key=&end_user=&limit=&format=
func (a *API) getReport(w http.ResponseWriter, r *http.Request) {
	p := a.params(r)
	from, to := p.period(7)
	rq := report.Query{From: from, To: to, Where: map[store.Dim]string{}}
	for _, d := range []store.Dim{store.DimUser, store.DimBizLine, store.DimModel, store.DimTemplate, store.DimUpstream, store.DimKey, store.DimEndUser} {
		if v := p.q.Get(string(d)); v != "" {
			rq.Where[d] = v
		}
	}
	p.limit(&rq.Limit, math.MaxInt32)
	p.oneOf("format", "json", "csv", "table")
	if p.err != nil {
		a.writeParamErr(w, p.err, "")
		return
	}
	format := p.q.Get("format")
	if format == "" || format == "table" {
		format = "json"
	}
	res, err := report.Run(r.Context(), a.o.Store, r.PathValue("kind"), rq)
	if errors.Is(err, store.ErrNotConnected) {
		a.storeErr(w, err, "report", "")
		return
	}
	if err != nil {
		writeErr(w, http.StatusBadRequest, "bad_report", err.Error())
		return
	}
	if format == "csv" {
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	if err := report.Render(w, res, format); err != nil {
		a.o.Log.Warn("render report", "err", err)
	}
}

// listRequests: GET /api/v1/requests?since=&until=&user=&biz_line=&model=&trace_id=&client_request_id=&template=&endpoint=&end_user=&status=&errors=1&slow=2s&sort=&limit=
func (a *API) listRequests(w http.ResponseWriter, r *http.Request) {
	p := a.params(r)
	q := p.q
	f := store.Filter{UserID: q.Get("user"), BizLine: q.Get("biz_line"), Model: q.Get("model"), TraceID: q.Get("trace_id"), TemplateID: q.Get("template"),
		ClientRequestID: q.Get("client_request_id"), Endpoint: q.Get("endpoint"), EndUser: q.Get("end_user")}
	p.time("since", &f.Since)
	p.time("until", &f.Until)
	p.int("status", &f.Status, 100, 599, "an HTTP status code")
	p.duration("slow", &f.MinE2E)
	p.limit(&f.Limit, 10000)
	p.bool("errors", &f.ErrorsOnly)
	p.oneOf("sort", slices.Sorted(maps.Keys(store.Sorts))...)
	f.Sort = q.Get("sort")
	if p.err != nil {
		a.writeParamErr(w, p.err, "")
		return
	}
	recs, err := a.o.Store.Requests(r.Context(), f)
	if err != nil {
		a.storeErr(w, err, "list requests", "could not read the ledger")
		return
	}
	writeJSON(w, map[string]any{"requests": recs})
}

func (a *API) getRequest(w http.ResponseWriter, r *http.Request) {
	recs, err := a.o.Store.Request(r.Context(), r.PathValue("id"))
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeErr(w, http.StatusNotFound, "not_found", "no request "+strconv.Quote(r.PathValue("id")))
	case err != nil:
		a.storeErr(w, err, "get request", "could not read the ledger")
	default:
		// now is the server's clock, against which a reader tells whether
		// an attempt's engine timing is still pending (arrival +
		// engine_timing_due_ms); a browser's clock may be off.
		writeJSON(w, map[string]any{"attempts": recs, "now": a.o.Now().UTC().Format(time.RFC3339Nano)})
	}
}

func (a *API) listEvents(w http.ResponseWriter, r *http.Request) {
	p := a.params(r)
	since := a.o.Now().Add(-7 * 24 * time.Hour)
	p.time("since", &since)
	if p.err != nil {
		a.writeParamErr(w, p.err, "")
		return
	}
	evs, err := a.o.Store.Events(r.Context(), since, p.q.Get("kind"), 500)
	if err != nil {
		a.storeErr(w, err, "list events", "could not read events")
		return
	}
	type ev struct {
		At      time.Time       `json:"at"`
		Kind    string          `json:"kind"`
		Subject string          `json:"subject"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data,omitempty"`
	}
	out := make([]ev, 0, len(evs))
	for _, e := range evs {
		var data json.RawMessage
		if json.Valid([]byte(e.Data)) {
			data = json.RawMessage(e.Data)
		}
		out = append(out, ev{e.At, e.Kind, e.Subject, e.Message, data})
	}
	writeJSON(w, map[string]any{"events": out})
}

// engineSamples: GET /api/v1/engine?from=&to=&upstream= — engines' own
// gauges over time (running, waiting, KV-cache use, hit rate, TTFT).
func (a *API) engineSamples(w http.ResponseWriter, r *http.Request) {
	p := a.params(r)
	from, to := p.period(1)
	if p.err != nil {
		a.writeParamErr(w, p.err, "")
		return
	}
	ss, err := a.o.Store.EngineSamples(r.Context(), from, to, p.q.Get("upstream"))
	if err != nil {
		a.storeErr(w, err, "engine samples", "could not read engine samples")
		return
	}
	// JSON has no NaN: an unknown value is null.
	num := func(f float64) *float64 {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil
		}
		return &f
	}
	type sample struct {
		At                  time.Time `json:"at"`
		Upstream            string    `json:"upstream"`
		Model               string    `json:"model"`
		Up                  bool      `json:"up"`
		Running             *float64  `json:"running"`
		Waiting             *float64  `json:"waiting"`
		KVCacheUsage        *float64  `json:"kv_cache_usage"`
		PrefixCacheHitRate  *float64  `json:"prefix_cache_hit_rate"`
		TTFTP50             *float64  `json:"ttft_p50_s"`
		TTFTP95             *float64  `json:"ttft_p95_s"`
		TTFTP99             *float64  `json:"ttft_p99_s"`
		PromptTokensPerS    *float64  `json:"prompt_tokens_per_s"`
		GenerationTokensPer *float64  `json:"generation_tokens_per_s"`
	}
	out := make([]sample, 0, len(ss))
	for _, e := range ss {
		out = append(out, sample{e.At, e.Upstream, e.Model, e.Up, num(e.Running), num(e.Waiting), num(e.KVCacheUsage), num(e.PrefixCacheHitRate),
			num(e.TTFTP50), num(e.TTFTP95), num(e.TTFTP99), num(e.PromptTokensPerS), num(e.GenerationTokensPerS)})
	}
	writeJSON(w, map[string]any{"samples": out})
}

// listAlerts: GET /api/v1/alerts?since= — the alerts now pending or
// firing, their history (fired, escalated, resolved; default the last 7
// days) and each notifier's delivery status.
func (a *API) listAlerts(w http.ResponseWriter, r *http.Request) {
	since := a.o.Now().Add(-7 * 24 * time.Hour)
	if p := a.params(r); p.time("since", &since) != nil {
		a.writeParamErr(w, p.err, "")
		return
	}
	history, err := a.o.Store.Events(r.Context(), since, alert.EventKind, 500)
	if err != nil {
		a.storeErr(w, err, "list alerts", "could not read the alert history")
		return
	}
	out := map[string]any{"active": []alert.Alert{}, "history": history, "notifiers": []notify.Status{}}
	if a.o.Alerts != nil {
		out["active"] = a.o.Alerts()
	}
	if a.o.Notifiers != nil {
		out["notifiers"] = a.o.Notifiers()
	}
	writeJSON(w, out)
}

// quotas: GET /api/v1/quotas — every scope with a daily limit, today's
// usage against it (budget burn).
func (a *API) quotas(w http.ResponseWriter, r *http.Request) {
	list := []quota.ScopeUsage{}
	if a.o.Quotas != nil {
		if us := a.o.Quotas.Usage(a.o.Now()); us != nil {
			list = us
		}
	}
	writeJSON(w, map[string]any{"quotas": list})
}
