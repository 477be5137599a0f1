// Package wal is the write-ahead log between the gateway and the store.
//
// It sits right after a request's Record is finished: the gateway encodes
// the Record, Appends it, and waits for the group commit (bounded by a
// timeout) before it writes the last bytes of the response, so a client
// that saw a complete response implies a durable ledger row. A shipper (Ship)
// then moves committed entries, in append order and in batches, into the
// store, retrying while the store is down; meanwhile the log grows, which
// makes it also the local spill queue. The store's Insert is idempotent by
// request_id, which is what makes at-least-once shipping exact.
//
//	gateway ──Append──▶ pending ──Run: one write + one fsync per group──▶ segments
//	   ▲                                  │                                 │
//	   └────── Commit.Wait returns ───────┘              Ship ──batches──▶ store
//
// # Durability guarantee
//
// SIGKILL, OOM kill, panic (the process dies, the kernel lives): every entry
// whose Commit.Wait returned nil is recovered by the next Open, exactly once
// in the log. So is, in practice, every entry whose write(2) had completed,
// since the page cache outlives the process; a partial last entry is
// truncated by Open, never returned.
//
// Power loss or kernel crash: every entry whose Commit.Wait returned nil,
// provided the storage honours fsync (no volatile write cache that lies).
// Wait returns only after fsync of the segment file that holds the entry,
// and a new segment file is fsynced with its header and made durable in the
// directory (directory fsync) before any entry is written into it. Entries
// whose Wait had not returned may or may not be there; none is half there
// (every entry carries a CRC).
//
// Delivered twice: entries the shipper handed to the sink but whose ack had
// not reached disk when the process died. The ack point is rewritten after
// every successful sink call (write to a temporary file, rename; no fsync,
// because replay is idempotent downstream). After SIGKILL it is current, so
// only the batch in the sink at that moment is replayed. After power loss it
// may be older, or unreadable and then ignored; replay then starts at the
// oldest segment still on disk, which is at most one segment of entries
// that had been shipped (fully shipped segments are deleted).
//
// Never delivered twice within one run: a failed sink call is retried with
// the same batch, and nothing after it is read until it succeeds.
//
// Not covered: an Append refused with ErrFull (the caller decides what to do
// with that Record; the refusal is counted); the time after a write or fsync
// error, when the WAL stops accepting (it cannot know what the kernel kept;
// reopen to recover what is on disk); and media corruption inside the last
// commit group of the last segment, which is indistinguishable from a torn
// write and is truncated (and reported) like one.
//
// # On-disk format
//
// A directory of segment files, a LOCK file (flock, one process at a time)
// and an ack file. All integers are little-endian; CRCs are CRC-32C
// (Castagnoli).
//
// Segment file "<first seq, 20 digits>.wal" (so name order is log order):
//
//	offset  size  field
//	0       4     magic "TWAL"
//	4       4     format version (1)
//	8       8     sequence number of the first entry (equals the name)
//	16      ...   entries, back to back
//
// Entry:
//
//	offset  size  field
//	0       4     n, payload length (at most MaxPayload)
//	4       4     CRC-32C of payload ‖ bytes 0..4 ‖ bytes 8..20
//	8       8     sequence number (the previous entry's + 1; the first is 1)
//	16      4     index of this entry within its commit group (the entries
//	              written by one write and made durable by one fsync)
//	20      n     payload
//
// The CRC covers the length, so a header of zeros (a block the file system
// allocated but never wrote) fails it. It covers the payload first so that
// appenders checksum their payloads in parallel and the committer only does
// I/O. The group index is what tells a torn write from corruption at Open:
// only the last group of the last segment can be torn, because every group
// is fsynced before the next is written, and every segment before the next
// is created. A bad entry there is a torn tail, truncated and reported,
// unless some valid entry after it belongs to a later group, which proves
// that the bad entry was fsynced: then, and for any bad entry in an older
// segment, Open refuses with an error naming the file and the offset.
//
// The active segment is filled with zeros ahead of its last entry (up to
// 1 MiB, and its size bound), so that a commit overwrites blocks that are
// already allocated and fdatasync flushes the data alone, without a
// journal commit. A segment is cut to its last entry before the next one
// is created, and at Close; after a crash Open truncates the zeros like
// any torn tail (a header of zeros fails its CRC), and reports them.
//
// Ack file "ack": 8 bytes, the highest shipped sequence number, then the
// 4-byte CRC-32C of those 8 bytes.
//
// Sent file "sent": the same 12 bytes for the highest sequence number ever
// handed to a sink, written in place and fsynced before the sink sees it.
// After a restart, entries up to it may have reached the store and are
// redeliveries (see Batch.Redelivery); those after it never reached a sink. A
// missing or unreadable sent file makes every entry Open finds a
// redelivery.
package wal
