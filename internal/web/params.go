package web

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/report"
)

// queryParser reads an endpoint's query parameters: every parser of a
// query parameter in this package goes through it, so that every bad one
// is answered alike — 400 bad_parameter naming the parameter and the form
// it wants (writeParamErr), never a Go parse error. An absent or empty
// parameter leaves its target as it is; the first error is kept.
type queryParser struct {
	q   url.Values
	loc *time.Location
	now time.Time
	err error
}

// params is the query parser of r.
func (a *API) params(r *http.Request) *queryParser {
	return &queryParser{q: r.URL.Query(), loc: a.o.Loc, now: a.o.Now()}
}

// fail records a bad value of parameter name: what is the form it wants.
func (p *queryParser) fail(name, what, got string) {
	if p.err == nil {
		p.err = badParam(name, "want %s, got %q", what, got)
	}
}

// int parses an integer from lo to hi; what says what it counts.
func (p *queryParser) int(name string, n *int, lo, hi int, what string) {
	v := p.q.Get(name)
	if v == "" || p.err != nil {
		return
	}
	x, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || x < lo || x > hi {
		p.fail(name, fmt.Sprintf("%s, an integer from %d to %d", what, lo, hi), v)
		return
	}
	*n = x
}

// limit parses "limit", which must be 1 to most.
func (p *queryParser) limit(n *int, most int) error {
	p.int("limit", n, 1, most, "how many")
	return p.err
}

// bool parses a flag: 1, true, 0 or false.
func (p *queryParser) bool(name string, b *bool) {
	v := p.q.Get(name)
	if v == "" || p.err != nil {
		return
	}
	x, err := strconv.ParseBool(v)
	if err != nil {
		p.fail(name, "1, true, 0 or false", v)
		return
	}
	*b = x
}

// duration parses a positive Go duration such as 500ms or 2s.
func (p *queryParser) duration(name string, d *time.Duration) {
	v := p.q.Get(name)
	if v == "" || p.err != nil {
		return
	}
	x, err := time.ParseDuration(v)
	if err != nil || x < 0 {
		p.fail(name, "a duration such as 500ms, 2s or 1m", v)
		return
	}
	*d = x
}

// time parses a report time (report.ParseTime) in the API's zone.
func (p *queryParser) time(name string, t *time.Time) error {
	v := p.q.Get(name)
	if v == "" || p.err != nil {
		return p.err
	}
	x, err := report.ParseTime(v, p.loc)
	if err != nil {
		p.fail(name, "a date (2026-11-01) or an RFC 3339 time (2026-11-01T08:00:00Z)", v)
		return p.err
	}
	*t = x
	return nil
}

// oneOf checks that the parameter, when given, is one of the values.
func (p *queryParser) oneOf(name string, values ...string) {
	if v := p.q.Get(name); v != "" && p.err == nil && !slices.Contains(values, v) {
		p.fail(name, "one of "+strings.Join(values, ", "), v)
	}
}

// period reads from and to (report.ParsePeriod: a missing from is days
// before to, a missing to the end of today), naming the one that is wrong.
func (p *queryParser) period(days int) (from, to time.Time) {
	var f, t time.Time
	p.time("from", &f)
	p.time("to", &t)
	if p.err != nil {
		return f, t
	}
	from, to, err := report.ParsePeriod(p.q.Get("from"), p.q.Get("to"), p.loc, p.now, days)
	if err != nil {
		p.err = badParam("from", "%v", err)
	}
	return from, to
}
