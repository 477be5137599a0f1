// Package fleet lets many tollgate replicas behind one load balancer act as
// one for alerting. It sits beside internal/alert: a leader lease in Redis
// decides which replica evaluates the rules (Lease), the leader reads
// every replica's persisted window minutes from the shared store instead of
// its own memory (Windows), and every notification passes a fleet-wide
// deduplication in Redis before it is sent (Dedup), so an alert is sent
// once even when the leader changes or several replicas raise it.
//
// A single replica needs none of it: Local is a lease that is always held,
// and serve reads its own windows as before.
package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// DefaultLeaseTTL is how long a leader's lease lasts without renewal.
const DefaultLeaseTTL = 15 * time.Second

// acquireScript is SET key token NX PX ttl, with the token made of a
// term that grows by one on every takeover (the fencing number) and the
// replica's id. A lease still held under this replica's id (Redis
// answered again before it expired) is taken back as it is: no one else
// can have held it meanwhile.
var acquireScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur then
  local sep = string.find(cur, ':', 1, true)
  if sep and string.sub(cur, sep + 1) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return cur
  end
  return false
end
local tok = redis.call('INCR', KEYS[2]) .. ':' .. ARGV[1]
redis.call('SET', KEYS[1], tok, 'PX', ARGV[2])
return tok
`)

// renewScript extends the lease only while it still holds our token.
var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`)

// releaseScript deletes the lease only while it still holds our token.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// Lease is the alert leader's lease: at most one replica holds it at a
// time. Run keeps trying to take it and, once held, renews it every third
// of its TTL; Held answers whether this replica may evaluate now.
//
// Held is false as soon as a renewal fails or finds another token, and in
// any case once the TTL has passed since the last successful call began
// (less a tenth for clock-rate drift), so a replica cut off from Redis
// stops before another can take over: two leaders never evaluate at the
// same time, given clocks that tick at about the same rate.
type Lease struct {
	rdb     *redis.Client // nil: Local, always held
	key     string
	termKey string
	id      string
	ttl     time.Duration
	log     *slog.Logger
	gauge   prometheus.Gauge

	mu    sync.Mutex
	token string    // "term:id" while held
	until time.Time // monotonic: when this replica must consider the lease lost
}

// LeaseOptions configure a Lease.
type LeaseOptions struct {
	// Prefix starts the lease's keys (the fleet's Redis key prefix).
	Prefix string
	// TTL is how long the lease lasts without renewal (DefaultLeaseTTL).
	TTL time.Duration
	// ID names this replica in the lease (default host:pid:random).
	ID         string
	Log        *slog.Logger
	Registerer prometheus.Registerer
}

// NewLease returns the lease of the fleet sharing rdb, not yet held.
func NewLease(rdb *redis.Client, o LeaseOptions) *Lease {
	l := newLease(o)
	l.rdb = rdb
	// One hash tag: the acquire script touches both keys, which a Redis
	// Cluster allows only within one slot.
	l.key, l.termKey = o.Prefix+":{alert-leader}", o.Prefix+":{alert-leader}:term"
	return l
}

// Local returns the lease of a single replica: always held.
func Local(reg prometheus.Registerer) *Lease {
	l := newLease(LeaseOptions{Registerer: reg})
	l.gauge.Set(1)
	return l
}

func newLease(o LeaseOptions) *Lease {
	if o.TTL <= 0 {
		o.TTL = DefaultLeaseTTL
	}
	if o.ID == "" {
		o.ID = replicaID()
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	l := &Lease{id: o.ID, ttl: o.TTL, log: o.Log, gauge: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tollgate_alert_leader",
		Help: "1 while this replica holds the alert leader's lease (evaluates the rules and notifies), else 0.",
	})}
	if o.Registerer != nil {
		o.Registerer.MustRegister(l.gauge)
	}
	return l
}

// replicaID names this process: host, pid and a random part, since pids
// repeat across containers.
func replicaID() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	// ':' separates the term in the token; keep it out of the id.
	return strings.ReplaceAll(fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b)), ":", "_")
}

// ID is this replica's name in the lease.
func (l *Lease) ID() string { return l.id }

// Held reports whether this replica holds the lease now.
func (l *Lease) Held() bool {
	if l.rdb == nil {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.token != "" && time.Now().Before(l.until)
}

// Token is the lease's fencing token while held ("term:id"), else "".
func (l *Lease) Token() string {
	if !l.Held() {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.token
}

// Run takes and renews the lease until ctx ends, then releases it so that
// another replica takes over at once instead of after the TTL.
func (l *Lease) Run(ctx context.Context) error {
	if l.rdb == nil {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(l.ttl / 3)
	defer t.Stop()
	for {
		l.Step(ctx)
		select {
		case <-ctx.Done():
			l.release()
			return nil
		case <-t.C:
		}
	}
}

// Step takes the lease, or renews it when held: one round of Run. It
// reports whether the lease is held afterwards.
func (l *Lease) Step(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, l.ttl/3)
	defer cancel()
	start := time.Now()
	l.mu.Lock()
	tok := l.token
	l.mu.Unlock()
	ms := l.ttl.Milliseconds()
	var next string
	var err error
	if tok != "" {
		var n int64
		n, err = renewScript.Run(cctx, l.rdb, []string{l.key}, tok, ms).Int64()
		if err == nil && n == 1 {
			next = tok
		}
	} else {
		next, err = acquireScript.Run(cctx, l.rdb, []string{l.key, l.termKey}, l.id, ms).Text()
		if errors.Is(err, redis.Nil) {
			err = nil // held by another replica
		}
	}
	l.mu.Lock()
	was := l.token
	if err != nil || next == "" {
		l.token, l.until = "", time.Time{}
	} else {
		l.token, l.until = next, start.Add(l.ttl-l.ttl/10)
	}
	l.mu.Unlock()
	switch {
	case err != nil && was != "":
		l.log.Error("lost the alert leader's lease: Redis did not answer; this replica stops evaluating alerts", "err", err)
	case err != nil:
		l.log.Warn("could not ask Redis for the alert leader's lease", "err", err)
	case was != "" && next == "":
		l.log.Warn("lost the alert leader's lease to another replica; this replica stops evaluating alerts", "token", was)
	case was == "" && next != "":
		l.log.Info("took the alert leader's lease: this replica evaluates alerts", "token", next)
	}
	held := next != "" && err == nil
	if held {
		l.gauge.Set(1)
	} else {
		l.gauge.Set(0)
	}
	return held
}

// release gives the lease up if still held, at shutdown.
func (l *Lease) release() {
	l.mu.Lock()
	tok := l.token
	l.token, l.until = "", time.Time{}
	l.mu.Unlock()
	l.gauge.Set(0)
	if tok == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.ttl/3)
	defer cancel()
	if err := releaseScript.Run(ctx, l.rdb, []string{l.key}, tok).Err(); err != nil {
		l.log.Warn("could not release the alert leader's lease; another replica takes over when it expires", "err", err)
	}
}

// NewClient connects to the fleet's Redis at url (redis://, rediss://,
// unix://); each call is bounded by timeout and never retried, so that a
// Redis that stops answering costs the leader its lease at once.
func NewClient(url string, timeout time.Duration) (*redis.Client, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout = timeout, timeout, timeout, timeout
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = -1
	opt.DisableIdentity = true
	return redis.NewClient(opt), nil
}
