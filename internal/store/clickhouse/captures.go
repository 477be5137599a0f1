package clickhouse

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/capture"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// The captures table holds the opt-in captures of slow or failed
// requests' redacted text, apart from the ledger. It is partitioned by
// the day of the capture, so old days can be dropped whole; PruneCaptures
// deletes by mutation, as Prune does everywhere in this store.
//
// Idempotency by request_id is that of the requests table: a check then
// an INSERT under a mutex within one process (capMu, the captures' own,
// so a capture batch never holds up the ledger's Insert), and across
// replicas ReplacingMergeTree(ver) collapsing two writes of one request
// (same at_ns, so the same day and sort key), the first write kept — ver
// falls as the clock rises — with every read through FINAL.

var _ store.Captures = (*Store)(nil)

func capturesTable(db string) string {
	return `CREATE TABLE IF NOT EXISTS ` + quoteIdent(db) + `.captures (
			day Date, at_ns Int64, request_id String, reason String,
			request String, response String, request_truncated UInt8, response_truncated UInt8,
			ver UInt64
		) ENGINE = ReplacingMergeTree(ver) PARTITION BY day ORDER BY (at_ns, request_id)`
}

const captureColumns = "request_id, at_ns, reason, request, response, request_truncated, response_truncated"

// listColumns are captureColumns with the bodies' lengths for the bodies.
const listColumns = "request_id, at_ns, reason, toInt64(length(request)), toInt64(length(response)), request_truncated, response_truncated"

// AddCaptures writes the captures of cs not stored yet in one INSERT.
func (s *Store) AddCaptures(ctx context.Context, cs []*capture.Capture) error {
	if err := s.Connected(); err != nil {
		return err
	}
	if len(cs) == 0 {
		return nil
	}
	s.capMu.Lock()
	defer s.capMu.Unlock()
	stored, err := s.storedCaptures(ctx, cs)
	if err != nil {
		return fmt.Errorf("add captures: check stored ids: %w", err)
	}
	e := &enc{}
	ver := math.MaxUint64 - uint64(s.now().UnixNano())
	n := 0
	for _, c := range cs {
		if c == nil || stored[c.RequestID] {
			continue
		}
		stored[c.RequestID] = true
		e.u16(day(c.At))
		e.str(c.RequestID)
		e.i64(c.At.UnixNano())
		e.str(c.Reason)
		e.str(string(c.Request))
		e.str(string(c.Response))
		e.flag(c.RequestTruncated)
		e.flag(c.ResponseTruncated)
		e.u64(ver)
		n++
	}
	if n == 0 {
		return nil
	}
	q := "INSERT INTO " + s.table("captures") + " (day, " + captureColumns + ", ver) FORMAT RowBinary"
	if err := s.c.insert(ctx, q, e.b); err != nil {
		return fmt.Errorf("add %d captures: %w", n, err)
	}
	return nil
}

// storedCaptures returns which RequestIDs of cs are in the table already,
// looking in their days' partitions only.
func (s *Store) storedCaptures(ctx context.Context, cs []*capture.Capture) (map[string]bool, error) {
	days := map[uint16]bool{}
	var ids []string
	for _, c := range cs {
		if c != nil {
			ids = append(ids, c.RequestID)
			days[day(c.At)] = true
		}
	}
	var dayList []string
	for d := range days {
		dayList = append(dayList, quoteDay(d))
	}
	stored := map[string]bool{}
	for i := 0; i < len(ids); i += checkChunk {
		chunk := ids[i:min(i+checkChunk, len(ids))]
		q := fmt.Sprintf("SELECT DISTINCT request_id FROM %s WHERE day IN (%s) AND request_id IN %s FORMAT RowBinary",
			s.table("captures"), strings.Join(dayList, ", "), quoteStrings(chunk))
		err := s.c.query(ctx, q, func(d *dec) error {
			for d.more() {
				if id := d.str(); d.err == nil {
					stored[id] = true
				}
			}
			return d.err
		})
		if err != nil {
			return nil, err
		}
	}
	return stored, nil
}

// Captures lists captures matching f, newest first.
func (s *Store) Captures(ctx context.Context, f store.CaptureFilter) ([]*capture.Capture, error) {
	if err := s.Connected(); err != nil {
		return nil, err
	}
	var where []string
	if !f.Since.IsZero() {
		where = append(where, "day >= "+quoteDay(day(f.Since))+" AND at_ns >= "+quoteInt(f.Since.UnixNano()))
	}
	if !f.Until.IsZero() {
		where = append(where, "day <= "+quoteDay(day(f.Until))+" AND at_ns < "+quoteInt(f.Until.UnixNano()))
	}
	if f.Reason != "" {
		where = append(where, "reason = "+quoteString(f.Reason))
	}
	limit := f.Limit
	if limit <= 0 {
		limit = defaultLimit
	}
	q := "SELECT " + listColumns + " FROM " + s.table("captures") + " FINAL"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY at_ns DESC, request_id DESC LIMIT " + quoteInt(int64(limit)) + " FORMAT RowBinary"
	out, err := s.readCaptures(ctx, q, false)
	if err != nil {
		return nil, fmt.Errorf("list captures: %w", err)
	}
	return out, nil
}

// Capture returns the capture of one request.
func (s *Store) Capture(ctx context.Context, requestID string) (*capture.Capture, error) {
	if err := s.Connected(); err != nil {
		return nil, err
	}
	q := "SELECT " + captureColumns + " FROM " + s.table("captures") + " FINAL WHERE request_id = " + quoteString(requestID) +
		" LIMIT 1 FORMAT RowBinary"
	out, err := s.readCaptures(ctx, q, true)
	if err != nil {
		return nil, fmt.Errorf("read capture %q: %w", requestID, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: capture %q", store.ErrNotFound, requestID)
	}
	return out[0], nil
}

// readCaptures reads rows of captureColumns (bodies) or of listColumns.
func (s *Store) readCaptures(ctx context.Context, q string, bodies bool) ([]*capture.Capture, error) {
	var out []*capture.Capture
	err := s.c.query(ctx, q, func(d *dec) error {
		for d.more() {
			c := &capture.Capture{RequestID: d.str()}
			c.At = time.Unix(0, d.i64()).UTC()
			c.Reason = d.str()
			if bodies {
				c.Request = []byte(d.str())
				c.Response = []byte(d.str())
				c.RequestBytes, c.ResponseBytes = len(c.Request), len(c.Response)
			} else {
				c.RequestBytes, c.ResponseBytes = int(d.i64()), int(d.i64())
			}
			c.RequestTruncated = d.flag()
			c.ResponseTruncated = d.flag()
			if d.err == nil {
				out = append(out, c)
			}
		}
		return d.err
	})
	return out, err
}

// PruneCaptures deletes the captures taken before cut, waiting for the
// mutation to finish.
func (s *Store) PruneCaptures(ctx context.Context, cut time.Time) (int64, error) {
	if err := s.Connected(); err != nil {
		return 0, err
	}
	n, err := s.mutate(ctx, "captures", "at_ns < "+quoteInt(cut.UnixNano()), "")
	if err != nil {
		return n, fmt.Errorf("prune captures: %w", err)
	}
	return n, nil
}
