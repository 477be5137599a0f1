package gateway

import (
	"time"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/cost"
)

// A reload (SIGHUP or POST /api/v1/admin/reload, wired by serve) swaps
// what the request path reads through atomic pointers: a request loads the
// keys, the routes or the price table once where it needs them and never
// waits for a reload, and a reload never waits for a request. Requests in
// flight finish on what they started with: their upstream (with its
// connection and slot), and the price table in force at their arrival.

// live is the part of the gateway a reload replaces.
type live struct {
	auth   *auth
	routes *router
	prio   *priorities
}

func (g *Gateway) auth() *auth     { return g.live.Load().auth }
func (g *Gateway) routes() *router { return g.live.Load().routes }

// priceBook is the price tables the gateway has run with, newest first,
// each from the time it came into force: a Record is rated with the table
// in force when it arrived, so a reload under load rates what arrived
// before it at the old price version and what arrives after at the new
// one. keepTables bounds the history; a request older than every kept
// table (many reloads during one request) is rated with the oldest kept.
type priceBook struct {
	from time.Time // zero for the table serve started with
	t    *cost.Table
	prev *priceBook
}

const keepTables = 8

// priceTable is the table in force at time at; nil when none is configured.
func (g *Gateway) priceTable(at time.Time) *cost.Table {
	b := g.prices.Load()
	for b != nil {
		if !at.Before(b.from) || b.prev == nil {
			return b.t
		}
		b = b.prev
	}
	return nil
}

// Reload puts a new configuration's keys, upstreams, priorities and price
// table in force for requests arriving from now on. cfg must be valid
// (config.Config.Validate) and prices built from it. Upstreams configured
// exactly as before keep their connections and slots.
func (g *Gateway) Reload(cfg *config.Config, prices *cost.Table) {
	old := g.live.Load()
	g.live.Store(&live{auth: newAuth(cfg.Auth.Keys), routes: newRouter(cfg.Upstreams, old.routes, g.dial), prio: newPriorities(cfg)})
	// Connections of upstreams no longer configured close once idle;
	// requests in flight on them finish first.
	for _, u := range old.routes.all {
		if g.routes().named(u.cfg.Name) != u {
			u.client.CloseIdleConnections()
		}
	}
	now := time.Now()
	head := &priceBook{from: now, t: prices, prev: g.prices.Load()}
	// Copy the kept history: the list other goroutines walk is never
	// written to.
	b, n := head, 1
	for b.prev != nil && n < keepTables {
		c := *b.prev
		b.prev = &c
		b, n = b.prev, n+1
	}
	b.prev = nil
	g.prices.Store(head)
}
