package cost

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func readLedger(t *testing.T, name string) []LedgerLine {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var l []LedgerLine
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatal(err)
	}
	return l
}

func readBill(t *testing.T, name string, parse func(f *os.File) ([]BillLine, error)) []BillLine {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := parse(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// outcome is what the planted differences must come out as.
type outcome struct {
	Day, Model, Key string
	Batch           bool
	Side            Side
	Explained       []Explanation
	Unexplained     Counts
	Severity        Severity
}

func outcomes(r Report) []outcome {
	var o []outcome
	for _, l := range r.Lines {
		o = append(o, outcome{l.Day, l.Model, l.Key, l.Batch, l.Side, l.Explained, l.Unexplained, l.Severity})
	}
	return o
}

// The sample OpenAI bill and ledger (testdata/openai_usage.csv,
// ledger_openai.json) plant one difference of each kind, each on its own
// day × model × key, plus a line mixing three of them.
func TestReconcileOpenAI(t *testing.T) {
	bill := readBill(t, "openai_usage.csv", func(f *os.File) ([]BillLine, error) { return ParseOpenAIUsageCSV(f) })
	rep := Reconcile(bill, readLedger(t, "ledger_openai.json"), DefaultTolerance())

	mini, four, A := "gpt-4o-mini-2024-07-18", "gpt-4o-2024-08-06", "key_abc123"
	want := []outcome{
		// Two hourly bill rows against two ledger rows: the sums match.
		{"2026-11-02", four, A, false, SideBoth,
			[]Explanation{{CauseRetryBilled, Counts{Requests: 3, Input: 4500}}}, Counts{}, SeverityExplained},
		{"2026-11-02", mini, A, false, SideBoth, nil, Counts{}, SeverityOK},
		{"2026-11-03", four, A, true, SideBillOnly,
			[]Explanation{{CauseBatch, Counts{Requests: 1000, Input: 2000000, Output: 500000}}}, Counts{}, SeverityExplained},
		{"2026-11-03", four, "key_def456", false, SideBoth,
			[]Explanation{{CauseTokenizer, Counts{Input: 640, Output: -120}}}, Counts{}, SeverityExplained},
		{"2026-11-03", mini, A, false, SideBoth,
			[]Explanation{{CauseStreamCut, Counts{Input: 2000, Output: 1250}}}, Counts{}, SeverityExplained},
		{"2026-11-04", "gpt-4.1-nano-2025-04-14", A, false, SideBillOnly,
			nil, Counts{Requests: 20, Input: 30000, Output: 5000}, SeverityCritical},
		// Retry, tokenizer drift and 60 output tokens nobody can account for.
		{"2026-11-04", four, A, false, SideBoth,
			[]Explanation{{CauseRetryBilled, Counts{Requests: 1, Input: 2000}}, {CauseTokenizer, Counts{Input: 100}}},
			Counts{Output: 60}, SeverityExplained},
		// The planted unexplained line: 1 % more output, 50 input tokens less.
		{"2026-11-04", mini, A, false, SideBoth, nil, Counts{Input: -50, Output: 3000}, SeverityWarning},
		{"2026-11-04", mini, "key_ghi789", false, SideLedgerOnly,
			nil, Counts{Requests: -5, Input: -8000, Output: -1000}, SeverityCritical},
	}
	if diff := cmp.Diff(want, outcomes(rep)); diff != "" {
		t.Errorf("reconciliation (-want +got):\n%s", diff)
	}
	// The unexplained total is exactly what was planted as unexplained.
	wantUnexplained := Counts{Requests: 20 - 5, Input: 30000 - 8000 - 50, Output: 5000 - 1000 + 60 + 3000}
	if rep.Unexplained != wantUnexplained {
		t.Errorf("unexplained total %+v; want %+v", rep.Unexplained, wantUnexplained)
	}
	// Explained + unexplained = the whole difference, per quantity.
	sum := rep.Unexplained
	for _, c := range rep.Explained {
		sum = sum.add(c)
	}
	if sum != rep.Diff {
		t.Errorf("explained + unexplained = %+v; diff = %+v", sum, rep.Diff)
	}
	if rep.Severity != SeverityCritical {
		t.Errorf("report severity %v", rep.Severity)
	}
	golden(t, rep, "openai_report")
}

// The generic (CNY) bill counts input without cached tokens, and on one
// line also bills two failed attempts.
func TestReconcileGeneric(t *testing.T) {
	bill := readBill(t, "generic_bill.csv", func(f *os.File) ([]BillLine, error) { return ParseGenericCSV(f, genericMap) })
	rep := Reconcile(bill, readLedger(t, "ledger_generic.json"), DefaultTolerance())
	k := "sk-****a1b2"
	want := []outcome{
		{"2026-11-02", "deepseek-chat", k, false, SideBoth,
			[]Explanation{{CauseCachedConvention, Counts{Input: -600000}}}, Counts{}, SeverityExplained},
		{"2026-11-03", "deepseek-chat", k, false, SideBoth,
			[]Explanation{{CauseCachedConvention, Counts{Input: -300000}}, {CauseRetryBilled, Counts{Requests: 2, Input: 6000}}},
			Counts{}, SeverityExplained},
		{"2026-11-03", "deepseek-reasoner", k, false, SideBoth,
			[]Explanation{{CauseCachedConvention, Counts{Input: -100000}}}, Counts{Requests: -2}, SeverityWarning},
	}
	if diff := cmp.Diff(want, outcomes(rep)); diff != "" {
		t.Errorf("reconciliation (-want +got):\n%s", diff)
	}
	golden(t, rep, "generic_report")
}

func TestReconcileRules(t *testing.T) {
	tol := Tolerance{Warn: 0.01, Critical: 0.05, TokenizerDrift: 0.1, MinTokens: 10}
	cases := []struct {
		name   string
		bill   []BillLine
		ledger []LedgerLine
		want   []outcome
	}{
		{"keys ignored unless both sides have them",
			[]BillLine{{Day: "d", Model: "m", Input: 100}},
			[]LedgerLine{{Day: "d", Model: "m", Key: "k1", Input: 60}, {Day: "d", Model: "m", Key: "k2", Input: 40}},
			[]outcome{{"d", "m", "", false, SideBoth, nil, Counts{}, SeverityOK}}},
		{"a cause never acts against its direction: fewer billed retries are not explained",
			[]BillLine{{Day: "d", Model: "m", Requests: 8, Input: 800}},
			[]LedgerLine{{Day: "d", Model: "m", Requests: 10, Input: 1000, FailedAttempts: 2, FailedAttemptInputEstimate: 200}},
			[]outcome{{"d", "m", "", false, SideBoth, nil, Counts{Requests: -2, Input: -200}, SeverityCritical}}},
		{"a cause explains no more than its evidence",
			[]BillLine{{Day: "d", Model: "m", Requests: 15, Input: 1500}},
			[]LedgerLine{{Day: "d", Model: "m", Requests: 10, Input: 1000, FailedAttempts: 2, FailedAttemptInputEstimate: 200}},
			[]outcome{{"d", "m", "", false, SideBoth, []Explanation{{CauseRetryBilled, Counts{Requests: 2, Input: 200}}},
				Counts{Requests: 3, Input: 300}, SeverityCritical}}},
		{"tokenizer drift is bounded both ways",
			[]BillLine{{Day: "d", Model: "m", Input: 10000, Output: 700}},
			[]LedgerLine{{Day: "d", Model: "m", Input: 10500, Output: 1000, TokenizerInput: 1000, TokenizerOutput: 1000}},
			[]outcome{{"d", "m", "", false, SideBoth, []Explanation{{CauseTokenizer, Counts{Input: -100, Output: -100}}},
				Counts{Input: -400, Output: -200}, SeverityCritical}}},
		{"cut streams without a limit explain no output",
			[]BillLine{{Day: "d", Model: "m", Output: 1100}},
			[]LedgerLine{{Day: "d", Model: "m", Output: 1000, CutStreams: 1, CutOutputTokens: 10}},
			[]outcome{{"d", "m", "", false, SideBoth, nil, Counts{Output: 100}, SeverityCritical}}},
		{"one unknown limit voids the sum",
			[]BillLine{{Day: "d", Model: "m", Output: 1100}},
			[]LedgerLine{{Day: "d", Model: "m", Output: 500, CutStreams: 1, CutOutputTokens: 10, CutOutputLimit: 4096},
				{Day: "d", Model: "m", Output: 500, CutStreams: 1, CutOutputTokens: 10}},
			[]outcome{{"d", "m", "", false, SideBoth, nil, Counts{Output: 100}, SeverityCritical}}},
		{"ledger input excluding cached (+C)",
			[]BillLine{{Day: "d", Model: "m", Input: 1000, Cached: 400}},
			[]LedgerLine{{Day: "d", Model: "m", Input: 600, Cached: 400}},
			[]outcome{{"d", "m", "", false, SideBoth, []Explanation{{CauseCachedConvention, Counts{Input: 400}}}, Counts{}, SeverityExplained}}},
		{"no cached column: cached not compared, ledger's cached used for the convention",
			[]BillLine{{Day: "d", Model: "m", Input: 600, NoCached: true}},
			[]LedgerLine{{Day: "d", Model: "m", Input: 1000, Cached: 400}},
			[]outcome{{"d", "m", "", false, SideBoth, []Explanation{{CauseCachedConvention, Counts{Input: -400}}}, Counts{}, SeverityExplained}}},
		{"differences under the noise floor are ok",
			[]BillLine{{Day: "d", Model: "m", Input: 1000005}},
			[]LedgerLine{{Day: "d", Model: "m", Input: 1000000}},
			[]outcome{{"d", "m", "", false, SideBoth, nil, Counts{Input: 5}, SeverityOK}}},
		{"cache hits unknown when usage never arrived",
			[]BillLine{{Day: "d", Model: "m", Input: 1000, Cached: 300}},
			[]LedgerLine{{Day: "d", Model: "m", Input: 1000, Cached: 100, TokenizerInput: 500}},
			[]outcome{{"d", "m", "", false, SideBoth, []Explanation{{CauseTokenizer, Counts{Cached: 200}}}, Counts{}, SeverityExplained}}},
		{"all-zero ledger line is ok on its own",
			nil,
			[]LedgerLine{{Day: "d", Model: "m", FailedAttempts: 1}},
			[]outcome{{"d", "m", "", false, SideLedgerOnly, nil, Counts{}, SeverityOK}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if diff := cmp.Diff(c.want, outcomes(Reconcile(c.bill, c.ledger, tol))); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestReconcileCostNotes(t *testing.T) {
	usd, cny := Money{1, "USD"}, Money{2, "CNY"}
	rep := Reconcile([]BillLine{{Day: "d", Model: "m", Cost: &usd}, {Day: "d", Model: "m", Cost: &cny}},
		[]LedgerLine{{Day: "d", Model: "m"}, {Day: "d", Model: "m", CutStreams: 2}}, DefaultTolerance())
	l := rep.Lines[0]
	if l.BillCost == nil || *l.BillCost != usd || len(l.Notes) != 1 {
		t.Errorf("mixed currencies: cost %v notes %q", l.BillCost, l.Notes)
	}
}

// golden compares the text and JSON renderings with testdata/<name>.txt and
// .json; go test -update rewrites them.
func golden(t *testing.T, rep Report, name string) {
	t.Helper()
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []struct {
		file string
		got  []byte
	}{{name + ".txt", text.Bytes()}, {name + ".json", append(js, '\n')}} {
		path := filepath.Join("testdata", g.file)
		if *update {
			if err := os.WriteFile(path, g.got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test -update to create it)", err)
		}
		if diff := cmp.Diff(string(want), string(g.got)); diff != "" {
			t.Errorf("%s differs (-want +got; go test -update to accept):\n%s", path, diff)
		}
	}
}
