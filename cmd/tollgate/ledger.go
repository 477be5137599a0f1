package main

import (
	"context"
	"encoding/json"
	"log/slog"
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
	sink func(*record.Record) func(context.Context) error
	stop func() // after the HTTP server has drained: flush everything, then return
}

func startLedger(cfg *config.Config, st store.Store, log *slog.Logger, reg prometheus.Registerer) (*ledger, error) {
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
	shipDone := make(chan error, 1)
	// Shipping ends by itself once Run has returned and everything durable
	// has reached the store; the context only bounds a store that is down.
	shipCtx, stopShip := context.WithCancel(context.Background())
	go func() {
		shipDone <- q.Ship(shipCtx, cfg.Store.BatchSize, cfg.Store.FlushInterval, func(ctx context.Context, payloads [][]byte) error {
			recs := make([]*record.Record, 0, len(payloads))
			for _, p := range payloads {
				r := &record.Record{}
				if err := json.Unmarshal(p, r); err != nil {
					// A payload that cannot decode never will: skip it
					// (counted in the log) rather than block the queue.
					qlog.Error("undecodable record in the queue; skipped", "err", err, "bytes", len(p))
					continue
				}
				recs = append(recs, r)
			}
			return st.Insert(ctx, recs)
		})
	}()
	return &ledger{
		sink: func(r *record.Record) func(context.Context) error {
			b, err := json.Marshal(r)
			if err != nil {
				qlog.Error("record could not be encoded", "request_id", r.RequestID, "err", err)
				return nil
			}
			c, err := q.Append(b)
			if err != nil {
				qlog.Error("record not queued", "request_id", r.RequestID, "err", err)
				return nil
			}
			return c.Wait
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
