package clickhouse

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/tollgate-dev/tollgate/internal/store"
)

// What store.Backend asks beyond the ledger, on ClickHouse: events, engine
// samples, the alerting windows' minutes, hours and days, and Prune of
// everything this store keeps. Report is in report.go, the rollups and
// Prompts in rollup.go.

var (
	_ store.Backend   = (*Store)(nil)
	_ store.RollUpper = (*Store)(nil)
	_ store.Connector = (*Store)(nil)
)

// The side tables. Times are Int64 (nanoseconds for events and samples,
// seconds for the windows, as in the SQLite store) and every table is
// partitioned by month of a Date the client computes, so Prune can drop
// months whole later; today it deletes rows (see Prune).
func sideTables(db string) []string {
	t := func(name string) string { return quoteIdent(db) + "." + name }
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + t("events") + ` (
			day Date, at_ns Int64, kind String, subject String, message String, data String
		) ENGINE = MergeTree PARTITION BY toYYYYMM(day) ORDER BY (at_ns)`,
		// NaN is stored as such (RowBinary carries the bits), where SQLite
		// needs NULL.
		`CREATE TABLE IF NOT EXISTS ` + t("engine_samples") + ` (
			day Date, at_ns Int64, upstream String, model String, up UInt8,
			running Float64, waiting Float64, kv_cache_usage Float64, prefix_cache_hit_rate Float64,
			ttft_p50 Float64, ttft_p95 Float64, ttft_p99 Float64, prompt_tps Float64, generation_tps Float64
		) ENGINE = MergeTree PARTITION BY toYYYYMM(day) ORDER BY (upstream, at_ns)`,
		`CREATE TABLE IF NOT EXISTS ` + t("window_minute") + ` (
			day Date, minute Int64, model String, biz_line String, upstream String, template String, data String
		) ENGINE = MergeTree PARTITION BY toYYYYMM(day) ORDER BY (minute)`,
		`CREATE TABLE IF NOT EXISTS ` + t("window_hour") + ` (
			day Date, hour Int64, model String, biz_line String, upstream String, template String, data String
		) ENGINE = MergeTree PARTITION BY toYYYYMM(day) ORDER BY (hour)`,
		// ver and writer tell the writes of one day apart: readers take
		// the rows of the first write only (see AddWindowDay).
		`CREATE TABLE IF NOT EXISTS ` + t("window_day") + ` (
			day_date Date, day Int64, day_end Int64, model String, biz_line String, upstream String, template String,
			data String, ver UInt64, writer String
		) ENGINE = MergeTree PARTITION BY toYYYYMM(day_date) ORDER BY (day)`,
		capturesTable(db),
	}
}

func (s *Store) table(name string) string { return quoteIdent(s.db) + "." + name }

// AddEvents stores events in one INSERT.
func (s *Store) AddEvents(ctx context.Context, evs []store.Event) error {
	if err := s.Connected(); err != nil {
		return err
	}
	if len(evs) == 0 {
		return nil
	}
	e := &enc{}
	for _, ev := range evs {
		e.u16(day(ev.At))
		e.i64(ev.At.UnixNano())
		e.str(ev.Kind)
		e.str(ev.Subject)
		e.str(ev.Message)
		e.str(ev.Data)
	}
	if err := s.c.insert(ctx, "INSERT INTO "+s.table("events")+" (day, at_ns, kind, subject, message, data) FORMAT RowBinary", e.b); err != nil {
		return fmt.Errorf("add events: %w", err)
	}
	return nil
}

// Events lists events since a time, of one kind or all, newest first.
func (s *Store) Events(ctx context.Context, since time.Time, kind string, limit int) ([]store.Event, error) {
	if err := s.Connected(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 100
	}
	where := "day >= " + quoteDay(day(since)) + " AND at_ns >= " + quoteInt(since.UnixNano())
	if kind != "" {
		where += " AND kind = " + quoteString(kind)
	}
	// Events written in one batch at the same instant keep no order in
	// ClickHouse; the text breaks the tie so that pages are stable.
	q := "SELECT at_ns, kind, subject, message, data FROM " + s.table("events") + " WHERE " + where +
		" ORDER BY at_ns DESC, kind, subject, message, data LIMIT " + quoteInt(int64(limit)) + " FORMAT RowBinary"
	var out []store.Event
	err := s.c.query(ctx, q, func(d *dec) error {
		for d.more() {
			ev := store.Event{At: time.Unix(0, d.i64()).UTC(), Kind: d.str(), Subject: d.str(), Message: d.str(), Data: d.str()}
			if d.err == nil {
				out = append(out, ev)
			}
		}
		return d.err
	})
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	return out, nil
}

// AddEngineSamples stores samples in one INSERT.
func (s *Store) AddEngineSamples(ctx context.Context, ss []store.EngineSample) error {
	if err := s.Connected(); err != nil {
		return err
	}
	if len(ss) == 0 {
		return nil
	}
	e := &enc{}
	for _, x := range ss {
		e.u16(day(x.At))
		e.i64(x.At.UnixNano())
		e.str(x.Upstream)
		e.str(x.Model)
		e.flag(x.Up)
		for _, f := range []float64{x.Running, x.Waiting, x.KVCacheUsage, x.PrefixCacheHitRate,
			x.TTFTP50, x.TTFTP95, x.TTFTP99, x.PromptTokensPerS, x.GenerationTokensPerS} {
			e.f64(f)
		}
	}
	q := "INSERT INTO " + s.table("engine_samples") + ` (day, at_ns, upstream, model, up, running, waiting, kv_cache_usage,
		prefix_cache_hit_rate, ttft_p50, ttft_p95, ttft_p99, prompt_tps, generation_tps) FORMAT RowBinary`
	if err := s.c.insert(ctx, q, e.b); err != nil {
		return fmt.Errorf("engine samples: %w", err)
	}
	return nil
}

// maxSamples bounds one EngineSamples answer, as in the SQLite store.
const maxSamples = 100000

// EngineSamples reads samples of [from, to), oldest first.
func (s *Store) EngineSamples(ctx context.Context, from, to time.Time, upstream string) ([]store.EngineSample, error) {
	if err := s.Connected(); err != nil {
		return nil, err
	}
	where := timeRange("day", "at_ns", from, to, from.UnixNano(), to.UnixNano())
	if upstream != "" {
		where += " AND upstream = " + quoteString(upstream)
	}
	q := `SELECT at_ns, upstream, model, up, running, waiting, kv_cache_usage, prefix_cache_hit_rate,
		ttft_p50, ttft_p95, ttft_p99, prompt_tps, generation_tps FROM ` + s.table("engine_samples") +
		" WHERE " + where + " ORDER BY at_ns, upstream, model LIMIT " + quoteInt(maxSamples) + " FORMAT RowBinary"
	var out []store.EngineSample
	err := s.c.query(ctx, q, func(d *dec) error {
		for d.more() {
			x := store.EngineSample{At: time.Unix(0, d.i64()).UTC(), Upstream: d.str(), Model: d.str(), Up: d.flag()}
			for _, f := range []*float64{&x.Running, &x.Waiting, &x.KVCacheUsage, &x.PrefixCacheHitRate,
				&x.TTFTP50, &x.TTFTP95, &x.TTFTP99, &x.PromptTokensPerS, &x.GenerationTokensPerS} {
				*f = d.f64()
			}
			if d.err == nil {
				out = append(out, x)
			}
		}
		return d.err
	})
	if err != nil {
		return nil, fmt.Errorf("engine samples: %w", err)
	}
	return out, nil
}

// timeRange is the condition for [from, to) on an Int64 column holding
// lo and hi's units, with the matching day bounds so that ClickHouse
// skips partitions and parts.
func timeRange(dayCol, col string, from, to time.Time, lo, hi int64) string {
	return fmt.Sprintf("%s >= %s AND %s <= %s AND %s >= %s AND %s < %s",
		dayCol, quoteDay(day(from)), dayCol, quoteDay(day(to)), col, quoteInt(lo), col, quoteInt(hi))
}

// windowRow is a minute or an hour of the alerting windows.
type windowRow struct {
	at                                 time.Time
	model, bizLine, upstream, template string
	data                               []byte
}

func (s *Store) addWindows(ctx context.Context, table, col string, rows []windowRow) error {
	if len(rows) == 0 {
		return nil
	}
	e := &enc{}
	for _, w := range rows {
		e.u16(day(w.at))
		e.i64(w.at.Unix())
		e.str(w.model)
		e.str(w.bizLine)
		e.str(w.upstream)
		e.str(w.template)
		e.str(string(w.data))
	}
	q := fmt.Sprintf("INSERT INTO %s (day, %s, model, biz_line, upstream, template, data) FORMAT RowBinary", s.table(table), col)
	return s.c.insert(ctx, q, e.b)
}

func (s *Store) windows(ctx context.Context, table, col string, from, to time.Time) ([]windowRow, error) {
	q := fmt.Sprintf("SELECT %s, model, biz_line, upstream, template, data FROM %s WHERE %s ORDER BY %s, model, biz_line, upstream, template, data FORMAT RowBinary",
		col, s.table(table), timeRange("day", col, from, to, from.Unix(), to.Unix()), col)
	var out []windowRow
	err := s.c.query(ctx, q, func(d *dec) error {
		for d.more() {
			w := windowRow{at: time.Unix(d.i64(), 0).UTC(), model: d.str(), bizLine: d.str(), upstream: d.str(), template: d.str(), data: []byte(d.str())}
			if d.err == nil {
				out = append(out, w)
			}
		}
		return d.err
	})
	return out, err
}

// AddWindowMinutes appends minutes in one INSERT.
func (s *Store) AddWindowMinutes(ctx context.Context, ms []store.WindowMinute) error {
	if err := s.Connected(); err != nil {
		return err
	}
	rows := make([]windowRow, len(ms))
	for i, m := range ms {
		rows[i] = windowRow{m.Minute, m.Model, m.BizLine, m.Upstream, m.Template, m.Data}
	}
	if err := s.addWindows(ctx, "window_minute", "minute", rows); err != nil {
		return fmt.Errorf("window minutes: %w", err)
	}
	return nil
}

// WindowMinutes reads the minutes of [from, to), oldest first.
func (s *Store) WindowMinutes(ctx context.Context, from, to time.Time) ([]store.WindowMinute, error) {
	if err := s.Connected(); err != nil {
		return nil, err
	}
	rows, err := s.windows(ctx, "window_minute", "minute", from, to)
	if err != nil {
		return nil, fmt.Errorf("window minutes: %w", err)
	}
	out := make([]store.WindowMinute, len(rows))
	for i, w := range rows {
		out[i] = store.WindowMinute{Minute: w.at, Model: w.model, BizLine: w.bizLine, Upstream: w.upstream, Template: w.template, Data: w.data}
	}
	return out, nil
}

// AddWindowHours appends hours in one INSERT.
func (s *Store) AddWindowHours(ctx context.Context, hs []store.WindowHour) error {
	if err := s.Connected(); err != nil {
		return err
	}
	rows := make([]windowRow, len(hs))
	for i, h := range hs {
		rows[i] = windowRow{h.Hour, h.Model, h.BizLine, h.Upstream, h.Template, h.Data}
	}
	if err := s.addWindows(ctx, "window_hour", "hour", rows); err != nil {
		return fmt.Errorf("window hours: %w", err)
	}
	return nil
}

// WindowHours reads the hours of [from, to), oldest first.
func (s *Store) WindowHours(ctx context.Context, from, to time.Time) ([]store.WindowHour, error) {
	if err := s.Connected(); err != nil {
		return nil, err
	}
	rows, err := s.windows(ctx, "window_hour", "hour", from, to)
	if err != nil {
		return nil, fmt.Errorf("window hours: %w", err)
	}
	out := make([]store.WindowHour, len(rows))
	for i, w := range rows {
		out[i] = store.WindowHour{Hour: w.at, Model: w.model, BizLine: w.bizLine, Upstream: w.upstream, Template: w.template, Data: w.data}
	}
	return out, nil
}

// AddWindowDay writes a closed day's rows in one INSERT, unless the day
// has rows already.
//
// The check and the write are serialised within the process, so there
// only the first call writes. Two replicas racing past the check may both
// write; each write's rows carry its version (falling with the clock, as
// for requests) and a writer token, and WindowDays reads only the rows of
// a day's first write, so readers always see exactly one compactor's day.
// A day's rows go in one INSERT into one partition, which ClickHouse
// applies whole or not at all.
func (s *Store) AddWindowDay(ctx context.Context, start, end time.Time, ds []store.WindowDay) (bool, error) {
	if err := s.Connected(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var n uint64
	err := s.c.query(ctx, "SELECT count() FROM "+s.table("window_day")+" WHERE day = "+quoteInt(start.Unix())+" FORMAT RowBinary",
		func(d *dec) error {
			for d.more() {
				n = d.u64()
			}
			return d.err
		})
	if err != nil {
		return false, fmt.Errorf("window day: %w", err)
	}
	if n > 0 {
		return false, nil
	}
	if len(ds) == 0 {
		ds = []store.WindowDay{{}} // a day without traffic: one empty row says it is done
	}
	now := s.now()
	ver := math.MaxUint64 - uint64(now.UnixNano())
	writer := fmt.Sprintf("%p-%d", s, now.UnixNano())
	if err := s.insertWindowDays(ctx, start, end, ds, ver, writer); err != nil {
		return false, fmt.Errorf("window day: %w", err)
	}
	return true, nil
}

// insertWindowDays writes the rows of one day as one write (ver, writer).
func (s *Store) insertWindowDays(ctx context.Context, start, end time.Time, ds []store.WindowDay, ver uint64, writer string) error {
	e := &enc{}
	for _, w := range ds {
		e.u16(day(start))
		e.i64(start.Unix())
		e.i64(end.Unix())
		e.str(w.Model)
		e.str(w.BizLine)
		e.str(w.Upstream)
		e.str(w.Template)
		e.str(string(w.Data))
		e.u64(ver)
		e.str(writer)
	}
	q := "INSERT INTO " + s.table("window_day") + " (day_date, day, day_end, model, biz_line, upstream, template, data, ver, writer) FORMAT RowBinary"
	return s.c.insert(ctx, q, e.b)
}

// WindowDays reads the rows of the days starting in [from, to), oldest
// first: of each day, those of its first write only.
func (s *Store) WindowDays(ctx context.Context, from, to time.Time) ([]store.WindowDay, error) {
	if err := s.Connected(); err != nil {
		return nil, err
	}
	t := s.table("window_day")
	where := timeRange("day_date", "day", from, to, from.Unix(), to.Unix())
	q := fmt.Sprintf(`SELECT day, day_end, model, biz_line, upstream, template, data FROM %s
		WHERE %s AND (day, ver, writer) IN (SELECT day, max(ver), argMax(writer, ver) FROM %s WHERE %s GROUP BY day)
		ORDER BY day, model, biz_line, upstream, template FORMAT RowBinary`, t, where, t, where)
	var out []store.WindowDay
	err := s.c.query(ctx, q, func(d *dec) error {
		for d.more() {
			w := store.WindowDay{Start: time.Unix(d.i64(), 0).UTC(), End: time.Unix(d.i64(), 0).UTC(),
				Model: d.str(), BizLine: d.str(), Upstream: d.str(), Template: d.str(), Data: []byte(d.str())}
			if d.err == nil {
				out = append(out, w)
			}
		}
		return d.err
	})
	if err != nil {
		return nil, fmt.Errorf("window days: %w", err)
	}
	return out, nil
}

// Prune deletes what the retention says is too old and returns how many
// rows went (sampled timelines cleared count as rows).
//
// It rolls up first, so that the rollups hold every ledger row it is
// about to delete, and records the ledger's cut before deleting, so that
// no pass recomputes a piece from what is left of it: reports outlive the
// ledger. Rollups go by Retention.Day, a whole month at a time with its
// days, as in SQLite (see pruneRollups); Retention.Hour applies to the
// alerting windows' hours only, since hours, days and months here are
// the same rows (pieces).
//
// ClickHouse deletes and updates rows by mutations, which run in the
// background; Prune waits for each to finish, so what it reports gone is
// gone when it returns. Mutations rewrite whole parts: Prune is meant to
// run rarely (serve runs it hourly), not per request. Dropping whole
// partitions instead, or TTL on servers that have it (19.6+), is the next
// step for large tables.
func (s *Store) Prune(ctx context.Context, now time.Time, r store.Retention) (int64, error) {
	if err := s.Connected(); err != nil {
		return 0, err
	}
	if err := s.rollUp(ctx); err != nil {
		return 0, fmt.Errorf("prune: roll up first: %w", err)
	}
	if r.Ledger > 0 {
		if err := s.setState(ctx, "ledger_horizon", now.Add(-r.Ledger).UnixNano(), ""); err != nil {
			return 0, fmt.Errorf("prune: %w", err)
		}
	}
	type job struct {
		keep         time.Duration
		table, where string
		cut          func(time.Time) int64
		set          string // an UPDATE's assignment; "" deletes
	}
	ns := func(t time.Time) int64 { return t.UnixNano() }
	sec := func(t time.Time) int64 { return t.Unix() }
	jobs := []job{
		{r.Details, "requests", "timeline IS NOT NULL AND arrival_ns < %s", ns, "timeline = NULL"},
		{r.Ledger, "requests", "arrival_ns < %s", ns, ""},
		{r.Events, "events", "at_ns < %s", ns, ""},
		{r.Engine, "engine_samples", "at_ns < %s", ns, ""},
		{r.Minute, "window_minute", "minute < %s", sec, ""},
		{r.Hour, "window_hour", "hour < %s", sec, ""},
		{r.Day, "window_day", "day < %s", sec, ""},
		{r.Captures, "captures", "at_ns < %s", ns, ""},
	}
	var total int64
	for _, j := range jobs {
		if j.keep <= 0 {
			continue
		}
		where := fmt.Sprintf(j.where, quoteInt(j.cut(now.Add(-j.keep))))
		n, err := s.mutate(ctx, j.table, where, j.set)
		total += n
		if err != nil {
			return total, fmt.Errorf("prune %s: %w", j.table, err)
		}
	}
	n, err := s.pruneRollups(ctx, now, r)
	total += n
	if err != nil {
		return total, err
	}
	if err := s.pruneMarks(ctx); err != nil {
		return total, err
	}
	return total, nil
}

// mutate deletes the rows of table matching where (or, with set, updates
// them) and waits for the mutation to finish. It returns how many rows
// matched.
func (s *Store) mutate(ctx context.Context, table, where, set string) (int64, error) {
	var n uint64
	err := s.c.query(ctx, "SELECT count() FROM "+s.table(table)+" WHERE "+where+" FORMAT RowBinary", func(d *dec) error {
		for d.more() {
			n = d.u64()
		}
		return d.err
	})
	if err != nil || n == 0 {
		return 0, err
	}
	stmt := "ALTER TABLE " + s.table(table) + " DELETE WHERE " + where
	if set != "" {
		stmt = "ALTER TABLE " + s.table(table) + " UPDATE " + set + " WHERE " + where
	}
	if err := s.c.exec(ctx, "", stmt); err != nil {
		return 0, err
	}
	return int64(n), s.waitMutations(ctx, table)
}

// mutationWait bounds how long Prune waits for one mutation: one that
// cannot finish (a broken part, a full disk) must not hold Prune forever.
const mutationWait = 10 * time.Minute

// waitMutations polls until no mutation of table is pending. 18.16 has no
// mutations_sync setting to wait server-side, nor a failure reason in
// system.mutations.
func (s *Store) waitMutations(ctx context.Context, table string) error {
	ctx, cancel := context.WithTimeout(ctx, mutationWait)
	defer cancel()
	q := fmt.Sprintf("SELECT count() FROM system.mutations WHERE database = %s AND table = %s AND is_done = 0 FORMAT RowBinary",
		quoteString(s.db), quoteString(table))
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var pending uint64
		err := s.c.query(ctx, q, func(d *dec) error {
			for d.more() {
				pending = d.u64()
			}
			return d.err
		})
		if err != nil {
			return fmt.Errorf("wait for mutation of %s: %w", table, err)
		}
		if pending == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for mutation of %s (%d pending): %w", table, pending, ctx.Err())
		case <-tick.C:
		}
	}
}
