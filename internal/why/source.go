package why

import (
	"context"
	"fmt"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// Ledger is where the Records come from: the store.
type Ledger interface {
	Requests(ctx context.Context, f store.Filter) ([]*record.Record, error)
}

// Limit bounds the ledger rows read for one period: a busier period is
// explained from its newest Limit requests (Report.Truncated says so).
const Limit = 100000

// Query asks what changed in [From, To) against [BaselineFrom,
// BaselineTo), in the series of Where (model, biz_line, template,
// upstream).
type Query struct {
	From, To                 time.Time
	BaselineFrom, BaselineTo time.Time
	Where                    map[string]string
	Figure                   string
	// Limit per period (default and at most Limit).
	Limit int
}

// Ask reads both periods from the ledger and explains the change.
func Ask(ctx context.Context, l Ledger, q Query) (*Report, error) {
	if !q.From.Before(q.To) || !q.BaselineFrom.Before(q.BaselineTo) {
		return nil, fmt.Errorf("period: from must be before to, for now and the baseline")
	}
	for k := range q.Where {
		switch k {
		case "model", "biz_line", "template", "upstream":
		default:
			return nil, fmt.Errorf("where %q: one of model, biz_line, template, upstream", k)
		}
	}
	if q.Limit <= 0 || q.Limit > Limit {
		q.Limit = Limit
	}
	read := func(from, to time.Time) (Period, bool, error) {
		f := store.Filter{Since: from, Until: to, Model: q.Where["model"], BizLine: q.Where["biz_line"], TemplateID: q.Where["template"], Limit: q.Limit}
		recs, err := l.Requests(ctx, f)
		if err != nil {
			return Period{}, false, fmt.Errorf("read the ledger %s–%s: %w", from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339), err)
		}
		full := len(recs) >= q.Limit
		if u, ok := q.Where["upstream"]; ok {
			kept := recs[:0]
			for _, r := range recs {
				if r.Upstream == u {
					kept = append(kept, r)
				}
			}
			recs = kept
		}
		return Period{From: from, To: to, Records: recs}, full, nil
	}
	base, bt, err := read(q.BaselineFrom, q.BaselineTo)
	if err != nil {
		return nil, err
	}
	cur, ct, err := read(q.From, q.To)
	if err != nil {
		return nil, err
	}
	rep, err := Explain(base, cur, Options{Figure: q.Figure, Where: q.Where})
	if err != nil {
		return nil, err
	}
	rep.Truncated = bt || ct
	return rep, nil
}
