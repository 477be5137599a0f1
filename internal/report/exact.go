package report

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// Exact ranges. Hour (and day) rollups answer whole hours only; a period
// such as "the last 15 minutes" or a drilled minute starts and ends inside
// an hour. Rounding it out to whole hours counts what happened outside
// the period (and divides by time that has not come yet), so a headline
// figure read that way can be off tenfold. Exact reads the whole hours
// from the hour rollups and the ragged ends from the minute rollups, as
// the charts' minute steps do; where a query groups or filters by a
// dimension minutes do not keep (template, user, key…), the ends are
// summed from the ledger rows themselves.
//
// The period is exact to the minute: From is rounded down and To up to a
// whole minute (the finest rollup), so a period ending now includes the
// minute in progress. Span returns the rounded period.

// Ledger reads ledger rows: the ends of a period grouped by a dimension
// the minute rollups do not keep.
type Ledger interface {
	Requests(ctx context.Context, f store.Filter) ([]*record.Record, error)
}

// ExactLedgerLimit bounds the ledger rows read for the ends of one period
// (at most two part-hours).
const ExactLedgerLimit = 200000

// minuteDims are the dimensions minute rollups keep.
var minuteDims = []store.Dim{store.DimModel, store.DimUpstream, store.DimBizLine}

// Span is [from, to) rounded out to whole minutes: the period Exact reads.
func Span(from, to time.Time) (time.Time, time.Time) {
	f := from.UTC().Truncate(time.Minute)
	t := to.UTC().Truncate(time.Minute)
	if t.Before(to) {
		t = t.Add(time.Minute)
	}
	return f, t
}

// Elapsed is the part of [from, to) that has passed at now, in seconds:
// what a rate over the period divides by (a period ending in the future
// has not had those seconds yet). It is never below one second.
func Elapsed(from, to, now time.Time) float64 {
	end := to
	if now.Before(end) {
		end = now
	}
	return max(end.Sub(from).Seconds(), 1)
}

// Exact answers q over exactly [q.From, q.To) (rounded out to minutes, see
// Span). q may group by no time dimension. led may be nil when q's
// dimensions are all kept by minute rollups; otherwise it reads the ends.
func Exact(ctx context.Context, src Source, led Ledger, q store.ReportQuery) ([]store.ReportRow, error) {
	for _, d := range q.GroupBy {
		if d == store.DimMinute || d == store.DimHour || d == store.DimDay || d == store.DimMonth {
			return nil, fmt.Errorf("exact report: cannot group by %s", d)
		}
	}
	if q.From.IsZero() || q.To.IsZero() {
		return src.Report(ctx, q)
	}
	from, to := Span(q.From, q.To)
	h1 := from.Truncate(time.Hour)
	if h1.Before(from) {
		h1 = h1.Add(time.Hour)
	}
	h2 := to.Truncate(time.Hour)
	var ends [][2]time.Time
	var rows []store.ReportRow
	if !h1.Before(h2) { // within one hour, or across one boundary only
		ends = append(ends, [2]time.Time{from, to})
	} else {
		if from.Before(h1) {
			ends = append(ends, [2]time.Time{from, h1})
		}
		if h2.Before(to) {
			ends = append(ends, [2]time.Time{h2, to})
		}
		mid := q
		mid.From, mid.To = h1, h2
		r, err := src.Report(ctx, mid)
		if err != nil {
			return nil, err
		}
		rows = r
	}
	byMinute := true
	for _, d := range q.GroupBy {
		byMinute = byMinute && slices.Contains(minuteDims, d)
	}
	for d := range q.Where {
		byMinute = byMinute && slices.Contains(minuteDims, d)
	}
	for _, e := range ends {
		var part []store.ReportRow
		var err error
		if byMinute || led == nil {
			part, err = minuteRows(ctx, src, q, e[0], e[1])
		} else {
			part, err = ledgerRows(ctx, led, q, e[0], e[1])
		}
		if err != nil {
			return nil, err
		}
		rows = append(rows, part...)
	}
	return mergeRows(rows), nil
}

// minuteRows sums q's groups over [from, to) from the minute rollups.
func minuteRows(ctx context.Context, src Source, q store.ReportQuery, from, to time.Time) ([]store.ReportRow, error) {
	mq := q
	mq.From, mq.To = from, to
	mq.GroupBy = append([]store.Dim{store.DimMinute}, q.GroupBy...)
	rows, err := src.Report(ctx, mq)
	if err != nil {
		return nil, err
	}
	for i := range rows {
		rows[i].Keys = rows[i].Keys[1:]
	}
	return rows, nil
}

// ledgerRows sums q's groups over [from, to) from the ledger.
func ledgerRows(ctx context.Context, led Ledger, q store.ReportQuery, from, to time.Time) ([]store.ReportRow, error) {
	f := store.Filter{Since: from, Until: to, Limit: ExactLedgerLimit, Model: q.Where[store.DimModel], BizLine: q.Where[store.DimBizLine],
		UserID: q.Where[store.DimUser], TemplateID: q.Where[store.DimTemplate], EndUser: q.Where[store.DimEndUser]}
	recs, err := led.Requests(ctx, f)
	if err != nil {
		return nil, err
	}
	if len(recs) >= ExactLedgerLimit {
		return nil, fmt.Errorf("exact report: more than %d requests in %s–%s: narrow the period to whole hours", ExactLedgerLimit,
			from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	var rows []store.ReportRow
	for _, r := range recs {
		match := true
		for d, v := range q.Where {
			k, ok := recordKey(r, d)
			if !ok {
				return nil, fmt.Errorf("exact report: cannot filter on %s", d)
			}
			match = match && k == v
		}
		if !match {
			continue
		}
		row := store.ReportRow{Currency: r.Cost.Currency, Totals: store.TotalsOf(r)}
		for _, d := range q.GroupBy {
			k, ok := recordKey(r, d)
			if !ok {
				return nil, fmt.Errorf("exact report: cannot group by %s", d)
			}
			row.Keys = append(row.Keys, k)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// recordKey is r's value of dimension d, as the rollups key it.
func recordKey(r *record.Record, d store.Dim) (string, bool) {
	switch d {
	case store.DimModel:
		return r.Model, true
	case store.DimServedModel:
		return r.ServedModel, true
	case store.DimUpstream:
		return r.Upstream, true
	case store.DimBizLine:
		return r.BizLine, true
	case store.DimUser:
		return r.UserID, true
	case store.DimKey:
		return r.KeyID, true
	case store.DimTemplate:
		return r.TemplateID, true
	case store.DimEndUser:
		return r.EndUser, true
	}
	return "", false
}

// mergeRows sums rows of the same group and currency, in key order.
func mergeRows(rows []store.ReportRow) []store.ReportRow {
	idx := map[string]int{}
	var out []store.ReportRow
	for _, r := range rows {
		k := strings.Join(r.Keys, "\x00") + "\x00" + r.Currency
		if i, ok := idx[k]; ok {
			out[i].Totals.Add(r.Totals)
			continue
		}
		idx[k] = len(out)
		out = append(out, r)
	}
	slices.SortStableFunc(out, func(a, b store.ReportRow) int {
		if c := slices.Compare(a.Keys, b.Keys); c != 0 {
			return c
		}
		return strings.Compare(a.Currency, b.Currency)
	})
	return out
}
