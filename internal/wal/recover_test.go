package wal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Every payload is 10 bytes, so entry k (from 0) of a segment starts at
// 16 + 30k.
const entrySize = entryHeaderSize + 10

func entryAt(k int) int64 { return segHeaderSize + int64(k)*entrySize }

func payloads(n int) []string {
	var p []string
	for i := range n {
		p = append(p, fmt.Sprintf("entry-%04d", i))
	}
	return p
}

// writeLog writes n entries and closes the log: in one commit group when
// grouped, else one group each.
func writeLog(t *testing.T, dir string, n int, grouped bool, segBytes int64) {
	t.Helper()
	w, err := Open(Options{Dir: dir, NoSync: true, SegmentBytes: segBytes}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !grouped {
		runT(t, w)
	}
	for _, p := range payloads(n) {
		c, err := w.Append([]byte(p))
		if err != nil {
			t.Fatal(err)
		}
		if !grouped {
			if err := c.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Without Run, Close commits everything pending as one group.
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func segPath(dir string, first uint64) string { return filepath.Join(dir, segmentName(first)) }

func appendBytes(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
}

func patch(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func truncate(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
}

func TestRecoverTornTail(t *testing.T) {
	garbage := make([]byte, 100)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range garbage {
		garbage[i] = byte(rng.Uint32())
	}
	tests := []struct {
		name    string
		grouped bool
		damage  func(t *testing.T, seg string)
		keep    int // entries that survive
		offset  int64
		bytes   int64
		reason  string
	}{{
		name:   "last entry cut mid-payload",
		damage: func(t *testing.T, seg string) { truncate(t, seg, entryAt(10)-7) },
		keep:   9, offset: entryAt(9), bytes: entrySize - 7, reason: "cut off",
	}, {
		name:   "last entry cut mid-header",
		damage: func(t *testing.T, seg string) { truncate(t, seg, entryAt(9)+5) },
		keep:   9, offset: entryAt(9), bytes: 5, reason: "header cut off",
	}, {
		name:   "garbage after the last entry",
		damage: func(t *testing.T, seg string) { appendBytes(t, seg, garbage) },
		keep:   10, offset: entryAt(10), bytes: 100,
	}, {
		// What power loss leaves when the size reached disk, the data not.
		name:   "zeros after the last entry",
		damage: func(t *testing.T, seg string) { appendBytes(t, seg, make([]byte, 4096)) },
		keep:   10, offset: entryAt(10), bytes: 4096, reason: "checksum mismatch",
	}, {
		// Entries after the bad one are intact but from the same write:
		// the write never completed its fsync, so the whole rest goes.
		name:    "bad entry inside the last commit group",
		grouped: true,
		damage:  func(t *testing.T, seg string) { patch(t, seg, entryAt(6)+entryHeaderSize+3, []byte{'#'}) },
		keep:    6, offset: entryAt(6), bytes: 4 * entrySize, reason: "checksum mismatch",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeLog(t, dir, 10, tc.grouped, 0)
			seg := segPath(dir, 1)
			tc.damage(t, seg)

			w, err := Open(Options{Dir: dir, NoSync: true}, nil, nil)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			rec := w.Recovery()
			if rec.TruncatedFile != seg || rec.TruncatedOffset != tc.offset || rec.TruncatedBytes != tc.bytes ||
				!strings.Contains(rec.TruncatedReason, tc.reason) {
				t.Errorf("truncation = %s at %d, %d bytes (%s); want %s at %d, %d bytes (%q)",
					rec.TruncatedFile, rec.TruncatedOffset, rec.TruncatedBytes, rec.TruncatedReason,
					seg, tc.offset, tc.bytes, tc.reason)
			}
			if st := w.Stats(); st.TruncatedBytes != uint64(tc.bytes) || st.UnshippedEntries != int64(tc.keep) {
				t.Errorf("stats after recovery: %+v", st)
			}
			// The log goes on right after the last good entry.
			runT(t, w)
			if c := appendWait(t, w, "after-0000"); c.Seq() != uint64(tc.keep+1) {
				t.Errorf("next entry got sequence %d, want %d", c.Seq(), tc.keep+1)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}

			w2 := openT(t, Options{Dir: dir, NoSync: true})
			if rec := w2.Recovery(); rec.TruncatedBytes != 0 || rec.TruncatedFile != "" {
				t.Errorf("second Open truncated again: %+v", rec)
			}
			want := append(payloads(tc.keep), "after-0000")
			if diff := cmp.Diff(want, shipAll(t, w2)); diff != "" {
				t.Errorf("entries after recovery (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRecoverTornSegmentCreation(t *testing.T) {
	dir := t.TempDir()
	writeLog(t, dir, 10, false, 0)
	// A crash between creating the next segment and its header's fsync.
	torn := segPath(dir, 11)
	if err := os.WriteFile(torn, []byte("TWAL\x01"), 0o640); err != nil {
		t.Fatal(err)
	}
	w := openT(t, Options{Dir: dir, NoSync: true})
	rec := w.Recovery()
	if rec.TruncatedFile != torn || rec.TruncatedBytes != 5 || rec.Entries != 10 || rec.Next != 11 {
		t.Errorf("recovery = %+v; want the 5-byte %s removed and 10 entries kept", rec, torn)
	}
	if _, err := os.Stat(torn); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("torn segment still there: %v", err)
	}
	runT(t, w)
	appendWait(t, w, "after-0000")
	if diff := cmp.Diff(append(payloads(10), "after-0000"), shipAll(t, w)); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
}

func TestRecoverRefusesCorruption(t *testing.T) {
	tests := []struct {
		name     string
		segBytes int64
		damage   func(t *testing.T, dir string)
		file     uint64 // segment named in the error (0: not a CorruptError)
		offset   int64
		reason   string
	}{{
		name: "bad payload before a later commit",
		damage: func(t *testing.T, dir string) {
			patch(t, segPath(dir, 1), entryAt(3)+entryHeaderSize, []byte{'#'})
		},
		file: 1, offset: entryAt(3), reason: "later commit",
	}, {
		// The bad length hides where the next entry is: found by search.
		name: "bad length before a later commit",
		damage: func(t *testing.T, dir string) {
			patch(t, segPath(dir, 1), entryAt(3), binary.LittleEndian.AppendUint32(nil, 0xffff))
		},
		file: 1, offset: entryAt(3), reason: "later commit",
	}, {
		// Segments of three entries (16+3*30 ≥ 100). An older segment
		// was fsynced whole before the next was created: even its end
		// cannot be torn.
		name:     "cut end of an older segment",
		segBytes: 100,
		damage:   func(t *testing.T, dir string) { truncate(t, segPath(dir, 1), entryAt(3)-3) },
		file:     1, offset: entryAt(2), reason: "cut off",
	}, {
		name:     "bad header with entries after it",
		segBytes: 100,
		damage:   func(t *testing.T, dir string) { patch(t, segPath(dir, 10), 0, []byte("XWAL")) },
		file:     10, offset: 0, reason: "bad magic",
	}, {
		name:     "unshipped segment missing",
		segBytes: 100,
		damage: func(t *testing.T, dir string) {
			if err := os.Remove(segPath(dir, 4)); err != nil {
				t.Fatal(err)
			}
		},
		reason: "entries 4 to 6 are missing",
	}, {
		name: "stray file",
		damage: func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, "copy.wal"), nil, 0o640); err != nil {
				t.Fatal(err)
			}
		},
		reason: "unexpected file copy.wal",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeLog(t, dir, 12, false, tc.segBytes)
			tc.damage(t, dir)
			w, err := Open(Options{Dir: dir, NoSync: true}, nil, nil)
			if err == nil {
				w.Close()
				t.Fatal("Open succeeded on a corrupt log")
			}
			t.Logf("Open: %v", err)
			if !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("error %q does not say %q", err, tc.reason)
			}
			if tc.file == 0 {
				return
			}
			var ce *CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is not a *CorruptError", err)
			}
			if ce.Path != segPath(dir, tc.file) || ce.Offset != tc.offset {
				t.Errorf("error names %s at %d, want %s at %d", ce.Path, ce.Offset, segPath(dir, tc.file), tc.offset)
			}
		})
	}
}
