package store

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// EventWriter batches events into the store off the request path. Send
// never blocks: when the buffer is full an event is dropped and counted,
// since an event is a notice, not a bill.
type EventWriter struct {
	a       EventLog
	log     *slog.Logger
	ch      chan Event
	dropped atomic.Int64
}

// NewEventWriter returns a writer with room for size pending events.
func NewEventWriter(a EventLog, size int, log *slog.Logger) *EventWriter {
	return &EventWriter{a: a, log: log, ch: make(chan Event, size)}
}

// Send queues an event.
func (e *EventWriter) Send(ev Event) {
	select {
	case e.ch <- ev:
	default:
		if e.dropped.Add(1)%100 == 1 {
			e.log.Warn("event buffer full; dropping events", "dropped", e.dropped.Load())
		}
	}
}

// Run writes events in batches until ctx is done, then writes what is left.
func (e *EventWriter) Run(ctx context.Context) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var batch []Event
	flush := func(ctx context.Context) {
		if len(batch) == 0 {
			return
		}
		if err := e.a.AddEvents(ctx, batch); err != nil {
			e.log.Warn("could not store events", "n", len(batch), "err", err)
		}
		batch = batch[:0]
	}
	for {
		select {
		case ev := <-e.ch:
			batch = append(batch, ev)
			if len(batch) >= 100 {
				flush(ctx)
			}
		case <-tick.C:
			flush(ctx)
		case <-ctx.Done():
			for {
				select {
				case ev := <-e.ch:
					batch = append(batch, ev)
				default:
					fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					flush(fctx)
					cancel()
					return nil
				}
			}
		}
	}
}
