// Package billing applies the price table to the stored ledger: re-rating
// history after a price change, spreading a self-hosted upstream's
// GPU-hour cost over the requests it served in that hour, summing the
// ledger per day and model for reconciliation with a provider's bill, and
// keeping each reconciliation's result for the dashboard (Runs). It sits
// after the store, beside the reports; the gateway only rates single
// requests as they end.
package billing

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/tollgate-dev/tollgate/internal/cost"
	"github.com/tollgate-dev/tollgate/internal/lifecycle"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// Ledger is what billing needs from a store: rollups to read (ledger
// lines) and rows to re-price.
type Ledger interface {
	store.Reports
	store.Rerater
}

// Rerate re-rates the rows of [from, to) with the table's token prices;
// rows of GPU-hour-priced upstreams are left to AllocateGPUHours. Rows no
// price applies to become unrated (zero cost, empty version).
func Rerate(ctx context.Context, l Ledger, tbl *cost.Table, from, to time.Time) (int, error) {
	return l.Rerate(ctx, from, to, func(r *record.Record) record.Cost {
		if _, _, ok := tbl.GPUHourAt(r.Upstream, r.Arrival); ok {
			return r.Cost
		}
		if c, ok := tbl.RateRecord(r); ok {
			return record.Cost{Nanos: c.Nanos, Currency: c.Currency, PriceVersion: c.PriceVersion}
		}
		return record.Cost{}
	})
}

// AllocateGPUHours spreads each GPU-hour-priced upstream's cost of every
// whole hour in [from, to) over the requests it served in that hour, in
// proportion to their weighted tokens (cost.AllocateHour: the shares add
// up to the hour's cost exactly). Re-running it changes nothing. An hour
// with no tokens allocates nothing: idle GPU time stays visible as the
// difference between the GPU bill and the allocated cost, rather than
// being hidden in other hours' requests.
func AllocateGPUHours(ctx context.Context, l Ledger, tbl *cost.Table, from, to time.Time) (int, error) {
	changed := 0
	for h := from.UTC().Truncate(time.Hour); h.Before(to); h = h.Add(time.Hour) {
		// First pass: read the hour's rows (the rate function changes nothing).
		byUpstream := map[string][]*record.Record{}
		if _, err := l.Rerate(ctx, h, h.Add(time.Hour), func(r *record.Record) record.Cost {
			if _, _, ok := tbl.GPUHourAt(r.Upstream, h); ok {
				byUpstream[r.Upstream] = append(byUpstream[r.Upstream], r)
			}
			return r.Cost
		}); err != nil {
			return changed, fmt.Errorf("read hour %s: %w", h.Format(time.RFC3339), err)
		}
		if len(byUpstream) == 0 {
			continue
		}
		alloc := map[string]record.Cost{}
		for up, recs := range byUpstream {
			g, version, _ := tbl.GPUHourAt(up, h)
			rows := make([]cost.HourRow, len(recs))
			for i, r := range recs {
				rows[i] = cost.HourRow{Input: r.Usage.InputTokens - r.Usage.CachedInputTokens, Cached: r.Usage.CachedInputTokens, Output: r.Usage.OutputTokens}
			}
			shares := g.Allocate(rows)
			for i, r := range recs {
				alloc[r.RequestID] = record.Cost{Nanos: shares[i].Nanos, Currency: shares[i].Currency,
					PriceVersion: "gpu-hour:" + version + "@" + h.Format(time.RFC3339)}
			}
		}
		// Second pass: write the shares.
		n, err := l.Rerate(ctx, h, h.Add(time.Hour), func(r *record.Record) record.Cost {
			if c, ok := alloc[r.RequestID]; ok {
				return c
			}
			return r.Cost
		})
		changed += n
		if err != nil {
			return changed, fmt.Errorf("allocate hour %s: %w", h.Format(time.RFC3339), err)
		}
	}
	return changed, nil
}

// LedgerLines sums the ledger per UTC day and billed model (the served
// model, as providers bill snapshot names; the requested one when the
// engine never said) for cost.Reconcile. Keys are not joined: tollgate's
// key ids are its clients' keys, not the provider key ids of a bill.
func LedgerLines(ctx context.Context, l Ledger, from, to time.Time) ([]cost.LedgerLine, error) {
	rows, err := l.Report(ctx, store.ReportQuery{From: from, To: to, Zone: time.UTC,
		GroupBy: []store.Dim{store.DimDay, store.DimModel, store.DimServedModel}})
	if err != nil {
		return nil, err
	}
	idx := map[[2]string]int{}
	unlimited := map[[2]string]bool{}
	var out []cost.LedgerLine
	for _, r := range rows {
		model := r.Keys[2]
		if model == "" {
			model = r.Keys[1]
		}
		k := [2]string{r.Keys[0], model}
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, cost.LedgerLine{Day: r.Keys[0], Model: model})
		}
		ln := &out[i]
		// Attempts that reached an engine, less the failed ones a retry
		// followed (reported apart: a provider may or may not bill them).
		ln.Requests += max(r.Reached-r.Retried, 0)
		ln.Input += r.Input
		ln.Cached += r.Cached
		ln.Output += r.Output
		ln.FailedAttempts += r.Retried
		ln.FailedAttemptInputEstimate += r.RetriedInputEst
		ln.CutStreams += r.CutStreams
		ln.CutOutputTokens += r.CutOutput
		ln.CutInputEstimate += r.CutInputEst
		if r.CutUnlimited == 0 && !unlimited[k] {
			ln.CutOutputLimit += r.CutOutputLimit
		} else {
			unlimited[k], ln.CutOutputLimit = true, 0 // one stream without max_tokens makes the bound unknown
		}
		ln.TokenizerInput += r.TokenizerInput
		ln.TokenizerOutput += r.TokenizerOutput
		if r.CostNanos != 0 {
			if ln.Cost == nil {
				ln.Cost = &cost.Money{Currency: r.Currency}
			}
			if ln.Cost.Currency == r.Currency {
				ln.Cost.Nanos += r.CostNanos
			}
		}
	}
	return out, nil
}

// RunGPUAllocation spreads each closed hour's GPU cost over its requests,
// a few minutes after the hour (records of the hour have reached the
// store by then); its first pass, after first, catches up on the last
// day. Idempotent. It returns when ctx ends.
func RunGPUAllocation(ctx context.Context, l Ledger, tbl *cost.Table, first time.Duration, log *slog.Logger) error {
	from := time.Now().UTC().Truncate(time.Hour).Add(-24 * time.Hour)
	return lifecycle.Repeat(ctx, first, func(ctx context.Context) time.Duration {
		to := time.Now().Add(-2 * time.Minute).UTC().Truncate(time.Hour)
		if to.After(from) {
			n, err := AllocateGPUHours(ctx, l, tbl, from, to)
			if err != nil && ctx.Err() == nil {
				log.Warn("GPU-hour allocation failed", "err", err)
			} else {
				log.Debug("GPU-hour allocation", "from", from, "to", to, "changed", n)
				from = to
			}
		}
		return time.Until(time.Now().UTC().Truncate(time.Hour).Add(time.Hour + 5*time.Minute))
	})
}
