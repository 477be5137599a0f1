package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/capture"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// The captures table (migration 10) holds the opt-in captures of slow or
// failed requests apart from the ledger: no foreign key to requests, so a
// capture's life is its own retention's, whatever the ledger's is.

var _ store.Captures = (*Store)(nil)

// AddCaptures writes cs in one transaction; a RequestID already stored is
// skipped.
func (s *Store) AddCaptures(ctx context.Context, cs []*capture.Capture) error {
	if len(cs) == 0 {
		return nil
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("add captures: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	for _, c := range cs {
		if c == nil {
			continue
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO captures (request_id, at, reason, request, response, request_truncated, response_truncated)
			VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (request_id) DO NOTHING`,
			c.RequestID, c.At.UnixNano(), c.Reason, orEmpty(c.Request), orEmpty(c.Response), c.RequestTruncated, c.ResponseTruncated); err != nil {
			return fmt.Errorf("add captures: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("add captures: %w", err)
	}
	return nil
}

// orEmpty stores a missing body as an empty BLOB (the column is NOT NULL).
func orEmpty(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

const captureColumns = "request_id, at, reason, request, response, request_truncated, response_truncated"

// listColumns are captureColumns with the bodies' lengths for the bodies.
const listColumns = "request_id, at, reason, length(CAST(request AS BLOB)), length(CAST(response AS BLOB)), request_truncated, response_truncated"

// Captures lists captures matching f, newest first.
func (s *Store) Captures(ctx context.Context, f store.CaptureFilter) ([]*capture.Capture, error) {
	var where []string
	var args []any
	if !f.Since.IsZero() {
		where, args = append(where, "at >= ?"), append(args, f.Since.UnixNano())
	}
	if !f.Until.IsZero() {
		where, args = append(where, "at < ?"), append(args, f.Until.UnixNano())
	}
	if f.Reason != "" {
		where, args = append(where, "reason = ?"), append(args, f.Reason)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	q := "SELECT " + listColumns + " FROM captures"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY at DESC, request_id DESC LIMIT ?"
	rows, err := s.r.QueryContext(ctx, q, append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("list captures: %w", err)
	}
	defer rows.Close()
	var out []*capture.Capture
	for rows.Next() {
		var (
			c  capture.Capture
			at int64
		)
		if err := rows.Scan(&c.RequestID, &at, &c.Reason, &c.RequestBytes, &c.ResponseBytes, &c.RequestTruncated, &c.ResponseTruncated); err != nil {
			return nil, fmt.Errorf("list captures: %w", err)
		}
		c.At = time.Unix(0, at).UTC()
		out = append(out, &c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list captures: %w", err)
	}
	return out, nil
}

// Capture returns the capture of one request.
func (s *Store) Capture(ctx context.Context, requestID string) (*capture.Capture, error) {
	c, err := scanCapture(s.r.QueryRowContext(ctx, "SELECT "+captureColumns+" FROM captures WHERE request_id = ?", requestID))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, fmt.Errorf("%w: capture %q", store.ErrNotFound, requestID)
	case err != nil:
		return nil, fmt.Errorf("read capture %q: %w", requestID, err)
	}
	return c, nil
}

func scanCapture(row interface{ Scan(...any) error }) (*capture.Capture, error) {
	var (
		c  capture.Capture
		at int64
	)
	if err := row.Scan(&c.RequestID, &at, &c.Reason, &c.Request, &c.Response, &c.RequestTruncated, &c.ResponseTruncated); err != nil {
		return nil, err
	}
	c.At = time.Unix(0, at).UTC()
	c.RequestBytes, c.ResponseBytes = len(c.Request), len(c.Response)
	return &c, nil
}

// PruneCaptures deletes the captures taken before cut, in slices so the
// writer is never held long.
func (s *Store) PruneCaptures(ctx context.Context, cut time.Time) (int64, error) {
	var total int64
	for {
		res, err := s.w.ExecContext(ctx, "DELETE FROM captures WHERE rowid IN (SELECT rowid FROM captures WHERE at < ? LIMIT 5000)", cut.UnixNano())
		if err != nil {
			return total, fmt.Errorf("prune captures: %w", err)
		}
		n, _ := res.RowsAffected()
		total += n
		if n < 5000 {
			return total, nil
		}
	}
}
