package report

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/tollgate-dev/tollgate/internal/record"
)

// Formats a Result renders to.
var Formats = []string{"table", "json", "csv"}

// Render writes res in format: table (for people), json, csv (raw values:
// money in the currency's units with nine decimals, shares as 0–1).
func Render(w io.Writer, res *Result, format string) error {
	switch format {
	case "table", "":
		return renderTable(w, res)
	case "json":
		return renderJSON(w, res)
	case "csv":
		return renderCSV(w, res)
	default:
		return fmt.Errorf("unknown format %q; one of %s", format, strings.Join(Formats, ", "))
	}
}

func renderTable(w io.Writer, res *Result) error {
	period := ""
	if res.From != "" || res.To != "" {
		period = fmt.Sprintf("  [%s, %s)", res.From, res.To)
	}
	fmt.Fprintf(w, "%s%s\n\n", res.Title, period)
	if len(res.Rows) == 0 {
		fmt.Fprintln(w, "no data for this period")
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		for i, c := range res.Columns {
			if i > 0 {
				fmt.Fprint(tw, "\t")
			}
			fmt.Fprint(tw, strings.ToUpper(c.Name))
		}
		fmt.Fprintln(tw, "\t")
		for _, row := range res.Rows {
			for i, v := range row {
				if i > 0 {
					fmt.Fprint(tw, "\t")
				}
				fmt.Fprint(tw, human(res.Columns[i].Kind, v))
			}
			fmt.Fprintln(tw, "\t")
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, n := range res.Notes {
		fmt.Fprintln(w, "\n! "+n)
	}
	return nil
}

func human(kind string, v any) string {
	switch kind {
	case KindMoney:
		n, _ := v.(int64)
		return moneyHuman(n)
	case KindPercent:
		f, _ := v.(float64)
		return strconv.FormatFloat(f*100, 'f', 1, 64) + "%"
	case KindFloat:
		f, _ := v.(float64)
		return strconv.FormatFloat(f, 'f', 1, 64)
	case KindInt:
		n, _ := v.(int64)
		return groupThousands(n)
	default:
		return fmt.Sprint(v)
	}
}

// moneyHuman shows enough digits to tell small amounts apart: 4 decimals
// below 1, 2 above.
func moneyHuman(nanos int64) string {
	f := float64(nanos) / 1e9
	if f != 0 && f < 1 && f > -1 {
		return strconv.FormatFloat(f, 'f', 4, 64)
	}
	return strconv.FormatFloat(f, 'f', 2, 64)
}

func groupThousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// raw is a value for machines: money as an exact decimal string.
func raw(kind string, v any) any {
	if kind == KindMoney {
		n, _ := v.(int64)
		return record.Cost{Nanos: n}.Amount()
	}
	return v
}

func renderJSON(w io.Writer, res *Result) error {
	type out struct {
		*Result
		Rows []map[string]any `json:"rows"`
	}
	o := out{Result: res, Rows: make([]map[string]any, 0, len(res.Rows))}
	for _, row := range res.Rows {
		m := make(map[string]any, len(row))
		for i, v := range row {
			m[res.Columns[i].Name] = raw(res.Columns[i].Kind, v)
		}
		o.Rows = append(o.Rows, m)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(o)
}

func renderCSV(w io.Writer, res *Result) error {
	cw := csv.NewWriter(w)
	head := make([]string, len(res.Columns))
	for i, c := range res.Columns {
		head[i] = c.Name
	}
	if err := cw.Write(head); err != nil {
		return err
	}
	for _, row := range res.Rows {
		rec := make([]string, len(row))
		for i, v := range row {
			rec[i] = fmt.Sprint(raw(res.Columns[i].Kind, v))
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
