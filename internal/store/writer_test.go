package store_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
	"github.com/tollgate-dev/tollgate/internal/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// faulty wraps the real store to inject failures and stalls; the records
// that get through end in SQLite, so the tests check real rows.
type faulty struct {
	store.Store

	mu    sync.Mutex
	fail  int           // fail this many more inserts
	gate  chan struct{} // when set, Insert waits for it to close (or ctx)
	calls []call
}

type call struct {
	at    time.Time
	ids   []string
	err   error
	first bool // marked store.Batch.FirstDelivery
}

var errInjected = errors.New("injected failure")

func (f *faulty) Insert(ctx context.Context, b store.Batch) error {
	recs := b.Records
	f.mu.Lock()
	gate := f.gate
	f.mu.Unlock()
	c := call{at: time.Now(), ids: ids(recs), first: b.FirstDelivery}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			c.err = ctx.Err()
		}
	}
	f.mu.Lock()
	if c.err == nil && f.fail > 0 {
		f.fail--
		c.err = errInjected
	}
	f.mu.Unlock()
	if c.err == nil {
		c.err = f.Store.Insert(ctx, b)
	}
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
	return c.err
}

// release opens the gate, if any.
func (f *faulty) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gate != nil {
		close(f.gate)
		f.gate = nil
	}
}

func (f *faulty) set(fn func(f *faulty)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// sizes returns the size of each Insert call so far.
func (f *faulty) sizes() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]int, len(f.calls))
	for i, c := range f.calls {
		out[i] = len(c.ids)
	}
	return out
}

func ids(recs []*record.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.RequestID
	}
	return out
}

// fixture is a Writer on a faulty wrapper of a real SQLite ledger.
type fixture struct {
	t      *testing.T
	store  *faulty
	w      *store.Writer
	reg    *prometheus.Registry
	cancel context.CancelFunc
	runErr chan error
	next   int
}

// start opens a ledger and runs a Writer on it until the test ends. Inside
// a synctest bubble everything it starts belongs to the bubble.
func start(t *testing.T, cfg store.WriterConfig) *fixture {
	t.Helper()
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"), log)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, store: &faulty{Store: s}, reg: prometheus.NewRegistry(), runErr: make(chan error, 1)}
	f.w = store.NewWriter(f.store, cfg, log, f.reg)
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	go func() { f.runErr <- f.w.Run(ctx) }()
	t.Cleanup(func() {
		f.store.release()
		f.stop()
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return f
}

// stop cancels Run and returns its result; later calls return nil.
func (f *fixture) stop() error {
	if f.cancel == nil {
		return nil
	}
	f.cancel()
	f.cancel = nil
	return <-f.runErr
}

// enqueue enqueues n new records and returns how many were accepted.
func (f *fixture) enqueue(n int) int {
	accepted := 0
	for range n {
		if f.w.Enqueue(storetest.Record(f.next)) {
			accepted++
		}
		f.next++
	}
	return accepted
}

// stored returns the ids in the ledger, oldest first.
func (f *fixture) stored() []string {
	f.t.Helper()
	recs, err := f.store.Requests(context.Background(), store.Filter{Limit: 1 << 30})
	if err != nil {
		f.t.Fatal(err)
	}
	out := ids(recs)
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

func recordIDs(from, n int) []string {
	return ids(storetest.Records(from, n))
}

func (f *fixture) flush() {
	f.t.Helper()
	if err := f.w.Flush(context.Background()); err != nil {
		f.t.Fatalf("Flush: %v", err)
	}
}

// metric returns the value of a counter or gauge, or a histogram's sample
// count, with the given label pairs.
func (f *fixture) metric(name string, labels ...string) float64 {
	f.t.Helper()
	fams, err := f.reg.Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	for _, fam := range fams {
		if fam.GetName() != name {
			continue
		}
		for _, m := range fam.GetMetric() {
			if !hasLabels(m, labels) {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	f.t.Fatalf("metric %s%v not found", name, labels)
	return 0
}

func hasLabels(m *dto.Metric, pairs []string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			found = found || (l.GetName() == pairs[i] && l.GetValue() == pairs[i+1])
		}
		if !found {
			return false
		}
	}
	return true
}

func TestWriterBatchesBySize(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := start(t, store.WriterConfig{BatchSize: 10, FlushInterval: time.Hour})
		f.enqueue(25)
		synctest.Wait()
		// Two full batches went at once; the rest waits for the interval.
		if diff := cmp.Diff([]int{10, 10}, f.store.sizes()); diff != "" {
			t.Errorf("batches before Flush (-want +got):\n%s", diff)
		}
		f.flush()
		if diff := cmp.Diff([]int{10, 10, 5}, f.store.sizes()); diff != "" {
			t.Errorf("batches after Flush (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(recordIDs(0, 25), f.stored()); diff != "" {
			t.Errorf("stored (-want +got):\n%s", diff)
		}
		if got := f.metric("tollgate_store_records_written_total"); got != 25 {
			t.Errorf("records written = %v, want 25", got)
		}
		if got := f.metric("tollgate_store_batch_size"); got != 3 {
			t.Errorf("batch size samples = %v, want 3", got)
		}
	})
}

func TestWriterFlushesByInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 200 * time.Millisecond
		f := start(t, store.WriterConfig{BatchSize: 100, FlushInterval: interval})
		steps := []struct {
			sleep   time.Duration
			enqueue int
			want    []int
		}{
			{0, 3, nil},
			{interval - 1, 0, nil},
			{1, 0, []int{3}},
			// The interval runs from a batch's first record, not from
			// the last flush nor the last record.
			{5 * interval, 2, []int{3}},
			{interval / 2, 1, []int{3}},
			{interval/2 - 1, 0, []int{3}},
			{1, 0, []int{3, 3}},
			// Idle: no empty batches.
			{10 * interval, 0, []int{3, 3}},
		}
		for i, s := range steps {
			time.Sleep(s.sleep)
			f.enqueue(s.enqueue)
			synctest.Wait()
			if diff := cmp.Diff(s.want, f.store.sizes(), cmpEmpty); diff != "" {
				t.Errorf("step %d: batches (-want +got):\n%s", i, diff)
			}
		}
	})
}

var cmpEmpty = cmp.Comparer(func(a, b []int) bool { return len(a) == 0 && len(b) == 0 || cmp.Equal(a, b) })

func TestWriterDropsWhenFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := start(t, store.WriterConfig{QueueSize: 4, BatchSize: 1})
		f.store.set(func(f *faulty) { f.gate = make(chan struct{}) })
		f.enqueue(1) // taken by Run, which then blocks in Insert
		synctest.Wait()

		// Enqueue never blocks: the queue fills, then it refuses.
		if got := f.enqueue(7); got != 4 {
			t.Errorf("accepted %d of 7 with the store blocked and a queue of 4, want 4", got)
		}
		metrics := []struct {
			name   string
			labels []string
			want   float64
		}{
			{"tollgate_store_records_dropped_total", []string{"reason", "queue_full"}, 3},
			{"tollgate_store_queue_depth", nil, 4},
			{"tollgate_store_queue_capacity", nil, 4},
			{"tollgate_store_records_written_total", nil, 0},
		}
		for _, m := range metrics {
			if got := f.metric(m.name, m.labels...); got != m.want {
				t.Errorf("%s%v = %v, want %v", m.name, m.labels, got, m.want)
			}
		}

		f.store.release()
		f.flush()
		if diff := cmp.Diff(recordIDs(0, 5), f.stored()); diff != "" {
			t.Errorf("stored (-want +got):\n%s", diff)
		}
		if got := f.metric("tollgate_store_queue_depth"); got != 0 {
			t.Errorf("queue depth after Flush = %v, want 0", got)
		}
	})
}

func TestWriterRetriesKeepBatch(t *testing.T) {
	tests := []struct {
		name     string
		failures int
		wantGaps []time.Duration // between attempts
	}{
		{"one failure", 1, []time.Duration{100 * time.Millisecond}},
		{"backoff doubles", 3, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}},
		{"backoff capped at 5s", 8, []time.Duration{
			100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
			1600 * time.Millisecond, 3200 * time.Millisecond, 5 * time.Second, 5 * time.Second,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := start(t, store.WriterConfig{QueueSize: 8, BatchSize: 5, FlushInterval: time.Hour, RetryBackoff: 100 * time.Millisecond})
				f.store.set(func(f *faulty) { f.fail = tt.failures })
				f.enqueue(5) // a full batch: it goes, and fails, at once
				synctest.Wait()

				// While the batch is retried, Enqueue still never blocks.
				if got := f.enqueue(10); got != 8 {
					t.Errorf("accepted %d of 10 while retrying with a queue of 8, want 8", got)
				}
				f.flush()

				f.store.mu.Lock()
				calls := f.store.calls
				f.store.mu.Unlock()
				var gaps []time.Duration
				for i, c := range calls[:tt.failures+1] {
					if diff := cmp.Diff(recordIDs(0, 5), c.ids); diff != "" {
						t.Errorf("attempt %d carried another batch (-want +got):\n%s", i, diff)
					}
					// Only the first attempt is a first delivery: a
					// failed one may have reached the store.
					if c.first != (i == 0) {
						t.Errorf("attempt %d marked as a first delivery: %v", i, c.first)
					}
					if i > 0 {
						gaps = append(gaps, c.at.Sub(calls[i-1].at))
					}
				}
				if diff := cmp.Diff(tt.wantGaps, gaps); diff != "" {
					t.Errorf("gaps between attempts (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(recordIDs(0, 13), f.stored()); diff != "" {
					t.Errorf("stored (-want +got):\n%s", diff)
				}
				if got := f.metric("tollgate_store_errors_total"); got != float64(tt.failures) {
					t.Errorf("errors = %v, want %d", got, tt.failures)
				}
				if got := f.metric("tollgate_store_records_dropped_total", "reason", "queue_full"); got != 2 {
					t.Errorf("dropped = %v, want 2", got)
				}
			})
		})
	}
}

func TestWriterRunFlushesEverythingOnShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := start(t, store.WriterConfig{BatchSize: 512, FlushInterval: time.Hour})
		f.enqueue(1000)
		if err := f.stop(); err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
		if diff := cmp.Diff(recordIDs(0, 1000), f.stored()); diff != "" {
			t.Errorf("stored after Run returned (-want +got):\n%s", diff)
		}
		// Once stopped, the Writer refuses (and counts) rather than
		// accept records nobody will write.
		if f.enqueue(1) != 0 {
			t.Error("Enqueue after Run returned was accepted")
		}
		if got := f.metric("tollgate_store_records_dropped_total", "reason", "stopped"); got != 1 {
			t.Errorf("dropped{stopped} = %v, want 1", got)
		}
		if err := f.w.Flush(context.Background()); err != nil {
			t.Errorf("Flush after a clean stop = %v, want nil", err)
		}
	})
}

func TestWriterShutdownWithFailingStore(t *testing.T) {
	tests := []struct {
		name  string
		fault func(f *faulty)
	}{
		{"store errors", func(f *faulty) { f.fail = 1 << 30 }},
		{"store hangs", func(f *faulty) { f.gate = make(chan struct{}) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const drain = 3 * time.Second
				f := start(t, store.WriterConfig{BatchSize: 2, FlushInterval: time.Hour, DrainTimeout: drain})
				f.store.set(tt.fault)
				f.enqueue(5) // two batches in flight or retried, one pending
				time.Sleep(time.Minute)
				began := time.Now()
				err := f.stop()
				if err == nil || !strings.Contains(err.Error(), "5 records not written") {
					t.Errorf("Run = %v, want an error counting 5 lost records", err)
				}
				if took := time.Since(began); took > drain {
					t.Errorf("shutdown took %v, want at most DrainTimeout %v", took, drain)
				}
				if got := f.metric("tollgate_store_records_dropped_total", "reason", "insert_failed"); got != 5 {
					t.Errorf("dropped{insert_failed} = %v, want 5", got)
				}
				if err := f.w.Flush(context.Background()); err == nil {
					t.Error("Flush after a lossy stop = nil, want Run's error")
				}
			})
		})
	}
}

func TestWriterFlush(t *testing.T) {
	t.Run("waits for Run", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := start(t, store.WriterConfig{FlushInterval: time.Hour})
			f.store.set(func(f *faulty) { f.gate = make(chan struct{}) })
			f.enqueue(3)
			done := make(chan error, 1)
			go func() { done <- f.w.Flush(context.Background()) }()
			synctest.Wait()
			select {
			case err := <-done:
				t.Fatalf("Flush returned %v while the store was blocked", err)
			default:
			}
			f.store.release()
			if err := <-done; err != nil {
				t.Fatalf("Flush: %v", err)
			}
			if diff := cmp.Diff(recordIDs(0, 3), f.stored()); diff != "" {
				t.Errorf("stored (-want +got):\n%s", diff)
			}
		})
	})
	t.Run("honours its context", func(t *testing.T) {
		w := store.NewWriter(&faulty{}, store.WriterConfig{QueueSize: 1}, nil, nil)
		w.Enqueue(storetest.Record(0)) // nobody runs the writer: Flush cannot finish
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		if err := w.Flush(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Flush = %v, want DeadlineExceeded", err)
		}
	})
}

func TestWriterRunTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := start(t, store.WriterConfig{})
		synctest.Wait() // the first Run is running
		if err := f.w.Run(context.Background()); err == nil {
			t.Error("second Run = nil, want an error")
		}
	})
}

func TestWriterEnqueueNil(t *testing.T) {
	w := store.NewWriter(&faulty{}, store.WriterConfig{QueueSize: 1}, nil, nil)
	if w.Enqueue(nil) {
		t.Error("Enqueue(nil) = true")
	}
	// It took no room in the queue.
	if !w.Enqueue(storetest.Record(0)) {
		t.Error("Enqueue after Enqueue(nil) = false, want the queue still empty")
	}
}

func TestWriterMetricsRegistered(t *testing.T) {
	reg := prometheus.NewRegistry()
	store.NewWriter(&faulty{}, store.WriterConfig{}, nil, reg)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range fams {
		got = append(got, f.GetName())
	}
	want := []string{
		"tollgate_store_batch_duration_seconds",
		"tollgate_store_batch_size",
		"tollgate_store_errors_total",
		"tollgate_store_queue_capacity",
		"tollgate_store_queue_depth",
		"tollgate_store_records_dropped_total",
		"tollgate_store_records_written_total",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("registered metrics (-want +got):\n%s", diff)
	}
	// A nil Registerer registers nothing and must not panic.
	store.NewWriter(&faulty{}, store.WriterConfig{}, nil, nil)
}

// TestWriterConcurrentShutdown races producers against shutdown: every
// record Enqueue accepted must be in the store when Run returns.
func TestWriterConcurrentShutdown(t *testing.T) {
	f := start(t, store.WriterConfig{QueueSize: 1024, BatchSize: 64, FlushInterval: time.Millisecond})
	const producers, each = 8, 500
	var (
		accepted atomic.Int64
		wg       sync.WaitGroup
		half     sync.WaitGroup
	)
	half.Add(producers)
	for p := range producers {
		wg.Go(func() {
			for i := range each {
				if i == each/2 {
					half.Done()
				}
				r := storetest.Record(p*each + i)
				if f.w.Enqueue(r) {
					accepted.Add(1)
				}
			}
		})
	}
	half.Wait() // stop while producers are still going
	if err := f.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	wg.Wait()
	if got, want := len(f.stored()), int(accepted.Load()); got != want {
		t.Errorf("stored %d records, Enqueue accepted %d", got, want)
	}
}
