package clickhouse

import (
	"context"
	"fmt"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// Amending a stored request (a late engine timing, a new price) writes the
// whole row again as a new version instead of updating it in place: a
// mutation rewrites whole parts, far too heavy per request. The new row's
// ver is one above the row it amends, so ReplacingMergeTree keeps it and
// every read (FINAL) sees it at once; the old version goes at the next
// merge. The rows' pieces are marked, so reports follow at the next
// roll-up pass (which every Report runs first). Insert still finds the id stored, so a replay of
// the original never undoes an amendment.

// readVersions returns the first limit current rows matching cond in
// arrival order, whole (timeline included), with their versions.
func (s *Store) readVersions(ctx context.Context, cond string, limit int64) ([]*record.Record, []uint64, error) {
	q := fmt.Sprintf("SELECT %s, timeline, ver FROM %s.requests FINAL WHERE %s ORDER BY arrival_ns, request_id LIMIT %s FORMAT RowBinary",
		selectColumns, quoteIdent(s.db), cond, quoteInt(limit))
	var (
		recs []*record.Record
		vers []uint64
	)
	err := s.c.query(ctx, q, func(d *dec) error {
		for d.more() {
			r, err := decodeRow(d, true)
			if err != nil {
				return err
			}
			v := d.u64()
			if d.err != nil {
				return d.err
			}
			r.Finish()
			recs, vers = append(recs, r), append(vers, v)
		}
		return d.err
	})
	return recs, vers, err
}

// writeVersions writes recs, each as the version after vers[i].
func (s *Store) writeVersions(ctx context.Context, recs []*record.Record, vers []uint64) error {
	if len(recs) == 0 {
		return nil
	}
	// Marked before the rows, so that a failure after them leaves a
	// mark (a retry of Rerate finds those rows unchanged and writes
	// none), and after, so that a pass that ran in between is followed
	// by another.
	if err := s.mark(ctx, recs); err != nil {
		return err
	}
	e := &enc{}
	for i, r := range recs {
		r.Finish()
		encodeRow(e, r, vers[i]+1)
	}
	q := fmt.Sprintf("INSERT INTO %s.requests (%s) FORMAT RowBinary", quoteIdent(s.db), insertColumns)
	if err := s.c.insert(ctx, q, e.b); err != nil {
		return err
	}
	return s.mark(ctx, recs)
}

// SetEngineTiming amends a stored request with what its engine reported
// after it ended; segments (and so reports) follow. A request not stored
// is ignored.
func (s *Store) SetEngineTiming(ctx context.Context, requestID string, et record.EngineTiming) error {
	if err := s.Connected(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	recs, vers, err := s.readVersions(ctx, "request_id = "+quoteString(requestID), 1)
	if err != nil {
		return fmt.Errorf("amend %q: %w", requestID, err)
	}
	if len(recs) == 0 {
		return nil
	}
	recs[0].EngineTiming = &et
	if err := s.writeVersions(ctx, recs[:1], vers[:1]); err != nil {
		return fmt.Errorf("amend %q: %w", requestID, err)
	}
	return nil
}

// rerateChunk bounds the rows one Rerate step reads and rewrites.
const rerateChunk = 5000

// Rerate recomputes the cost of the requests that arrived in [from, to)
// and writes the changed ones as new versions, a chunk at a time in
// arrival order; it returns how many changed.
func (s *Store) Rerate(ctx context.Context, from, to time.Time, rate func(*record.Record) record.Cost) (int, error) {
	if err := s.Connected(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := 0
	atNS, afterID := from.UnixNano(), ""
	first := true
	for {
		cond := fmt.Sprintf("day >= %s AND day <= %s AND arrival_ns < %s AND (arrival_ns > %s OR arrival_ns = %s AND request_id > %s)",
			quoteDay(day(from)), quoteDay(day(to)), quoteInt(to.UnixNano()), quoteInt(atNS), quoteInt(atNS), quoteString(afterID))
		if first {
			cond = fmt.Sprintf("day >= %s AND day <= %s AND arrival_ns >= %s AND arrival_ns < %s",
				quoteDay(day(from)), quoteDay(day(to)), quoteInt(from.UnixNano()), quoteInt(to.UnixNano()))
			first = false
		}
		recs, vers, err := s.readVersions(ctx, cond, rerateChunk)
		if err != nil {
			return changed, fmt.Errorf("rerate: %w", err)
		}
		if len(recs) == 0 {
			return changed, nil
		}
		var (
			out     []*record.Record
			outVers []uint64
		)
		for i, r := range recs {
			if c := rate(r); c != r.Cost {
				nr := *r
				nr.Cost = c
				out, outVers = append(out, &nr), append(outVers, vers[i])
			}
		}
		if err := s.writeVersions(ctx, out, outVers); err != nil {
			return changed, fmt.Errorf("rerate: %w", err)
		}
		changed += len(out)
		last := recs[len(recs)-1]
		atNS, afterID = last.Arrival.UnixNano(), last.RequestID
		if len(recs) < rerateChunk {
			return changed, nil
		}
	}
}
