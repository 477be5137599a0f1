package wal

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

const (
	shipBackoff    = 100 * time.Millisecond
	maxShipBackoff = 10 * time.Second
)

// Ship delivers committed entries to sink in append order, those recovered
// by Open first, until ctx is done or Close is called, or until Run has
// returned and everything durable is delivered: a shutdown that stops Run
// first and then waits for Ship (bounded by ctx) leaves the store current.
//
// A batch holds batchMax entries, or whatever is durable flushEvery after
// its first entry was (flushEvery ≤ 0: whatever is durable now). When sink
// returns nil the batch is acked: the ack point is persisted and segments
// wholly before it are deleted. When it fails, Ship retries the same batch,
// waiting 100ms doubling to 10s, for as long as it takes; the log grows
// meanwhile, up to Options.MaxBytes. Delivery is at least once: after a
// crash the batch that was in sink (more after power loss, see the package
// doc) comes again, so sink must be idempotent (store.Insert is, by
// request_id).
//
// sink gets a context that ends with ctx or Close, and the batch, whose
// payloads it must not keep after it returns: their memory is reused. An error makes Ship
// retry the batch forever, so sink must not return one for a payload it
// can never accept (undecodable, say): it should skip and count it. Ship
// returns nil after the current sink call once stopped, or an error if a
// committed entry no longer reads back intact.
func (w *WAL) Ship(ctx context.Context, batchMax int, flushEvery time.Duration, sink func(ctx context.Context, b Batch) error) error {
	if batchMax <= 0 || sink == nil {
		return errors.New("wal: Ship needs batchMax > 0 and a sink")
	}
	w.mu.Lock()
	switch {
	case w.closed:
		w.mu.Unlock()
		return ErrClosed
	case w.shipping:
		w.mu.Unlock()
		return errors.New("wal: Ship is already running")
	}
	w.shipping = true
	w.wg.Add(1)
	s := &shipper{w: w, seq: w.acked + 1, r: newSegReader()}
	w.mu.Unlock()
	defer func() {
		s.closeReader()
		w.mu.Lock()
		w.shipping = false
		w.mu.Unlock()
		w.wg.Done()
	}()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(w.stopCtx, cancel)()

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var deadline time.Time // when the partial batch must go; zero: no batch
	for ctx.Err() == nil {
		last, err := s.fill(batchMax)
		if err != nil {
			return err
		}
		switch {
		case s.n == 0 && last:
			return nil
		case s.n == 0:
		case s.n >= batchMax, flushEvery <= 0, last:
			deadline = time.Now() // ship now
		case deadline.IsZero():
			deadline = time.Now().Add(flushEvery)
			timer.Reset(flushEvery)
		}
		if deadline.IsZero() || time.Now().Before(deadline) {
			if !s.wantNext(batchMax) {
				continue // became durable meanwhile
			}
			select {
			case <-w.shipKick:
			case <-timer.C:
			case <-ctx.Done():
			}
			continue
		}
		timer.Stop()
		deadline = time.Time{}
		if !s.deliver(ctx, sink) {
			return nil
		}
	}
	return nil
}

// shipper is Ship's state: where it reads, and the batch being delivered.
type shipper struct {
	w    *WAL
	seq  uint64 // next entry to read
	r    *segReader
	ok   bool      // r has a file open
	view []segment // fill's snapshot of the segments

	// The batch: payloads copied back to back into data, ends[i] the end
	// of the i-th. Copying lets the reader's buffer move on.
	data    []byte
	ends    []int
	views   [][]byte
	n       int
	bytes   int64 // encoded size, for the unshipped gauge
	lastSeq uint64
}

// fill adds durable entries to the batch, up to max. last reports that
// the batch holds everything there will ever be: Run has returned and
// nothing durable is left unread.
func (s *shipper) fill(max int) (last bool, err error) {
	w := s.w
	w.mu.Lock()
	durable, finished := w.durable, w.finished
	s.view = s.view[:0]
	if s.seq <= durable {
		// Copy (under the lock) the segments from the one holding s.seq
		// on: the committer updates their sizes.
		i := len(w.segs) - 1
		for i > 0 && w.segs[i].first > s.seq {
			i--
		}
		for _, seg := range w.segs[i:] {
			s.view = append(s.view, *seg)
		}
	}
	w.mu.Unlock()

	view := s.view
	for s.n < max && s.seq <= durable {
		for len(view) > 1 && view[1].first <= s.seq {
			view = view[1:]
		}
		if len(view) == 0 || view[0].first > s.seq {
			return false, fmt.Errorf("wal: entry %d is durable but no segment holds it", s.seq)
		}
		cur := view[0]
		if !s.ok || s.r.first != cur.first {
			if err := s.open(cur); err != nil {
				return false, err
			}
		}
		p, ok, err := s.r.next(cur.size)
		if err != nil {
			return false, err
		}
		if !ok {
			return false, fmt.Errorf("wal: segment %s ends at %d bytes, before durable entry %d", cur.path, cur.size, s.seq)
		}
		s.data = append(s.data, p...)
		s.ends = append(s.ends, len(s.data))
		s.n++
		s.bytes += int64(entryHeaderSize + len(p))
		s.lastSeq = s.seq
		s.seq++
	}
	return finished && s.seq > durable, nil
}

// wantNext tells the committer which entry's durability to wake Ship
// for: the one that fills the batch, or the first of the next batch. It
// reports false when that entry is durable already (its commit may have
// looked before the store): Ship must not wait for a kick then.
func (s *shipper) wantNext(batchMax int) bool {
	want := s.seq
	if s.n > 0 {
		want += uint64(batchMax-s.n) - 1 // the timer covers the rest
	}
	s.w.shipWant.Store(want)
	s.w.mu.Lock()
	durable := s.w.durable
	s.w.mu.Unlock()
	return durable < want
}

// open points the reader at seg, positioned at s.seq.
func (s *shipper) open(seg segment) error {
	s.closeReader()
	f, err := os.Open(seg.path)
	if err != nil {
		return fmt.Errorf("open segment for shipping: %w", err)
	}
	s.r.reset(f, seg.path, seg.first)
	s.ok = true
	// Only after Open can s.seq be mid-segment: skip what was acked.
	for s.r.seq < s.seq {
		if _, ok, err := s.r.next(seg.size); err != nil || !ok {
			if err == nil {
				err = fmt.Errorf("wal: segment %s ends before entry %d", seg.path, s.seq)
			}
			return err
		}
	}
	return nil
}

func (s *shipper) closeReader() {
	if s.ok {
		s.r.f.Close()
		s.ok = false
	}
}

// Batch is what Ship hands its sink: committed entries, in append order.
type Batch struct {
	// First is the sequence number (Commit.Seq) of Payloads[0]; the
	// others follow it in order. A caller that kept what it appended can
	// then hand on its own copy rather than decode the payload again.
	First uint64
	// Payloads are the entries. Their memory is reused once the sink
	// returns: it must not keep them.
	Payloads [][]byte
	// Redelivery is whether some payload of the batch may have been
	// handed to a sink before: the batch is being retried after a failed
	// call (which may have stored part of it, or all of it and then lost
	// the answer), or it holds entries that an earlier process handed to
	// its sink without the ack reaching the disk — those up to the sent
	// mark it persisted before each call, or every entry Open found when
	// there is no mark to trust. Otherwise no sink has seen any of them,
	// and a sink may skip the work that makes a replay harmless (the
	// ClickHouse store's look-up of stored ids: store.Batch.FirstDelivery).
	Redelivery bool
}

// deliver calls sink until it accepts the batch (true) or ctx ends (false).
func (s *shipper) deliver(ctx context.Context, sink func(context.Context, Batch) error) bool {
	s.views = s.views[:0]
	start := 0
	for _, end := range s.ends {
		s.views = append(s.views, s.data[start:end:end])
		start = end
	}
	backoff := shipBackoff
	first := s.lastSeq - uint64(s.n) + 1
	// w.sent is what a sink may have seen: Open's recovered entries, then
	// every batch handed on since (owned by the one running Ship).
	b := Batch{First: first, Payloads: s.views, Redelivery: first <= s.w.sent}
	for {
		// The sent mark is durable before a sink sees the batch, so that
		// after a restart only the entries a sink may have seen count as
		// redeliveries, not the whole backlog.
		err := s.markSent()
		if err == nil {
			err = sink(ctx, b)
		}
		if err == nil {
			s.ack()
			return true
		}
		s.w.st.shipErrors.Add(1)
		if ctx.Err() != nil {
			return false
		}
		b.Redelivery = true
		s.w.log.Warn("wal: shipping failed, retrying the same batch", "entries", s.n,
			"first", s.lastSeq-uint64(s.n)+1, "retry_in", backoff, "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false
		}
		backoff = min(2*backoff, maxShipBackoff)
	}
}

// markSent persists the batch's last entry as sent, if it is past the
// mark. If the mark cannot be written, the file is removed instead (the
// next Open then counts every entry it finds as maybe delivered), so that
// shipping does not stop on it; only if that fails too is the batch held
// back, as a failed delivery.
func (s *shipper) markSent() error {
	if s.lastSeq <= s.w.sent {
		return nil
	}
	if err := s.w.writeSent(s.lastSeq); err != nil {
		if rerr := os.Remove(filepath.Join(s.w.dir, sentName)); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			return err
		}
		s.w.log.Warn("wal: could not persist the sent mark; removed it, so a restart looks up every entry it finds", "err", err)
	}
	s.w.sent = s.lastSeq
	return nil
}

// ack records the delivered batch: the gauges, the ack file, and the
// segments now wholly shipped, which are removed. The active segment is
// kept even when shipped: the committer is writing it.
func (s *shipper) ack() {
	w := s.w
	w.mu.Lock()
	w.acked = s.lastSeq
	w.unBytes -= s.bytes
	w.unEntries -= int64(s.n)
	var done []*segment
	for len(w.segs) > 1 && w.segs[1].first-1 <= s.lastSeq {
		done = append(done, w.segs[0])
		w.segs = w.segs[1:]
	}
	w.mu.Unlock()

	s.data, s.ends, s.n, s.bytes = s.data[:0], s.ends[:0], 0, 0
	clear(s.views)
	if err := w.writeAck(s.lastSeq); err != nil {
		// Not fatal: the old ack point only means more replay.
		w.log.Warn("wal: could not persist the ack point", "err", err)
	}
	for _, seg := range done {
		if s.ok && s.r.first == seg.first {
			s.closeReader()
		}
		if err := os.Remove(seg.path); err != nil {
			// Open removes it next time: it is before the ack point.
			w.log.Warn("wal: could not remove a shipped segment", "file", seg.path, "err", err)
		}
	}
	if len(done) > 0 {
		if err := w.syncDir(); err != nil {
			w.log.Warn("wal: directory fsync after removing segments failed", "err", err)
		}
	}
}
