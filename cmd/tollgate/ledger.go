package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
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

	q, err := wal.Open(wal.Options{Dir: cfg.QueueDir(), MaxBytes: cfg.Store.Queue.MaxBytes}, log.With("component", "queue"), reg)
	if err != nil {
		return nil, err
	}
	if r := q.Recovery(); r.TruncatedBytes > 0 {
		log.Warn("queue recovered from a crash", "truncated_bytes", r.TruncatedBytes)
	}
	qlog := log.With("component", "queue")
	runCtx, stopRun := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- q.Run(runCtx) }()
	// The Records appended by this process, by sequence number, until
	// shipped: the shipper hands them on as they are rather than decode
	// the queue's copy (the JSON round trip was a third of the ledger's
	// CPU). After a restart, or beyond maxHeldBytes unshipped, it decodes.
	held := &heldRecords{m: map[uint64]heldRecord{}}
	shipDone := make(chan error, 1)
	// Shipping ends by itself once Run has returned and everything durable
	// has reached the store; the context only bounds a store that is down.
	shipCtx, stopShip := context.WithCancel(context.Background())
	go func() {
		shipDone <- q.Ship(shipCtx, cfg.Store.BatchSize, cfg.Store.FlushInterval, func(ctx context.Context, payloads [][]byte) error {
			// In queue order: Records in batches, an amendment after the
			// Records before it. Replays are harmless (idempotent inserts,
			// amendments that set the same values again).
			recs := make([]*record.Record, 0, len(payloads))
			first, seqs := wal.BatchFirst(ctx)
			for i, p := range payloads {
				if seqs {
					if r := held.get(first + uint64(i)); r != nil {
						recs = append(recs, r)
						continue
					}
				}
				if bytes.HasPrefix(p, amendPrefix) {
					var a amendment
					if err := json.Unmarshal(p, &a); err != nil {
						qlog.Error("undecodable amendment in the queue; skipped", "err", err)
						continue
					}
					if err := st.Insert(ctx, recs); err != nil {
						return err
					}
					recs = recs[:0]
					if err := an.SetEngineTiming(ctx, a.RequestID, a.EngineTiming); err != nil {
						return err
					}
					continue
				}
				r := &record.Record{}
				if err := json.Unmarshal(p, r); err != nil {
					// A payload that cannot decode never will: skip it
					// (counted in the log) rather than block the queue.
					qlog.Error("undecodable record in the queue; skipped", "err", err, "bytes", len(p))
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
		})
	}()
	return &ledger{
		sink: func(r *record.Record) func(context.Context) error {
			// Record's own encoder, called directly: json.Marshal would
			// re-scan its output to compact it (a quarter of the cost).
			b, err := r.MarshalJSON()
			if err != nil {
				qlog.Error("record could not be encoded", "request_id", r.RequestID, "err", err)
				return nil
			}
			c, err := q.Append(b)
			if err != nil {
				qlog.Error("record not queued", "request_id", r.RequestID, "err", err)
				return nil
			}
			held.put(c.Seq(), r, len(b))
			return c.Wait
		},
		amend: func(id string, et record.EngineTiming) {
			b, err := json.Marshal(amendment{Amend: "engine_timing", RequestID: id, EngineTiming: et})
			if err == nil {
				_, err = q.Append(b)
			}
			if err != nil {
				qlog.Warn("engine timing not queued", "request_id", id, "err", err)
			}
		},
		stop: func() {
			stopRun()
			if err := <-runDone; err != nil {
				qlog.Error("queue stopped with an error", "err", err)
			}
			select {
			case <-shipDone:
			case <-time.After(30 * time.Second):
				qlog.Warn("store did not take the queued records within 30s; they stay in the queue for the next start")
				stopShip()
				<-shipDone
			}
			stopShip()
			if err := q.Close(); err != nil {
				qlog.Error("close queue", "err", err)
			}
		},
	}, nil
}

// heldRecords are the Records this process appended to the queue and
// has not shipped yet, by sequence number. A Record is not changed after
// it is handed to the ledger, so the shipper may insert it as it is.
type heldRecords struct {
	mu    sync.Mutex
	m     map[uint64]heldRecord
	bytes int    // their encoded sizes, summed
	low   uint64 // entries before it are shipped
}

type heldRecord struct {
	r    *record.Record
	size int
}

// maxHeldBytes bounds the Records kept (by their encoded size) while the
// store is slow or down; beyond it, the shipper decodes the queue's
// copies, which are on disk anyway.
const maxHeldBytes = 16 << 20

// put holds r, appended as entry seq in size bytes, unless that entry was
// shipped already (Append and put are not one step) or the bound is
// reached.
func (h *heldRecords) put(seq uint64, r *record.Record, size int) {
	h.mu.Lock()
	if seq >= h.low && h.bytes+size <= maxHeldBytes {
		h.m[seq] = heldRecord{r, size}
		h.bytes += size
	}
	h.mu.Unlock()
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
			h.bytes -= e.size
			delete(h.m, s)
		}
	}
	h.low = max(h.low, end)
	h.mu.Unlock()
}
