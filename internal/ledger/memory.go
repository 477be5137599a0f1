package ledger

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// memoryLedger is store.Writer's in-memory queue. Without the ordered
// queue a late engine timing could reach the store before its row: each
// is applied after a Flush of the Records queued before it, one at a
// time, by Run.
type memoryLedger struct {
	w      *store.Writer
	st     Store
	log    *slog.Logger
	amends chan amendment
}

// maxPendingAmends bounds the engine timings waiting for their rows; one
// beyond it is dropped, logged.
const maxPendingAmends = 1024

func newMemoryLedger(cfg Config, st Store, log *slog.Logger, reg prometheus.Registerer) *memoryLedger {
	w := store.NewWriter(st, store.WriterConfig{QueueSize: cfg.QueueSize, BatchSize: cfg.BatchSize, FlushInterval: cfg.FlushInterval},
		log.With("component", "writer"), reg)
	return &memoryLedger{w: w, st: st, log: log, amends: make(chan amendment, maxPendingAmends)}
}

func (m *memoryLedger) append(r *record.Record) func(context.Context) error {
	m.w.Enqueue(r) // a refusal is counted and logged by the Writer
	return nil
}

func (m *memoryLedger) amend(id string, et record.EngineTiming) {
	select {
	case m.amends <- amendment{Amend: "engine_timing", RequestID: id, EngineTiming: et}:
	default:
		m.log.Warn("engine timing dropped: too many waiting for their rows", "request_id", id)
	}
}

func (m *memoryLedger) run(ctx context.Context) error {
	// The Writer drains when its own context ends, which is after ours:
	// an amendment being applied then still finds its row written.
	wctx, stopWriter := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWriter()
	done := make(chan error, 1)
	go func() { done <- m.w.Run(wctx) }()
	for {
		select {
		case a := <-m.amends:
			m.apply(ctx, a)
		case <-ctx.Done():
			stopWriter()
			err := <-done
			// What is left applies to rows the drain has just written.
			for {
				select {
				case a := <-m.amends:
					m.apply(context.WithoutCancel(ctx), a)
				default:
					return err
				}
			}
		}
	}
}

// apply writes a after the rows queued before it, within 10 s.
func (m *memoryLedger) apply(ctx context.Context, a amendment) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := m.w.Flush(ctx)
	if err == nil {
		err = m.st.SetEngineTiming(ctx, a.RequestID, a.EngineTiming)
	}
	if err != nil && ctx.Err() == nil {
		m.log.Warn("engine timing not stored", "request_id", a.RequestID, "err", err)
	}
}
