package ledger

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/internal/record"
)

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
