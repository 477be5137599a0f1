package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// Changes to stored rows that move their rollups with them: Rerate (a
// price change) and SetEngineTiming (timings that arrive late).

// Rerate walks the ledger rows of [from, to) in arrival order, a chunk per
// transaction, and moves each changed row's totals from its old rollup
// rows to its new ones (cost and currency may both change).
func (s *Store) Rerate(ctx context.Context, from, to time.Time, rate func(*record.Record) record.Cost) (int, error) {
	changed := 0
	cursorAt, cursorID := from.UnixNano(), ""
	const chunk = 2000
	for {
		recs, err := s.query(ctx, "SELECT "+selectColumns+" FROM requests WHERE (arrival > ? OR (arrival = ? AND request_id > ?)) AND arrival < ? ORDER BY arrival, request_id LIMIT ?",
			false, cursorAt, cursorAt, cursorID, to.UnixNano(), chunk)
		if err != nil {
			return changed, fmt.Errorf("rerate: %w", err)
		}
		if len(recs) == 0 {
			return changed, nil
		}
		n, err := s.rerateChunk(ctx, recs, rate)
		changed += n
		if err != nil {
			return changed, fmt.Errorf("rerate: %w", err)
		}
		last := recs[len(recs)-1]
		cursorAt, cursorID = last.Arrival.UnixNano(), last.RequestID
		if len(recs) < chunk {
			return changed, nil
		}
	}
}

func (s *Store) rerateChunk(ctx context.Context, recs []*record.Record, rate func(*record.Record) record.Cost) (int, error) {
	s.pend.mu.Lock()
	defer s.pend.mu.Unlock()
	// The pending sums are written first: every row of the chunk then has
	// its totals in the tables, where the changes below move them.
	// Rerating is rare; writing them per chunk costs nothing that matters.
	n := 0
	err := s.rollupTx(ctx, func(tx *sql.Tx, mark int64) (int64, error) {
		acc := newRollupAcc(s.loc)
		for _, r := range recs {
			c := rate(r)
			if c == r.Cost {
				continue
			}
			acc.add(r, -1)
			nr := *r
			nr.Cost = c
			acc.add(&nr, +1)
			if _, err := tx.ExecContext(ctx, "UPDATE requests SET cost_nanos = ?, currency = ?, price_version = ? WHERE request_id = ?",
				c.Nanos, c.Currency, c.PriceVersion, r.RequestID); err != nil {
				return 0, err
			}
			n++
		}
		return mark, acc.flush(ctx, tx, s.upserts)
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// SetEngineTiming amends one row and its rollups in one transaction.
func (s *Store) SetEngineTiming(ctx context.Context, requestID string, et record.EngineTiming) error {
	recs, err := s.query(ctx, "SELECT "+selectColumns+" FROM requests WHERE request_id = ?", false, requestID)
	if err != nil {
		return fmt.Errorf("amend %q: %w", requestID, err)
	}
	if len(recs) == 0 {
		return nil
	}
	old := recs[0]
	nr := *old
	nr.EngineTiming = &et
	nr.Finish()
	s.pend.mu.Lock()
	defer s.pend.mu.Unlock()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("amend %q: %w", requestID, err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	// A non-streamed answer's TPOT comes from the engine's decode time.
	sets := []string{"engine_timing = ?", "tpot_ns = ?"}
	args := []any{mustColumn("engine_timing").val(&nr), mustColumn("tpot_ns").val(&nr)}
	for _, n := range record.SegmentNames {
		sets = append(sets, "seg_"+n+"_ns = ?")
		args = append(args, int64(nr.Derived.Segments.Get(n)))
	}
	args = append(args, requestID)
	var rowid int64
	err = tx.QueryRowContext(ctx, "UPDATE requests SET "+strings.Join(sets, ", ")+" WHERE request_id = ? RETURNING rowid", args...).Scan(&rowid)
	if errors.Is(err, sql.ErrNoRows) {
		return nil // pruned since it was read
	}
	if err != nil {
		return fmt.Errorf("amend %q: %w", requestID, err)
	}
	delta := newRollupAcc(s.loc)
	delta.add(old, -1)
	delta.add(&nr, +1)
	mark, _, err := rollupMark(ctx, tx)
	if err != nil {
		return fmt.Errorf("amend %q: %w", requestID, err)
	}
	if rowid <= mark {
		// The row's totals are in the tables: move them there.
		if err := delta.flush(ctx, tx, s.upserts); err != nil {
			return fmt.Errorf("amend %q: %w", requestID, err)
		}
		return tx.Commit()
	}
	// The row's totals still wait in memory (or, if another process moved
	// the mark, in nobody's: the next write sums the amended row from the
	// ledger and drops what is pending, this change with it).
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("amend %q: %w", requestID, err)
	}
	s.pend.add(delta, time.Now())
	return nil
}
