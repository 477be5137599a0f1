// Package report answers the cost questions of the seeds from the store's
// rollups: who spent what per day, which business line per month, which
// model version and which prompt template burns money, who the big
// spenders are, where max_tokens cuts answers, and what is wasted. It sits
// after the store: the CLI (`tollgate report`) and the HTTP API
// (/api/v1/reports/…) render the same Results.
package report

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/store"
)

// Kinds are the reports, in the order `tollgate report` lists them.
var Kinds = []struct{ Name, Help string }{
	{"users", "cost and tokens per user and day"},
	{"end-users", "cost and tokens per end user (the customer a request's body named) and the key's user"},
	{"biz", "cost and tokens per business line and month"},
	{"models", "per model and served model version"},
	{"templates", "per prompt template: average tokens per request — which template burns money"},
	{"top", "top spenders with their share of cost (flags anyone above 40 %)"},
	{"length", "share of finish_reason=length per model and template (max_tokens set too low)"},
	{"waste", "duplicate prompts, grown prompts, answers cut by max_tokens, low prefix-cache hits — each with its cost"},
}

// Query selects the period and filters of a report.
type Query struct {
	From, To time.Time // [From, To)
	Where    map[store.Dim]string
	Limit    int // rows of ranked reports (top, waste lists); 0 = 20
}

// Column kinds tell renderers how to show a value.
const (
	KindText    = "text"
	KindInt     = "int"
	KindMoney   = "money"   // int64 nanos, with the row's currency column
	KindPercent = "percent" // float64 share 0–1
	KindFloat   = "float"
)

// Column is one column of a Result.
type Column struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
}

// Result is a rendered-agnostic report: a title, typed columns, rows and
// notes that say what to look at.
type Result struct {
	Title   string   `json:"title"`
	From    string   `json:"from"`
	To      string   `json:"to"`
	Columns []Column `json:"columns"`
	Rows    [][]any  `json:"-"`
	Notes   []string `json:"notes,omitempty"`
}

// Source is what reports read.
type Source interface {
	Report(ctx context.Context, q store.ReportQuery) ([]store.ReportRow, error)
	Prompts(ctx context.Context, from, to time.Time, minCount int64, limit int) ([]store.PromptRow, error)
}

// Run builds the report of the given kind.
func Run(ctx context.Context, src Source, kind string, q Query) (*Result, error) {
	if q.Limit <= 0 {
		q.Limit = 20
	}
	var (
		res *Result
		err error
	)
	switch kind {
	case "users":
		res, err = grouped(ctx, src, q, "Cost per user and day", []store.Dim{store.DimUser, store.DimDay})
	case "end-users":
		res, err = grouped(ctx, src, q, "Cost per end user and user", []store.Dim{store.DimEndUser, store.DimUser})
		if err == nil {
			res.Notes = append(res.Notes, "Only the requests whose body named an end user (user, safety_identifier, metadata.user_id) are counted.")
		}
	case "biz":
		res, err = grouped(ctx, src, q, "Cost per business line and month", []store.Dim{store.DimBizLine, store.DimMonth})
	case "models":
		res, err = grouped(ctx, src, q, "Cost per model and served model version", []store.Dim{store.DimModel, store.DimServedModel})
	case "templates":
		res, err = templates(ctx, src, q)
	case "top":
		res, err = top(ctx, src, q)
	case "length":
		res, err = length(ctx, src, q)
	case "waste":
		res, err = waste(ctx, src, q)
	default:
		names := make([]string, len(Kinds))
		for i, k := range Kinds {
			names[i] = k.Name
		}
		return nil, fmt.Errorf("unknown report %q; one of %s", kind, strings.Join(names, ", "))
	}
	if err != nil {
		return nil, err
	}
	res.From, res.To = stamp(q.From), stamp(q.To)
	return res, nil
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Format(time.RFC3339)
}

// measures are the sums reports read: asking for only these keeps a
// month-wide report fast (TestMeasuresSuffice checks that they suffice).
var measures = []string{"requests", "errors", "input_tokens", "cached_input_tokens", "output_tokens",
	"reasoning_tokens", "cost_nanos", "finish_length", "input_unknown"}

func (q Query) store(groupBy ...store.Dim) store.ReportQuery {
	return store.ReportQuery{From: q.From, To: q.To, GroupBy: groupBy, Where: q.Where, Measures: measures}
}

var usageColumns = []Column{
	{"requests", KindInt}, {"errors", KindInt}, {"input_tokens", KindInt}, {"cached_input_tokens", KindInt},
	{"output_tokens", KindInt}, {"reasoning_tokens", KindInt}, {"cost", KindMoney}, {"currency", KindText},
}

func usageValues(r store.ReportRow) []any {
	return []any{r.Requests, r.Errors, r.Input, r.Cached, r.Output, r.Reasoning, r.CostNanos, r.Currency}
}

func dimColumns(dims []store.Dim) []Column {
	cols := make([]Column, len(dims))
	for i, d := range dims {
		cols[i] = Column{string(d), KindText}
	}
	return cols
}

// grouped is the plain "totals per group" report, sorted by the group keys.
func grouped(ctx context.Context, src Source, q Query, title string, dims []store.Dim) (*Result, error) {
	rows, err := src.Report(ctx, q.store(dims...))
	if err != nil {
		return nil, err
	}
	sortRows(rows)
	res := &Result{Title: title, Columns: append(dimColumns(dims), usageColumns...), Notes: unknownInput(rows)}
	for _, r := range rows {
		res.Rows = append(res.Rows, append(keysAny(r.Keys), usageValues(r)...))
	}
	return res, nil
}

// unknownInput is the note of a report summing input tokens over requests
// some of whose input nobody counted: those add nothing to the sums, and
// the reader must know.
func unknownInput(rows []store.ReportRow) []string {
	var n int64
	for _, r := range rows {
		n += r.InputUnknown
	}
	if n == 0 {
		return nil
	}
	return []string{fmt.Sprintf("%d requests reached an engine that reported no usage and no tokenizer counted their prompt: "+
		"their input tokens are unknown and not in input_tokens (tollgate requests shows them as -).", n)}
}

func keysAny(keys []string) []any {
	out := make([]any, len(keys))
	for i, k := range keys {
		out[i] = orNone(k)
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func sortRows(rows []store.ReportRow) {
	sort.SliceStable(rows, func(i, j int) bool {
		if c := slices.Compare(rows[i].Keys, rows[j].Keys); c != 0 {
			return c < 0
		}
		return rows[i].Currency < rows[j].Currency
	})
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// templates answers "which template burns money": average tokens and cost
// per request of each prompt template, dearest first.
func templates(ctx context.Context, src Source, q Query) (*Result, error) {
	rows, err := src.Report(ctx, q.store(store.DimTemplate))
	if err != nil {
		return nil, err
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].CostNanos > rows[j].CostNanos })
	res := &Result{Title: "Prompt templates: tokens and cost per request", Notes: unknownInput(rows), Columns: []Column{
		{"template", KindText}, {"requests", KindInt}, {"avg_input_tokens", KindFloat}, {"avg_output_tokens", KindFloat},
		{"cache_hit_rate", KindPercent}, {"cost", KindMoney}, {"cost_per_request", KindMoney}, {"currency", KindText},
	}}
	for _, r := range rows {
		res.Rows = append(res.Rows, []any{orNone(r.Keys[0]), r.Requests, ratio(r.Input, r.Requests), ratio(r.Output, r.Requests),
			ratio(r.Cached, r.Input), r.CostNanos, r.CostNanos / max(r.Requests, 1), r.Currency})
	}
	return res, nil
}

// TopShareFlag is the share of cost above which one user is flagged
// (seed 001 §4.2: "some users may account for 40 % of the tokens").
const TopShareFlag = 0.40

// top ranks users by cost with their share of the period's cost, per
// currency; a user above TopShareFlag is flagged.
func top(ctx context.Context, src Source, q Query) (*Result, error) {
	rows, err := src.Report(ctx, q.store(store.DimUser))
	if err != nil {
		return nil, err
	}
	total := map[string]int64{}
	tokens := map[string]int64{}
	for _, r := range rows {
		total[r.Currency] += r.CostNanos
		tokens[r.Currency] += r.Input + r.Output
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].CostNanos != rows[j].CostNanos {
			return rows[i].CostNanos > rows[j].CostNanos
		}
		return rows[i].Input+rows[i].Output > rows[j].Input+rows[j].Output
	})
	res := &Result{Title: "Top spenders", Notes: unknownInput(rows), Columns: []Column{
		{"user", KindText}, {"requests", KindInt}, {"tokens", KindInt}, {"token_share", KindPercent},
		{"cost", KindMoney}, {"cost_share", KindPercent}, {"currency", KindText}, {"flag", KindText},
	}}
	for i, r := range rows {
		if i >= q.Limit {
			break
		}
		share := ratio(r.CostNanos, total[r.Currency])
		tshare := ratio(r.Input+r.Output, tokens[r.Currency])
		flag := ""
		if share > TopShareFlag || (total[r.Currency] == 0 && tshare > TopShareFlag) {
			flag = "over 40%"
			res.Notes = append(res.Notes, fmt.Sprintf("%s accounts for %.0f%% of the %s cost (%.0f%% of tokens): talk to them, or set a quota.",
				orNone(r.Keys[0]), share*100, r.Currency, tshare*100))
		}
		res.Rows = append(res.Rows, []any{orNone(r.Keys[0]), r.Requests, r.Input + r.Output, tshare, r.CostNanos, share, r.Currency, flag})
	}
	return res, nil
}

// LengthShareFlag is the share of finish_reason=length that is flagged.
const LengthShareFlag = 0.10

// length shows, per model and template, how often answers were cut by
// max_tokens (seed 001 §2.1: users receive truncated answers).
// It counts exactly the period asked (Exact), so a drilled minute lists
// its requests.
func length(ctx context.Context, src Source, q Query) (*Result, error) {
	led, _ := src.(Ledger)
	rows, err := Exact(ctx, src, led, q.store(store.DimModel, store.DimTemplate))
	if err != nil {
		return nil, err
	}
	rows = mergeCurrencies(rows)
	sort.SliceStable(rows, func(i, j int) bool {
		return ratio(rows[i].FinishLength, rows[i].Requests) > ratio(rows[j].FinishLength, rows[j].Requests)
	})
	res := &Result{Title: "Answers cut by max_tokens (finish_reason=length)", Columns: []Column{
		{"model", KindText}, {"template", KindText}, {"requests", KindInt}, {"finish_length", KindInt}, {"length_share", KindPercent},
	}}
	for _, r := range rows {
		share := ratio(r.FinishLength, r.Requests)
		res.Rows = append(res.Rows, []any{orNone(r.Keys[0]), orNone(r.Keys[1]), r.Requests, r.FinishLength, share})
		if share > LengthShareFlag && r.Requests >= 10 {
			res.Notes = append(res.Notes, fmt.Sprintf("%s / %s: %.0f%% of answers hit max_tokens — raise it or shorten the answers.",
				orNone(r.Keys[0]), orNone(r.Keys[1]), share*100))
		}
	}
	return res, nil
}

// mergeCurrencies sums rows that differ only by currency, for reports that
// count requests and tokens rather than money.
func mergeCurrencies(rows []store.ReportRow) []store.ReportRow {
	idx := map[string]int{}
	var out []store.ReportRow
	for _, r := range rows {
		k := strings.Join(r.Keys, "\x00")
		if i, ok := idx[k]; ok {
			out[i].Totals.Add(r.Totals)
			continue
		}
		idx[k] = len(out)
		r.Currency = ""
		out = append(out, r)
	}
	return out
}
