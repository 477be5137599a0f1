package cost

import (
	"math/big"
	"sort"
)

// A self-hosted engine costs the same per hour whether it serves one request
// or a thousand, so its cost per token is only known afterwards, from what it
// actually served: each hour's cost is spread over the requests that upstream
// served in that hour, in proportion to the work they made the GPUs do.
//
// Not every token is the same work. Prefill computes a whole prompt in one
// batched pass; decode produces one token per sequence per step and is bound
// by memory bandwidth, so an output token holds the GPU far longer than an
// input token (seed 000 §5.1: "输出更贵，因为 decode 更耗算力"). And a cached
// prompt token is not computed at all (seed 000 §5.2: 命中的部分不需要重新计算
// prefill, 按实际计算量计费). Hence the weights: an uncached input token
// weighs 1, an output token OutputWeight, a cached input token CachedWeight.
// Both default to 1, i.e. plain input + output tokens, because a wrong
// weight is worse than an obviously simple one. A measured value for
// OutputWeight is the engine's prefill throughput divided by its decode
// throughput (tokens/s each, from the same engine's records); CachedWeight
// is near 0 on engines with prefix caching.

// HourRow is what one request (or any group of requests) consumed on a
// self-hosted upstream within one hour.
type HourRow struct {
	Input, Cached, Output int64
}

// Weights say how much work a token is, relative to an uncached input
// token (weight 1).
type Weights struct {
	Cached, Output Decimal
}

// DefaultWeights count input and output tokens alike.
var DefaultWeights = Weights{Cached: One, Output: One}

// Weights returns the entry's weights with their defaults applied.
func (g GPUHour) Weights() Weights {
	w := DefaultWeights
	if g.OutputWeight != nil {
		w.Output = *g.OutputWeight
	}
	if g.CachedWeight != nil {
		w.Cached = *g.CachedWeight
	}
	return w
}

// HourCost is the cost of one hour of the entry: price per GPU-hour × GPUs.
func (g GPUHour) HourCost() Money {
	var a acc128
	if g.PricePerHour != nil && *g.PricePerHour > 0 {
		a.addMul(uint64(*g.PricePerHour), uint64(max(g.GPUs, 1)))
	}
	return Money{a.divRound(1), g.Currency} // saturates rather than wraps
}

// Allocate spreads one hour of the entry over rows (see AllocateHour).
func (g GPUHour) Allocate(rows []HourRow) []Money {
	return AllocateHour(g.HourCost(), rows, g.Weights())
}

// AllocateHour spreads hourCost over rows in proportion to their weighted
// tokens. It is exact: the results sum to hourCost to the nano, by the
// largest-remainder method (each row gets the floor of its share, and the
// nanos left over go one each to the rows with the largest remainders,
// earlier rows first on ties, so the result is deterministic). When the
// rows carry no weight at all (the GPUs idled), every share is zero and the
// hour's cost stays unallocated: idle time is the caller's to report, not
// something to hide inside other hours' requests.
func AllocateHour(hourCost Money, rows []HourRow, w Weights) []Money {
	out := make([]Money, len(rows))
	for i := range out {
		out[i].Currency = hourCost.Currency
	}
	total := hourCost.Nanos
	neg := total < 0
	if neg {
		total = -total
	}
	weights := make([]*big.Int, len(rows))
	sum := new(big.Int)
	for i, r := range rows {
		weights[i] = rowWeight(r, w)
		sum.Add(sum, weights[i])
	}
	if sum.Sign() == 0 || total == 0 {
		return out
	}
	type rem struct {
		i int
		r *big.Int
	}
	rems := make([]rem, len(rows))
	c := big.NewInt(total)
	var given int64
	for i, wt := range weights {
		q, r := new(big.Int).QuoRem(new(big.Int).Mul(c, wt), sum, new(big.Int))
		out[i].Nanos = q.Int64() // ≤ total: fits
		given += out[i].Nanos
		rems[i] = rem{i, r}
	}
	// The floors leave fewer nanos than rows, so each gets at most one.
	sort.SliceStable(rems, func(a, b int) bool { return rems[a].r.Cmp(rems[b].r) > 0 })
	for k := int64(0); k < total-given; k++ {
		out[rems[k].i].Nanos++
	}
	if neg {
		for i := range out {
			out[i].Nanos = -out[i].Nanos
		}
	}
	return out
}

// rowWeight is the row's work in nano-token units: uncached input × 1e9 +
// cached × cached weight + output × output weight. Negative counts and
// cached > input are clamped, as in Rate.
func rowWeight(r HourRow, w Weights) *big.Int {
	in := max(r.Input, 0)
	cached := min(max(r.Cached, 0), in)
	out := max(r.Output, 0)
	x := new(big.Int).Mul(big.NewInt(in-cached), big.NewInt(int64(One)))
	x.Add(x, new(big.Int).Mul(big.NewInt(cached), big.NewInt(int64(max(w.Cached, 0)))))
	x.Add(x, new(big.Int).Mul(big.NewInt(out), big.NewInt(int64(max(w.Output, 0)))))
	return x
}
