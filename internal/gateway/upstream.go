package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/record"
)

// upstream is one engine with its own connection pool: timeouts differ
// per engine, and one slow engine must not starve another's connections.
type upstream struct {
	cfg      config.Upstream
	base     string // URL without trailing slash, e.g. http://127.0.0.1:8000/v1
	timeouts config.Timeouts
	client   *http.Client
	slots    *slots // nil: unbounded, no queue (see slots.go)
}

// newUpstream builds an upstream; dial, when not nil, replaces the TCP
// dialer (Options.Dial).
func newUpstream(c config.Upstream, wait *prometheus.HistogramVec, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *upstream {
	t := c.TimeoutsOrDefault()
	if dial == nil {
		dial = (&net.Dialer{Timeout: t.Connect, KeepAlive: 30 * time.Second}).DialContext
	}
	tr := &http.Transport{
		Proxy:       nil, // an inference engine is reached directly, never via HTTP_PROXY
		DialContext: dial,
		// Uncompressed bodies: the tap must read tokens and usage, and
		// engines on a LAN gain nothing from gzip.
		DisableCompression:    true,
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   1024,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   t.Connect,
		ResponseHeaderTimeout: 0, // bounded by the first-token timer instead
		ExpectContinueTimeout: 0,
	}
	return &upstream{
		slots:    newSlots(c, wait),
		cfg:      c,
		base:     strings.TrimRight(c.URL, "/"),
		timeouts: t,
		client: &http.Client{
			Transport: tr,
			// The gateway proxies; a redirect from an engine is an answer
			// for the client, not something to follow.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
}

// router maps a model name to the upstreams that serve it.
type router struct {
	byModel  map[string][]*upstream
	byName   map[string]*upstream
	all      []*upstream
	wildcard *upstream // the single upstream with no model list, if so configured
	next     atomic.Uint64
	// longLanes: some upstream has a long-input lane, so requests need
	// their input estimate to pick a lane.
	longLanes bool
	wait      *prometheus.HistogramVec // slot waits, by upstream and lane
}

// newRouter builds the routes of ups. With old (a reload), an upstream
// configured exactly as before is kept, with its connection pool and its
// slots, so the requests it holds and queues go on counting against its
// max_concurrency; a changed one is built anew, and requests in flight on
// the old one finish there.
func newRouter(ups []config.Upstream, old *router, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *router {
	rt := &router{byModel: map[string][]*upstream{}, byName: map[string]*upstream{}}
	if old != nil {
		rt.wait = old.wait
	} else {
		rt.wait = newWaitHistogram()
	}
	for _, c := range ups {
		u := (*upstream)(nil)
		if o := old.named(c.Name); o != nil && reflect.DeepEqual(o.cfg, c) {
			u = o
		} else {
			u = newUpstream(c, rt.wait, dial)
		}
		rt.all = append(rt.all, u)
		rt.byName[c.Name] = u
		rt.longLanes = rt.longLanes || (u.slots != nil && u.slots.longMax > 0)
		for _, m := range c.Models {
			rt.byModel[m] = append(rt.byModel[m], u)
		}
	}
	if len(rt.all) == 1 && len(ups[0].Models) == 0 {
		rt.wildcard = rt.all[0]
	}
	return rt
}

// named is the upstream called name, nil if none (or rt is nil).
func (rt *router) named(name string) *upstream {
	if rt == nil {
		return nil
	}
	return rt.byName[name]
}

// candidates returns the upstreams for a model, starting at a rotating
// offset so load spreads over replicas of one model, and a retry moves on
// to the next one.
func (rt *router) candidates(model string) []*upstream {
	if rt.wildcard != nil {
		return []*upstream{rt.wildcard}
	}
	list := rt.byModel[model]
	switch len(list) {
	case 0:
		return nil
	case 1:
		return list
	}
	start := int(rt.next.Add(1) % uint64(len(list)))
	out := make([]*upstream, 0, len(list))
	out = append(out, list[start:]...)
	return append(out, list[:start]...)
}

func (rt *router) modelNames() []string {
	names := make([]string, 0, len(rt.byModel))
	for m := range rt.byModel {
		names = append(names, m)
	}
	slices.Sort(names)
	return names
}

func (rt *router) closeIdle() {
	for _, u := range rt.all {
		u.client.CloseIdleConnections()
	}
}

type modelList struct {
	Object string      `json:"object"`
	Data   []modelItem `json:"data"`
}

type modelItem struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

func writeModelList(w http.ResponseWriter, names []string) {
	l := modelList{Object: "list", Data: make([]modelItem, 0, len(names))}
	for _, n := range names {
		l.Data = append(l.Data, modelItem{ID: n, Object: "model", OwnedBy: "tollgate"})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(l)
}

// forwardModels returns the upstream's own /models answer.
func (g *Gateway) forwardModels(w http.ResponseWriter, r *http.Request, u *upstream) {
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, u.base+"/models", nil)
	if err != nil {
		writeError(w, &apiError{Kind: record.ErrUpstreamStatus, Status: http.StatusBadGateway, Type: "server_error", Code: "upstream_error", Message: err.Error()})
		return
	}
	setUpstreamAuth(req, r, u)
	resp, err := u.client.Do(req)
	if err != nil {
		writeError(w, &apiError{Kind: record.ErrConnect, Status: http.StatusBadGateway, Type: "server_error", Code: "upstream_connect",
			Message: "upstream " + u.cfg.Name + " is unreachable"})
		return
	}
	defer resp.Body.Close()
	copyHeaders(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, io.LimitReader(resp.Body, 16<<20))
}

// setUpstreamAuth sends the upstream's own key when configured; otherwise
// the client's credentials pass through (hosted APIs behind an open
// gateway). A tollgate key is never forwarded when tollgate checks keys.
func setUpstreamAuth(req, client *http.Request, u *upstream) {
	if u.cfg.APIKey != "" {
		if u.cfg.Engine == "anthropic" {
			req.Header.Set("X-Api-Key", u.cfg.APIKey) // Anthropic's API takes no bearer token
			return
		}
		req.Header.Set("Authorization", "Bearer "+u.cfg.APIKey)
		return
	}
	if v := client.Header.Get("Authorization"); v != "" {
		req.Header.Set("Authorization", v)
	}
	if v := client.Header.Get("X-Api-Key"); v != "" {
		req.Header.Set("X-Api-Key", v) // Anthropic's SDKs send their key so
	}
}

// AnthropicVersion is the anthropic-version header sent to an upstream of
// engine anthropic when the client sent none (Anthropic's API requires
// one); a client's own is forwarded unchanged, as anthropic-beta is.
const AnthropicVersion = "2023-06-01"

// hop-by-hop headers (RFC 9110 §7.6.1) and those the gateway sets itself.
var skipResponseHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true, "Content-Length": true, "X-Request-Id": true,
}

func copyHeaders(dst, src http.Header) {
	named := connectionHeaders(src)
	for k, vs := range src {
		if skipResponseHeaders[k] || named[k] {
			continue
		}
		dst[k] = vs
	}
}

// Request headers not forwarded upstream: hop-by-hop, credentials (set by
// setUpstreamAuth), the body framing, and compression (the tap needs
// plain bytes; a gzip body was decompressed by readBody). Headers the
// Connection header names are hop-by-hop too (RFC 9110 §7.6.1), whatever
// their name: connectionHeaders.
var skipRequestHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true, "Content-Length": true, "Authorization": true,
	"X-Api-Key": true, "Api-Key": true, "Accept-Encoding": true, "Content-Encoding": true, "Traceparent": true, "Tracestate": true,
	"Host": true, "Proxy-Authorization": true,
}

func copyRequestHeaders(dst, src http.Header) {
	named := connectionHeaders(src)
	for k, vs := range src {
		if skipRequestHeaders[k] || named[k] {
			continue
		}
		dst[k] = vs
	}
}

// connectionHeaders are the headers h's Connection header names, in
// canonical form: they belong to this hop only. Nil when there are none
// (the usual case, no allocation).
func connectionHeaders(h http.Header) map[string]bool {
	var named map[string]bool
	for _, v := range h["Connection"] {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				if named == nil {
					named = map[string]bool{}
				}
				named[http.CanonicalHeaderKey(f)] = true
			}
		}
	}
	return named
}
