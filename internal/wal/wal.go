package wal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Options configure a WAL. Zero fields take the defaults.
type Options struct {
	// Dir holds the segments; it is created if missing.
	Dir string
	// SegmentBytes is the size at which the committer starts a new
	// segment. A segment can exceed it by one commit group. Default 64 MiB.
	SegmentBytes int64
	// MaxBytes caps the data appended but not yet shipped (entry headers
	// included). Beyond it Append returns ErrFull rather than block or
	// fill the disk. Default 10 GiB.
	MaxBytes int64
	// NoSync skips every fsync. For tests and benchmarks only: it keeps
	// the SIGKILL guarantee and loses the power-loss one.
	NoSync bool
}

const (
	defaultSegmentBytes = 64 << 20
	defaultMaxBytes     = 10 << 30

	// MaxPayload is the largest payload Append accepts. The bound also
	// lets recovery reject a corrupt length before it allocates.
	MaxPayload = 16 << 20

	// maxPending bounds the memory of entries appended but not yet
	// written: if the disk stalls, Append reports ErrFull instead of
	// letting the gateway's memory grow with its request rate.
	maxPending = 64 << 20
	// keepBuffer is the largest pending buffer kept for reuse, so that
	// one burst does not pin its memory forever.
	keepBuffer = 4 << 20
	// preallocBytes is how far ahead of its entries the active segment
	// is filled with zeros (see preallocate).
	preallocBytes = 1 << 20

	segHeaderSize   = 16
	entryHeaderSize = 20
	segMagic        = "TWAL"
	segVersion      = 1

	fullLogEvery = 10 * time.Second
)

var (
	// ErrFull is returned by Append when MaxBytes of unshipped data (or
	// the in-memory bound, if the disk stalls) is reached.
	ErrFull = errors.New("wal: full")
	// ErrClosed is returned once Run has stopped or Close was called.
	ErrClosed = errors.New("wal: closed")
	// ErrTooLarge is returned by Append for a payload over MaxPayload.
	ErrTooLarge = errors.New("wal: payload too large")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// WAL is a group-committed, segmented write-ahead log. Append and
// Commit.Wait are safe for concurrent use; Run (the committer) runs once,
// Ship (the reader) one at a time, each in its own goroutine.
type WAL struct {
	dir   string
	opts  Options
	log   *slog.Logger
	m     metrics
	st    stats
	epoch time.Time // base of the monotonic append times
	lock  *os.File
	rec   Recovery

	// syncFile is fsync; tests replace it to inject failures.
	syncFile func(*os.File) error

	kick     chan struct{}      // Append → committer: something is pending
	shipKick chan struct{}      // committer → shipper: shipWant is durable
	stopCtx  context.Context    // done once Close is called
	stopAll  context.CancelFunc // ends stopCtx
	wg       sync.WaitGroup     // Run and Ship, for Close to wait on

	// shipWant is the entry whose durability the shipper waits for: the
	// first of a new batch, or the one that fills the batch it holds.
	// Kicking it on every commit instead woke it, and had it read the
	// group back from disk, once per fsync while a batch waited for its
	// flush interval: dozens of wake-ups per batch shipped.
	shipWant atomic.Uint64

	mu        sync.Mutex
	next      uint64          // sequence number of the next Append
	pend      []byte          // encoded entries not yet written
	pendTimes []time.Duration // their append times, since epoch
	pendFirst uint64          // sequence number of pend's first entry
	group     *group          // the commit pend will be written in
	spare     []byte          // the other half of the double buffer
	spareT    []time.Duration
	stopped   bool  // Appends refused: Run finished, Close called or failed
	closed    bool  // Close called
	running   bool  // Run started
	finished  bool  // Run returned: nothing more becomes durable
	shipping  bool  // a Ship is running
	failed    error // the write or fsync error that stopped the WAL
	segs      []*segment
	durable   uint64 // highest fsynced sequence number
	acked     uint64 // highest shipped sequence number
	// sent is the highest entry a sink may have seen: at Open, the
	// persisted sent mark (or every entry found, without one); then the
	// last of each batch handed on (owned by the one running Ship).
	sent      uint64
	unBytes   int64 // appended, not yet shipped: bytes
	unEntries int64 // and entries

	// Owned by the committer (Run, or Close once Run is gone).
	active     *os.File
	activeSize int64 // bytes of header and entries
	allocated  int64 // the file's size: entries, then zeros (preallocate)
}

// segment is one file; its entries run from first to the next segment's
// first − 1 (to durable for the last one).
type segment struct {
	first uint64
	path  string
	size  int64 // bytes durable (fsynced); the shipper reads no further
}

// group is one commit: the entries written by one write and made durable
// by one fsync, and the waiters of all of them.
type group struct {
	done chan struct{}
	err  error // set before done is closed
}

func newGroup() *group { return &group{done: make(chan struct{})} }

// stats are counted here and exported both through Stats and as Prometheus
// counters (CounterFunc), so there is one bookkeeping, not two.
type stats struct {
	appends, commits, fsyncs, full, shipErrors, truncated atomic.Uint64
	lastFullLog                                           atomic.Int64
}

// Stats is a snapshot of the WAL's counters.
type Stats struct {
	Appends          uint64 // accepted Appends
	Commits          uint64 // commit groups written
	Fsyncs           uint64 // the committer's fsyncs: commits, segment creation, directory (not the sent mark's)
	Full             uint64 // Appends refused with ErrFull
	ShipErrors       uint64 // failed sink calls
	TruncatedBytes   uint64 // torn tail removed by Open
	UnshippedBytes   int64
	UnshippedEntries int64
	Segments         int    // segment files
	Durable          uint64 // highest durable sequence number
	Acked            uint64 // highest shipped sequence number
}

// Stats returns the current counters.
func (w *WAL) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return Stats{
		Appends:          w.st.appends.Load(),
		Commits:          w.st.commits.Load(),
		Fsyncs:           w.st.fsyncs.Load(),
		Full:             w.st.full.Load(),
		ShipErrors:       w.st.shipErrors.Load(),
		TruncatedBytes:   w.st.truncated.Load(),
		UnshippedBytes:   w.unBytes,
		UnshippedEntries: w.unEntries,
		Segments:         len(w.segs),
		Durable:          w.durable,
		Acked:            w.acked,
	}
}

// Open opens the log in opts.Dir, creating it if needed, and recovers what
// is there (see Recovery and the package doc for what is truncated and what
// is refused). Metrics go to reg unless it is nil.
func Open(opts Options, log *slog.Logger, reg prometheus.Registerer) (*WAL, error) {
	if opts.Dir == "" {
		return nil, errors.New("wal: Options.Dir is required")
	}
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = defaultSegmentBytes
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = defaultMaxBytes
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(opts.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("create wal directory: %w", err)
	}
	lock, err := lockDir(opts.Dir)
	if err != nil {
		return nil, err
	}
	stopCtx, stopAll := context.WithCancel(context.Background())
	w := &WAL{
		dir:      opts.Dir,
		opts:     opts,
		log:      log,
		epoch:    time.Now(),
		lock:     lock,
		syncFile: syncFile,
		kick:     make(chan struct{}, 1),
		shipKick: make(chan struct{}, 1),
		stopCtx:  stopCtx,
		stopAll:  stopAll,
		group:    newGroup(),
	}
	w.m = newMetrics()
	if err := w.recover(); err != nil {
		stopAll()
		w.closeFiles()
		return nil, err
	}
	w.m.register(w, reg)
	return w, nil
}

// Commit is the handle of one appended entry.
type Commit struct {
	g   *group
	seq uint64
}

// Seq is the entry's sequence number: its position in the log.
func (c Commit) Seq() uint64 { return c.seq }

// Wait returns nil once the entry is durable (see the package doc for what
// that guarantees), the write or fsync error if its group failed, or ctx's
// error if ctx ends first; the entry may still become durable after that.
func (c Commit) Wait(ctx context.Context) error {
	if c.g == nil {
		return errors.New("wal: Wait on a zero Commit")
	}
	select {
	case <-c.g.done:
		return c.g.err
	default:
	}
	select {
	case <-c.g.done:
		return c.g.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Append hands a copy of payload to the committer and returns at once: it
// never waits for I/O. Wait on the Commit for durability.
func (w *WAL) Append(payload []byte) (Commit, error) {
	if len(payload) > MaxPayload {
		return Commit{}, fmt.Errorf("%w: %d bytes, the limit is %d", ErrTooLarge, len(payload), MaxPayload)
	}
	size := int64(entryHeaderSize + len(payload))
	// Checksum outside the lock: appenders run this in parallel.
	sum := crc32.Checksum(payload, castagnoli)
	at := time.Since(w.epoch)

	w.mu.Lock()
	if w.stopped {
		err := w.failed
		w.mu.Unlock()
		if err != nil {
			return Commit{}, fmt.Errorf("wal stopped after an I/O error: %w", err)
		}
		return Commit{}, ErrClosed
	}
	if w.unBytes+size > w.opts.MaxBytes || len(w.pend)+int(size) > maxPending {
		unshipped, pending := w.unBytes, len(w.pend)
		w.mu.Unlock()
		w.refuse(unshipped, pending)
		return Commit{}, ErrFull
	}
	seq := w.next
	w.next++
	if len(w.pendTimes) == 0 {
		w.pendFirst = seq
	}
	w.pend = appendEntry(w.pend, seq, uint32(seq-w.pendFirst), sum, payload)
	w.pendTimes = append(w.pendTimes, at)
	w.unBytes += size
	w.unEntries++
	g := w.group
	w.mu.Unlock()

	w.st.appends.Add(1)
	select {
	case w.kick <- struct{}{}:
	default: // the committer is already told
	}
	return Commit{g: g, seq: seq}, nil
}

func (w *WAL) refuse(unshipped int64, pending int) {
	w.st.full.Add(1)
	// Under a long store outage every request lands here: log rarely,
	// the counter has the exact number.
	now := time.Now().UnixNano()
	last := w.st.lastFullLog.Load()
	if now-last < int64(fullLogEvery) || !w.st.lastFullLog.CompareAndSwap(last, now) {
		return
	}
	w.log.Error("wal full, refusing records", "unshipped_bytes", unshipped, "max_bytes", w.opts.MaxBytes,
		"pending_bytes", pending, "refused_total", w.st.full.Load())
}

// appendEntry encodes one entry (format in the package doc) onto buf.
func appendEntry(buf []byte, seq uint64, index uint32, payloadSum uint32, payload []byte) []byte {
	var h [entryHeaderSize]byte
	binary.LittleEndian.PutUint32(h[0:4], uint32(len(payload)))
	binary.LittleEndian.PutUint64(h[8:16], seq)
	binary.LittleEndian.PutUint32(h[16:20], index)
	binary.LittleEndian.PutUint32(h[4:8], entrySum(payloadSum, h[:]))
	buf = append(buf, h[:]...)
	return append(buf, payload...)
}

// entrySum extends the payload's CRC over the header fields it protects.
func entrySum(payloadSum uint32, h []byte) uint32 {
	return crc32.Update(crc32.Update(payloadSum, castagnoli, h[0:4]), castagnoli, h[8:20])
}

// Run is the committer. Each round it takes every pending entry, writes
// them with one write and one fsync, and releases all their waiters. It
// adds no delay: an idle log commits a lone entry at once, a busy one
// shares each fsync among everything appended during the previous one.
// When ctx is done (or Close is called) it refuses further Appends,
// commits what is pending and returns. After a write or fsync error it
// fails the waiters, stops the WAL and returns the error.
func (w *WAL) Run(ctx context.Context) error {
	w.mu.Lock()
	switch {
	case w.closed:
		w.mu.Unlock()
		return ErrClosed
	case w.running:
		w.mu.Unlock()
		return errors.New("wal: Run called twice")
	}
	w.running = true
	w.wg.Add(1)
	w.mu.Unlock()
	defer w.wg.Done()
	defer func() {
		// Nothing more will become durable: Ship may finish.
		w.mu.Lock()
		w.finished = true
		w.mu.Unlock()
		w.kickShipper()
	}()

	for {
		select {
		case <-w.kick:
			if err := w.commitPending(); err != nil {
				return err
			}
		case <-ctx.Done():
			return w.drain()
		case <-w.stopCtx.Done():
			return w.drain()
		}
	}
}

// drain ends the committer: everything appended before stopped was set is
// in pend, so one more commit covers it.
func (w *WAL) drain() error {
	w.mu.Lock()
	w.stopped = true
	failed := w.failed
	w.mu.Unlock()
	if failed != nil {
		return failed
	}
	return w.commitPending()
}

// commitPending writes and syncs everything pending as one group. Only the
// committer calls it.
func (w *WAL) commitPending() error {
	w.mu.Lock()
	if len(w.pendTimes) == 0 {
		w.mu.Unlock()
		return nil
	}
	buf, times, first, g := w.pend, w.pendTimes, w.pendFirst, w.group
	w.pend, w.pendTimes, w.group = w.spare[:0], w.spareT[:0], newGroup()
	w.spare, w.spareT = nil, nil
	w.mu.Unlock()

	last := first + uint64(len(times)) - 1
	if err := w.write(buf, first); err != nil {
		w.fail(err, int64(len(buf)), int64(len(times)))
		g.err = err
		close(g.done)
		return err
	}

	w.mu.Lock()
	w.segs[len(w.segs)-1].size = w.activeSize
	w.durable = last
	if cap(buf) <= keepBuffer {
		w.spare, w.spareT = buf[:0], times[:0]
	}
	w.mu.Unlock()
	w.st.commits.Add(1)
	w.m.groupSize.Observe(float64(len(times)))
	close(g.done)

	if last >= w.shipWant.Load() {
		w.kickShipper()
	}
	// Per-entry latencies after the release: waiters don't pay for them.
	now := time.Since(w.epoch)
	for _, t := range times {
		w.m.commit.Observe((now - t).Seconds())
	}
	return nil
}

func (w *WAL) kickShipper() {
	select {
	case w.shipKick <- struct{}{}:
	default: // already told
	}
}

// write appends one group to the active segment, starting a new segment
// first if the active one is full, and syncs it.
func (w *WAL) write(buf []byte, first uint64) error {
	if w.active == nil || w.activeSize >= w.opts.SegmentBytes {
		if err := w.rotate(first); err != nil {
			return err
		}
	}
	if _, err := w.active.WriteAt(buf, w.activeSize); err != nil {
		return fmt.Errorf("write %s: %w", w.active.Name(), err)
	}
	w.activeSize += int64(len(buf))
	if err := w.preallocate(); err != nil {
		return err
	}
	if err := w.sync(w.active); err != nil {
		return fmt.Errorf("fsync %s: %w", w.active.Name(), err)
	}
	return nil
}

// zeros is what preallocate writes.
var zeros [preallocBytes]byte

// preallocate keeps the active segment filled with zeros ahead of its
// entries, up to preallocBytes (and the segment's size). A group written
// over those zeros changes neither the file's size nor its blocks, so
// its fdatasync flushes the data alone; a group that grows the file
// costs a journal commit too (ext4: twice the CPU of the commit's
// fsync, and twice its latency, measured on this project's machine).
// The zeros are not written by fallocate, whose unwritten extents need
// that journal commit on first write as well. They are trimmed when the
// segment is done (trimActive); after a crash Open truncates them as it
// truncates a torn tail: a header of zeros fails its CRC.
func (w *WAL) preallocate() error {
	if w.activeSize <= w.allocated {
		return nil
	}
	end := max(w.activeSize, min(w.activeSize+preallocBytes, w.opts.SegmentBytes))
	if end > w.activeSize {
		if _, err := w.active.WriteAt(zeros[:end-w.activeSize], w.activeSize); err != nil {
			return fmt.Errorf("preallocate %s: %w", w.active.Name(), err)
		}
	}
	w.allocated = end
	return nil
}

// trimActive cuts the zeros after the active segment's last entry. A
// segment that is done must end with an entry, durably, before the next
// one exists: Open refuses a bad entry anywhere but at the end of the
// last segment. At Close the cut need not be durable (sync false): it
// only spares the next Open a truncation, which the last segment may
// have.
func (w *WAL) trimActive(sync bool) error {
	if w.active == nil || w.allocated <= w.activeSize {
		return nil
	}
	if err := w.active.Truncate(w.activeSize); err != nil {
		return fmt.Errorf("trim %s: %w", w.active.Name(), err)
	}
	if sync {
		if err := w.sync(w.active); err != nil {
			return fmt.Errorf("fsync %s: %w", w.active.Name(), err)
		}
	}
	w.allocated = w.activeSize
	return nil
}

// rotate creates the segment whose first entry is first. Its header is
// fsynced on its own, and the directory after it, before any entry goes
// in: so at Open a bad header with data after it is corruption, not a
// torn creation, and no acknowledged entry lives in a file the directory
// could lose.
func (w *WAL) rotate(first uint64) error {
	if err := w.trimActive(true); err != nil {
		return err
	}
	path := filepath.Join(w.dir, segmentName(first))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return fmt.Errorf("create segment: %w", err)
	}
	var h [segHeaderSize]byte
	copy(h[0:4], segMagic)
	binary.LittleEndian.PutUint32(h[4:8], segVersion)
	binary.LittleEndian.PutUint64(h[8:16], first)
	if _, err := f.Write(h[:]); err != nil {
		f.Close()
		return fmt.Errorf("write segment header %s: %w", path, err)
	}
	if err := w.sync(f); err != nil {
		f.Close()
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	if err := w.syncDir(); err != nil {
		f.Close()
		return err
	}
	if w.active != nil {
		// Already synced with its last group; a close error loses nothing.
		_ = w.active.Close()
	}
	w.active, w.activeSize, w.allocated = f, segHeaderSize, segHeaderSize
	w.mu.Lock()
	w.segs = append(w.segs, &segment{first: first, path: path, size: segHeaderSize})
	w.mu.Unlock()
	return nil
}

// fail stops the WAL after a write or fsync error. Retrying is not safe:
// after a failed fsync Linux may report the next one clean while the data
// is gone, so the only honest state is on disk, read again by Open.
func (w *WAL) fail(err error, groupBytes, groupEntries int64) {
	w.mu.Lock()
	if w.failed == nil {
		w.failed = err
	}
	w.stopped = true
	// The failed group and anything appended since will never be
	// shipped by this process.
	g, n := w.group, len(w.pendTimes)
	w.unBytes -= groupBytes + int64(len(w.pend))
	w.unEntries -= groupEntries + int64(n)
	w.pend, w.pendTimes = nil, nil
	w.mu.Unlock()
	if n > 0 {
		g.err = err
		close(g.done)
	}
	w.log.Error("wal write failed: refusing appends until reopened", "err", err)
}

// syncFile makes f durable: a segment with fdatasync (see preallocate),
// the directory and the marks with fsync.
func syncFile(f *os.File) error {
	if strings.HasSuffix(f.Name(), ".wal") {
		return datasync(f)
	}
	return f.Sync()
}

func (w *WAL) sync(f *os.File) error {
	if w.opts.NoSync {
		return nil
	}
	w.st.fsyncs.Add(1)
	return w.syncFile(f)
}

// syncDir makes creations, renames and removals in the directory durable.
func (w *WAL) syncDir() error {
	if w.opts.NoSync {
		return nil
	}
	d, err := os.Open(w.dir)
	if err != nil {
		return fmt.Errorf("open wal directory: %w", err)
	}
	defer d.Close()
	if err := w.sync(d); err != nil {
		return fmt.Errorf("fsync wal directory %s: %w", w.dir, err)
	}
	return nil
}

func segmentName(first uint64) string { return fmt.Sprintf("%020d.wal", first) }

// Close stops Run and Ship (Run commits what is pending first; Ship
// returns after its current sink call), commits anything appended while
// no Run was running, and releases the files. It is safe to call at any
// time; calls after the first return nil.
func (w *WAL) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed, w.stopped = true, true
	w.mu.Unlock()
	w.stopAll()
	w.wg.Wait()

	var err error
	w.mu.Lock()
	failed := w.failed
	w.mu.Unlock()
	if failed == nil {
		err = w.commitPending()
		if err == nil {
			err = w.trimActive(false)
		}
	} else {
		w.markAllSent()
	}
	return errors.Join(err, w.closeFiles())
}

// markAllSent, after a write or fsync error, marks every entry ever
// appended as maybe sent: the ones the error left on disk are also held
// by the caller (cmd/tollgate's ledger queues them again or writes them
// to the store itself), so the next Open must count them as maybe
// delivered. If the mark cannot be written it is removed, which counts
// every entry found.
func (w *WAL) markAllSent() {
	w.mu.Lock()
	last := w.next - 1
	w.mu.Unlock()
	if err := w.writeSent(last); err != nil {
		_ = os.Remove(filepath.Join(w.dir, sentName))
	}
}

func (w *WAL) closeFiles() error {
	var errs []error
	if w.active != nil {
		errs = append(errs, w.active.Close())
		w.active = nil
	}
	if w.lock != nil {
		errs = append(errs, w.lock.Close()) // releases the flock
		w.lock = nil
	}
	return errors.Join(errs...)
}
