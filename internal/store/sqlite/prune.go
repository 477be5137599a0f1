package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/store"
)

// Prune deletes, in chunks so the writer is never held long, whatever the
// retention says is too old. It returns how many rows went.
func (s *Store) Prune(ctx context.Context, now time.Time, r store.Retention) (int64, error) {
	type job struct {
		keep time.Duration
		stmt string
		arg  func(cut time.Time) any
	}
	ns := func(cut time.Time) any { return cut.UnixNano() }
	sec := func(cut time.Time) any { return cut.Unix() }
	day := func(cut time.Time) any { return bucket(grainDay, cut, s.loc) }
	// A month goes once all of it is older than the retention, and the
	// day rollups go with their month: reports read whole months from the
	// month rollups and the rest from the day rollups, which must cover
	// the same months to agree.
	month := func(cut time.Time) any { return bucket(grainMonth, cut, s.loc) }
	monthDays := func(cut time.Time) any { return bucket(grainDay, floorMonth(cut, s.loc), s.loc) }
	jobs := []job{
		{r.Details, "DELETE FROM request_details WHERE request_id IN (SELECT d.request_id FROM request_details d JOIN requests q USING (request_id) WHERE q.arrival < ? LIMIT 5000)", ns},
		{r.Ledger, "DELETE FROM requests WHERE rowid IN (SELECT rowid FROM requests WHERE arrival < ? LIMIT 5000)", ns},
		{r.Minute, "DELETE FROM rollup_minute WHERE bucket < ?", sec},
		{r.Hour, "DELETE FROM rollup_hour WHERE bucket < ?", sec},
		{r.Day, "DELETE FROM rollup_day WHERE bucket < ?", monthDays},
		{r.Day, "DELETE FROM prompt_day WHERE bucket < ?", day},
		{r.Day, "DELETE FROM rollup_day_user WHERE bucket < ?", monthDays},
		{r.Day, "DELETE FROM rollup_month WHERE bucket < ?", month},
		{r.Day, "DELETE FROM rollup_month_user WHERE bucket < ?", month},
		{r.Hour, "DELETE FROM end_user_hour WHERE bucket < ?", sec},
		{r.Day, "DELETE FROM end_user_day WHERE bucket < ?", monthDays},
		{r.Day, "DELETE FROM end_user_month WHERE bucket < ?", month},
		{r.Events, "DELETE FROM events WHERE id IN (SELECT id FROM events WHERE at < ? LIMIT 5000)", ns},
		{r.Engine, "DELETE FROM engine_samples WHERE rowid IN (SELECT rowid FROM engine_samples WHERE at < ? LIMIT 5000)", ns},
		{r.Minute, "DELETE FROM window_minute WHERE rowid IN (SELECT rowid FROM window_minute WHERE minute < ? LIMIT 5000)", sec},
		{r.Hour, "DELETE FROM window_hour WHERE rowid IN (SELECT rowid FROM window_hour WHERE hour < ? LIMIT 5000)", sec},
		{r.Day, "DELETE FROM window_day WHERE rowid IN (SELECT rowid FROM window_day WHERE day < ? LIMIT 5000)", sec},
		{r.Captures, "DELETE FROM captures WHERE rowid IN (SELECT rowid FROM captures WHERE at < ? LIMIT 5000)", ns},
	}
	// The rollups first hold every row, so that what goes below goes
	// whole.
	if err := s.syncRollups(ctx); err != nil {
		return 0, fmt.Errorf("prune: %w", err)
	}
	var total int64
	// Most prompts are sent once: prompt_day would otherwise hold nearly a
	// row per request. Once a day has closed, only prompts seen more than
	// once (what the waste report looks for) are kept; a day at a time, so
	// the writer is never held long.
	rows, err := s.w.QueryContext(ctx, "SELECT DISTINCT bucket FROM prompt_day WHERE bucket < ?", now.In(s.loc).Format(time.DateOnly))
	if err != nil {
		return 0, fmt.Errorf("prune single prompts: %w", err)
	}
	var days []string
	for rows.Next() {
		var d string
		if err := rows.Scan(&d); err != nil {
			rows.Close()
			return 0, fmt.Errorf("prune single prompts: %w", err)
		}
		days = append(days, d)
	}
	rows.Close()
	for _, d := range days {
		res, err := s.w.ExecContext(ctx, "DELETE FROM prompt_day WHERE bucket = ? AND requests <= 1", d)
		if err != nil {
			return total, fmt.Errorf("prune single prompts: %w", err)
		}
		n, _ := res.RowsAffected()
		total += n
	}
	for _, j := range jobs {
		if j.keep <= 0 {
			continue
		}
		cut := now.Add(-j.keep)
		for {
			var n int64
			var err error
			if strings.HasPrefix(j.stmt, "DELETE FROM requests ") {
				n, err = s.pruneLedger(ctx, j.stmt, j.arg(cut))
			} else {
				var res sql.Result
				if res, err = s.w.ExecContext(ctx, j.stmt, j.arg(cut)); err == nil {
					n, _ = res.RowsAffected()
				}
			}
			if err != nil {
				return total, fmt.Errorf("prune: %w", err)
			}
			total += n
			if n < 5000 || !strings.Contains(j.stmt, "LIMIT") {
				break
			}
		}
	}
	return total, nil
}

// pruneLedger runs one chunk of the ledger's deletion with the rollups'
// mark: pending sums written first, and the mark lowered in the same
// transaction if the newest rows went, since SQLite then hands their
// rowids to the next rows (pending.go).
func (s *Store) pruneLedger(ctx context.Context, stmt string, cut any) (int64, error) {
	s.pend.mu.Lock()
	defer s.pend.mu.Unlock()
	var n int64
	err := s.rollupTx(ctx, func(tx *sql.Tx, mark int64) (int64, error) {
		res, err := tx.ExecContext(ctx, stmt, cut)
		if err != nil {
			return 0, err
		}
		n, _ = res.RowsAffected()
		_, top, err := rollupMark(ctx, tx)
		if err != nil {
			return 0, err
		}
		if top < mark {
			if _, err := tx.ExecContext(ctx, `UPDATE rollup_state SET rolled_through = ?`, top); err != nil {
				return 0, fmt.Errorf("write rollup mark: %w", err)
			}
			mark = top
		}
		return mark, nil
	})
	return n, err
}
