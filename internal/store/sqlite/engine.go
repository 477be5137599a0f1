package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"time"

	"github.com/tollgate-dev/tollgate/internal/store"
)

// nullNaN stores NaN (unknown) as NULL, which SQLite would do anyway,
// but explicitly so that reading back gives NaN again.
func nullNaN(f float64) any {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil
	}
	return f
}

// AddEngineSamples stores samples in one transaction.
func (s *Store) AddEngineSamples(ctx context.Context, ss []store.EngineSample) error {
	if len(ss) == 0 {
		return nil
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("engine samples: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	for _, e := range ss {
		if _, err := tx.ExecContext(ctx, `INSERT INTO engine_samples (at, upstream, model, up, running, waiting, kv_cache_usage,
			prefix_cache_hit_rate, ttft_p50, ttft_p95, ttft_p99, prompt_tps, generation_tps) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			e.At.UnixNano(), e.Upstream, e.Model, e.Up, nullNaN(e.Running), nullNaN(e.Waiting), nullNaN(e.KVCacheUsage),
			nullNaN(e.PrefixCacheHitRate), nullNaN(e.TTFTP50), nullNaN(e.TTFTP95), nullNaN(e.TTFTP99),
			nullNaN(e.PromptTokensPerS), nullNaN(e.GenerationTokensPerS)); err != nil {
			return fmt.Errorf("engine samples: %w", err)
		}
	}
	return tx.Commit()
}

// EngineSamples reads samples of [from, to), oldest first.
func (s *Store) EngineSamples(ctx context.Context, from, to time.Time, upstream string) ([]store.EngineSample, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT at, upstream, model, up, running, waiting, kv_cache_usage, prefix_cache_hit_rate,
		ttft_p50, ttft_p95, ttft_p99, prompt_tps, generation_tps FROM engine_samples
		WHERE at >= ? AND at < ? AND (? = '' OR upstream = ?) ORDER BY at, rowid LIMIT 100000`,
		from.UnixNano(), to.UnixNano(), upstream, upstream)
	if err != nil {
		return nil, fmt.Errorf("engine samples: %w", err)
	}
	defer rows.Close()
	var out []store.EngineSample
	for rows.Next() {
		var e store.EngineSample
		var at int64
		var f [9]sql.NullFloat64
		if err := rows.Scan(&at, &e.Upstream, &e.Model, &e.Up, &f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &f[6], &f[7], &f[8]); err != nil {
			return nil, fmt.Errorf("engine samples: %w", err)
		}
		e.At = time.Unix(0, at).UTC()
		v := func(i int) float64 {
			if f[i].Valid {
				return f[i].Float64
			}
			return math.NaN()
		}
		e.Running, e.Waiting, e.KVCacheUsage, e.PrefixCacheHitRate = v(0), v(1), v(2), v(3)
		e.TTFTP50, e.TTFTP95, e.TTFTP99, e.PromptTokensPerS, e.GenerationTokensPerS = v(4), v(5), v(6), v(7), v(8)
		out = append(out, e)
	}
	return out, rows.Err()
}
