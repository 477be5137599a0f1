package cost

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// Reconciliation answers seed 001 §5.1, "日志里 Token 数和账单对不上怎么办":
// the provider's bill and the ledger disagree, and the causes the seed names
// (tokenizer mismatch, streams cut off, retries billed twice) plus the
// cached-token convention each leave a recognisable trace that the ledger
// can measure. Reconcile attributes each difference to those causes, up to
// what the ledger's evidence allows, and leaves the rest as unexplained, in
// plain sight.

// LedgerLine is the ledger's side of one day × model × key, produced from
// the store. All days are UTC dates, because providers bill by UTC day.
// Model should be the served model: providers bill snapshot names.
type LedgerLine struct {
	Day   string `json:"day"`
	Model string `json:"model"`
	Key   string `json:"key,omitempty"` // the provider key id the upstream used, to match BillLine.Key
	// Requests counts attempts that reached the upstream and have usage
	// (engine-, tokenizer- or chunk-counted, cancelled ones included); the
	// FailedAttempts are not in it.
	Requests int64 `json:"requests"`
	Input    int64 `json:"input"` // cached included
	Cached   int64 `json:"cached"`
	Output   int64 `json:"output"`
	// FailedAttempts are attempts that reached the upstream, failed with no
	// usage at all and were retried; a provider may still have billed them.
	FailedAttempts int64 `json:"failed_attempts,omitempty"`
	// FailedAttemptInputEstimate is the input tokens of those attempts,
	// estimated from their retry's input (the same prompt).
	FailedAttemptInputEstimate int64 `json:"failed_attempt_input_estimate,omitempty"`
	// CutStreams are rows whose usage never arrived (source chunks or
	// tokenizer) because the stream was cut off.
	CutStreams int64 `json:"cut_streams,omitempty"`
	// CutOutputTokens is their output as counted from the chunks delivered.
	CutOutputTokens int64 `json:"cut_output_tokens,omitempty"`
	// CutOutputLimit is Σ max_tokens over those streams: the most the
	// provider can have generated for them. 0 means unknown (some had no
	// max_tokens); output differences then stay unexplained, with a note.
	CutOutputLimit int64 `json:"cut_output_limit,omitempty"`
	// CutInputEstimate is the input of cut streams that recorded none
	// (source chunks: input unknown, stored as 0), estimated from the prompt.
	CutInputEstimate int64 `json:"cut_input_estimate,omitempty"`
	// TokenizerInput and TokenizerOutput are the tokens counted by the
	// tokenizer rather than the engine (source tokenizer, or the tokenizer
	// part of merged).
	TokenizerInput  int64  `json:"tokenizer_input,omitempty"`
	TokenizerOutput int64  `json:"tokenizer_output,omitempty"`
	Cost            *Money `json:"cost,omitempty"` // the ledger's rated cost, shown beside the bill's
}

// Tolerance sets what counts as a difference worth a look.
type Tolerance struct {
	// Warn and Critical are relative unexplained differences (0.01 = 1 %)
	// above which a line is a warning or critical.
	Warn, Critical float64
	// MinTokens is an absolute floor: unexplained token differences of at
	// most this many tokens are ignored for severity.
	MinTokens int64
	// TokenizerDrift is how far, relatively, a tokenizer count may be from
	// the engine's own count and still be explained as tokenizer drift.
	TokenizerDrift float64
}

// DefaultTolerance: 0.5 % warns, 2 % is critical; the model's own
// tokenizer with its chat template lands within a few percent of the
// engine (a different tokenizer can be 30 % off, seed 001 §2.2).
func DefaultTolerance() Tolerance {
	return Tolerance{Warn: 0.005, Critical: 0.02, MinTokens: 0, TokenizerDrift: 0.05}
}

// Counts are the compared quantities.
type Counts struct {
	Requests int64 `json:"requests"`
	Input    int64 `json:"input"`
	Cached   int64 `json:"cached"`
	Output   int64 `json:"output"`
}

func (c Counts) sub(o Counts) Counts {
	return Counts{c.Requests - o.Requests, c.Input - o.Input, c.Cached - o.Cached, c.Output - o.Output}
}
func (c Counts) add(o Counts) Counts {
	return Counts{c.Requests + o.Requests, c.Input + o.Input, c.Cached + o.Cached, c.Output + o.Output}
}
func (c Counts) neg() Counts { return Counts{}.sub(c) }

// Cause is a known reason for the bill and the ledger to differ.
type Cause string

const (
	// CauseCachedConvention: the provider counts input excluding cached
	// tokens (or the ledger did): the input difference is ∓ the cached count.
	CauseCachedConvention Cause = "cached_convention"
	// CauseRetryBilled: the provider billed attempts that failed and were
	// retried; the ledger holds no usage for them.
	CauseRetryBilled Cause = "retry_billed"
	// CauseStreamCut: streams cut off before usage arrived; the ledger
	// counted the chunks delivered, the provider what it generated.
	CauseStreamCut Cause = "stream_cut"
	// CauseTokenizer: tokens the ledger counted with a tokenizer rather
	// than taking the engine's count.
	CauseTokenizer Cause = "tokenizer"
	// CauseBatch: Batch API usage, which does not pass through the gateway.
	CauseBatch Cause = "batch_api"
)

// Causes lists the causes in the order they are attributed.
var Causes = []Cause{CauseCachedConvention, CauseRetryBilled, CauseStreamCut, CauseTokenizer, CauseBatch}

// Explanation is the part of a line's difference (bill − ledger) put down
// to one cause.
type Explanation struct {
	Cause  Cause  `json:"cause"`
	Amount Counts `json:"amount"`
}

// Side says where a line was found.
type Side string

const (
	SideBoth       Side = "both"
	SideBillOnly   Side = "bill_only"
	SideLedgerOnly Side = "ledger_only"
)

// Severity grades a line by its unexplained difference.
type Severity int

const (
	SeverityOK        Severity = iota // no difference beyond tolerance
	SeverityExplained                 // differences, all explained
	SeverityWarning
	SeverityCritical
)

func (s Severity) String() string {
	switch s {
	case SeverityOK:
		return "ok"
	case SeverityExplained:
		return "explained"
	case SeverityWarning:
		return "warning"
	case SeverityCritical:
		return "critical"
	}
	return fmt.Sprintf("Severity(%d)", int(s))
}

// MarshalText makes severities read as words in JSON.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Line is one reconciled day × model × key.
type Line struct {
	Day         string        `json:"day"`
	Model       string        `json:"model"`
	Key         string        `json:"key,omitempty"`
	Batch       bool          `json:"batch,omitempty"`
	Side        Side          `json:"side"`
	Bill        Counts        `json:"bill"`
	Ledger      Counts        `json:"ledger"`
	Diff        Counts        `json:"diff"` // bill − ledger
	Explained   []Explanation `json:"explained,omitempty"`
	Unexplained Counts        `json:"unexplained"`
	RelDiff     float64       `json:"rel_diff"` // largest relative unexplained difference
	Severity    Severity      `json:"severity"`
	NoCached    bool          `json:"no_cached,omitempty"` // cached not compared: the bill has no such column
	// BillCacheWrite is the bill's cache writes, when it has them: shown,
	// and used to explain an input convention that leaves them out, but
	// not compared (the rollups hold no daily sum of the ledger's).
	BillCacheWrite int64    `json:"bill_cache_write,omitempty"`
	BillCost       *Money   `json:"bill_cost,omitempty"`
	LedgerCost     *Money   `json:"ledger_cost,omitempty"`
	Notes          []string `json:"notes,omitempty"`
}

// Report is the outcome of Reconcile.
type Report struct {
	Lines       []Line           `json:"lines"`
	Bill        Counts           `json:"bill"`
	Ledger      Counts           `json:"ledger"`
	Diff        Counts           `json:"diff"`
	Explained   map[Cause]Counts `json:"explained"`
	Unexplained Counts           `json:"unexplained"`
	Severity    Severity         `json:"severity"` // the worst line's
}

type lineKey struct {
	day, model, key string
	batch           bool
}

type billAgg struct {
	c        Counts
	write    int64 // cache writes, when the bill has them
	cost     *Money
	noCached bool
	notes    []string
}

// Reconcile joins the bill and the ledger per day × model × key and
// explains the differences. Keys take part in the join only when both sides
// carry them (they must then be the same ids, e.g. the provider's key id of
// the upstream's key); otherwise both sides are summed over keys.
//
// For each line found on both sides, d = bill − ledger per quantity, and the
// causes are applied in order, each taking from what is still unexplained
// at most what its evidence in the ledger line allows, and only in the
// direction the cause can act:
//
//  1. cached_convention: input shifted by −C (the bill's input excludes
//     cached tokens) or +C, C being the bill's cached count (the ledger's
//     when the bill has none), or by ∓(C + W), W being the bill's cache
//     writes (Anthropic's input excludes reads and writes). Each tried as
//     a whole, with steps 2–4 after it; the one leaving the least input
//     unexplained is kept, and only if that is less than no shift.
//  2. retry_billed: requests up to +FailedAttempts, input up to
//     +FailedAttemptInputEstimate, cached up to the same.
//  3. stream_cut: output up to +(CutOutputLimit − CutOutputTokens), input
//     and cached up to +CutInputEstimate.
//  4. tokenizer: input within ±TokenizerDrift·TokenizerInput, output within
//     ±TokenizerDrift·TokenizerOutput, cached up to +TokenizerInput (cache
//     hits are unknown when usage never arrived).
//
// What remains is unexplained. Lines on one side only are reported whole
// as unexplained, except Batch API lines (batch_api).
func Reconcile(bill []BillLine, ledger []LedgerLine, tol Tolerance) Report {
	byKey := hasKeys(bill) && slices.ContainsFunc(ledger, func(l LedgerLine) bool { return l.Key != "" })
	bills := sumBills(bill, byKey)
	ledgers := sumLedger(ledger, byKey)

	var rep Report
	for k, b := range bills {
		var ln Line
		if l, ok := ledgers[k]; ok {
			ln = reconcileLine(b, &l.LedgerLine, tol)
			ln.LedgerCost = l.Cost
			ln.Notes = append(ln.Notes, l.notes...)
		} else {
			ln = billOnly(b, k.batch, tol)
		}
		ln.Day, ln.Model, ln.Key, ln.Batch = k.day, k.model, k.key, k.batch
		ln.BillCost = b.cost
		ln.Notes = append(b.notes, ln.Notes...)
		rep.Lines = append(rep.Lines, ln)
	}
	for k, l := range ledgers {
		if _, ok := bills[k]; !ok && !l.empty() {
			rep.Lines = append(rep.Lines, ledgerOnly(k, l, tol))
		}
	}
	slices.SortFunc(rep.Lines, func(a, b Line) int {
		return cmp.Or(cmp.Compare(a.Day, b.Day), cmp.Compare(a.Model, b.Model), cmp.Compare(a.Key, b.Key), boolCmp(a.Batch, b.Batch))
	})

	rep.Explained = map[Cause]Counts{}
	for _, ln := range rep.Lines {
		rep.Bill = rep.Bill.add(ln.Bill)
		rep.Ledger = rep.Ledger.add(ln.Ledger)
		rep.Diff = rep.Diff.add(ln.Diff)
		rep.Unexplained = rep.Unexplained.add(ln.Unexplained)
		for _, e := range ln.Explained {
			rep.Explained[e.Cause] = rep.Explained[e.Cause].add(e.Amount)
		}
		rep.Severity = max(rep.Severity, ln.Severity)
	}
	return rep
}

func joinKey(day, model, key string, batch, byKey bool) lineKey {
	if !byKey {
		key = ""
	}
	return lineKey{day, model, key, batch}
}

func sumBills(bill []BillLine, byKey bool) map[lineKey]*billAgg {
	bills := map[lineKey]*billAgg{}
	for _, b := range bill {
		k := joinKey(b.Day, b.Model, b.Key, b.Batch, byKey)
		a := bills[k]
		if a == nil {
			a = &billAgg{}
			bills[k] = a
		}
		a.c = a.c.add(Counts{b.Requests, b.Input, b.Cached, b.Output})
		a.write += b.CacheWrite
		a.noCached = a.noCached || b.NoCached
		if b.Cost != nil {
			a.cost, a.notes = addCost(a.cost, *b.Cost, a.notes)
		}
	}
	return bills
}

type ledgerAgg struct {
	LedgerLine
	notes []string
}

func sumLedger(ledger []LedgerLine, byKey bool) map[lineKey]*ledgerAgg {
	out := map[lineKey]*ledgerAgg{}
	unbounded := map[lineKey]bool{}
	for _, l := range ledger {
		k := joinKey(l.Day, l.Model, l.Key, false, byKey)
		a := out[k]
		if a == nil {
			a = &ledgerAgg{LedgerLine: LedgerLine{Day: l.Day, Model: l.Model, Key: k.key}}
			out[k] = a
		}
		a.Requests += l.Requests
		a.Input += l.Input
		a.Cached += l.Cached
		a.Output += l.Output
		a.FailedAttempts += l.FailedAttempts
		a.FailedAttemptInputEstimate += l.FailedAttemptInputEstimate
		a.CutStreams += l.CutStreams
		a.CutOutputTokens += l.CutOutputTokens
		a.CutOutputLimit += l.CutOutputLimit
		a.CutInputEstimate += l.CutInputEstimate
		a.TokenizerInput += l.TokenizerInput
		a.TokenizerOutput += l.TokenizerOutput
		// One cut stream without a known limit makes the sum no bound.
		unbounded[k] = unbounded[k] || (l.CutStreams > 0 && l.CutOutputLimit == 0)
		if l.Cost != nil {
			a.Cost, a.notes = addCost(a.Cost, *l.Cost, a.notes)
		}
	}
	for k := range unbounded {
		if unbounded[k] {
			out[k].CutOutputLimit = 0
		}
	}
	return out
}

func hasKeys(bill []BillLine) bool {
	return slices.ContainsFunc(bill, func(b BillLine) bool { return b.Key != "" })
}

func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

func addCost(sum *Money, c Money, notes []string) (*Money, []string) {
	if sum == nil {
		return &c, notes
	}
	s, err := sum.add(c)
	if err != nil {
		return sum, append(notes, fmt.Sprintf("cost in %s left out of the sum: %v", c.Currency, err))
	}
	return &s, notes
}

// empty reports whether a ledger line holds nothing a provider could bill:
// no request reached an engine, no token, no cost (requests refused
// before any engine, e.g. by auth, whose body may not even name a model).
// Such a line has nothing to reconcile and is left out rather than shown
// as an all-zero ledger_only line.
func (l *ledgerAgg) empty() bool {
	return l.Requests == 0 && l.Input == 0 && l.Cached == 0 && l.Output == 0 && l.FailedAttempts == 0 &&
		l.CutStreams == 0 && (l.Cost == nil || l.Cost.Nanos == 0)
}

func ledgerOnly(k lineKey, l *ledgerAgg, tol Tolerance) Line {
	ln := Line{Day: k.day, Model: k.model, Key: k.key, Side: SideLedgerOnly, LedgerCost: l.Cost, Notes: l.notes}
	ln.Ledger = Counts{l.Requests, l.Input, l.Cached, l.Output}
	ln.Diff = ln.Ledger.neg()
	ln.Unexplained = ln.Diff
	ln.RelDiff, ln.Severity = grade(ln, tol)
	if ln.Severity > SeverityOK {
		ln.Notes = append(ln.Notes, "no bill line: check the model name (providers bill the served snapshot, e.g. gpt-4o-mini-2024-07-18), the key mapping, UTC day boundaries, and that the bill is final")
	}
	return ln
}

func billOnly(b *billAgg, batch bool, tol Tolerance) Line {
	ln := Line{Side: SideBillOnly, Bill: b.c, BillCacheWrite: b.write, Diff: b.c, NoCached: b.noCached}
	if b.noCached {
		ln.Diff.Cached = 0
	}
	if batch {
		ln.Explained = []Explanation{{CauseBatch, ln.Diff}}
	} else {
		ln.Unexplained = ln.Diff
		ln.Notes = append(ln.Notes, "no ledger line: usage that did not pass through the gateway (the key used elsewhere?), or a model or key the ledger names differently")
	}
	ln.RelDiff, ln.Severity = grade(ln, tol)
	return ln
}

func reconcileLine(b *billAgg, l *LedgerLine, tol Tolerance) Line {
	ln := Line{Side: SideBoth, Bill: b.c, BillCacheWrite: b.write, Ledger: Counts{l.Requests, l.Input, l.Cached, l.Output}, NoCached: b.noCached}
	ln.Diff = ln.Bill.sub(ln.Ledger)
	if b.noCached {
		ln.Diff.Cached = 0
	}
	c := ln.Bill.Cached
	if b.noCached || c == 0 {
		c = ln.Ledger.Cached
	}
	ln.Explained, ln.Unexplained = explain(ln.Diff, 0, l, tol)
	// Anthropic's convention leaves cache writes out of input as well as
	// cache reads: with the bill's write count, that shift is tried too.
	for _, shift := range []int64{-c, c, -(c + b.write), c + b.write} {
		if shift == 0 {
			continue
		}
		// A convention is a property of the provider, not noise: take it
		// only when it leaves strictly less input unexplained.
		if ex, res := explain(ln.Diff, shift, l, tol); abs(res.Input) < abs(ln.Unexplained.Input) {
			ln.Explained, ln.Unexplained = ex, res
		}
	}
	if l.CutStreams > 0 && l.CutOutputLimit == 0 && ln.Unexplained.Output > 0 {
		ln.Notes = append(ln.Notes, fmt.Sprintf(
			"%d streams were cut before usage arrived and not all had max_tokens: some of the %d unexplained output tokens may be theirs, but the ledger cannot bound how many",
			l.CutStreams, ln.Unexplained.Output))
	}
	ln.RelDiff, ln.Severity = grade(ln, tol)
	return ln
}

// explain applies the causes in order to d (bill − ledger) after an input
// shift for the cached convention, returning what each explained and the
// residue.
func explain(d Counts, shift int64, l *LedgerLine, tol Tolerance) ([]Explanation, Counts) {
	res := d
	var ex []Explanation
	take := func(cause Cause, a Counts) {
		if a != (Counts{}) {
			ex = append(ex, Explanation{cause, a})
			res = res.sub(a)
		}
	}
	take(CauseCachedConvention, Counts{Input: shift})
	if l.FailedAttempts > 0 {
		take(CauseRetryBilled, Counts{
			Requests: clamp(res.Requests, 0, l.FailedAttempts),
			Input:    clamp(res.Input, 0, l.FailedAttemptInputEstimate),
			Cached:   clamp(res.Cached, 0, l.FailedAttemptInputEstimate),
		})
	}
	if l.CutStreams > 0 {
		headroom := max(l.CutOutputLimit-l.CutOutputTokens, 0)
		take(CauseStreamCut, Counts{
			Input:  clamp(res.Input, 0, l.CutInputEstimate),
			Cached: clamp(res.Cached, 0, l.CutInputEstimate),
			Output: clamp(res.Output, 0, headroom),
		})
	}
	if l.TokenizerInput > 0 || l.TokenizerOutput > 0 {
		di := int64(math.Ceil(tol.TokenizerDrift * float64(l.TokenizerInput)))
		do := int64(math.Ceil(tol.TokenizerDrift * float64(l.TokenizerOutput)))
		take(CauseTokenizer, Counts{
			Input:  clamp(res.Input, -di, di),
			Cached: clamp(res.Cached, 0, l.TokenizerInput),
			Output: clamp(res.Output, -do, do),
		})
	}
	return ex, res
}

func clamp(v, lo, hi int64) int64 { return min(max(v, lo), hi) }

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// grade finds the largest relative unexplained difference among the
// quantities above the noise floor, and the severity it earns.
func grade(ln Line, tol Tolerance) (float64, Severity) {
	worst := 0.0
	for _, q := range []struct {
		u, b, l int64
		tokens  bool
	}{
		{ln.Unexplained.Requests, ln.Bill.Requests, ln.Ledger.Requests, false},
		{ln.Unexplained.Input, ln.Bill.Input, ln.Ledger.Input, true},
		{ln.Unexplained.Cached, ln.Bill.Cached, ln.Ledger.Cached, true},
		{ln.Unexplained.Output, ln.Bill.Output, ln.Ledger.Output, true},
	} {
		u := abs(q.u)
		if u == 0 || (q.tokens && u <= tol.MinTokens) {
			continue
		}
		rel := 1.0
		if den := max(q.b, q.l); den > 0 {
			rel = min(float64(u)/float64(den), 1)
		}
		worst = max(worst, rel)
	}
	switch {
	case worst > tol.Critical:
		return worst, SeverityCritical
	case worst > tol.Warn:
		return worst, SeverityWarning
	case len(ln.Explained) > 0:
		return worst, SeverityExplained
	}
	return worst, SeverityOK
}
