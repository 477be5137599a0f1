package clickhouse

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// Amending a stored request (a late engine timing, a new price) writes the
// whole row again as a new version instead of updating it in place: a
// mutation rewrites whole parts, far too heavy per request. The new row's
// ver is one above the row it amends, so ReplacingMergeTree keeps it and
// every read (FINAL) sees it at once, reports included; the old version
// goes at the next merge. Insert still finds the id stored, so a replay of
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
	e := &enc{}
	for i, r := range recs {
		r.Finish()
		encodeRow(e, r, vers[i]+1)
	}
	q := fmt.Sprintf("INSERT INTO %s.requests (%s) FORMAT RowBinary", quoteIdent(s.db), insertColumns)
	return s.c.insert(ctx, q, e.b)
}

// SetEngineTiming amends a stored request with what its engine reported
// after it ended; segments (and so reports) follow. A request not stored
// is ignored.
func (s *Store) SetEngineTiming(ctx context.Context, requestID string, et record.EngineTiming) error {
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

// Prompts returns the prompts (by hash, model and template) sent at least
// minCount times on the report zone's days from from's to to's (exclusive,
// as the SQLite store's day rollups count them), most requests first.
func (s *Store) Prompts(ctx context.Context, from, to time.Time, minCount int64, limit int) ([]store.PromptRow, error) {
	if limit <= 0 {
		limit = 100
	}
	where := []string{"prompt_sha256 != ''"}
	if !from.IsZero() {
		start := localMidnight(from, s.loc)
		where = append(where, "day >= "+quoteDay(day(start))+" AND arrival_ns >= "+quoteInt(start.UnixNano()))
	}
	if !to.IsZero() {
		end := localMidnight(to, s.loc)
		where = append(where, "day <= "+quoteDay(day(end))+" AND arrival_ns < "+quoteInt(end.UnixNano())+" AND arrival_ns != "+quoteInt(noArrival))
	}
	sel := []string{"prompt_sha256", "toString(model)", "toString(template_id)", "toString(currency)"}
	for _, m := range store.Measures {
		sel = append(sel, "toInt64("+measureSQL[m.Name]+")")
	}
	q := fmt.Sprintf(`SELECT %s FROM %s.requests FINAL WHERE %s
		GROUP BY prompt_sha256, model, template_id, currency HAVING count() >= %s
		ORDER BY count() DESC, prompt_sha256, model, template_id, currency LIMIT %s FORMAT RowBinary`,
		strings.Join(sel, ", "), quoteIdent(s.db), strings.Join(where, " AND "), quoteInt(minCount), quoteInt(int64(limit)))
	var out []store.PromptRow
	err := s.c.query(ctx, q, func(d *dec) error {
		for d.more() {
			p := store.PromptRow{PromptSHA256: d.str(), Model: d.str(), TemplateID: d.str()}
			_ = d.str() // currency: a prompt's rows are per currency, as in SQLite
			for _, m := range store.Measures {
				*m.Field(&p.Totals) = d.i64()
			}
			if d.err == nil {
				out = append(out, p)
			}
		}
		return d.err
	})
	if err != nil {
		return nil, fmt.Errorf("prompts: %w", err)
	}
	return out, nil
}

// localMidnight is the start of t's day in loc (01:00 where that
// midnight does not exist, as time.Date normalises it).
func localMidnight(t time.Time, loc *time.Location) time.Time {
	y, m, d := t.In(loc).Date()
	return time.Date(y, m, d, 0, 0, 0, 0, loc)
}
