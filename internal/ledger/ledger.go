// Package ledger is the path of finished Records into the store. It sits
// right after the gateway in the request flow:
//
//	gateway ──Append(Record)──▶ ledger ──▶ wal (durable) ──ship──▶ store
//	        ◀── wait: durable ──┘
//
// The gateway Appends each finished Record and waits (bounded) on what
// Append returns before it writes the response's last bytes, so a client
// that saw a complete answer implies a durable ledger row. How durable is
// chosen by Config.Durability, and the three modes are built one way:
//
//   - "queue" (the default): the write-ahead queue of package wal, group
//     committed and shipped in order, in batches, to the store; it is also
//     the spill queue while the store is down. When the queue itself fails
//     (its disk full) the Records are held in memory (bounded) until it
//     reopens.
//   - "memory": store.Writer's bounded in-memory queue; what it holds is
//     lost if the process is killed.
//   - "off": nothing is recorded (bench overhead's bare arm only).
//
// Amend queues what an engine reported after its request ended (a vLLM
// span seconds later) behind the request's row, in the same order.
//
// Run drives the mode until its context ends, then drains: everything
// Appended before is in the store (or durable in the queue, for the next
// start) when Run returns. Call it once; the store must stay open until
// it has returned.
package ledger

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// Durability modes (Config.Durability).
const (
	Queue  = "queue"
	Memory = "memory"
	Off    = "off"
)

// Config sizes a Ledger. Zero fields take the defaults of the mode.
type Config struct {
	Durability    string        // Queue (""), Memory or Off
	QueueDir      string        // Queue: the write-ahead queue's directory
	QueueMaxBytes int64         // Queue: its bound on disk (0: the wal default)
	QueueSize     int           // Memory: the in-memory queue's bound
	BatchSize     int           // Records per store insert
	FlushInterval time.Duration // the longest a Record waits for a full batch
}

// Store is what the ledger writes into: the Records, and the engine
// timings that arrive after them.
type Store interface {
	store.Store
	store.Amender
}

// Ledger takes finished Records to the store. Append and Amend are safe
// for concurrent use and never block on the store.
type Ledger struct {
	m   mode
	log *slog.Logger
}

// mode is one durability mode.
type mode interface {
	append(*record.Record) func(context.Context) error
	amend(requestID string, et record.EngineTiming)
	run(ctx context.Context) error
}

// Open builds the ledger of cfg over st; with the write-ahead queue it
// opens the queue and recovers what an earlier process left in it. Nothing
// moves to the store before Run. log and reg may be nil.
func Open(cfg Config, st Store, log *slog.Logger, reg prometheus.Registerer) (*Ledger, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var (
		m   mode
		err error
	)
	switch cfg.Durability {
	case Off:
		log.Warn("store.durability is off: no request is recorded in the ledger")
		m = offLedger{}
	case Memory:
		log.Warn("store.durability is memory: records still queued are lost if the process is killed")
		m = newMemoryLedger(cfg, st, log, reg)
	case Queue, "":
		m, err = openQueue(cfg, st, log, reg)
	default:
		err = &badDurability{cfg.Durability}
	}
	if err != nil {
		return nil, err
	}
	return &Ledger{m: m, log: log}, nil
}

type badDurability struct{ v string }

func (e *badDurability) Error() string {
	return "store.durability: " + e.v + " is not one of queue, memory, off"
}

// Append hands a finished Record to the ledger, which owns it from then
// on: the caller must not change it. The caller may wait (bounded) on
// what it returns: nil once the Record is durable, or an error. A Record
// the ledger cannot take is counted and logged, never an error here.
func (l *Ledger) Append(r *record.Record) (wait func(context.Context) error) { return l.m.append(r) }

// Amend queues what the engine reported of a request after it ended;
// it is applied to the request's row once that is stored.
func (l *Ledger) Amend(requestID string, et record.EngineTiming) { l.m.amend(requestID, et) }

// Run moves Records to the store until ctx ends, then drains (see the
// package doc) and returns. Its error says what was lost, if anything.
func (l *Ledger) Run(ctx context.Context) error { return l.m.run(ctx) }

// offLedger records nothing.
type offLedger struct{}

func (offLedger) append(*record.Record) func(context.Context) error { return nil }
func (offLedger) amend(string, record.EngineTiming)                 {}
func (offLedger) run(ctx context.Context) error                     { <-ctx.Done(); return nil }
