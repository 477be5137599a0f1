package sqlite

import (
	"context"
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
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	acc := newRollupAcc(s.loc)
	n := 0
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
	if err := acc.flush(ctx, tx, s.upserts); err != nil {
		return 0, err
	}
	return n, tx.Commit()
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
	if _, err := tx.ExecContext(ctx, "UPDATE requests SET "+strings.Join(sets, ", ")+" WHERE request_id = ?", args...); err != nil {
		return fmt.Errorf("amend %q: %w", requestID, err)
	}
	acc := newRollupAcc(s.loc)
	acc.add(old, -1)
	acc.add(&nr, +1)
	if err := acc.flush(ctx, tx, s.upserts); err != nil {
		return fmt.Errorf("amend %q: %w", requestID, err)
	}
	return tx.Commit()
}
