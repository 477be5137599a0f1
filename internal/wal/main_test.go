package wal

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The crash test re-executes this binary as the process it kills.
	if dir := os.Getenv(crashDirEnv); dir != "" {
		crashChild(dir, os.Getenv(crashRoundEnv))
		return
	}
	goleak.VerifyTestMain(m)
}

// openT opens a WAL that is closed when the test ends.
func openT(t testing.TB, opts Options) *WAL {
	t.Helper()
	w, err := Open(opts, nil, nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// runT starts the committer; the returned stop cancels it and returns
// Run's result. It is also called at cleanup, so no test leaks it.
func runT(t testing.TB, w *WAL) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

// breakSync makes w's fsyncs fail with "injected EIO" once the returned
// switch is set.
func breakSync(w *WAL) *atomic.Bool {
	var broken atomic.Bool
	w.syncFile = func(f *os.File) error {
		if broken.Load() {
			return errors.New("injected EIO")
		}
		return f.Sync()
	}
	return &broken
}

// appendWait appends and waits, failing the test on any error.
func appendWait(t testing.TB, w *WAL, payload string) Commit {
	t.Helper()
	c, err := w.Append([]byte(payload))
	if err != nil {
		t.Fatalf("Append(%q): %v", payload, err)
	}
	if err := c.Wait(context.Background()); err != nil {
		t.Fatalf("Wait(%q): %v", payload, err)
	}
	return c
}

// shipAll ships everything unshipped and durable, acking it, and returns
// the payloads in delivery order.
func shipAll(t testing.TB, w *WAL) []string {
	t.Helper()
	want := w.Stats().UnshippedEntries
	if want == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got []string
	err := w.Ship(ctx, 1000, 0, func(_ context.Context, b Batch) error {
		ps := b.Payloads
		for _, p := range ps {
			got = append(got, string(p))
		}
		if int64(len(got)) >= want {
			cancel()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Ship: %v", err)
	}
	return got
}

// dump reads every entry on disk without acking anything, as (seq,
// payload), after the recovery a fresh Open does.
func dump(t testing.TB, dir string) (seqs []uint64, payloads []string) {
	t.Helper()
	w, err := Open(Options{Dir: dir, NoSync: true}, nil, nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if rec := w.Recovery(); rec.TruncatedFile != "" {
		t.Logf("recovery truncated %d bytes at %s:%d (%s)", rec.TruncatedBytes, rec.TruncatedFile, rec.TruncatedOffset, rec.TruncatedReason)
	}
	segs := w.segs
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	r := newSegReader()
	for _, s := range segs {
		f, err := os.Open(s.path)
		if err != nil {
			t.Fatal(err)
		}
		r.reset(f, s.path, s.first)
		for {
			p, ok, err := r.next(s.size)
			if err != nil {
				t.Fatalf("read back %s: %v", s.path, err)
			}
			if !ok {
				break
			}
			seqs = append(seqs, r.seq-1)
			payloads = append(payloads, string(p))
		}
		f.Close()
	}
	return seqs, payloads
}
