package ledger

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

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/wal"
)

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

// openQueue opens the write-ahead queue, recovering what an earlier
// process left in it.
func openQueue(cfg Config, st Store, log *slog.Logger, reg prometheus.Registerer) (*queueLedger, error) {
	l := &queueLedger{
		opts:  wal.Options{Dir: cfg.QueueDir, MaxBytes: cfg.QueueMaxBytes},
		log:   log.With("component", "queue"),
		reg:   &reRegisterer{reg: reg},
		st:    st,
		batch: cfg.BatchSize,
		flush: cfg.FlushInterval,
	}
	q, err := wal.Open(l.opts, l.log, l.reg)
	if err != nil {
		return nil, err
	}
	if r := q.Recovery(); r.TruncatedBytes > 0 {
		log.Warn("queue recovered from a crash", "truncated_bytes", r.TruncatedBytes)
	}
	l.registerMetrics(reg)
	l.cur.Store(l.newRun(q))
	return l, nil
}

func (l *queueLedger) append(r *record.Record) func(context.Context) error { return l.sink(r) }

func (l *queueLedger) amend(id string, et record.EngineTiming) {
	b, err := json.Marshal(amendment{Amend: "engine_timing", RequestID: id, EngineTiming: et})
	if err == nil {
		_, err = l.cur.Load().q.Append(b)
	}
	if err != nil {
		l.log.Warn("engine timing not queued", "request_id", id, "err", err)
	}
}

// run starts the queue opened by openQueue and supervises it until ctx
// ends, then commits what is pending, ships it (bounded) and closes.
func (l *queueLedger) run(ctx context.Context) error {
	run := l.cur.Load()
	run.start(l)
	l.supervise(ctx, run)
	return nil
}

// queueLedger is the ledger on the write-ahead queue. The queue stops for
// good after a write or fsync error (its disk full, say: see package wal);
// the ledger then holds the Records it could not queue in memory (bounded),
// opens the queue again — which recovers what is on disk — until that
// works, and queues them again, so a disk that fills up for a while loses
// no Record unless the process dies meanwhile.
type queueLedger struct {
	opts        wal.Options
	log         *slog.Logger
	reg         *reRegisterer
	st          Store
	batch       int
	flush       time.Duration
	cur         atomic.Pointer[queueRun] // the queue Records go to now
	spill       spillBuffer
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

// newRun is a freshly opened queue, not started yet.
func (l *queueLedger) newRun(q *wal.WAL) *queueRun {
	return &queueRun{q: q, held: &heldRecords{m: map[uint64]heldRecord{}, max: maxHeld(l.batch)},
		runDone: make(chan error, 1), shipDone: make(chan error, 1)}
}

// start runs the committer and the shipper of r.
func (r *queueRun) start(l *queueLedger) {
	runCtx, stopRun := context.WithCancel(context.Background())
	// Shipping ends by itself once Run has returned and everything durable
	// has reached the store; the context only bounds a store that is down.
	shipCtx, stopShip := context.WithCancel(context.Background())
	r.stopRun, r.stopShip = stopRun, stopShip
	go func() { r.runDone <- r.q.Run(runCtx) }()
	go func() { r.shipDone <- r.q.Ship(shipCtx, l.batch, l.flush, l.shipper(r)) }()
}

// shipper is the sink of one queue run.
func (l *queueLedger) shipper(run *queueRun) func(ctx context.Context, b wal.Batch) error {
	st, held := l.st, run.held
	return func(ctx context.Context, b wal.Batch) error {
		// In queue order: Records in batches, an amendment after the
		// Records before it. Replays are harmless (idempotent inserts,
		// amendments that set the same values again).
		payloads, first := b.Payloads, b.First
		// Records queued again after a failed queue may be on its disk
		// too (a write that completed before its fsync failed), which
		// Open recovered and the store may have: not first deliveries.
		out := store.Batch{Records: make([]*record.Record, 0, len(payloads)),
			FirstDelivery: !b.Redelivery && first > run.requeued.Load()}
		for i, p := range payloads {
			// The Records this process appended are handed on as they
			// are rather than decoded from the queue's copy (the JSON
			// round trip was a third of the ledger's CPU).
			if r := held.get(first + uint64(i)); r != nil {
				out.Records = append(out.Records, r)
				continue
			}
			if bytes.HasPrefix(p, amendPrefix) {
				var a amendment
				if err := json.Unmarshal(p, &a); err != nil {
					l.log.Error("undecodable amendment in the queue; skipped", "err", err)
					continue
				}
				if err := st.Insert(ctx, out); err != nil {
					return err
				}
				out.Records = out.Records[:0]
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
			out.Records = append(out.Records, r)
		}
		if err := st.Insert(ctx, out); err != nil {
			return err // retried with the same batch: held records stay
		}
		held.drop(first, first+uint64(len(payloads)))
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

// supervise runs until ctx ends: it reopens the queue whenever a run ends
// in an I/O error, and queues again the Records held meanwhile.
func (l *queueLedger) supervise(ctx context.Context, run *queueRun) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-run.runDone:
			// Run returns before stop only after a write or fsync error.
			l.fail(run, err)
			if run = l.reopen(ctx, run); run == nil {
				l.flushSpill()
				return
			}
		case <-tick.C:
			// Records that saw the failed run just before the swap.
			l.requeue(run)
			l.noteRecovered(run)
		case <-ctx.Done():
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
// it opens or ctx ends (nil).
func (l *queueLedger) reopen(ctx context.Context, failed *queueRun) *queueRun {
	for {
		// Opening works on a full disk; writing does not: the wait grows
		// across runs that fail before their first commit.
		l.backoff = min(max(2*l.backoff, 100*time.Millisecond), maxReopenBackoff)
		t := time.NewTimer(l.backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
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
		run := l.newRun(q)
		run.start(l)
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
	if err := l.st.Insert(ctx, store.Batch{Records: recs}); err != nil {
		l.spill.dropped.Add(uint64(len(recs)))
		l.log.Error("records held in memory lost at shutdown: the queue could not be reopened and the store refused them",
			"records", len(recs), "err", err)
		return
	}
	l.log.Warn("records held in memory written to the store directly at shutdown (the queue could not be reopened)", "records", len(recs))
}
