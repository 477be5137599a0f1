// Package lifecycle runs serve's long-lived components and stops them in
// the reverse of the order they were started, each waited for before what
// it uses is closed.
//
// It sits under cmd/tollgate's serve, beside the flow rather than in it:
// serve opens the store, then starts the sinks (the ledger, the event
// writer), then the background jobs (windows, alerts, retention, roll-ups,
// GPU-hour allocation, quota preload, scraping), then the ingress (the
// HTTP server, the OTLP receiver). Each block is a Stage: an errgroup of
// goroutines with a context of its own, and the closers of what the block
// opened. Stop cancels the last stage, waits for every goroutine of it,
// runs its closers, then moves to the stage before: so no job still runs
// when the store it writes to is closed, and the ledger has flushed every
// Record before that. A component is a func(ctx) error that returns when
// ctx ends: its Run method.
package lifecycle

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// Runner is the ordered list of stages.
type Runner struct {
	log    *slog.Logger
	mu     sync.Mutex
	stages []*Stage
	failed chan error // the first component that ended before it was stopped
}

// New returns an empty Runner; log reports components that fail.
func New(log *slog.Logger) *Runner {
	return &Runner{log: log, failed: make(chan error, 1)}
}

// Stage is one block of components, stopped together.
type Stage struct {
	r      *Runner
	name   string
	ctx    context.Context
	cancel context.CancelFunc
	g      errgroup.Group
	closes []func() // run in reverse order once the goroutines returned
}

// Stage appends a stage; it is stopped before every stage appended
// earlier. Its context is not derived from any request or signal: only
// Stop ends it.
func (r *Runner) Stage(name string) *Stage {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Stage{r: r, name: name, ctx: ctx, cancel: cancel}
	r.mu.Lock()
	r.stages = append(r.stages, s)
	r.mu.Unlock()
	return s
}

// Context is the stage's context, done when Stop reaches the stage.
func (s *Stage) Context() context.Context { return s.ctx }

// Go runs fn on its own goroutine until the stage stops. fn must return
// when its context ends. An error it returns before then is reported on
// Failed; one it returns after is logged unless it is context.Canceled.
func (s *Stage) Go(name string, fn func(ctx context.Context) error) {
	s.g.Go(func() error {
		err := fn(s.ctx)
		if err != nil && s.ctx.Err() == nil {
			err = errors.Join(errors.New(s.name+"/"+name+" stopped"), err)
			select {
			case s.r.failed <- err:
			default:
			}
			return err
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			s.r.log.Warn("component stopped with an error", "stage", s.name, "component", name, "err", err)
		}
		return nil
	})
}

// Defer registers fn to run when the stage stops, after its goroutines
// have returned; the last registered runs first.
func (s *Stage) Defer(fn func()) { s.closes = append(s.closes, fn) }

func (s *Stage) stop() error {
	s.cancel()
	err := s.g.Wait()
	for _, c := range slices.Backward(s.closes) {
		c()
	}
	return err
}

// Failed receives the error of the first component that returned before
// its stage was stopped.
func (r *Runner) Failed() <-chan error { return r.failed }

// Stop stops the stages from the last appended to the first: cancel,
// wait, close. It returns the errors of components that failed.
func (r *Runner) Stop() error {
	r.mu.Lock()
	stages := r.stages
	r.stages = nil
	r.mu.Unlock()
	var errs []error
	for _, s := range slices.Backward(stages) {
		errs = append(errs, s.stop())
	}
	return errors.Join(errs...)
}

// Repeat runs pass after first, then again after each wait pass returns,
// until ctx ends; it returns nil then. serve's background jobs are
// Repeat loops: a pass that fails logs and waits like one that succeeds.
func Repeat(ctx context.Context, first time.Duration, pass func(ctx context.Context) (wait time.Duration)) error {
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		t.Reset(pass(ctx))
	}
}
