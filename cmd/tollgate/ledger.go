package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/wal"
)

// ledger is the path of finished Records into the store: the write-ahead
// queue (durable before the response ends, shipped in order, the spill
// queue while the store is down) or, by choice, the in-memory writer.
type ledger struct {
	sink  func(*record.Record) func(context.Context) error
	amend func(requestID string, et record.EngineTiming) // a late engine span
	stop  func()                                         // after the HTTP server has drained: flush everything, then return
}

// amendment is the queue payload of a late engine timing: it travels the
// same ordered queue as the Records, so it is applied after its row.
type amendment struct {
	Amend        string              `json:"amend"` // "engine_timing"
	RequestID    string              `json:"request_id"`
	EngineTiming record.EngineTiming `json:"engine_timing"`
}

var amendPrefix = []byte(`{"amend":`)

// A Record travels the queue in its binary form (record.AppendBinary):
// a tenth of the JSON form's CPU each way, which was most of what a
// replica spent per request on its ledger (BenchmarkRecordCodec,
// BenchmarkLedgerClickHouse). Queues written by an older tollgate hold
// JSON, still read.
var queueBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// decodeQueued reads a queued Record, binary or JSON.
func decodeQueued(p []byte) (*record.Record, error) {
	r := &record.Record{}
	if len(p) > 0 && p[0] == record.BinaryMagic {
		return r, r.UnmarshalBinary(p)
	}
	return r, json.Unmarshal(p, r)
}

func startLedger(cfg *config.Config, st interface {
	store.Store
	store.Analytics
}, log *slog.Logger, reg prometheus.Registerer) (*ledger, error) {
	an := st
	if cfg.Store.Durability == "memory" {
		w := store.NewWriter(st, store.WriterConfig{
			QueueSize: cfg.Store.QueueSize, BatchSize: cfg.Store.BatchSize, FlushInterval: cfg.Store.FlushInterval,
		}, log.With("component", "writer"), reg)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		log.Warn("store.durability is memory: records still queued are lost if the process is killed")
		return &ledger{
			sink: func(r *record.Record) func(context.Context) error { w.Enqueue(r); return nil },
			// Without the ordered queue a late span could reach the store
			// before its row; it is applied on a best-effort basis.
			amend: func(id string, et record.EngineTiming) {
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					if err := w.Flush(ctx); err == nil {
						_ = an.SetEngineTiming(ctx, id, et)
					}
				}()
			},
			stop: func() {
				cancel()
				if err := <-done; err != nil {
					log.Error("writer stopped with an error", "err", err)
				}
			},
		}, nil
	}

	l := &queueLedger{
		opts:  wal.Options{Dir: cfg.QueueDir(), MaxBytes: cfg.Store.Queue.MaxBytes},
		log:   log.With("component", "queue"),
		reg:   &reRegisterer{reg: reg},
		st:    st,
		batch: cfg.Store.BatchSize,
		flush: cfg.Store.FlushInterval,
		quit:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	q, err := wal.Open(l.opts, l.log, l.reg)
	if err != nil {
		return nil, err
	}
	if r := q.Recovery(); r.TruncatedBytes > 0 {
		log.Warn("queue recovered from a crash", "truncated_bytes", r.TruncatedBytes)
	}
	l.registerMetrics(reg)
	run := l.start(q)
	l.cur.Store(run)
	go l.supervise(run)
	return &ledger{
		sink: l.sink,
		amend: func(id string, et record.EngineTiming) {
			b, err := json.Marshal(amendment{Amend: "engine_timing", RequestID: id, EngineTiming: et})
			if err == nil {
				_, err = l.cur.Load().q.Append(b)
			}
			if err != nil {
				l.log.Warn("engine timing not queued", "request_id", id, "err", err)
			}
		},
		stop: func() {
			close(l.quit)
			<-l.done
		},
	}, nil
}

// queueLedger is the ledger on the write-ahead queue. The queue stops for
// good after a write or fsync error (its disk full, say: see package wal);
// the ledger then holds the Records it could not queue in memory (bounded),
// opens the queue again — which recovers what is on disk — until that
// works, and queues them again, so a disk that fills up for a while loses
// no Record unless the process dies meanwhile.
type queueLedger struct {
	opts wal.Options
	log  *slog.Logger
	reg  *reRegisterer
	st   interface {
		store.Store
		store.Analytics
	}
	batch       int
	flush       time.Duration
	cur         atomic.Pointer[queueRun] // the queue Records go to now
	spill       spillBuffer
	quit, done  chan struct{} // stop → supervise: shut down; supervise → stop: done
	failures    atomic.Uint64 // queue runs ended by an I/O error
	lastDropLog atomic.Int64

	// Owned by supervise: the queue has failed and not yet committed
	// since (one log line per outage, not per attempt), and the wait
	// before the next reopen, which grows while attempts keep failing.
	troubled bool
	backoff  time.Duration
}

// queueRun is one opening of the queue: the WAL, its committer and
// shipper, and the Records appended to it and not yet shipped.
type queueRun struct {
	q        *wal.WAL
	held     *heldRecords
	requeued atomic.Uint64 // the last entry requeue appended: entries up to it are not first deliveries
	runDone  chan error
	shipDone chan error
	stopRun  context.CancelFunc
	stopShip context.CancelFunc
}

const (
	// maxSpillBytes bounds the Records held in memory while the queue is
	// failed (by their encoded size); beyond it they are dropped, counted.
	maxSpillBytes    = 64 << 20
	maxReopenBackoff = 5 * time.Second // between attempts to reopen the failed queue
	dropLogEvery     = 10 * time.Second
)

func (l *queueLedger) registerMetrics(reg prometheus.Registerer) {
	if reg == nil {
		return
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tollgate_ledger_spilled_records",
			Help: "Finished Records held in memory because the write-ahead queue failed (its disk full, an I/O error); queued again once it reopens."},
			func() float64 { return float64(l.spill.len()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tollgate_ledger_dropped_records_total",
			Help: "Finished Records lost because the write-ahead queue failed and they could not be held in memory."},
			func() float64 { return float64(l.spill.dropped.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tollgate_ledger_queue_failures_total",
			Help: "Times the write-ahead queue stopped after a write or fsync error (disk full…) and was reopened."},
			func() float64 { return float64(l.failures.Load()) }),
	)
}

// start runs the committer and the shipper of a freshly opened queue.
func (l *queueLedger) start(q *wal.WAL) *queueRun {
	runCtx, stopRun := context.WithCancel(context.Background())
	// Shipping ends by itself once Run has returned and everything durable
	// has reached the store; the context only bounds a store that is down.
	shipCtx, stopShip := context.WithCancel(context.Background())
	r := &queueRun{q: q, held: &heldRecords{m: map[uint64]heldRecord{}, max: maxHeld(l.batch)},
		runDone: make(chan error, 1), shipDone: make(chan error, 1), stopRun: stopRun, stopShip: stopShip}
	go func() { r.runDone <- q.Run(runCtx) }()
	go func() { r.shipDone <- q.Ship(shipCtx, l.batch, l.flush, l.shipper(r)) }()
	return r
}

// shipper is the sink of one queue run.
func (l *queueLedger) shipper(run *queueRun) func(ctx context.Context, payloads [][]byte) error {
	st, held := l.st, run.held
	return func(ctx context.Context, payloads [][]byte) error {
		// In queue order: Records in batches, an amendment after the
		// Records before it. Replays are harmless (idempotent inserts,
		// amendments that set the same values again).
		recs := make([]*record.Record, 0, len(payloads))
		first, seqs := wal.BatchFirst(ctx)
		// Records queued again after a failed queue may be on its disk
		// too (a write that completed before its fsync failed), which
		// Open recovered and the store may have: not first deliveries.
		if !wal.Redelivery(ctx) && seqs && first > run.requeued.Load() {
			ctx = store.FirstDelivery(ctx)
		}
		for i, p := range payloads {
			if seqs {
				// The Records this process appended are handed on as
				// they are rather than decoded from the queue's copy
				// (the JSON round trip was a third of the ledger's CPU).
				if r := held.get(first + uint64(i)); r != nil {
					recs = append(recs, r)
					continue
				}
			}
			if bytes.HasPrefix(p, amendPrefix) {
				var a amendment
				if err := json.Unmarshal(p, &a); err != nil {
					l.log.Error("undecodable amendment in the queue; skipped", "err", err)
					continue
				}
				if err := st.Insert(ctx, recs); err != nil {
					return err
				}
				recs = recs[:0]
				if err := st.SetEngineTiming(ctx, a.RequestID, a.EngineTiming); err != nil {
					return err
				}
				continue
			}
			r, err := decodeQueued(p)
			if err != nil {
				// A payload that cannot decode never will: skip it
				// (counted in the log) rather than block the queue.
				l.log.Error("undecodable record in the queue; skipped", "err", err, "bytes", len(p))
				continue
			}
			recs = append(recs, r)
		}
		if err := st.Insert(ctx, recs); err != nil {
			return err // retried with the same batch: held records stay
		}
		if seqs {
			held.drop(first, first+uint64(len(payloads)))
		}
		return nil
	}
}

// sink queues a finished Record; the gateway waits (bounded) on what it
// returns before the response's last bytes. A Record the failed queue
// cannot take is held in memory and the response is not held up: its
// durability then waits for the queue to reopen.
func (l *queueLedger) sink(r *record.Record) func(context.Context) error {
	buf := queueBufs.Get().(*[]byte)
	b, _ := r.AppendBinary((*buf)[:0]) // never fails
	defer func() {
		if cap(b) <= 64<<10 { // a rare huge timeline is not kept
			*buf = b
			queueBufs.Put(buf)
		}
	}()
	run := l.cur.Load()
	c, err := run.q.Append(b) // copies b
	switch {
	case errors.Is(err, wal.ErrFull):
		return nil // dropped, counted and logged (rate-limited) by the queue
	case errors.Is(err, wal.ErrTooLarge):
		l.log.Error("record not queued", "request_id", r.RequestID, "err", err)
		return nil
	case err != nil: // stopped after an I/O error, or closed for a reopen
		l.hold(r, len(b))
		return nil
	}
	if !run.held.put(c.Seq(), r, len(b)) {
		l.hold(r, len(b)) // the run failed before this entry was durable
		return nil
	}
	return c.Wait
}

func (l *queueLedger) hold(r *record.Record, size int) {
	if l.spill.add(r, size) {
		return
	}
	now := time.Now().UnixNano()
	last := l.lastDropLog.Load()
	if now-last >= int64(dropLogEvery) && l.lastDropLog.CompareAndSwap(last, now) {
		l.log.Error("write-ahead queue failed and the records held in memory are at their bound: records dropped",
			"held_bytes", maxSpillBytes, "dropped_total", l.spill.dropped.Load())
	}
}

// supervise runs until stop: it reopens the queue whenever a run ends in
// an I/O error, and queues again the Records held meanwhile.
func (l *queueLedger) supervise(run *queueRun) {
	defer close(l.done)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-run.runDone:
			// Run returns before stop only after a write or fsync error.
			l.fail(run, err)
			if run = l.reopen(run); run == nil {
				l.flushSpill()
				return
			}
		case <-tick.C:
			// Records that saw the failed run just before the swap.
			l.requeue(run)
			l.noteRecovered(run)
		case <-l.quit:
			l.requeue(run)
			l.shutdown(run)
			l.noteRecovered(run) // a recovery within the last second is logged too
			l.flushSpill()
			return
		}
	}
}

// noteRecovered logs, once per outage, that the reopened queue commits.
func (l *queueLedger) noteRecovered(run *queueRun) {
	if l.troubled && run.q.Stats().Commits > 0 {
		l.troubled, l.backoff = false, 0
		l.log.Warn("write-ahead queue working again", "failures", l.failures.Load())
	}
}

// fail ends a run stopped by an I/O error: the Records appended to it but
// not durable go to memory; what is durable stays on disk for the next
// run, which ships it from its ack point.
func (l *queueLedger) fail(run *queueRun, err error) {
	n := l.failures.Add(1)
	st := run.q.Stats()
	lost, notHeld := run.held.fail(st.Durable)
	for _, h := range lost {
		l.hold(h.r, h.size)
	}
	if st.Commits > 0 || !l.troubled {
		// A new outage: the queue had worked since the last one.
		l.troubled, l.backoff = true, 0
		l.log.Error("write-ahead queue failed; finished records are held in memory until it can be reopened",
			"err", err, "failures", n, "records_held", len(lost), "entries_not_held", notHeld)
	} else {
		l.log.Debug("write-ahead queue failed again after reopening", "err", err, "failures", n)
	}
	run.stopShip()
	<-run.shipDone
	if err := run.q.Close(); err != nil {
		l.log.Warn("close the failed queue", "err", err)
	}
}

// reopen opens the queue again, waiting longer after each failure, until
// it opens or stop is called (nil).
func (l *queueLedger) reopen(failed *queueRun) *queueRun {
	for {
		// Opening works on a full disk; writing does not: the wait grows
		// across runs that fail before their first commit.
		l.backoff = min(max(2*l.backoff, 100*time.Millisecond), maxReopenBackoff)
		t := time.NewTimer(l.backoff)
		select {
		case <-t.C:
		case <-l.quit:
			t.Stop()
			if failed != nil {
				l.spill.dropped.Add(uint64(failed.held.lost()))
			}
			return nil
		}
		if failed != nil {
			// By now every Append to the failed run has had its put:
			// what is still missing was never held (beyond the held
			// bound, or a late engine timing) and is lost.
			l.spill.dropped.Add(uint64(failed.held.lost()))
			failed = nil
		}
		l.reg.reset() // the failed queue's metrics
		q, err := wal.Open(l.opts, l.log, l.reg)
		if err != nil {
			l.log.Warn("write-ahead queue could not be reopened; retrying", "err", err)
			continue
		}
		run := l.start(q)
		l.cur.Store(run)
		held := l.spill.len()
		l.requeue(run)
		l.log.Debug("write-ahead queue reopened", "records_requeued", held-l.spill.len(),
			"truncated_bytes", q.Recovery().TruncatedBytes)
		return run
	}
}

// requeue appends the Records held in memory to run, in the order they
// were held, until it refuses one.
func (l *queueLedger) requeue(run *queueRun) {
	recs := l.spill.take()
	if len(recs) == 0 {
		return // supervise calls this every second: leave the marker be
	}
	// Until the last is appended, no batch of this run is a first
	// delivery (Append does not wait: an entry may ship before its
	// sequence number is known here); then those up to the last.
	last := run.requeued.Load()
	run.requeued.Store(math.MaxUint64)
	defer func() { run.requeued.Store(last) }()
	for i, h := range recs {
		b, _ := h.r.AppendBinary(nil)
		c, err := run.q.Append(b)
		if err != nil {
			for _, h := range recs[i:] {
				l.hold(h.r, h.size)
			}
			return
		}
		last = c.Seq()
		if !run.held.put(c.Seq(), h.r, len(b)) {
			l.hold(h.r, len(b))
		}
	}
}

// shutdown stops a healthy run: commit what is pending, let the shipper
// bring the store up to date (bounded), close.
func (l *queueLedger) shutdown(run *queueRun) {
	run.stopRun()
	if err := <-run.runDone; err != nil {
		l.failures.Add(1)
		l.log.Error("queue stopped with an error", "err", err)
		lost, _ := run.held.fail(run.q.Stats().Durable)
		for _, h := range lost {
			l.hold(h.r, h.size)
		}
	}
	select {
	case <-run.shipDone:
	case <-time.After(30 * time.Second):
		l.log.Warn("store did not take the queued records within 30s; they stay in the queue for the next start")
		run.stopShip()
		<-run.shipDone
	}
	run.stopShip()
	if err := run.q.Close(); err != nil {
		l.log.Error("close queue", "err", err)
	}
}

// flushSpill is the last chance of Records still held in memory at
// shutdown (the queue could not be reopened): straight into the store.
func (l *queueLedger) flushSpill() {
	held := l.spill.take()
	if len(held) == 0 {
		return
	}
	recs := make([]*record.Record, len(held))
	for i, h := range held {
		recs[i] = h.r
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := l.st.Insert(ctx, recs); err != nil {
		l.spill.dropped.Add(uint64(len(recs)))
		l.log.Error("records held in memory lost at shutdown: the queue could not be reopened and the store refused them",
			"records", len(recs), "err", err)
		return
	}
	l.log.Warn("records held in memory written to the store directly at shutdown (the queue could not be reopened)", "records", len(recs))
}

// spillBuffer holds the Records the failed queue could not take, bounded
// by their encoded size.
type spillBuffer struct {
	mu      sync.Mutex
	recs    []heldRecord
	bytes   int
	dropped atomic.Uint64
}

// add holds r unless the bound is reached (then it is counted dropped).
func (s *spillBuffer) add(r *record.Record, size int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bytes+size > maxSpillBytes {
		s.dropped.Add(1)
		return false
	}
	s.recs = append(s.recs, heldRecord{r, size})
	s.bytes += size
	return true
}

func (s *spillBuffer) take() []heldRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	recs := s.recs
	s.recs, s.bytes = nil, 0
	return recs
}

func (s *spillBuffer) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.recs)
}

// reRegisterer lets each opening of the queue register its metrics again:
// reset unregisters those of the previous one (their counters restart, as
// after a process restart).
type reRegisterer struct {
	reg prometheus.Registerer
	mu  sync.Mutex
	cs  []prometheus.Collector
}

func (r *reRegisterer) Register(c prometheus.Collector) error {
	if r.reg == nil {
		return nil
	}
	if err := r.reg.Register(c); err != nil {
		return err
	}
	r.mu.Lock()
	r.cs = append(r.cs, c)
	r.mu.Unlock()
	return nil
}

func (r *reRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *reRegisterer) Unregister(c prometheus.Collector) bool {
	return r.reg != nil && r.reg.Unregister(c)
}

func (r *reRegisterer) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.cs {
		r.reg.Unregister(c)
	}
	r.cs = nil
}

// heldRecords are the Records this process appended to the queue and
// has not shipped yet, by sequence number. A Record is not changed after
// it is handed to the ledger, so the shipper may insert it as it is.
type heldRecords struct {
	mu      sync.Mutex
	m       map[uint64]heldRecord
	max     int64  // the bound of bytes (maxHeld)
	bytes   int64  // their encoded sizes, summed
	low     uint64 // entries before it are shipped
	top     uint64 // the highest entry put
	failed  bool   // the run failed: entries after durable will never be shipped
	durable uint64
	missing map[uint64]bool // after the failure: entries after durable not held (yet)
}

type heldRecord struct {
	r    *record.Record
	size int
}

// maxHeld bounds the Records kept (by their encoded size) until shipped:
// about two batches (the one in the store's insert and the next), at
// least minHeldBytes. Beyond it — a store slow or down for a while — the
// shipper decodes the queue's copies, which are on disk anyway. At
// ClickHouse's 50,000-row batches the Records of a busy replica did not
// fit 16 MiB, and decoding them again was a fifth of its ledger's CPU.
func maxHeld(batch int) int64 { return max(minHeldBytes, 2*int64(batch)*heldRecordBytes) }

const (
	minHeldBytes    = 16 << 20
	heldRecordBytes = 768 // a queued Record's size, a sampled one's included (BenchmarkRecordCodec: 581)
)

// put holds r, appended as entry seq in size bytes, unless that entry was
// shipped already (Append and put are not one step) or the bound is
// reached. It returns false when the run has failed and the entry was not
// durable: r is not in the queue, and not kept here.
func (h *heldRecords) put(seq uint64, r *record.Record, size int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failed {
		delete(h.missing, seq) // its Append came before the failure, its put after
		return seq <= h.durable
	}
	h.top = max(h.top, seq)
	if seq >= h.low && h.bytes+int64(size) <= h.max {
		h.m[seq] = heldRecord{r, size}
		h.bytes += int64(size)
	}
	return true
}

// fail marks the run failed with entries up to durable on disk, and
// returns the Records held after it, in order, and how many entries after
// it are not held: those whose put has not come yet (put then refuses
// them, and the caller holds the Record elsewhere), those beyond the held
// bound and late engine timings.
func (h *heldRecords) fail(durable uint64) (lost []heldRecord, notHeld int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failed, h.durable, h.missing = true, durable, map[uint64]bool{}
	for s := durable + 1; s <= h.top; s++ {
		if e, ok := h.m[s]; ok {
			lost = append(lost, e)
			h.bytes -= int64(e.size)
			delete(h.m, s)
		} else {
			h.missing[s] = true
		}
	}
	return lost, len(h.missing)
}

// lost is, some time after fail, how many entries after the durable point
// were never held: lost with the failed run.
func (h *heldRecords) lost() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.missing)
}

func (h *heldRecords) get(seq uint64) *record.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[seq].r
}

// drop forgets the entries [first, end): shipped.
func (h *heldRecords) drop(first, end uint64) {
	h.mu.Lock()
	for s := first; s < end; s++ {
		if e, ok := h.m[s]; ok {
			h.bytes -= int64(e.size)
			delete(h.m, s)
		}
	}
	h.low = max(h.low, end)
	h.mu.Unlock()
}
