package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tollgate-dev/tollgate/internal/store"
)

// Connecting in the background.
//
// Open connects at once: it reads the server's version and creates the
// database and tables, and fails when it cannot — what a report run from
// the command line wants. With Config.Background a failed first attempt
// is not the end: Open returns the Store anyway and keeps connecting in
// the background, waiting minConnectBackoff after the first failure and
// twice as long after each further one, up to maxConnectBackoff, until an
// attempt succeeds or Close is called. Each attempt is the whole of what
// Open does (version, schema, rollup zone), so a server that comes back
// empty gets its tables then. This is what serve uses: a replica started
// or moved while ClickHouse is down serves and keeps its Records in the
// write-ahead queue, which ships them once the store is connected.
//
// Until then every method fails at once with an error that wraps
// store.ErrNotConnected and says why the last attempt failed, without a
// call to the server; Connected reports the same.

const (
	minConnectBackoff = 250 * time.Millisecond
	maxConnectBackoff = 5 * time.Second
	// firstAttempt bounds Open's own attempt with Config.Background, so a
	// server that swallows packets holds serve's start for seconds, not
	// for Config.Timeout; later attempts have the whole Timeout.
	firstAttempt = 5 * time.Second
)

// connect makes one attempt at what Open does, unless connected already.
func (s *Store) connect(ctx context.Context) error {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if s.connected.Load() {
		return nil
	}
	zone := s.zone // openRollups may adopt the recorded zone: not from a failed attempt
	if err := s.open(ctx); err != nil {
		s.zone = zone
		s.lastErr.Store(&err)
		return err
	}
	// Everything open set is written before the flag that lets methods
	// read it.
	s.connected.Store(true)
	return nil
}

// keepConnecting retries connect with backoff until it succeeds or ctx
// ends; done is closed when it returns.
func (s *Store) keepConnecting(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	start, attempts := time.Now(), 1 // Open's
	backoff := minConnectBackoff
	t := time.NewTimer(backoff)
	defer t.Stop()
	last := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		attempts++
		err := s.connect(ctx)
		if err == nil {
			s.log.Info("ClickHouse store connected after waiting for the server", "attempts", attempts,
				"waited", time.Since(start).Round(time.Millisecond))
			return
		}
		if ctx.Err() != nil {
			return
		}
		// One line per new reason, not one per attempt.
		if msg := err.Error(); msg != last {
			last = msg
			s.log.Warn("ClickHouse store still not connected; retrying", "err", err, "retry_in", backoff)
		}
		backoff = min(2*backoff, maxConnectBackoff)
		t.Reset(backoff)
	}
}

// Connected returns nil once the store is connected: the server answered
// and the schema is in place. Before that (only with Config.Background) it
// returns an error wrapping store.ErrNotConnected with the reason the last
// attempt failed.
func (s *Store) Connected() error {
	if s.connected.Load() {
		return nil
	}
	why := errors.New("not tried yet")
	if p := s.lastErr.Load(); p != nil {
		why = *p
	}
	return fmt.Errorf("%w: ClickHouse at %s, database %q: %w", store.ErrNotConnected, s.c.base.Redacted(), s.db, why)
}
