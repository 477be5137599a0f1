package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

const (
	ackName    = "ack"
	ackTmpName = "ack.tmp"
	sentName   = "sent"
	readChunk  = 1 << 20
)

// Recovery is what Open found on disk.
type Recovery struct {
	Segments  int    // segment files kept
	Entries   uint64 // complete entries in them, shipped ones included
	Unshipped uint64 // entries after the ack point, which Ship delivers first
	Acked     uint64 // the ack point read from disk (0: none, or unreadable)
	Next      uint64 // sequence number the next Append gets

	// The torn tail Open removed, if any (TruncatedBytes > 0 or a file
	// named): the file, where its valid part ends, how many bytes went
	// and why.
	TruncatedFile   string
	TruncatedOffset int64
	TruncatedBytes  int64
	TruncatedReason string
}

// Recovery returns what Open found.
func (w *WAL) Recovery() Recovery { return w.rec }

// CorruptError is a bad entry or header: Open returns it for corruption it
// will not truncate, Ship for a committed entry that no longer reads back.
type CorruptError struct {
	Path   string
	Offset int64
	Seq    uint64 // the sequence number expected there
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("wal: corrupt segment %s at offset %d (entry %d): %s", e.Path, e.Offset, e.Seq, e.Reason)
}

// recover scans the directory: verifies every segment, truncates a torn
// tail, checks that no unshipped entry is missing, removes segments that
// were shipped, and sets the committer up to continue the last segment.
func (w *WAL) recover() error {
	ack, err := w.readAck()
	if err != nil {
		return err
	}
	w.rec.Acked = ack
	dirents, err := os.ReadDir(w.dir)
	if err != nil {
		return fmt.Errorf("read wal directory: %w", err)
	}
	var segs []*segment
	for _, e := range dirents { // sorted by name, hence by first sequence
		name := e.Name()
		if !strings.HasSuffix(name, ".wal") {
			continue
		}
		first, err := strconv.ParseUint(strings.TrimSuffix(name, ".wal"), 10, 64)
		if err != nil || first == 0 || segmentName(first) != name {
			return fmt.Errorf("wal: unexpected file %s in %s", name, w.dir)
		}
		segs = append(segs, &segment{first: first, path: filepath.Join(w.dir, name)})
	}

	r := newSegReader()
	counts := make([]uint64, 0, len(segs))
	for i, s := range segs {
		n, keep, err := w.recoverSegment(s, i == len(segs)-1, ack, r)
		if err != nil {
			return err
		}
		if !keep {
			segs = segs[:i]
			break
		}
		counts = append(counts, n)
	}
	for i := 0; i+1 < len(segs); i++ {
		end, next := segs[i].first+counts[i], segs[i+1].first
		switch {
		case end > next:
			return fmt.Errorf("wal: segment %s runs to entry %d, past the start of %s", segs[i].path, end-1, segs[i+1].path)
		case end < next && next-1 > ack:
			// A gap below the ack point is a deletion of shipped
			// segments that reached disk out of order; above it,
			// unshipped entries are gone.
			return fmt.Errorf("wal: entries %d to %d are missing between %s and %s", end, next-1, segs[i].path, segs[i+1].path)
		}
	}

	// Shipped segments left by a crash between the ack and the removal.
	removed := 0
	for len(segs) > 1 && segs[1].first-1 <= ack {
		if err := os.Remove(segs[0].path); err != nil {
			return fmt.Errorf("remove shipped segment: %w", err)
		}
		segs, counts = segs[1:], counts[1:]
		removed++
	}
	if removed > 0 {
		if err := w.syncDir(); err != nil {
			return err
		}
	}

	next := ack + 1
	if len(segs) > 0 {
		next = segs[len(segs)-1].first + counts[len(counts)-1]
		if ack+1 < segs[0].first {
			// The ack file was lost or is older than the deletions:
			// everything still here is unshipped.
			ack = segs[0].first - 1
		}
	}
	if ack >= next {
		// Only if the log lost its end (a disk that lies about fsync)
		// or files were moved by hand. Left alone, the next entries
		// would be taken as shipped.
		w.log.Warn("wal ack point is past the end of the log; resetting it", "ack", ack, "last_entry", next-1)
		ack = next - 1
		if err := w.writeAck(ack); err != nil {
			return err
		}
	}

	w.segs, w.next, w.durable, w.acked = segs, next, next-1, ack
	// Entries a sink may have seen: up to the persisted sent mark, or all
	// that were found when there is none to trust.
	w.sent = next - 1
	// A mark below the ack point is stale (within one version sent ≥ ack
	// always holds: it is fsynced before the sink call, the ack written
	// after it), say left by a downgrade to a version without it.
	if sent, ok := w.readSent(); ok && sent >= ack {
		w.sent = min(w.sent, sent)
	}
	for _, c := range counts {
		w.rec.Entries += c
	}
	w.rec.Segments, w.rec.Next = len(segs), next
	w.rec.Unshipped = uint64(w.unEntries)
	if len(segs) > 0 {
		last := segs[len(segs)-1]
		f, err := os.OpenFile(last.path, os.O_WRONLY, 0)
		if err != nil {
			return fmt.Errorf("open segment for append: %w", err)
		}
		w.active, w.activeSize, w.allocated = f, last.size, last.size
	}
	w.log.Info("wal opened", "dir", w.dir, "segments", len(segs), "entries", w.rec.Entries,
		"unshipped", w.rec.Unshipped, "unshipped_bytes", w.unBytes, "acked", ack, "next", next)
	return nil
}

// recoverSegment verifies one segment and counts its entries. The last
// segment may end in a torn write, which it truncates; keep is false when
// the whole file was a torn creation and is gone.
func (w *WAL) recoverSegment(s *segment, last bool, ack uint64, r *segReader) (count uint64, keep bool, err error) {
	flag := os.O_RDONLY
	if last {
		flag = os.O_RDWR
	}
	f, err := os.OpenFile(s.path, flag, 0)
	if err != nil {
		return 0, false, fmt.Errorf("open segment: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, false, fmt.Errorf("stat segment: %w", err)
	}
	size := fi.Size()

	var h [segHeaderSize]byte
	n, err := f.ReadAt(h[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, false, fmt.Errorf("read segment header %s: %w", s.path, err)
	}
	if reason := checkHeader(h[:n], s.first); reason != "" {
		// The header is fsynced alone before any entry is written, so
		// only a file holding nothing more can be a crash mid-creation.
		if !last || size > segHeaderSize {
			return 0, false, &CorruptError{Path: s.path, Offset: 0, Seq: s.first, Reason: reason}
		}
		f.Close()
		if err := os.Remove(s.path); err != nil {
			return 0, false, fmt.Errorf("remove torn segment: %w", err)
		}
		if err := w.syncDir(); err != nil {
			return 0, false, err
		}
		w.truncated(s.path, 0, size, "segment creation cut short: "+reason)
		return 0, false, nil
	}

	r.reset(f, s.path, s.first)
	for {
		p, ok, err := r.next(size)
		if err != nil {
			var ce *CorruptError
			if !last || !errors.As(err, &ce) {
				return 0, false, err
			}
			proof, perr := laterGroup(f, ce.Offset, size, ce.Seq)
			if perr != nil {
				return 0, false, fmt.Errorf("read segment %s: %w", s.path, perr)
			}
			if proof != "" {
				ce.Reason += proof
				return 0, false, ce
			}
			if err := f.Truncate(ce.Offset); err != nil {
				return 0, false, fmt.Errorf("truncate torn tail of %s: %w", s.path, err)
			}
			w.truncated(s.path, ce.Offset, size-ce.Offset, ce.Reason)
			size = ce.Offset
			break
		}
		if !ok {
			break
		}
		count++
		if r.seq-1 > ack {
			w.unBytes += int64(entryHeaderSize + len(p))
			w.unEntries++
		}
	}
	if last {
		// Make the truncation durable, and whatever the dead process
		// wrote without reaching its fsync: the shipper may hand it to
		// the store, and the log must not then lose it to a power cut.
		if err := w.sync(f); err != nil {
			return 0, false, fmt.Errorf("fsync %s: %w", s.path, err)
		}
	}
	s.size = size
	return count, true, nil
}

func (w *WAL) truncated(path string, off, n int64, reason string) {
	w.rec.TruncatedFile, w.rec.TruncatedOffset, w.rec.TruncatedBytes, w.rec.TruncatedReason = path, off, n, reason
	w.st.truncated.Add(uint64(n))
	w.log.Warn("wal: truncated a torn tail left by a crash (entries in it were never acknowledged)",
		"file", path, "offset", off, "bytes", n, "reason", reason)
}

func checkHeader(h []byte, first uint64) string {
	switch {
	case len(h) < segHeaderSize:
		return fmt.Sprintf("header is %d bytes, want %d", len(h), segHeaderSize)
	case string(h[0:4]) != segMagic:
		return fmt.Sprintf("bad magic %q", h[0:4])
	case binary.LittleEndian.Uint32(h[4:8]) != segVersion:
		return fmt.Sprintf("unknown format version %d", binary.LittleEndian.Uint32(h[4:8]))
	case binary.LittleEndian.Uint64(h[8:16]) != first:
		return fmt.Sprintf("header says first entry %d, the name says %d", binary.LittleEndian.Uint64(h[8:16]), first)
	}
	return ""
}

// laterGroup looks for proof that the bad entry at off (sequence bad) had
// been fsynced: an intact entry after it whose commit group started after
// bad. Every group is synced before the next one is written, so such an
// entry means the bad one was acknowledged and is now corrupt, not torn.
// It searches byte by byte because the bad entry's own length may be the
// corrupt part; cheap header checks come before the CRC.
func laterGroup(f *os.File, off, size int64, bad uint64) (string, error) {
	if size-off-1 < entryHeaderSize {
		return "", nil
	}
	b := make([]byte, size-off-1)
	if _, err := f.ReadAt(b, off+1); err != nil {
		return "", err
	}
	maxAfter := uint64(len(b)/entryHeaderSize) + 1
	for i := 0; i+entryHeaderSize <= len(b); i++ {
		h := b[i:]
		seq := binary.LittleEndian.Uint64(h[8:16])
		if seq <= bad || seq-bad > maxAfter {
			continue
		}
		idx := uint64(binary.LittleEndian.Uint32(h[16:20]))
		if idx >= seq || seq-idx <= bad {
			continue
		}
		n := int(binary.LittleEndian.Uint32(h[0:4]))
		if n > MaxPayload || i+entryHeaderSize+n > len(b) {
			continue
		}
		if entrySum(crc32.Checksum(h[entryHeaderSize:entryHeaderSize+n], castagnoli), h) != binary.LittleEndian.Uint32(h[4:8]) {
			continue
		}
		return fmt.Sprintf("; entry %d at offset %d, from a later commit, is intact, so this one had been fsynced",
			seq, off+1+int64(i)), nil
	}
	return "", nil
}

// segReader reads entries from one segment file through a buffer, never
// past a limit (the durable size), verifying each CRC and sequence number.
type segReader struct {
	f     *os.File
	path  string
	first uint64
	seq   uint64 // sequence number of the next entry
	off   int64  // file offset of buf[0]
	buf   []byte
	pos   int // next entry in buf
}

func newSegReader() *segReader { return &segReader{buf: make([]byte, 0, readChunk)} }

func (r *segReader) reset(f *os.File, path string, first uint64) {
	r.f, r.path, r.first, r.seq = f, path, first, first
	r.off, r.buf, r.pos = segHeaderSize, r.buf[:0], 0
}

// next returns the next entry's payload, valid until the following call.
// ok is false when no entry starts before limit; an entry that starts
// before limit but does not fit, or fails its checks, is a CorruptError.
func (r *segReader) next(limit int64) (p []byte, ok bool, err error) {
	at := r.off + int64(r.pos)
	if at >= limit {
		return nil, false, nil
	}
	corrupt := func(format string, args ...any) ([]byte, bool, error) {
		return nil, false, &CorruptError{Path: r.path, Offset: at, Seq: r.seq, Reason: fmt.Sprintf(format, args...)}
	}
	if err := r.ensure(entryHeaderSize, limit); err != nil {
		return nil, false, err
	}
	if avail := len(r.buf) - r.pos; avail < entryHeaderSize {
		return corrupt("entry header cut off after %d bytes", avail)
	}
	n := binary.LittleEndian.Uint32(r.buf[r.pos : r.pos+4])
	if n > MaxPayload {
		return corrupt("length %d is over the limit", n)
	}
	total := entryHeaderSize + int(n)
	if err := r.ensure(total, limit); err != nil {
		return nil, false, err
	}
	if avail := len(r.buf) - r.pos; avail < total {
		return corrupt("entry of %d bytes cut off after %d", total, avail)
	}
	h := r.buf[r.pos : r.pos+entryHeaderSize]
	p = r.buf[r.pos+entryHeaderSize : r.pos+total]
	if entrySum(crc32.Checksum(p, castagnoli), h) != binary.LittleEndian.Uint32(h[4:8]) {
		return corrupt("checksum mismatch")
	}
	if seq := binary.LittleEndian.Uint64(h[8:16]); seq != r.seq {
		return corrupt("sequence number %d", seq)
	}
	// A group never spans segments, so its start is in this one.
	if idx := uint64(binary.LittleEndian.Uint32(h[16:20])); idx > r.seq-r.first {
		return corrupt("group index %d reaches before the segment", idx)
	}
	r.pos += total
	r.seq++
	return p, true, nil
}

// ensure tries to have k bytes buffered from pos, reading no further than
// limit; it reads in big chunks to keep syscalls per entry low.
func (r *segReader) ensure(k int, limit int64) error {
	if len(r.buf)-r.pos >= k {
		return nil
	}
	n := copy(r.buf, r.buf[r.pos:])
	r.buf, r.off, r.pos = r.buf[:n], r.off+int64(r.pos), 0
	if cap(r.buf) < k {
		nb := make([]byte, n, max(k, readChunk))
		copy(nb, r.buf)
		r.buf = nb
	}
	end := r.off + int64(n)
	want := min(int64(cap(r.buf)-n), limit-end)
	if want <= 0 {
		return nil
	}
	m, err := r.f.ReadAt(r.buf[n:n+int(want)], end)
	r.buf = r.buf[:n+m]
	if int64(m) < want {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("read %s at %d: %w", r.path, end, err)
	}
	return nil
}

// readAck returns the persisted ack point, 0 when there is none. An
// unreadable one is ignored (replay is idempotent downstream), not fatal.
func (w *WAL) readAck() (uint64, error) {
	_ = os.Remove(filepath.Join(w.dir, ackTmpName)) // a crash mid-writeAck
	b, err := os.ReadFile(filepath.Join(w.dir, ackName))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read wal ack point: %w", err)
	}
	if len(b) != 12 || crc32.Checksum(b[:8], castagnoli) != binary.LittleEndian.Uint32(b[8:12]) {
		w.log.Warn("wal ack file is unreadable (power loss after it was renamed?): shipping from the oldest segment again",
			"file", filepath.Join(w.dir, ackName), "bytes", len(b))
		return 0, nil
	}
	return binary.LittleEndian.Uint64(b[:8]), nil
}

// readSent returns the persisted sent mark (the highest entry ever handed
// to a sink), ok false when there is none or it is unreadable.
func (w *WAL) readSent() (uint64, bool) {
	b, err := os.ReadFile(filepath.Join(w.dir, sentName))
	if err != nil || len(b) != 12 || crc32.Checksum(b[:8], castagnoli) != binary.LittleEndian.Uint32(b[8:12]) {
		return 0, false
	}
	return binary.LittleEndian.Uint64(b[:8]), true
}

// writeSent persists the sent mark before a sink sees entries up to seq:
// written in place and fsynced (a torn or empty file fails its CRC and is
// then not trusted, so every entry Open finds counts as maybe delivered).
func (w *WAL) writeSent(seq uint64) error {
	var b [12]byte
	binary.LittleEndian.PutUint64(b[:8], seq)
	binary.LittleEndian.PutUint32(b[8:12], crc32.Checksum(b[:8], castagnoli))
	f, err := os.OpenFile(filepath.Join(w.dir, sentName), os.O_WRONLY|os.O_CREATE, 0o640)
	if err != nil {
		return fmt.Errorf("write wal sent mark: %w", err)
	}
	_, err = f.WriteAt(b[:], 0)
	if err == nil && !w.opts.NoSync {
		err = w.syncFile(f) // not counted in Stats.Fsyncs
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write wal sent mark: %w", err)
	}
	return nil
}

// writeAck persists the ack point by rename, so a reader sees the old or
// the new value, never half of one. No fsync: losing it to power loss
// means replaying shipped entries, which the store ignores by request_id.
func (w *WAL) writeAck(seq uint64) error {
	var b [12]byte
	binary.LittleEndian.PutUint64(b[:8], seq)
	binary.LittleEndian.PutUint32(b[8:12], crc32.Checksum(b[:8], castagnoli))
	tmp := filepath.Join(w.dir, ackTmpName)
	if err := os.WriteFile(tmp, b[:], 0o640); err != nil {
		return fmt.Errorf("write wal ack point: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(w.dir, ackName)); err != nil {
		return fmt.Errorf("write wal ack point: %w", err)
	}
	return nil
}
