package lifecycle

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestStopOrder: stages stop last-first, and a stage's closers run only
// once every goroutine of the stage has returned.
func TestStopOrder(t *testing.T) {
	var mu sync.Mutex
	var got []string
	note := func(s string) { mu.Lock(); got = append(got, s); mu.Unlock() }
	r := New(slog.New(slog.DiscardHandler))
	store := r.Stage("store")
	store.Defer(func() { note("store closed") })
	sinks := r.Stage("sinks")
	running := make(chan struct{})
	sinks.Go("ledger", func(ctx context.Context) error {
		close(running)
		<-ctx.Done()
		note("ledger drained")
		return ctx.Err()
	})
	sinks.Defer(func() { note("sinks closed") })
	jobs := r.Stage("jobs")
	jobs.Go("prune", func(ctx context.Context) error {
		<-ctx.Done()
		note("prune returned")
		return nil
	})
	<-running
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	want := []string{"prune returned", "ledger drained", "sinks closed", "store closed"}
	if !slices.Equal(got, want) {
		t.Fatalf("stop order %q, want %q", got, want)
	}
}

// TestFailed: a component that ends on its own with an error is reported;
// one that returns nil, or an error after the stop, is not.
func TestFailed(t *testing.T) {
	r := New(slog.New(slog.DiscardHandler))
	s := r.Stage("ingress")
	boom := errors.New("listener closed")
	s.Go("quiet", func(context.Context) error { return nil })
	s.Go("http", func(context.Context) error { return boom })
	err := <-r.Failed()
	if !errors.Is(err, boom) {
		t.Fatalf("Failed gave %v, want %v", err, boom)
	}
	if err := r.Stop(); !errors.Is(err, boom) {
		t.Fatalf("Stop = %v, want it to carry %v", err, boom)
	}
	r2 := New(slog.New(slog.DiscardHandler))
	r2.Stage("jobs").Go("late", func(ctx context.Context) error { <-ctx.Done(); return errors.New("after stop") })
	if err := r2.Stop(); err != nil {
		t.Fatalf("an error after the stop failed Stop: %v", err)
	}
	select {
	case err := <-r2.Failed():
		t.Fatalf("an error after the stop was reported as a failure: %v", err)
	default:
	}
}

// TestRepeat: the first pass waits first, later ones wait what the pass
// returned, and the loop ends with its context.
func TestRepeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		var at []time.Duration
		done := make(chan error)
		go func() {
			done <- Repeat(ctx, time.Minute, func(context.Context) time.Duration {
				at = append(at, time.Since(start))
				if len(at) == 3 {
					cancel()
				}
				return time.Hour
			})
		}()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		want := []time.Duration{time.Minute, time.Minute + time.Hour, time.Minute + 2*time.Hour}
		if !slices.Equal(at, want) {
			t.Fatalf("passes at %v, want %v", at, want)
		}
	})
}
