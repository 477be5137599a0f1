package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// Rollups summed in memory across batches.
//
// A batch's ledger rows are committed with the batch, as always: what a
// client was answered is durable before its last bytes. Their rollup sums
// wait in memory (pending) and are written at most every rollupDelay, once
// maxPendingKeys rollup rows have gathered, or before anything reads or
// prunes the rollups. With the shipper's 200 ms batches most rollup rows
// (a user's hour, a model's day) were otherwise rewritten five times a
// second; now once per rollupDelay.
//
// rollup_state.rolled_through is the largest requests rowid whose totals
// are in the rollup tables, written in the same transaction as the sums.
// Whatever lies after it — the sums a crash took from memory, or another
// process's pending rows (the CLI opens the same file as serve) — is
// summed again from the ledger rows by whichever process next writes the
// rollups ("catch-up"). A process trusts its own pending sums only while
// the file shows nobody else moved the mark or added rows; otherwise it
// drops them and catches up. SQLite gives a rowid table without an
// INTEGER PRIMARY KEY increasing rowids (max + 1) unless the largest row
// is deleted or the file is vacuumed; both lower the ledger's largest
// rowid below the mark, which every write of the mark checks.

const (
	// rollupDelay bounds how long sums wait in memory.
	rollupDelay = 10 * time.Second
	// maxPendingKeys bounds their memory: about 450 bytes a rollup row,
	// so ≈ 7 MiB.
	maxPendingKeys = 16384
)

// pending is the rollup sums not yet written. mu is held across the
// writer transactions that move the mark: the shipper's inserts and the
// flushes before reads; never on a request's path.
type pending struct {
	mu  sync.Mutex
	acc *rollupAcc // sums of the ledger rows after mark, up to last
	// mark is rolled_through as this process last wrote or read it; -1
	// until the first sync.
	mark  int64
	last  int64     // the largest rowid in acc; mark when acc is empty
	since time.Time // when acc got its first row
}

// due reports whether the sums should be written now.
func (p *pending) due(now time.Time) bool {
	n := len(p.acc.keys)
	return p.mark < 0 || n >= maxPendingKeys || (n > 0 && now.Sub(p.since) >= rollupDelay)
}

// add merges sums of rows already committed (an amendment's).
func (p *pending) add(b *rollupAcc, now time.Time) {
	if len(b.keys) == 0 {
		return
	}
	if len(p.acc.keys) == 0 {
		p.since = now
	}
	p.acc.merge(b)
}

// reset starts again, empty, from a mark just written or read. The map
// and slice keep their room: the next interval fills them again.
func (p *pending) reset(mark int64) {
	clear(p.acc.sums)
	p.acc.keys = p.acc.keys[:0]
	p.mark, p.last = mark, mark
}

// merge adds b's sums to a's.
func (a *rollupAcc) merge(b *rollupAcc) {
	for _, k := range b.keys {
		sum, ok := a.sums[k]
		if !ok {
			sum = new(store.Totals)
			a.sums[k] = sum
			a.keys = append(a.keys, k)
		}
		sum.Add(*b.sums[k])
	}
}

// rollupMark reads the mark and the ledger's largest rowid.
func rollupMark(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) (mark, top int64, err error) {
	err = q.QueryRowContext(ctx, `SELECT rolled_through, (SELECT COALESCE(MAX(rowid), 0) FROM requests) FROM rollup_state`).Scan(&mark, &top)
	if err != nil {
		return 0, 0, fmt.Errorf("read rollup mark: %w", err)
	}
	return mark, top, nil
}

// writeRollups writes the pending sums inside tx, and moves the mark past
// them; batchLast is the largest rowid tx itself added (their sums are
// pending too). It returns the new mark; the caller resets pending with
// it once tx commits. s.pend.mu is held.
func (s *Store) writeRollups(ctx context.Context, tx *sql.Tx, batchLast int64) (int64, error) {
	mark, top, err := rollupMark(ctx, tx)
	if err != nil {
		return 0, err
	}
	p := &s.pend
	expect := max(mark, p.last, batchLast)
	next := expect
	if mark == p.mark && top == expect {
		if err := p.acc.flush(ctx, tx, s.upserts); err != nil {
			return 0, err
		}
	} else {
		// Someone else moved the mark or wrote rows (or this process
		// has not synced yet): what is in memory may be counted already.
		// The ledger rows after the mark, this batch's among them, are
		// the truth.
		acc := newRollupAcc(s.loc)
		last, err := sumLedger(ctx, tx, acc, "rowid > ?", mark)
		if err != nil {
			return 0, err
		}
		if err := acc.flush(ctx, tx, s.upserts); err != nil {
			return 0, err
		}
		next = max(mark, last)
		if len(acc.keys) > 0 {
			s.log.Debug("ledger rollups caught up from the ledger", "path", s.path, "after_rowid", mark, "to_rowid", last)
		}
	}
	// Rows deleted from the end (a prune) or renumbered (VACUUM) leave the
	// mark above the largest rowid; new rows will reuse the numbers above
	// it, so it comes down to what exists.
	next = min(next, top)
	if next != mark {
		if _, err := tx.ExecContext(ctx, `UPDATE rollup_state SET rolled_through = ?`, next); err != nil {
			return 0, fmt.Errorf("write rollup mark: %w", err)
		}
	}
	return next, nil
}

// sumLedger adds the ledger rows matching where (all when empty) to acc
// and returns the largest rowid read (0 when none).
func sumLedger(ctx context.Context, tx *sql.Tx, acc *rollupAcc, where string, args ...any) (int64, error) {
	q := "SELECT rowid, " + selectColumns + " FROM requests"
	if where != "" {
		q += " WHERE " + where
	}
	rows, err := tx.QueryContext(ctx, q+" ORDER BY rowid", args...)
	if err != nil {
		return 0, fmt.Errorf("read ledger: %w", err)
	}
	defer rows.Close()
	var last, rowid int64
	var dsts []any
	for i := 0; rows.Next(); i++ {
		yield(i)
		r := new(record.Record)
		dsts = scanDests(append(dsts[:0], &rowid), r)
		if err := rows.Scan(dsts...); err != nil {
			return 0, fmt.Errorf("read ledger: %w", err)
		}
		r.Finish()
		acc.add(r, +1)
		last = rowid
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("read ledger: %w", err)
	}
	return last, nil
}

// syncRollups writes the pending sums, or catches up with another
// process's rows, so that a read of the rollups sees every committed
// ledger row. With nothing pending anywhere it costs one read.
func (s *Store) syncRollups(ctx context.Context) error {
	s.pend.mu.Lock()
	defer s.pend.mu.Unlock()
	return s.syncRollupsLocked(ctx)
}

func (s *Store) syncRollupsLocked(ctx context.Context) error {
	p := &s.pend
	if len(p.acc.keys) == 0 && p.mark >= 0 {
		mark, top, err := rollupMark(ctx, s.r)
		if err != nil {
			return err
		}
		if mark == p.mark && top == mark {
			return nil
		}
	}
	if err := s.rollupTx(context.WithoutCancel(ctx), nil); err != nil {
		return fmt.Errorf("write rollups: %w", err)
	}
	return nil
}

// rollupTx runs f in a writer transaction that first writes the pending
// sums (moving the mark), and resets pending with the mark f returns once
// the transaction commits. s.pend.mu is held.
func (s *Store) rollupTx(ctx context.Context, f func(tx *sql.Tx, mark int64) (int64, error)) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	mark, err := s.writeRollups(ctx, tx, 0)
	if err != nil {
		return err
	}
	if f != nil {
		if mark, err = f(tx, mark); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	s.pend.reset(mark)
	return nil
}
