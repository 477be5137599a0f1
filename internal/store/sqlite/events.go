package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/tollgate-dev/tollgate/internal/store"
)

// AddEvents stores events in one transaction.
func (s *Store) AddEvents(ctx context.Context, evs []store.Event) error {
	if len(evs) == 0 {
		return nil
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("add events: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	for _, e := range evs {
		if _, err := tx.ExecContext(ctx, "INSERT INTO events (at, kind, subject, message, data) VALUES (?, ?, ?, ?, ?)",
			e.At.UnixNano(), e.Kind, e.Subject, e.Message, e.Data); err != nil {
			return fmt.Errorf("add events: %w", err)
		}
	}
	return tx.Commit()
}

// Events lists events since a time, of one kind or all, newest first.
func (s *Store) Events(ctx context.Context, since time.Time, kind string, limit int) ([]store.Event, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.r.QueryContext(ctx, "SELECT at, kind, subject, message, data FROM events WHERE at >= ? AND (? = '' OR kind = ?) ORDER BY at DESC, id DESC LIMIT ?",
		since.UnixNano(), kind, kind, limit)
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	defer rows.Close()
	var out []store.Event
	for rows.Next() {
		var e store.Event
		var at int64
		if err := rows.Scan(&at, &e.Kind, &e.Subject, &e.Message, &e.Data); err != nil {
			return nil, fmt.Errorf("events: %w", err)
		}
		e.At = time.Unix(0, at).UTC()
		out = append(out, e)
	}
	return out, rows.Err()
}
