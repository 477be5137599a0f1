package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/tollgate-dev/tollgate/internal/store"
)

// The alerting windows (internal/window) kept as stored minutes, hours
// and days: appended, never merged, read back in time order.

// AddWindowMinutes appends minutes in one transaction.
func (s *Store) AddWindowMinutes(ctx context.Context, ms []store.WindowMinute) error {
	if len(ms) == 0 {
		return nil
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("window minutes: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	for _, m := range ms {
		if _, err := tx.ExecContext(ctx, "INSERT INTO window_minute (minute, model, biz_line, upstream, template, data) VALUES (?, ?, ?, ?, ?, ?)",
			m.Minute.Unix(), m.Model, m.BizLine, m.Upstream, m.Template, m.Data); err != nil {
			return fmt.Errorf("window minutes: %w", err)
		}
	}
	return tx.Commit()
}

// WindowMinutes reads the minutes of [from, to), oldest first.
func (s *Store) WindowMinutes(ctx context.Context, from, to time.Time) ([]store.WindowMinute, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT minute, model, biz_line, upstream, template, data FROM window_minute WHERE minute >= ? AND minute < ? ORDER BY minute, rowid",
		from.Unix(), to.Unix())
	if err != nil {
		return nil, fmt.Errorf("window minutes: %w", err)
	}
	defer rows.Close()
	var out []store.WindowMinute
	for rows.Next() {
		var m store.WindowMinute
		var at int64
		if err := rows.Scan(&at, &m.Model, &m.BizLine, &m.Upstream, &m.Template, &m.Data); err != nil {
			return nil, fmt.Errorf("window minutes: %w", err)
		}
		m.Minute = time.Unix(at, 0).UTC()
		out = append(out, m)
	}
	return out, rows.Err()
}

// AddWindowHours appends hours in one transaction.
func (s *Store) AddWindowHours(ctx context.Context, hs []store.WindowHour) error {
	if len(hs) == 0 {
		return nil
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("window hours: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	for _, h := range hs {
		if _, err := tx.ExecContext(ctx, "INSERT INTO window_hour (hour, model, biz_line, upstream, template, data) VALUES (?, ?, ?, ?, ?, ?)",
			h.Hour.Unix(), h.Model, h.BizLine, h.Upstream, h.Template, h.Data); err != nil {
			return fmt.Errorf("window hours: %w", err)
		}
	}
	return tx.Commit()
}

// WindowHours reads the hours of [from, to), oldest first.
func (s *Store) WindowHours(ctx context.Context, from, to time.Time) ([]store.WindowHour, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT hour, model, biz_line, upstream, template, data FROM window_hour WHERE hour >= ? AND hour < ? ORDER BY hour, rowid",
		from.Unix(), to.Unix())
	if err != nil {
		return nil, fmt.Errorf("window hours: %w", err)
	}
	defer rows.Close()
	var out []store.WindowHour
	for rows.Next() {
		var h store.WindowHour
		var at int64
		if err := rows.Scan(&at, &h.Model, &h.BizLine, &h.Upstream, &h.Template, &h.Data); err != nil {
			return nil, fmt.Errorf("window hours: %w", err)
		}
		h.Hour = time.Unix(at, 0).UTC()
		out = append(out, h)
	}
	return out, rows.Err()
}

// AddWindowDay writes a closed day's rows in one transaction, unless the
// day has rows already.
func (s *Store) AddWindowDay(ctx context.Context, start, end time.Time, ds []store.WindowDay) (bool, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("window day: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	var n int
	if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM (SELECT 1 FROM window_day WHERE day = ? LIMIT 1)", start.Unix()).Scan(&n); err != nil {
		return false, fmt.Errorf("window day: %w", err)
	}
	if n > 0 {
		return false, nil
	}
	if len(ds) == 0 {
		ds = []store.WindowDay{{}}
	}
	for _, d := range ds {
		if d.Data == nil {
			d.Data = []byte{}
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO window_day (day, day_end, model, biz_line, upstream, template, data) VALUES (?, ?, ?, ?, ?, ?, ?)",
			start.Unix(), end.Unix(), d.Model, d.BizLine, d.Upstream, d.Template, d.Data); err != nil {
			return false, fmt.Errorf("window day: %w", err)
		}
	}
	return true, tx.Commit()
}

// WindowDays reads the rows of the days starting in [from, to), oldest
// first.
func (s *Store) WindowDays(ctx context.Context, from, to time.Time) ([]store.WindowDay, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT day, day_end, model, biz_line, upstream, template, data FROM window_day WHERE day >= ? AND day < ? ORDER BY day, rowid",
		from.Unix(), to.Unix())
	if err != nil {
		return nil, fmt.Errorf("window days: %w", err)
	}
	defer rows.Close()
	var out []store.WindowDay
	for rows.Next() {
		var d store.WindowDay
		var start, end int64
		if err := rows.Scan(&start, &end, &d.Model, &d.BizLine, &d.Upstream, &d.Template, &d.Data); err != nil {
			return nil, fmt.Errorf("window days: %w", err)
		}
		d.Start, d.End = time.Unix(start, 0).UTC(), time.Unix(end, 0).UTC()
		out = append(out, d)
	}
	return out, rows.Err()
}
