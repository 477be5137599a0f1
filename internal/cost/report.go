package cost

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteText renders the report as aligned tables: one row per line and
// quantity, then the notes, then the totals by cause. Every line is shown,
// matching ones too, so the reader sees what was compared, not only what
// failed. JSON (encoding/json on Report) carries the same data.
func (r Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DAY\tMODEL\tKEY\tSIDE\tSEVERITY\tQUANTITY\tBILL\tLEDGER\tDIFF\tEXPLAINED\tUNEXPLAINED")
	for _, ln := range r.Lines {
		id := []string{ln.Day, orDash(ln.Model), orDash(ln.Key), string(ln.Side), ln.Severity.String()}
		if ln.Batch {
			id[2] += " (batch)"
		}
		for i, q := range quantities {
			if i > 0 {
				id = []string{"", "", "", "", ""}
			}
			diff, unexpl := signed(q.get(ln.Diff)), signed(q.get(ln.Unexplained))
			if q.name == "cached" && ln.NoCached {
				diff, unexpl = "n/a", "n/a"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", strings.Join(id, "\t"), q.name,
				q.get(ln.Bill), q.get(ln.Ledger), diff, explainedCell(ln.Explained, q), unexpl)
		}
		if ln.BillCost != nil || ln.LedgerCost != nil {
			fmt.Fprintf(tw, "\t\t\t\t\tcost\t%s\t%s\t%s\t-\t-\n", moneyCell(ln.BillCost), moneyCell(ln.LedgerCost), costDiff(ln.BillCost, ln.LedgerCost))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	var notes []string
	for _, ln := range r.Lines {
		for _, n := range ln.Notes {
			notes = append(notes, fmt.Sprintf("  %s %s %s: %s", ln.Day, orDash(ln.Model), orDash(ln.Key), n))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintf(w, "\nNotes:\n%s\n", strings.Join(notes, "\n"))
	}

	fmt.Fprintf(w, "\nTotals (severity %s):\n", r.Severity)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := []string{"QUANTITY", "BILL", "LEDGER", "DIFF"}
	for _, c := range Causes {
		head = append(head, strings.ToUpper(string(c)))
	}
	fmt.Fprintln(tw, strings.Join(append(head, "UNEXPLAINED"), "\t"))
	for _, q := range quantities {
		row := []string{q.name, strconv.FormatInt(q.get(r.Bill), 10), strconv.FormatInt(q.get(r.Ledger), 10), signed(q.get(r.Diff))}
		for _, c := range Causes {
			row = append(row, signed(q.get(r.Explained[c])))
		}
		fmt.Fprintln(tw, strings.Join(append(row, signed(q.get(r.Unexplained))), "\t"))
	}
	return tw.Flush()
}

type quantity struct {
	name string
	get  func(Counts) int64
}

var quantities = []quantity{
	{"requests", func(c Counts) int64 { return c.Requests }},
	{"input", func(c Counts) int64 { return c.Input }},
	{"cached", func(c Counts) int64 { return c.Cached }},
	{"output", func(c Counts) int64 { return c.Output }},
}

func explainedCell(ex []Explanation, q quantity) string {
	var parts []string
	for _, e := range ex {
		if v := q.get(e.Amount); v != 0 {
			parts = append(parts, string(e.Cause)+" "+signed(v))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func signed(v int64) string {
	if v > 0 {
		return "+" + strconv.FormatInt(v, 10)
	}
	return strconv.FormatInt(v, 10)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func moneyCell(m *Money) string {
	if m == nil {
		return "-"
	}
	return m.String()
}

func costDiff(b, l *Money) string {
	if b == nil || l == nil || b.Currency != l.Currency {
		return "-"
	}
	d := Money{b.Nanos - l.Nanos, b.Currency}
	if d.Nanos > 0 {
		return "+" + d.String()
	}
	return d.String()
}
