package fleet

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/alert"
	"github.com/tollgate-dev/tollgate/internal/quota/redisquota/redistest"
)

// claimHook counts the claims a client sends to Redis (EVALSHA) and runs
// before, when set, ahead of each.
type claimHook struct {
	claims atomic.Int64
	before func(key string)
}

func (h *claimHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *claimHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *claimHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" {
			h.claims.Add(1)
			if h.before != nil {
				h.before(cmd.Args()[3].(string))
			}
		}
		return next(ctx, cmd)
	}
}

// fakeClock is the Dedup's clock, moved by hand.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func (r *recorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.sent)
}

func alertOf(fp string, s alert.State) alert.Alert {
	return alert.Alert{Fingerprint: fp, State: s, Severity: alert.Warning}
}

// A Redis that does not answer (stopped, not refusing) costs one claim's
// timeout, not one per alert: claims pause, the alerts behind go out
// unclaimed (counted), and after the pause Redis is tried again.
func TestDedupBreaker(t *testing.T) {
	srv := redistest.Start(t, true)
	rdb := srv.Client(t)
	hook := &claimHook{}
	rdb.AddHook(hook)
	rec := &recorder{}
	d := NewDedup(rec, rdb, DedupOptions{Prefix: srv.Prefix(t)})
	clock := &fakeClock{}
	d.now, d.timeout = clock.now, 300*time.Millisecond
	ctx := t.Context()

	srv.Signal(t, syscall.SIGSTOP)
	for _, fp := range []string{"b1", "b2", "b3", "b4", "b5"} {
		d.send(ctx, alertOf(fp, alert.Firing))
	}
	if got := hook.claims.Load(); got != 1 {
		t.Errorf("Redis stalled: %d claims tried, want 1 (the rest wait out the pause)", got)
	}
	if got := rec.list(); len(got) != 5 || testutil.ToFloat64(d.errs) != 5 {
		t.Errorf("Redis stalled: sent %v, errors %v; want all 5 sent and counted", got, testutil.ToFloat64(d.errs))
	}

	srv.Signal(t, syscall.SIGCONT)
	clock.advance(d.breakFor) // the pause is over: Redis again
	d.send(ctx, alertOf("b6", alert.Firing))
	d.send(ctx, alertOf("b6", alert.Firing))
	if got := hook.claims.Load(); got != 3 {
		t.Errorf("after the pause: %d claims in all, want 3", got)
	}
	if got := rec.list(); len(got) != 6 || got[5] != "b6 firing warning" || testutil.ToFloat64(d.dropped) != 1 {
		t.Errorf("after the pause: sent %v, dropped %v; want b6 sent once", got, testutil.ToFloat64(d.dropped))
	}
}

// The drain at shutdown is bounded: with a Redis that answers, but
// slowly, claims stop at the deadline and the rest are sent unclaimed.
func TestDedupDrainDeadline(t *testing.T) {
	srv := redistest.Start(t, false)
	rdb := srv.Client(t)
	clock := &fakeClock{}
	hook := &claimHook{before: func(string) { clock.advance(time.Second) }} // each claim takes 1 s
	rdb.AddHook(hook)
	rec := &recorder{}
	d := NewDedup(rec, rdb, DedupOptions{Prefix: srv.Prefix(t)})
	d.now = clock.now
	const n = 20
	for i := range n {
		d.Notify(t.Context(), alertOf(string(rune('a'+i)), alert.Firing))
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	d.Run(ctx)
	if got := hook.claims.Load(); got != int64(d.drainFor/time.Second) {
		t.Errorf("%d claims in the drain, want %d (its %v at 1 s each)", got, d.drainFor/time.Second, d.drainFor)
	}
	if got := rec.list(); len(got) != n {
		t.Errorf("sent %d of %d queued", len(got), n)
	}
	if e := testutil.ToFloat64(d.errs); e != float64(n)-float64(d.drainFor/time.Second) {
		t.Errorf("errors %v, want the %v sent unclaimed", e, float64(n)-float64(d.drainFor/time.Second))
	}
}

// With the queue full, a notification never overtakes an older one of
// the same alert: a newer state replaces the queued one, an alert being
// sent queues behind itself, and only an alert with nothing queued is
// handed over at once.
func TestDedupFullQueueOrder(t *testing.T) {
	srv := redistest.Start(t, false)
	rdb := srv.Client(t)
	claiming, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hook := &claimHook{before: func(key string) {
		if strings.HasSuffix(key, ":f1") {
			once.Do(func() { close(claiming); <-release })
		}
	}}
	rdb.AddHook(hook)
	rec := &recorder{}
	d := NewDedup(rec, rdb, DedupOptions{Prefix: srv.Prefix(t)})
	d.max = 2

	d.Notify(t.Context(), alertOf("f1", alert.Firing))
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan struct{})
	go func() { d.Run(ctx); close(ran) }()
	<-claiming // Run holds f1 firing, waiting on Redis
	d.Notify(t.Context(), alertOf("g1", alert.Firing))
	d.Notify(t.Context(), alertOf("g2", alert.Firing))   // the queue is full
	d.Notify(t.Context(), alertOf("f1", alert.Resolved)) // behind the f1 in flight
	d.Notify(t.Context(), alertOf("g2", alert.Resolved)) // replaces g2 firing, never sent
	d.Notify(t.Context(), alertOf("h1", alert.Firing))   // nothing of h1 queued: at once
	if got := rec.list(); !slices.Equal(got, []string{"h1 firing warning"}) {
		t.Errorf("with the queue full, sent at once %v; want only h1", got)
	}
	close(release)
	want := []string{"h1 firing warning", "f1 firing warning", "g1 firing warning", "g2 resolved warning", "f1 resolved warning"}
	redistest.WaitFor(t, "the queue sent", 10*time.Second, func() bool { return len(rec.list()) == len(want) })
	cancel()
	<-ran
	if got := rec.list(); !slices.Equal(got, want) {
		t.Errorf("sent:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if e := testutil.ToFloat64(d.errs); e != 2 {
		t.Errorf("errors %v, want 2 (g2 replaced, h1 unclaimed)", e)
	}
}
