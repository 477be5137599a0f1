package web

import (
	"net/http"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/why"
)

// whyMax bounds the periods of one explanation.
const whyMax = 7 * 24 * time.Hour

// whyChanged: GET /api/v1/why?since=15m&against=1h&figure=&model=&biz_line=&template=&upstream=
// — what changed in the last `since` against the `against` before it
// (internal/why): the figure that moved, the segment, the slice and since
// when, as message codes with parameters and English text.
func (a *API) whyChanged(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	dur := func(name string, def time.Duration) (time.Duration, bool) {
		v := q.Get(name)
		if v == "" {
			return def, true
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Minute || d > whyMax {
			writeErr(w, http.StatusBadRequest, "bad_"+name, name+" must be a duration from 1m to 168h, such as 15m")
			return 0, false
		}
		return d, true
	}
	since, ok := dur("since", 15*time.Minute)
	if !ok {
		return
	}
	against, ok := dur("against", time.Hour)
	if !ok {
		return
	}
	now := a.o.Now()
	wq := why.Query{From: now.Add(-since), To: now, BaselineTo: now.Add(-since), BaselineFrom: now.Add(-since - against),
		Figure: q.Get("figure"), Where: map[string]string{}}
	for _, l := range []string{"model", "biz_line", "template", "upstream"} {
		if v := q.Get(l); v != "" {
			wq.Where[l] = v
		}
	}
	if _, ok := why.FigureNamed(wq.Figure); wq.Figure != "" && !ok {
		writeErr(w, http.StatusBadRequest, "bad_figure", "figure must be one of "+strings.Join(why.FigureNames(), ", "))
		return
	}
	rep, err := why.Ask(r.Context(), a.o.Store, wq)
	if err != nil {
		a.storeErr(w, err, "why", "could not read the ledger")
		return
	}
	writeJSON(w, rep)
}
