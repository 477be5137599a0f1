package billing

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/cost"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
)

var h0 = time.Date(2026, 11, 10, 14, 0, 0, 0, time.UTC)

func open(t *testing.T) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "b.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func table(t *testing.T, yml string) *cost.Table {
	t.Helper()
	cfg, err := config.Parse([]byte(yml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := cost.NewTable(cfg.CostConfig())
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

var seq int

func rec(upstream, model string, at time.Time, in, cached, out int64) *record.Record {
	seq++
	r := &record.Record{RequestID: fmt.Sprintf("r%d", seq), LogicalRequestID: fmt.Sprintf("r%d", seq), Attempt: 1,
		Upstream: upstream, Model: model, ServedModel: model, Arrival: at, Status: 200, UpstreamStatus: 200,
		Usage: record.Usage{InputTokens: in, CachedInputTokens: cached, OutputTokens: out, Source: record.SourceEngine}}
	r.Marks.End = time.Millisecond
	r.Finish()
	return r
}

func insert(t *testing.T, s *sqlite.Store, recs ...*record.Record) {
	t.Helper()
	if err := s.Insert(context.Background(), store.Batch{Records: recs}); err != nil {
		t.Fatal(err)
	}
}

func costs(t *testing.T, s *sqlite.Store, from, to time.Time) map[string]record.Cost {
	t.Helper()
	recs, err := s.Requests(context.Background(), store.Filter{Since: from, Until: to, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]record.Cost{}
	for _, r := range recs {
		out[r.RequestID] = r.Cost
	}
	return out
}

// TestAllocateGPUHours: 4 GPUs at 9.80 CNY an hour cost 39.20 CNY; the
// hour's three requests share it by tokens (1000, 2000, 1000 of 4000),
// exactly, and a second run changes nothing.
func TestAllocateGPUHours(t *testing.T) {
	s := open(t)
	tbl := table(t, "gpu_hours:\n  - {upstream: gpu-a, currency: CNY, price_per_hour: 9.80, gpus: 4}\n")
	a := rec("gpu-a", "m", h0.Add(5*time.Minute), 800, 0, 200)
	b := rec("gpu-a", "m", h0.Add(25*time.Minute), 1500, 0, 500)
	c := rec("gpu-a", "m", h0.Add(59*time.Minute), 900, 0, 100)
	other := rec("openai", "m", h0.Add(10*time.Minute), 10, 0, 10)
	next := rec("gpu-a", "m", h0.Add(70*time.Minute), 1, 0, 1) // next hour: not allocated here
	insert(t, s, a, b, c, other, next)

	n, err := AllocateGPUHours(context.Background(), s, tbl, h0, h0.Add(time.Hour))
	if err != nil || n != 3 {
		t.Fatalf("allocated %d rows (err %v), want 3", n, err)
	}
	got := costs(t, s, h0, h0.Add(2*time.Hour))
	want := map[string]int64{a.RequestID: 9_800_000_000, b.RequestID: 19_600_000_000, c.RequestID: 9_800_000_000, other.RequestID: 0, next.RequestID: 0}
	var sum int64
	for id, nanos := range want {
		if got[id].Nanos != nanos {
			t.Errorf("%s: %d nanos, want %d", id, got[id].Nanos, nanos)
		}
		sum += got[id].Nanos
	}
	if sum != 39_200_000_000 || got[a.RequestID].Currency != "CNY" || !strings.HasPrefix(got[a.RequestID].PriceVersion, "gpu-hour:") {
		t.Errorf("sum %d, cost %+v", sum, got[a.RequestID])
	}
	if n, err := AllocateGPUHours(context.Background(), s, tbl, h0, h0.Add(time.Hour)); err != nil || n != 0 {
		t.Errorf("second run changed %d rows (err %v), want 0", n, err)
	}
	// The rollups moved with the rows.
	rows, err := s.Report(context.Background(), store.ReportQuery{Where: map[store.Dim]string{store.DimUpstream: "gpu-a"}})
	if err != nil {
		t.Fatal(err)
	}
	var rolled int64
	for _, r := range rows {
		rolled += r.CostNanos
	}
	if rolled != 39_200_000_000 {
		t.Errorf("rollup cost for gpu-a = %d, want 39.2 CNY", rolled)
	}
}

// TestRerateAfterPriceChange: the price of m changes on the 15th; rows
// rated with the old table are re-rated with the right version each.
func TestRerateAfterPriceChange(t *testing.T) {
	s := open(t)
	before := time.Date(2026, 11, 14, 12, 0, 0, 0, time.UTC)
	after := time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)
	old := table(t, "prices:\n  - {model: m, currency: USD, input: 1, output: 2}\n")
	r1, r2 := rec("u", "m", before, 1000, 0, 100), rec("u", "m", after, 1000, 400, 100)
	for _, r := range []*record.Record{r1, r2} {
		c, _ := old.RateRecord(r)
		r.Cost = record.Cost{Nanos: c.Nanos, Currency: c.Currency, PriceVersion: c.PriceVersion}
	}
	insert(t, s, r1, r2)
	// 1 USD/M input = 1000 nanos a token, 2 USD/M output = 2000.
	if r1.Cost.Nanos != 1000*1000+100*2000 {
		t.Fatalf("old rating %d", r1.Cost.Nanos)
	}
	newer := table(t, `prices:
  - {model: m, currency: USD, input: 1, output: 2}
  - {model: m, effective_from: 2026-11-15, currency: USD, input: 0.5, cached_input: 0.05, output: 1.5}
`)
	from, to := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	n, err := Rerate(context.Background(), s, newer, from, to)
	if err != nil || n != 1 {
		t.Fatalf("re-rated %d (err %v), want 1 (only the row after the change)", n, err)
	}
	got := costs(t, s, from, to)
	// (1000 − 400)·500 + 400·50 + 100·1500 nanos.
	if want := int64(600*500 + 400*50 + 100*1500); got[r2.RequestID].Nanos != want || got[r2.RequestID].PriceVersion == r1.Cost.PriceVersion {
		t.Errorf("after the change: %+v, want %d nanos with the new version", got[r2.RequestID], want)
	}
	if got[r1.RequestID] != r1.Cost {
		t.Errorf("before the change: %+v, want unchanged %+v", got[r1.RequestID], r1.Cost)
	}
}

// TestReconcileLedgerAgainstBill: a ledger built by the store, a bill with
// a difference of each kind the seeds name, each explained.
func TestReconcileLedgerAgainstBill(t *testing.T) {
	s := open(t)
	day := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
	var recs []*record.Record
	// model a: 10 plain requests, 1000 in / 100 out each.
	for i := range 10 {
		recs = append(recs, rec("openai", "a", day.Add(time.Duration(i)*time.Minute), 1000, 0, 100))
	}
	// model a: a retried request: the failed attempt (503, no usage), then
	// the retry, which carries the same 1000-token prompt.
	failed := rec("openai", "a", day.Add(time.Hour), 0, 0, 0)
	failed.Status, failed.UpstreamStatus, failed.ErrorType, failed.Usage.Source = 503, 503, record.ErrUpstreamStatus, record.SourceNone
	retry := rec("openai", "a", day.Add(time.Hour+time.Second), 1000, 0, 100)
	retry.Attempt, retry.Retries = 2, 1
	recs = append(recs, failed, retry)
	// model b: a stream cut after 30 tokens (no usage, no tokenizer: output
	// counted from chunks, input unknown; max_tokens 100; a 2000-byte prompt).
	cut := rec("openai", "b", day.Add(2*time.Hour), 0, 0, 30)
	cut.Usage.Source, cut.ErrorType, cut.Status = record.SourceChunks, record.ErrUpstreamReset, 502
	cut.PromptBytes = 2000
	mt := int64(100)
	cut.MaxTokens = &mt
	recs = append(recs, cut, rec("openai", "b", day.Add(3*time.Hour), 500, 0, 50))
	for _, r := range recs {
		r.Finish()
	}
	insert(t, s, recs...)

	// The provider billed: for a, both attempts of the retried request
	// (12 requests, 12000 input); for b, the cut stream's whole 100 tokens,
	// and 3 unexplained output tokens.
	bill := "date,model,requests,input,output\n2026-11-20,a,12,12000,1100\n2026-11-20,b,2,1000,153\n"
	lines, err := cost.ParseGenericCSV(strings.NewReader(bill), cost.ColumnMap{Day: "date", Model: "model", Requests: "requests", Input: "input", Output: "output"})
	if err != nil {
		t.Fatal(err)
	}
	ledger, err := LedgerLines(context.Background(), s, day.Truncate(24*time.Hour), day.Truncate(24*time.Hour).AddDate(0, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	rep := cost.Reconcile(lines, ledger, cost.DefaultTolerance())
	byModel := map[string]cost.Line{}
	for _, l := range rep.Lines {
		byModel[l.Model] = l
	}
	a, b := byModel["a"], byModel["b"]
	if diff := cmp.Diff([]cost.Explanation{{Cause: cost.CauseRetryBilled, Amount: cost.Counts{Requests: 1, Input: 1000}}}, a.Explained); diff != "" || a.Unexplained != (cost.Counts{}) {
		t.Errorf("model a: explained (-want +got) %s; unexplained %+v", diff, a.Unexplained)
	}
	if diff := cmp.Diff([]cost.Explanation{{Cause: cost.CauseStreamCut, Amount: cost.Counts{Input: 500, Output: 70}}}, b.Explained); diff != "" || b.Unexplained != (cost.Counts{Output: 3}) {
		t.Errorf("model b: explained (-want +got) %s; unexplained %+v (want the planted 3 output tokens)", diff, b.Unexplained)
	}
}
