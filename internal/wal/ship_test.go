package wal

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// shipT runs Ship in the background; stop cancels it and returns its result.
func shipT(t *testing.T, w *WAL, batchMax int, flushEvery time.Duration, sink func(context.Context, Batch) error) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Ship(ctx, batchMax, flushEvery, sink) }()
	t.Cleanup(cancel)
	return func() error {
		cancel()
		return <-done
	}
}

func strs(ps [][]byte) []string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = string(p)
	}
	return s
}

func TestShipRetriesTheSameBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := openT(t, Options{Dir: t.TempDir(), NoSync: true})
		runT(t, w)
		want := payloads(10)
		for _, p := range want {
			appendWait(t, w, p)
		}

		type call struct {
			At         time.Duration
			Batch      []string
			Redelivery bool
		}
		var calls []call
		start := time.Now()
		delivered := make(chan struct{})
		stop := shipT(t, w, 100, 0, func(_ context.Context, b Batch) error {
			ps := b.Payloads
			calls = append(calls, call{time.Since(start), strs(ps), b.Redelivery})
			if len(calls) <= 3 {
				return errors.New("store down")
			}
			close(delivered)
			return nil
		})
		<-delivered
		if err := stop(); err != nil {
			t.Fatalf("Ship: %v", err)
		}
		// Same batch each time, after 100ms, 200ms, 400ms of backoff; a
		// redelivery from the first retry on.
		wantCalls := []call{{0, want, false}, {100 * time.Millisecond, want, true}, {300 * time.Millisecond, want, true}, {700 * time.Millisecond, want, true}}
		if diff := cmp.Diff(wantCalls, calls); diff != "" {
			t.Errorf("sink calls (-want +got):\n%s", diff)
		}
		if st := w.Stats(); st.ShipErrors != 3 || st.Acked != 10 || st.UnshippedEntries != 0 || st.UnshippedBytes != 0 {
			t.Errorf("stats = %+v; want 3 ship errors, all 10 acked", st)
		}
	})
}

func TestShipSpillsWhileTheStoreIsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		w := openT(t, Options{Dir: dir, NoSync: true, SegmentBytes: 1 << 10})
		runT(t, w)
		var down atomic.Bool
		down.Store(true)
		var got []string
		all := make(chan struct{})
		const n = 200
		stop := shipT(t, w, 50, 10*time.Millisecond, func(_ context.Context, b Batch) error {
			ps := b.Payloads
			if down.Load() {
				return errors.New("store down")
			}
			got = append(got, strs(ps)...)
			if len(got) == n {
				close(all)
			}
			return nil
		})

		want := payloads(n)
		for _, p := range want {
			appendWait(t, w, p) // the store being down never slows this
		}
		// An outage of a minute: the log only grows, the retries back off.
		time.Sleep(time.Minute)
		synctest.Wait()
		st := w.Stats()
		if st.UnshippedEntries != n || st.UnshippedBytes != n*entrySize || st.Acked != 0 {
			t.Errorf("during the outage: %+v; want all %d entries (%d bytes) unshipped", st, n, n*entrySize)
		}
		if files := walFiles(t, dir); st.Segments < 5 || len(files) != st.Segments {
			t.Errorf("during the outage: %d segments, files %v; want them all kept", st.Segments, files)
		}
		// Backoff doubles to 10s: about a dozen attempts in a minute.
		if st.ShipErrors < 5 || st.ShipErrors > 15 {
			t.Errorf("%d failed attempts in a minute of outage", st.ShipErrors)
		}

		down.Store(false)
		<-all
		if err := stop(); err != nil {
			t.Fatalf("Ship: %v", err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("shipped after the outage (-want +got):\n%s", diff)
		}
		st = w.Stats()
		if st.UnshippedEntries != 0 || st.UnshippedBytes != 0 || st.Acked != n || st.Segments != 1 {
			t.Errorf("after draining: %+v", st)
		}
		if files := walFiles(t, dir); len(files) != 1 {
			t.Errorf("segment files after draining: %v", files)
		}
	})
}

func TestShipFlushEvery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := openT(t, Options{Dir: t.TempDir(), NoSync: true})
		runT(t, w)
		type call struct {
			At time.Duration
			N  int
		}
		calls := make(chan call, 10)
		start := time.Now()
		stop := shipT(t, w, 100, 50*time.Millisecond, func(_ context.Context, b Batch) error {
			ps := b.Payloads
			calls <- call{time.Since(start), len(ps)}
			return nil
		})
		for range 5 {
			appendWait(t, w, "few")
		}
		// A partial batch waits flushEvery for company, then goes.
		if got := <-calls; got != (call{50 * time.Millisecond, 5}) {
			t.Errorf("partial batch: %+v, want 5 entries after 50ms", got)
		}
		// A full batch goes at once.
		start = time.Now()
		var last Commit
		for range 100 {
			var err error
			if last, err = w.Append([]byte("many")); err != nil {
				t.Fatal(err)
			}
		}
		if err := last.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := <-calls; got != (call{0, 100}) {
			t.Errorf("full batch: %+v, want 100 entries at once", got)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestRestartReplaysFromTheAckPoint(t *testing.T) {
	dir := t.TempDir()
	// Seven 30-byte entries per segment: 1-7, 8-14, ..., 29-35, ...
	w := openT(t, Options{Dir: dir, NoSync: true, SegmentBytes: 200})
	runT(t, w)
	all := payloads(100)
	for _, p := range all {
		appendWait(t, w, p)
	}

	// The fourth batch reaches the store, then the process "dies" before
	// the ack: the sink fails and Ship is stopped.
	var stored []string
	calls := 0
	ctx, cancel := context.WithCancel(context.Background())
	err := w.Ship(ctx, 10, 0, func(_ context.Context, b Batch) error {
		ps := b.Payloads
		stored = append(stored, strs(ps)...)
		if calls++; calls == 4 {
			cancel()
			return errors.New("killed mid-insert")
		}
		return nil
	})
	cancel()
	if err != nil {
		t.Fatalf("Ship: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// Segments wholly acked (up to 28) are gone.
	if files := walFiles(t, dir); len(files) == 0 || files[0] != segmentName(29) {
		t.Errorf("segment files after acking 30: %v, want the first to be %s", files, segmentName(29))
	}

	w2 := openT(t, Options{Dir: dir, NoSync: true})
	if rec := w2.Recovery(); rec.Acked != 30 || rec.Unshipped != 70 {
		t.Errorf("recovery = %+v, want ack point 30 and 70 unshipped", rec)
	}
	again := shipAll(t, w2)
	// Replay is what was not acked, no more: the store sees the fourth
	// batch twice (its request_id makes that harmless), nothing else.
	if diff := cmp.Diff(all[30:], again); diff != "" {
		t.Errorf("replayed after restart (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(all[:40], stored); diff != "" {
		t.Errorf("stored before the crash (-want +got):\n%s", diff)
	}
}

func TestLostAckFileReplaysAtMostASegment(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(path string) error
	}{
		{"missing", os.Remove},
		// A rename that reached disk before the data it named.
		{"empty", func(path string) error { return os.Truncate(path, 0) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			w := openT(t, Options{Dir: dir, NoSync: true, SegmentBytes: 200})
			runT(t, w)
			all := payloads(100)
			for _, p := range all {
				appendWait(t, w, p)
			}
			if got := shipAll(t, w); len(got) != 100 {
				t.Fatalf("shipped %d, want 100", len(got))
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if err := tc.damage(filepath.Join(dir, ackName)); err != nil {
				t.Fatal(err)
			}

			w2 := openT(t, Options{Dir: dir, NoSync: true})
			// Segments of seven: only the one from 99 is left.
			if rec := w2.Recovery(); rec.Acked != 0 || rec.Segments != 1 || rec.Unshipped != 2 {
				t.Errorf("recovery = %+v; want no ack point, one segment, its 2 entries unshipped", rec)
			}
			if diff := cmp.Diff(all[98:], shipAll(t, w2)); diff != "" {
				t.Errorf("replayed (-want +got):\n%s", diff)
			}
		})
	}
}

func TestShipDrainsOnceRunHasReturned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := openT(t, Options{Dir: t.TempDir(), NoSync: true})
		stopRun := runT(t, w)
		want := payloads(10)
		for _, p := range want {
			appendWait(t, w, p)
		}
		var batches [][]string
		start := time.Now()
		// The shutdown order: stop the committer, then let Ship finish.
		if err := stopRun(); err != nil {
			t.Fatal(err)
		}
		err := w.Ship(context.Background(), 4, time.Hour, func(_ context.Context, b Batch) error {
			ps := b.Payloads
			batches = append(batches, strs(ps))
			return nil
		})
		if err != nil {
			t.Fatalf("Ship: %v", err)
		}
		// No waiting for flushEvery: nothing more can come.
		if d := time.Since(start); d != 0 {
			t.Errorf("Ship took %v to drain", d)
		}
		if diff := cmp.Diff([][]string{want[:4], want[4:8], want[8:]}, batches); diff != "" {
			t.Errorf("batches (-want +got):\n%s", diff)
		}
		if st := w.Stats(); st.UnshippedEntries != 0 || st.Acked != 10 {
			t.Errorf("after the drain: %+v", st)
		}
	})
}

// TestShipBatchFirst: Batch.First+i is the Seq that Append gave the
// batch's i-th payload, across batches and a retry.
func TestShipBatchFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := openT(t, Options{Dir: t.TempDir(), NoSync: true})
		runT(t, w)
		seqOf := map[string]uint64{}
		for _, p := range payloads(10) {
			seqOf[p] = appendWait(t, w, p).Seq()
		}
		calls, seen := 0, 0
		delivered := make(chan struct{})
		stop := shipT(t, w, 3, 0, func(_ context.Context, b Batch) error {
			ps := b.Payloads
			calls++
			first := b.First
			for i, p := range ps {
				if want := seqOf[string(p)]; first+uint64(i) != want {
					t.Errorf("payload %q: First+%d = %d, Append gave %d", p, i, first+uint64(i), want)
				}
			}
			if calls == 2 {
				return errors.New("store down") // retried: the same first
			}
			if seen += len(ps); seen == 10 {
				close(delivered)
			}
			return nil
		})
		<-delivered
		if err := stop(); err != nil {
			t.Fatalf("Ship: %v", err)
		}
	})
}

// redelivered is one sink call as the redelivery tests note it.
type redelivered struct {
	Batch      []string
	Redelivery bool
}

// restart stops w's committer, closes w and opens the directory again,
// with a committer running: a process that stopped and started.
func restart(t *testing.T, w *WAL, stopRun func() error, dir string) *WAL {
	t.Helper()
	if err := stopRun(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w = openT(t, Options{Dir: dir, NoSync: true})
	runT(t, w)
	return w
}

// TestShipRedeliveryAfterOpen: the entries a restart finds unacked may have
// reached the store before the crash, so their batches are redeliveries;
// the batches of entries appended since are not.
func TestShipRedeliveryAfterOpen(t *testing.T) {
	dir := t.TempDir()
	w := openT(t, Options{Dir: dir, NoSync: true})
	stopRun := runT(t, w)
	for _, p := range payloads(5) {
		appendWait(t, w, p)
	}
	w = restart(t, w, stopRun, dir)
	var calls []redelivered
	more := payloads(8)[5:]
	delivered := make(chan struct{})
	stop := shipT(t, w, 2, 0, func(_ context.Context, b Batch) error {
		ps := b.Payloads
		calls = append(calls, redelivered{strs(ps), b.Redelivery})
		if len(calls) == 3 {
			// The recovered ones are shipped (the third batch held the
			// last of them); the next appends come after.
			for _, p := range more {
				appendWait(t, w, p)
			}
		}
		if len(calls) == 5 {
			close(delivered)
		}
		return nil
	})
	<-delivered
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	all := payloads(8)
	want := []redelivered{{all[0:2], true}, {all[2:4], true}, {all[4:5], true}, {all[5:7], false}, {all[7:8], false}}
	if diff := cmp.Diff(want, calls); diff != "" {
		t.Errorf("sink calls (-want +got):\n%s", diff)
	}
}

// TestShipRedeliveryUpToSentMark: after a restart only the entries a sink
// may have seen (up to the persisted sent mark) are redeliveries, not the
// whole backlog: entries appended while the store was down and never
// handed to it are first deliveries.
func TestShipRedeliveryUpToSentMark(t *testing.T) {
	dir := t.TempDir()
	w := openT(t, Options{Dir: dir, NoSync: true})
	stopRun := runT(t, w)
	all := payloads(6)
	for _, p := range all[:4] {
		appendWait(t, w, p)
	}
	calls := 0
	failed := make(chan struct{})
	stop := shipT(t, w, 2, 0, func(context.Context, Batch) error {
		calls++
		if calls == 2 { // entries 3–4 reach the sink, which fails (its INSERT may have run)
			close(failed)
		}
		if calls >= 2 {
			return errors.New("store down")
		}
		return nil
	})
	<-failed
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, p := range all[4:] { // appended while the store is down
		appendWait(t, w, p)
	}
	w = restart(t, w, stopRun, dir)
	var got []redelivered
	done := make(chan struct{})
	stop = shipT(t, w, 2, 0, func(_ context.Context, b Batch) error {
		ps := b.Payloads
		got = append(got, redelivered{strs(ps), b.Redelivery})
		if len(got) == 2 {
			close(done)
		}
		return nil
	})
	<-done
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	want := []redelivered{{all[2:4], true}, {all[4:6], false}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("sink calls after the restart (-want +got):\n%s", diff)
	}
}

// TestFailureCountsEverythingAsSent: entries a failed write left on disk
// are also held by the caller, which queues them again or stores them
// itself; so after the failure the next Open counts every entry it finds
// as maybe delivered, even past the sent mark.
func TestFailureCountsEverythingAsSent(t *testing.T) {
	dir := t.TempDir()
	w := openT(t, Options{Dir: dir})
	broken := breakSync(w)
	stopRun := runT(t, w)
	appendWait(t, w, "before")
	shipped := make(chan struct{})
	stopShip := shipT(t, w, 10, 0, func(context.Context, Batch) error { close(shipped); return nil })
	<-shipped // the sent mark is 1 now
	if err := stopShip(); err != nil {
		t.Fatal(err)
	}
	broken.Store(true)
	c, err := w.Append([]byte("during")) // written, its fsync fails
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Wait(context.Background())
	_ = stopRun()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	w = openT(t, Options{Dir: dir, NoSync: true})
	runT(t, w)
	if w.Stats().UnshippedEntries == 0 {
		t.Skip("the failed write left nothing on disk this time: nothing to check")
	}
	got := make(chan bool, 1)
	stop := shipT(t, w, 10, 0, func(_ context.Context, b Batch) error {
		ps := b.Payloads
		if strs(ps)[0] == "during" {
			got <- b.Redelivery
		}
		return nil
	})
	if !<-got {
		t.Error("an entry left on disk by a failed write shipped as a first delivery; the caller may have stored its copy")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// While a partial batch waits for its flush interval, commits do not wake
// the shipper (each wake-up read the group back from disk): only the one
// that makes durable the entry it wants, the one that fills the batch.
func TestShipWakesForAFullBatchOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := openT(t, Options{Dir: t.TempDir(), NoSync: true})
		calls := make(chan int, 10)
		shipT(t, w, 10, time.Hour, func(_ context.Context, b Batch) error {
			calls <- len(b.Payloads)
			return nil
		})
		// No Run: the test commits, as the committer would.
		commit := func() {
			if _, err := w.Append([]byte("x")); err != nil {
				t.Fatal(err)
			}
			if err := w.commitPending(); err != nil {
				t.Fatal(err)
			}
		}
		commit() // the first entry of a batch wakes it: its flush timer starts
		synctest.Wait()
		if got := w.shipWant.Load(); got != 10 {
			t.Fatalf("with entry 1 of a batch of 10 read, the shipper waits for entry %d, want 10", got)
		}
		// A shipper blocked on the channel takes a kick at once; keep it
		// from reading it to count the kicks.
		kicks := w.shipKick
		w.shipKick = make(chan struct{}, 1)
		for i := 2; i < 10; i++ {
			commit()
			if len(w.shipKick) != 0 {
				t.Fatalf("entry %d of a batch of 10 woke the shipper", i)
			}
		}
		commit()
		if len(w.shipKick) != 1 {
			t.Fatal("the entry that fills the batch did not wake the shipper")
		}
		kicks <- <-w.shipKick
		if n := <-calls; n != 10 {
			t.Errorf("shipped %d entries, want the full batch of 10", n)
		}
	})
}
