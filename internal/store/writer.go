package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// WriterConfig sizes a Writer. Zero fields take the defaults.
type WriterConfig struct {
	// QueueSize is how many Records may wait for the store. When it is
	// full, Enqueue drops rather than slow the proxy. Default 65536.
	QueueSize int
	// BatchSize is the most Records inserted in one transaction. Default 512.
	BatchSize int
	// FlushInterval is the longest a Record waits for its batch to fill.
	// Default 200ms.
	FlushInterval time.Duration
	// RetryBackoff is the first wait after a failed insert; it doubles up
	// to 5s. Default 100ms.
	RetryBackoff time.Duration
	// DrainTimeout bounds the final flush once Run's context is done, so
	// that a dead store cannot hold shutdown forever. Default 30s.
	DrainTimeout time.Duration
}

const (
	maxRetryBackoff = 5 * time.Second
	// dropLogEvery rate-limits the "queue full" log: under overload it
	// would otherwise log once per request. The counter has the exact
	// number.
	dropLogEvery = 10 * time.Second
)

func (c WriterConfig) withDefaults() WriterConfig {
	if c.QueueSize <= 0 {
		c.QueueSize = 65536
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 512
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = 200 * time.Millisecond
	}
	if c.RetryBackoff <= 0 {
		c.RetryBackoff = 100 * time.Millisecond
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 30 * time.Second
	}
	return c
}

// Writer is the bounded, batching queue between the gateway and a Store.
// The gateway calls Enqueue on its hot path, which never blocks; Run inserts
// what was queued in batches and retries failed batches, so a Record that
// was accepted is written unless the store stays down through shutdown (and
// then it is counted and logged, never lost silently).
//
// Enqueued Records belong to the Writer: the caller must not modify them.
type Writer struct {
	store Store
	cfg   WriterConfig
	log   *slog.Logger
	m     writerMetrics

	ch chan item

	// mu orders Enqueue against the end of Run: Run sets stopped under
	// the write lock before its final drain, so a Record that Enqueue
	// accepted is always in the channel in time to be drained.
	mu      sync.RWMutex
	stopped bool

	started atomic.Bool
	done    chan struct{} // closed when Run returns
	err     error         // Run's result, read after done is closed

	lastDropLog atomic.Int64 // unix ns
	unlogged    atomic.Int64 // drops since the last log line
}

// item is a Record or, from Flush, a marker answered once everything
// queued before it is written. Markers ride the same FIFO channel so that
// "before" needs no other bookkeeping.
type item struct {
	rec     *record.Record
	flushed chan error
}

// NewWriter returns a Writer inserting into s. Its metrics are registered
// on reg unless reg is nil. Start it with Run.
func NewWriter(s Store, cfg WriterConfig, log *slog.Logger, reg prometheus.Registerer) *Writer {
	cfg = cfg.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Writer{
		store: s,
		cfg:   cfg,
		log:   log,
		ch:    make(chan item, cfg.QueueSize),
		done:  make(chan struct{}),
	}
	w.m = newWriterMetrics(w, reg)
	return w
}

// Enqueue hands r to the Writer without blocking. It returns false, and
// counts a drop, when the queue is full or the Writer has stopped.
func (w *Writer) Enqueue(r *record.Record) bool {
	if r == nil {
		return false
	}
	w.mu.RLock()
	if w.stopped {
		w.mu.RUnlock()
		w.drop(w.m.droppedStopped, "store writer stopped, dropping records")
		return false
	}
	select {
	case w.ch <- item{rec: r}:
		w.mu.RUnlock()
		return true
	default:
		w.mu.RUnlock()
		w.drop(w.m.droppedFull, "store queue full, dropping records")
		return false
	}
}

func (w *Writer) drop(c prometheus.Counter, msg string) {
	c.Inc()
	// Reading the clock on every drop would make overload, when every
	// request drops, costlier than normal operation; look at it on the
	// first drop since the last log line and every 1024th after that.
	if n := w.unlogged.Add(1); n != 1 && n%1024 != 0 {
		return
	}
	now := time.Now().UnixNano()
	last := w.lastDropLog.Load()
	if now-last < int64(dropLogEvery) || !w.lastDropLog.CompareAndSwap(last, now) {
		return
	}
	w.log.Warn(msg, "dropped", w.unlogged.Swap(0), "queue_capacity", w.cfg.QueueSize)
}

// Run inserts queued Records until ctx is done, then writes everything
// still queued (bounded by DrainTimeout) and returns. It returns nil when
// every accepted Record was written, and an error saying how many were
// lost otherwise. Run must be called once; Enqueue after Run has returned
// reports false.
func (w *Writer) Run(ctx context.Context) error {
	if !w.started.CompareAndSwap(false, true) {
		return errors.New("store writer: Run called twice")
	}
	defer close(w.done)

	batch := make([]*record.Record, 0, w.cfg.BatchSize)
	// The timer runs only while a batch is pending: an idle gateway costs
	// no wakeups.
	timer := time.NewTimer(w.cfg.FlushInterval)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			w.err = w.drain(ctx, batch, nil)
			return w.err
		case it := <-w.ch:
			if it.flushed != nil {
				timer.Stop()
				if !w.write(ctx, batch) {
					w.err = w.drain(ctx, batch, it.flushed)
					return w.err
				}
				batch = reset(batch)
				it.flushed <- nil
				continue
			}
			batch = append(batch, it.rec)
			if len(batch) == 1 {
				timer.Reset(w.cfg.FlushInterval)
			}
			if len(batch) < w.cfg.BatchSize {
				continue
			}
		case <-timer.C:
		}
		timer.Stop()
		if !w.write(ctx, batch) {
			w.err = w.drain(ctx, batch, nil)
			return w.err
		}
		batch = reset(batch)
	}
}

// reset empties batch for reuse, dropping its references so that written
// Records can be collected.
func reset(batch []*record.Record) []*record.Record {
	clear(batch)
	return batch[:0]
}

// write inserts batch, retrying with backoff until it succeeds (true) or
// ctx is done (false, batch not written).
func (w *Writer) write(ctx context.Context, batch []*record.Record) bool {
	if len(batch) == 0 {
		return true
	}
	backoff := w.cfg.RetryBackoff
	// The first attempt is a first delivery: these Records came from
	// Enqueue and no store has seen them. A retry may follow an INSERT
	// that was written but whose answer was lost, so it is not.
	first := true
	for {
		err := w.insert(ctx, Batch{Records: batch, FirstDelivery: first})
		if err == nil {
			return true
		}
		first = false
		if ctx.Err() != nil {
			return false
		}
		// While we wait the queue fills and then Enqueue drops: that is
		// the back-pressure the metrics show, the proxy never waits.
		w.log.Warn("store insert failed, retrying the batch", "records", len(batch), "retry_in", backoff, "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		backoff = min(2*backoff, maxRetryBackoff)
	}
}

func (w *Writer) insert(ctx context.Context, b Batch) error {
	start := time.Now()
	err := w.store.Insert(ctx, b)
	w.m.batchDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		w.m.errors.Inc()
		return err
	}
	w.m.batchSize.Observe(float64(len(b.Records)))
	w.m.written.Add(float64(len(b.Records)))
	return nil
}

// drain is the end of Run: it stops Enqueue, then writes batch and
// everything still queued, one attempt per batch since there is no time
// left to retry. waiter, if any, is a Flush marker that came after batch.
func (w *Writer) drain(ctx context.Context, batch []*record.Record, waiter chan error) error {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()

	// ctx is done; the drain gets its own deadline instead.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.DrainTimeout)
	defer cancel()
	var (
		lost    int
		lastErr error
	)
	result := func() error {
		if lost == 0 {
			return nil
		}
		return fmt.Errorf("store writer: %d records not written at shutdown: %w", lost, lastErr)
	}
	flush := func() {
		if len(batch) == 0 {
			return
		}
		if err := w.insert(dctx, Batch{Records: batch}); err != nil {
			lost += len(batch)
			lastErr = err
			w.m.droppedFailed.Add(float64(len(batch)))
			w.log.Error("store insert failed at shutdown, records lost", "records", len(batch), "err", err)
		}
		batch = reset(batch)
	}
	answer := func(ch chan error) {
		flush()
		ch <- result()
	}
	if waiter != nil {
		answer(waiter)
	}
	for {
		select {
		case it := <-w.ch:
			if it.flushed != nil {
				answer(it.flushed)
				continue
			}
			batch = append(batch, it.rec)
			if len(batch) >= w.cfg.BatchSize {
				flush()
			}
		default:
			flush()
			return result()
		}
	}
}

// Flush waits until every Record enqueued before the call has been written.
// It needs Run to be running (or to have returned, in which case it reports
// Run's result at once), and returns ctx's error if ctx ends first.
func (w *Writer) Flush(ctx context.Context) error {
	reply := make(chan error, 1)
	select {
	case w.ch <- item{flushed: reply}:
	case <-w.done:
		return w.err
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-w.done:
		// The marker came after Run's last look at the queue: everything
		// enqueued before it was handled by then, so Run's result stands.
		select {
		case err := <-reply:
			return err
		default:
			return w.err
		}
	case <-ctx.Done():
		return ctx.Err()
	}
}

type writerMetrics struct {
	batchDuration  prometheus.Histogram
	batchSize      prometheus.Histogram
	written        prometheus.Counter
	droppedFull    prometheus.Counter
	droppedStopped prometheus.Counter
	droppedFailed  prometheus.Counter
	errors         prometheus.Counter
}

func newWriterMetrics(w *Writer, reg prometheus.Registerer) writerMetrics {
	dropped := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_store_records_dropped_total",
		Help: "Records that never reached the store, by reason: queue_full (Enqueue refused), " +
			"stopped (Enqueue after the writer stopped), insert_failed (the final insert at shutdown failed).",
	}, []string{"reason"})
	m := writerMetrics{
		batchDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tollgate_store_batch_duration_seconds",
			Help:    "Time of each store insert attempt, failed ones included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5ms to 16s
		}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tollgate_store_batch_size",
			Help:    "Records per successful store insert.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14), // 1 to 8192
		}),
		written: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_store_records_written_total",
			Help: "Records inserted into the store.",
		}),
		droppedFull:    dropped.WithLabelValues("queue_full"),
		droppedStopped: dropped.WithLabelValues("stopped"),
		droppedFailed:  dropped.WithLabelValues("insert_failed"),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tollgate_store_errors_total",
			Help: "Failed store insert attempts; the batch is kept and retried.",
		}),
	}
	if reg != nil {
		reg.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "tollgate_store_queue_depth",
				Help: "Records waiting in the store writer's queue.",
			}, func() float64 { return float64(len(w.ch)) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "tollgate_store_queue_capacity",
				Help: "Capacity of the store writer's queue; depth near it means drops are coming.",
			}, func() float64 { return float64(cap(w.ch)) }),
			m.batchDuration, m.batchSize, m.written, dropped, m.errors,
		)
	}
	return m
}
