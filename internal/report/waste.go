package report

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/tollgate-dev/tollgate/internal/store"
)

// Thresholds of the waste report; each finding says what it costs.
const (
	GrowthFlag   = 0.20 // average input tokens per request up 20 % on the previous period
	LowCacheFlag = 0.20 // prefix-cache hit rate below 20 % …
	LowCacheMin  = 1000 // … over at least this many input tokens
)

// waste is seed 001 §6's "先降本": where tokens go that need not. Costs of
// findings are estimates from the period's own cost per token, and say so.
func waste(ctx context.Context, src Source, q Query) (*Result, error) {
	if q.From.IsZero() || q.To.IsZero() {
		return nil, fmt.Errorf("the waste report needs a period (from and to)")
	}
	res := &Result{Title: "Waste: tokens spent that need not be", Columns: []Column{
		{"finding", KindText}, {"subject", KindText}, {"requests", KindInt}, {"share", KindPercent},
		{"tokens", KindInt}, {"est_cost", KindMoney}, {"currency", KindText}, {"detail", KindText},
	}}
	all, err := src.Report(ctx, q.store())
	if err != nil {
		return nil, err
	}
	var totalReq int64
	for _, r := range all {
		totalReq += r.Requests
	}

	// 1. Duplicate prompts: the same prompt (by hash) sent again; an
	// exact-match response cache would have answered the repeats.
	dups, err := src.Prompts(ctx, q.From, q.To, 2, q.Limit)
	if err != nil {
		return nil, err
	}
	for _, p := range dups {
		repeats := p.Requests - 1
		cost := p.CostNanos * repeats / max(p.Requests, 1)
		tokens := (p.Input + p.Output) * repeats / max(p.Requests, 1)
		res.Rows = append(res.Rows, []any{"duplicate_prompt", short(p.PromptSHA256) + " (" + orNone(p.TemplateID) + ", " + p.Model + ")",
			repeats, ratio(repeats, totalReq), tokens, cost, currencyOf(all), fmt.Sprintf("sent %d times", p.Requests)})
	}

	// 2. Templates whose prompts grew against the previous period of the
	// same length (seed 000 §1.1: a system prompt went from 200 to 3000).
	span := q.To.Sub(q.From)
	prevQ := q
	prevQ.From, prevQ.To = q.From.Add(-span), q.From
	now, err := src.Report(ctx, q.store(store.DimTemplate))
	if err != nil {
		return nil, err
	}
	prev, err := src.Report(ctx, prevQ.store(store.DimTemplate))
	if err != nil {
		return nil, err
	}
	now, prev = mergeCurrencies(now), mergeCurrencies(prev)
	before := map[string]store.Totals{}
	for _, r := range prev {
		before[r.Keys[0]] = r.Totals
	}
	costs := costByTemplate(now)
	for _, r := range now {
		b, ok := before[r.Keys[0]]
		if !ok || b.Requests == 0 || r.Requests == 0 {
			continue
		}
		avgNow, avgPrev := ratio(r.Input, r.Requests), ratio(b.Input, b.Requests)
		if avgPrev == 0 || avgNow/avgPrev-1 < GrowthFlag {
			continue
		}
		extra := int64((avgNow - avgPrev) * float64(r.Requests))
		c := costs[r.Keys[0]]
		est := int64(float64(c.nanos) * ratio(extra, r.Input+r.Output))
		res.Rows = append(res.Rows, []any{"prompt_grew", orNone(r.Keys[0]), r.Requests, ratio(r.Requests, totalReq), extra, est, c.currency,
			fmt.Sprintf("avg input %.0f → %.0f tokens (+%.0f%%)", avgPrev, avgNow, (avgNow/avgPrev-1)*100)})
	}

	// 3. Answers cut by max_tokens: paid for, yet truncated.
	for _, r := range now {
		if r.FinishLength == 0 {
			continue
		}
		c := costs[r.Keys[0]]
		est := c.nanos * r.FinishLength / max(r.Requests, 1)
		res.Rows = append(res.Rows, []any{"cut_by_max_tokens", orNone(r.Keys[0]), r.FinishLength, ratio(r.FinishLength, totalReq),
			r.Output * r.FinishLength / max(r.Requests, 1), est, c.currency, fmt.Sprintf("%.0f%% of this template's answers", ratio(r.FinishLength, r.Requests)*100)})
	}

	// 4. Low prefix-cache hit rate: a shared prefix (system prompt) that
	// is not reused costs full prefill every time.
	for _, r := range now {
		hit := ratio(r.Cached, r.Input)
		if r.Input < LowCacheMin || hit >= LowCacheFlag {
			continue
		}
		c := costs[r.Keys[0]]
		uncached := r.Input - r.Cached
		est := int64(float64(c.nanos) * ratio(uncached, r.Input+r.Output))
		res.Rows = append(res.Rows, []any{"low_prefix_cache_hits", orNone(r.Keys[0]), r.Requests, ratio(r.Requests, totalReq), uncached, est, c.currency,
			fmt.Sprintf("%.0f%% of input tokens cached; put the fixed part of the prompt first", hit*100)})
	}

	sort.SliceStable(res.Rows, func(i, j int) bool { return res.Rows[i][5].(int64) > res.Rows[j][5].(int64) })
	res.Notes = append(res.Notes, "est_cost is the finding's share of its group's cost at the period's own cost per token: an estimate, not a bill.")
	if len(dups) > 0 {
		res.Notes = append(res.Notes, "Duplicate prompts can be answered without the GPU by the exact-match response cache (response_cache in the config).")
	}
	return res, nil
}

type money struct {
	nanos    int64
	currency string
}

// costByTemplate picks each template's cost in its main currency.
func costByTemplate(rows []store.ReportRow) map[string]money {
	out := map[string]money{}
	for _, r := range rows {
		out[r.Keys[0]] = money{r.CostNanos, r.Currency}
	}
	return out
}

func currencyOf(rows []store.ReportRow) string {
	best, n := "", int64(-1)
	for _, r := range rows {
		if r.CostNanos > n {
			best, n = r.Currency, r.CostNanos
		}
	}
	return best
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// DefaultPeriod is the last n whole days up to and including today, in loc.
func DefaultPeriod(now time.Time, loc *time.Location, days int) (time.Time, time.Time) {
	lt := now.In(loc)
	end := time.Date(lt.Year(), lt.Month(), lt.Day(), 0, 0, 0, 0, loc).AddDate(0, 0, 1)
	return end.AddDate(0, 0, -days), end
}

// ParseTime reads a period bound: a date (midnight in loc) or RFC 3339.
func ParseTime(s string, loc *time.Location) (time.Time, error) {
	if t, err := time.ParseInLocation(time.DateOnly, s, loc); err == nil {
		return t, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither a date (2026-11-01) nor an RFC 3339 time (2026-11-01T08:00:00Z)", s)
	}
	return t, nil
}

// ParsePeriod reads from/to; a missing from is days before to, a missing
// to is the end of today. A date as to means up to that date's midnight
// (exclusive): "--from 2026-11-01 --to 2026-12-01" is November.
func ParsePeriod(from, to string, loc *time.Location, now time.Time, days int) (time.Time, time.Time, error) {
	f, t := DefaultPeriod(now, loc, days)
	var err error
	if to != "" {
		if t, err = ParseTime(to, loc); err != nil {
			return f, t, fmt.Errorf("to: %w", err)
		}
		f = t.AddDate(0, 0, -days)
	}
	if from != "" {
		if f, err = ParseTime(from, loc); err != nil {
			return f, t, fmt.Errorf("from: %w", err)
		}
	}
	if !f.Before(t) {
		return f, t, fmt.Errorf("from (%s) must be before to (%s)", f.Format(time.RFC3339), t.Format(time.RFC3339))
	}
	return f, t, nil
}
