package fleet

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/tollgate-dev/tollgate/internal/alert"
	"github.com/tollgate-dev/tollgate/internal/quota/redisquota/redistest"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
	"github.com/tollgate-dev/tollgate/internal/window"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Two replicas' leases on one Redis: one holds it, the other does not;
// the holder renews it; released, the other takes it with a higher term
// (the fencing number); a holder that cannot reach Redis lets go at the
// first failed renewal, without waiting for the TTL.
func TestLease(t *testing.T) {
	srv := redistest.Start(t, true)
	prefix := srv.Prefix(t)
	ctx := t.Context()
	ra, rb := srv.Client(t), srv.Client(t)
	regA := prometheus.NewRegistry()
	a := NewLease(ra, LeaseOptions{Prefix: prefix, TTL: 3 * time.Second, ID: "a", Registerer: regA})
	b := NewLease(rb, LeaseOptions{Prefix: prefix, TTL: 3 * time.Second, ID: "b"})

	if !a.Step(ctx) || !a.Held() || a.Token() != "1:a" {
		t.Fatalf("a did not take a free lease: held %v token %q", a.Held(), a.Token())
	}
	if g := testutil.ToFloat64(a.gauge); g != 1 {
		t.Errorf("tollgate_alert_leader of the holder = %v, want 1", g)
	}
	if b.Step(ctx) || b.Held() || b.Token() != "" {
		t.Fatalf("b took a lease a holds (token %q)", b.Token())
	}
	if !a.Step(ctx) || a.Token() != "1:a" {
		t.Fatalf("a's renewal failed: token %q", a.Token())
	}
	a.release()
	if a.Held() || testutil.ToFloat64(a.gauge) != 0 {
		t.Fatal("a still holds the lease it released")
	}
	if !b.Step(ctx) || b.Token() != "2:b" {
		t.Fatalf("b after a's release: held %v token %q, want 2:b", b.Held(), b.Token())
	}
	// a's old token no longer renews anything: a comes back as a candidate.
	if a.Step(ctx) {
		t.Fatal("a took the lease b holds")
	}

	// Redis gone: the holder stops at its next step.
	srv.Kill(t)
	if b.Step(ctx) || b.Held() {
		t.Fatal("b still holds the lease with Redis down")
	}
	// Back: the lease b held may still be in Redis (no persistence here,
	// so it is not); either way one replica takes it.
	srv.Restart(t)
	redistest.WaitFor(t, "a leader after Redis restarts", 10*time.Second, func() bool { return a.Step(ctx) || b.Step(ctx) })
	if a.Held() == b.Held() {
		t.Errorf("a held %v, b held %v: want exactly one", a.Held(), b.Held())
	}
}

// A held lease not renewed in time is no longer held locally, whatever
// Redis says: a stuck renewal cannot make two leaders.
func TestLeaseExpiresLocally(t *testing.T) {
	srv := redistest.Start(t, false)
	l := NewLease(srv.Client(t), LeaseOptions{Prefix: srv.Prefix(t), TTL: time.Second, ID: "a"})
	if !l.Step(t.Context()) {
		t.Fatal("could not take a free lease")
	}
	redistest.WaitFor(t, "the lease to lapse", 5*time.Second, func() bool { return !l.Held() })
}

// Run takes the lease and releases it when its context ends, so another
// replica takes over at once.
func TestLeaseRunReleases(t *testing.T) {
	srv := redistest.Start(t, false)
	prefix := srv.Prefix(t)
	a := NewLease(srv.Client(t), LeaseOptions{Prefix: prefix, TTL: time.Minute, ID: "a"})
	b := NewLease(srv.Client(t), LeaseOptions{Prefix: prefix, TTL: time.Minute, ID: "b"})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	redistest.WaitFor(t, "a to lead", 10*time.Second, a.Held)
	cancel()
	<-done
	if !b.Step(t.Context()) {
		t.Fatal("b could not take the lease a released (a lease of a minute)")
	}
	if l := Local(nil); !l.Held() {
		t.Error("a single replica's lease is not held")
	}
}

type recorder struct {
	mu   sync.Mutex
	sent []string
}

func (r *recorder) Notify(_ context.Context, a alert.Alert) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, fmt.Sprintf("%s %s %s", a.Fingerprint, a.State, a.Severity))
}

// Three replicas' notifiers: each transition is sent once, whichever
// replicas hand it over and however often; with Redis down, sent anyway.
func TestDedup(t *testing.T) {
	srv := redistest.Start(t, true)
	prefix := srv.Prefix(t)
	rec := &recorder{}
	reg := prometheus.NewRegistry()
	var ds []*Dedup
	for i := range 3 {
		o := DedupOptions{Prefix: prefix, Repeat: time.Hour}
		if i == 0 {
			o.Registerer = reg
		}
		ds = append(ds, NewDedup(rec, srv.Client(t), o))
	}
	ctx := t.Context()
	steps := []alert.Alert{
		{Fingerprint: "f1", State: alert.Firing, Severity: alert.Warning},
		{Fingerprint: "f1", State: alert.Firing, Severity: alert.Warning},  // a new leader re-finds it
		{Fingerprint: "f2", State: alert.Firing, Severity: alert.Warning},  // another alert
		{Fingerprint: "f1", State: alert.Firing, Severity: alert.Critical}, // escalates
		{Fingerprint: "f1", State: alert.Resolved, Severity: alert.Critical},
		{Fingerprint: "f1", State: alert.Resolved, Severity: alert.Critical},
		{Fingerprint: "f1", State: alert.Firing, Severity: alert.Critical}, // fires again
	}
	for _, a := range steps {
		for _, d := range ds {
			d.send(ctx, a) // what Run does with each queued alert
		}
	}
	want := []string{"f1 firing warning", "f2 firing warning", "f1 firing critical", "f1 resolved critical", "f1 firing critical"}
	if !slices.Equal(rec.sent, want) {
		t.Errorf("sent:\n%s\nwant:\n%s", strings.Join(rec.sent, "\n"), strings.Join(want, "\n"))
	}
	var dropped float64
	for _, d := range ds {
		dropped += testutil.ToFloat64(d.dropped)
	}
	if dropped != float64(3*len(steps)-len(want)) {
		t.Errorf("dropped %v in all, want %d", dropped, 3*len(steps)-len(want))
	}
	// The claim expires before the engine's repeat.
	ttl := srv.Client(t).PTTL(ctx, prefix+":alert-sent:f1").Val()
	if ttl <= 0 || ttl > 54*time.Minute {
		t.Errorf("claim lasts %v, want at most 54m (repeat 1h less a tenth)", ttl)
	}

	srv.Kill(t)
	rec.sent = nil
	ds[0].send(ctx, alert.Alert{Fingerprint: "f3", State: alert.Firing, Severity: alert.Warning})
	if len(rec.sent) != 1 || testutil.ToFloat64(ds[0].errs) != 1 {
		t.Errorf("with Redis down: sent %v, errors %v; want it sent and counted", rec.sent, testutil.ToFloat64(ds[0].errs))
	}
}

// Notify only queues (quota alerts are raised on the request path, which
// must not wait for Redis); Run claims and sends in order, and drains the
// queue when stopped. A full queue sends unclaimed rather than lose one.
func TestDedupQueue(t *testing.T) {
	srv := redistest.Start(t, false)
	rec := &recorder{}
	d := NewDedup(rec, srv.Client(t), DedupOptions{Prefix: srv.Prefix(t)})
	fire := alert.Alert{Fingerprint: "q1", State: alert.Firing, Severity: alert.Warning}
	for range d.max {
		d.Notify(t.Context(), fire)
	}
	if len(rec.sent) != 0 {
		t.Fatalf("sent before Run: %v", rec.sent)
	}
	d.Notify(t.Context(), alert.Alert{Fingerprint: "q2", State: alert.Firing, Severity: alert.Warning}) // queue full
	if !slices.Equal(rec.sent, []string{"q2 firing warning"}) || testutil.ToFloat64(d.errs) != 1 {
		t.Fatalf("with the queue full: sent %v, errors %v", rec.sent, testutil.ToFloat64(d.errs))
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // Run drains what is queued, then returns
	d.Run(ctx)
	if want := []string{"q2 firing warning", "q1 firing warning"}; !slices.Equal(rec.sent, want) {
		t.Errorf("sent %v, want %v (the %d queued copies of q1 sent once)", rec.sent, want, d.max)
	}
	if n := testutil.ToFloat64(d.dropped); n != float64(d.max-1) {
		t.Errorf("dropped %v, want %d", n, d.max-1)
	}
}

func finished(model string, end time.Time, status int, in, out int64) *record.Record {
	r := &record.Record{RequestID: fmt.Sprint(end.UnixNano(), model, status, in), Model: model, BizLine: "b", Upstream: "u",
		Arrival: end.Add(-time.Second), Status: status, Usage: record.Usage{InputTokens: in, OutputTokens: out, Source: record.SourceEngine}}
	if status != 200 {
		r.ErrorType = record.ErrUpstreamStatus
	}
	r.Marks.End = time.Second
	r.Finish()
	return r
}

// Two replicas' aggregators persist their minutes in one store; the fleet
// windows merge both, read late rows again within Reread, and answer
// closed hours from the store too.
func TestWindows(t *testing.T) {
	ctx, st := t.Context(), openStore(t)
	t0 := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	a := window.New(window.Config{From: t0}, st, nil, nil)
	b := window.New(window.Config{From: t0}, st, nil, nil)
	for i := range 30 {
		end := t0.Add(time.Duration(i) * 10 * time.Second) // 10:00:00 … 10:04:50
		a.Add(finished("m1", end, 200, 100, 10))
		if i%3 == 0 {
			b.Add(finished("m1", end, 500, 0, 0))
		} else {
			b.Add(finished("m2", end, 200, 50, 5))
		}
	}
	a.Flush(ctx, t0.Add(7*time.Minute))
	w := NewWindows(st, WindowsOptions{})
	now := t0.Add(7 * time.Minute)
	if err := w.Refresh(ctx, now); err != nil {
		t.Fatal(err)
	}
	got := w.Window(t0, t0.Add(5*time.Minute), nil, []string{"model"}, window.NoQuantity)
	if len(got) != 1 || got["model=m1"].Stats.Requests != 30 {
		t.Fatalf("before b flushed: %v", keys(got))
	}
	// b's minutes land later: the next refresh, within Reread, reads them.
	b.Flush(ctx, t0.Add(7*time.Minute))
	if err := w.Refresh(ctx, now.Add(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	got = w.Window(t0, t0.Add(5*time.Minute), nil, []string{"model"}, window.E2E)
	m1, m2 := got["model=m1"], got["model=m2"]
	if m1 == nil || m2 == nil || m1.Stats.Requests != 40 || m1.Stats.Errors != 10 || m1.Stats.Input != 3000 || m2.Stats.Requests != 20 || m2.Stats.Output != 100 {
		t.Fatalf("fleet window: %+v / %+v", m1, m2)
	}
	if m1.Key.Model != "m1" || m1.Key.BizLine != "" {
		t.Errorf("group key %+v: only the grouped label set", m1.Key)
	}
	if v, n := m1.Stats.Quantile(window.E2E, 0.5); n != 40 || v < 0.99 || v > 1.01 {
		t.Errorf("E2E P50 over the fleet = %v over %d, want 1 s over 40", v, n)
	}
	if _, n := m1.Stats.Quantile(window.TTFT, 0.5); n != 0 {
		t.Error("a sketch not asked for was merged")
	}
	all := w.Window(t0, t0.Add(5*time.Minute), window.Selector{"model": "m2"}, nil, window.NoQuantity)
	if len(all) != 1 || all[""].Stats.Requests != 20 {
		t.Errorf("selected m2: %+v", all[""])
	}
	// The minutes of 10:01–10:02 only.
	if g := w.Window(t0.Add(time.Minute), t0.Add(2*time.Minute), nil, nil, window.NoQuantity)[""]; g == nil || g.Stats.Requests != 12 {
		t.Errorf("one minute: %+v, want 12 requests (6 per replica)", g)
	}
	// The closed hour, from the store: both replicas' minutes.
	h, err := w.Hour(ctx, t0, nil, nil, window.NoQuantity)
	if err != nil {
		t.Fatal(err)
	}
	if h[""] == nil || h[""].Stats.Requests != 60 {
		t.Errorf("hour: %+v, want 60 requests", h[""])
	}
	// Far later: minutes older than Keep are forgotten.
	if err := w.Refresh(ctx, t0.Add(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if len(w.Window(t0, t0.Add(5*time.Minute), nil, nil, window.NoQuantity)) != 0 {
		t.Error("minutes older than Keep still held")
	}
}

func keys(m map[string]*window.Group) []string {
	var ks []string
	for k, g := range m {
		ks = append(ks, fmt.Sprintf("%s:%d", k, g.Stats.Requests))
	}
	slices.Sort(ks)
	return ks
}

// openStore opens a SQLite store in the test's directory, closed when
// the test ends: where the replicas' window minutes and hours go.
func openStore(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "w.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// redisAndStore starts a Redis (its prefix for this test) and opens a
// store (openStore).
func redisAndStore(t *testing.T) (*redistest.Server, string, *sqlite.Store) {
	t.Helper()
	srv := redistest.Start(t, false)
	return srv, srv.Prefix(t), openStore(t)
}

// The evaluator evaluates only while the lease is held, at now − Lag.
func TestEvaluatorStep(t *testing.T) {
	srv, prefix, st := redisAndStore(t)
	var evals []time.Time
	mk := func(id string) *Evaluator {
		return &Evaluator{Lease: NewLease(srv.Client(t), LeaseOptions{Prefix: prefix, ID: id}), Windows: NewWindows(st, WindowsOptions{}),
			Eval: func(_ context.Context, now time.Time) { evals = append(evals, now) }, Lag: 40 * time.Second}
	}
	a, b := mk("a"), mk("b")
	now := time.Now()
	if a.Step(t.Context(), now) {
		t.Fatal("evaluated without the lease")
	}
	a.Lease.Step(t.Context())
	b.Lease.Step(t.Context())
	if !a.Step(t.Context(), now) || b.Step(t.Context(), now) {
		t.Fatal("want a (the leader) to evaluate and b not")
	}
	if len(evals) != 1 || !evals[0].Equal(now.Add(-40*time.Second)) {
		t.Errorf("evaluations at %v, want one at now − 40s", evals)
	}
}

// fakeEngine is the part of alert.Engine the Evaluator saves and restores.
type fakeEngine struct {
	now      []alert.Tracked
	restored [][]alert.Tracked
}

func (f *fakeEngine) Snapshot() []alert.Tracked  { return f.now }
func (f *fakeEngine) Restore(ts []alert.Tracked) { f.restored = append(f.restored, ts) }
func tracked(rule string, until time.Time) alert.Tracked {
	return alert.Tracked{Alert: alert.Alert{Rule: rule, Fingerprint: rule, State: alert.Firing, Severity: alert.Warning},
		NotifiedAt: time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC), NotifiedSeverity: alert.Warning, Until: until}
}

// The alert state passes from one leader to the next through Redis: the
// leader saves its engine's alerts after each evaluation; the next leader
// restores them once, when its term begins; a replica that is not the
// leader cannot overwrite them; every replica lists them.
func TestStateHandsOver(t *testing.T) {
	srv, prefix, st := redisAndStore(t)
	mk := func(id string) (*Evaluator, *fakeEngine) {
		l := NewLease(srv.Client(t), LeaseOptions{Prefix: prefix, ID: id})
		f := &fakeEngine{}
		return &Evaluator{Lease: l, Windows: NewWindows(st, WindowsOptions{}), State: NewState(l, nil), Engine: f,
			Eval: func(context.Context, time.Time) {}}, f
	}
	a, fa := mk("a")
	b, fb := mk("b")
	ctx, now := t.Context(), time.Now()

	a.Lease.Step(ctx)
	fa.now = []alert.Tracked{tracked("errs", time.Time{})}
	if !a.Step(ctx, now) {
		t.Fatal("the leader did not evaluate")
	}
	if len(fa.restored) != 1 || len(fa.restored[0]) != 0 {
		t.Fatalf("the first leader restored %v; want the empty state once", fa.restored)
	}
	a.Step(ctx, now) // same term: no second restore
	if len(fa.restored) != 1 {
		t.Errorf("restored %d times in one term; want once", len(fa.restored))
	}
	// b is not the leader: its save is refused, and it lists a's alerts
	// with the one it raised itself.
	if err := b.State.Save(ctx, "2:b", []alert.Tracked{tracked("forged", time.Time{})}); err == nil {
		t.Error("a replica without the lease saved the state")
	}
	list := b.State.Active(ctx, []alert.Tracked{tracked("quota", now.Add(time.Hour)), tracked("stale-rule", time.Time{})})
	if len(list) != 2 || list[0].Rule != "errs" || list[1].Rule != "quota" {
		t.Errorf("b lists %+v; want a's rule alert and b's own quota alert, not b's stale rule alert", list)
	}

	// a goes; b takes over and restores exactly what a saved.
	a.Lease.release()
	b.Lease.Step(ctx)
	if !b.Step(ctx, now) {
		t.Fatal("the new leader did not evaluate")
	}
	want := []alert.Tracked{tracked("errs", time.Time{})}
	if len(fb.restored) != 1 || !reflect.DeepEqual(fb.restored[0], want) {
		t.Errorf("the new leader restored %+v; want %+v", fb.restored, want)
	}
}

// A figure JSON cannot hold (an infinite ratio over a zero baseline) does
// not stop the state from being saved.
func TestStateSavesOddFigures(t *testing.T) {
	srv := redistest.Start(t, false)
	l := NewLease(srv.Client(t), LeaseOptions{Prefix: srv.Prefix(t), ID: "a"})
	ctx := t.Context()
	if !l.Step(ctx) {
		t.Fatal("no lease")
	}
	s := NewState(l, nil)
	odd := tracked("base", time.Time{})
	odd.Alert.Value, odd.Alert.Baseline = math.Inf(1), math.NaN()
	ts := []alert.Tracked{tracked("errs", time.Time{}), odd}
	if err := s.Save(ctx, l.Token(), ts); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(ctx)
	if err != nil || len(got) != 2 || got[1].Alert.Value != 0 || got[1].Alert.Rule != "base" {
		t.Fatalf("loaded %+v, %v; want both alerts, the odd figures as 0", got, err)
	}
	if !math.IsInf(ts[1].Alert.Value, 1) {
		t.Error("Save changed the caller's alerts")
	}
}

// A state that does not decode does not stop alerting: the leader starts
// from no alerts. Raised alerts past their end are not listed.
func TestStateBadOrExpired(t *testing.T) {
	srv, prefix, st := redisAndStore(t)
	ctx, now := t.Context(), time.Now()
	rdb := srv.Client(t)
	l := NewLease(rdb, LeaseOptions{Prefix: prefix, ID: "a"})
	f := &fakeEngine{}
	e := &Evaluator{Lease: l, Windows: NewWindows(st, WindowsOptions{}), State: NewState(l, nil), Engine: f,
		Eval: func(context.Context, time.Time) {}}
	if err := rdb.Set(ctx, e.State.key, `{"not": "a list"`, 0).Err(); err != nil {
		t.Fatal(err)
	}
	l.Step(ctx)
	if !e.Step(ctx, now) {
		t.Fatal("a state that does not decode stopped the leader from evaluating")
	}
	if len(f.restored) != 1 || len(f.restored[0]) != 0 {
		t.Errorf("restored %v; want the empty state", f.restored)
	}
	if _, err := e.State.Load(ctx); err != nil {
		t.Errorf("after the leader's save the state decodes again: %v", err)
	}

	list := e.State.Active(ctx, []alert.Tracked{tracked("over", now.Add(-time.Minute)), tracked("on", now.Add(time.Minute))})
	if len(list) != 1 || list[0].Rule != "on" {
		t.Errorf("listed %+v; want only the raised alert that has not ended", list)
	}
}

// A replica that starts mid-hour writes no hour row for that hour; while
// the store keeps minutes, the fleet reads the hour from every replica's
// minutes and counts its requests. Beyond minute retention only the hour
// rows remain, which lack them.
func TestHourCountsReplicaStartedMidHour(t *testing.T) {
	ctx, st := t.Context(), openStore(t)
	t0 := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	a := window.New(window.Config{From: t0}, st, nil, nil)                       // saw 10:00–11:00 whole
	b := window.New(window.Config{From: t0.Add(20 * time.Minute)}, st, nil, nil) // started at 10:20
	for i := range 60 {
		end := t0.Add(time.Duration(i)*time.Minute + 30*time.Second)
		a.Add(finished("m", end, 200, 10, 1))
		if i >= 20 {
			b.Add(finished("m", end, 200, 10, 1))
		}
	}
	a.Flush(ctx, t0.Add(70*time.Minute))
	b.Flush(ctx, t0.Add(70*time.Minute))
	if hrs, err := st.WindowHours(ctx, t0, t0.Add(time.Hour)); err != nil || len(hrs) != 1 {
		t.Fatalf("hour rows: %d, %v; want a's only (b did not see the hour whole)", len(hrs), err)
	}
	requests := func(ret time.Duration) int64 {
		w := NewWindows(st, WindowsOptions{MinuteRetention: ret})
		w.now = func() time.Time { return t0.Add(3 * time.Hour) }
		g, err := w.Hour(ctx, t0, nil, nil, window.NoQuantity)
		if err != nil {
			t.Fatal(err)
		}
		return g[""].Stats.Requests
	}
	if n := requests(0); n != 100 {
		t.Errorf("hour inside minute retention: %d requests, want 100 (60 of a, 40 of b)", n)
	}
	if n := requests(2 * time.Hour); n != 60 {
		t.Errorf("hour beyond minute retention: %d requests, want a's 60 from its hour row", n)
	}
}
