package cost

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// BillLine is one line of a provider's usage export, reduced to what
// reconciliation compares. Parsers return one BillLine per CSV row;
// Reconcile sums rows that share a day, model and key (hourly buckets,
// several projects).
type BillLine struct {
	Day      string `json:"day"` // YYYY-MM-DD, UTC: providers bill by UTC day
	Model    string `json:"model"`
	Key      string `json:"key,omitempty"` // the provider's key id, when the export has one
	Requests int64  `json:"requests"`
	Input    int64  `json:"input"` // all input tokens, cached included (OpenAI's convention and the ledger's)
	Cached   int64  `json:"cached"`
	// CacheWrite is the tokens written to the prompt cache, when the
	// export says (Anthropic's cache creation, 5-minute and 1-hour
	// together). A bill in Anthropic's convention leaves them, like
	// cache reads, out of Input: Reconcile uses it to explain that.
	CacheWrite int64  `json:"cache_write,omitempty"`
	Output     int64  `json:"output"`
	Cost       *Money `json:"cost,omitempty"`
	// NoCached is set when the export has no cached-token column: cached
	// tokens are then not compared (a missing column is not a difference).
	NoCached bool `json:"no_cached,omitempty"`
	// Batch marks Batch API usage, which never passes through the gateway.
	Batch bool `json:"batch,omitempty"`
}

// OpenAI usage export.
//
// Source: the Usage API's completions object (GET
// /v1/organization/usage/completions, platform.openai.com/docs/api-reference/usage),
// whose buckets carry start_time and end_time (Unix seconds, UTC) and
// results with input_tokens ("including cached tokens"),
// input_cached_tokens, output_tokens, input_audio_tokens,
// output_audio_tokens, num_model_requests, project_id, user_id, api_key_id,
// model and batch. OpenAI's cookbook (examples/completions_usage_api.ipynb)
// flattens each result with its bucket's start_time/end_time into one table
// row, and that flat table written as CSV is what this parser reads. The
// exact header of the dashboard's Export button could not be established
// from public sources, so the parser matches columns by these Usage API
// names, case-insensitively and in any order, plus the older /v1/usage
// names (aggregation_timestamp, snapshot_id, n_requests,
// n_context_tokens_total, n_generated_tokens_total) for old exports.
//
// Mapping: Day is the UTC date of start_time (Unix seconds, or an ISO/RFC
// 3339 time as pandas writes it); Input = input_tokens + input_audio_tokens
// and Output = output_tokens + output_audio_tokens, because the Usage API
// counts audio apart while a chat completion's usage.prompt_tokens (what the
// ledger records) includes it; Key = api_key_id. Empty cells (null in the
// API) are 0; a row without a model is an error, since reconciliation is
// per model: export with group_by=model.
var openAIColumns = map[string][]string{
	"time":         {"start_time", "start_time_iso", "aggregation_timestamp"},
	"model":        {"model", "snapshot_id"},
	"key":          {"api_key_id"},
	"requests":     {"num_model_requests", "n_requests"},
	"input":        {"input_tokens", "n_context_tokens_total"},
	"input_audio":  {"input_audio_tokens"},
	"cached":       {"input_cached_tokens"},
	"output":       {"output_tokens", "n_generated_tokens_total"},
	"output_audio": {"output_audio_tokens"},
	"batch":        {"batch"},
}

// ParseOpenAIUsageCSV reads OpenAI's completions usage export (see
// openAIColumns for the format and its source).
func ParseOpenAIUsageCSV(r io.Reader) ([]BillLine, error) {
	t, err := readTable(r, ',')
	if err != nil {
		return nil, fmt.Errorf("openai usage csv: %w", err)
	}
	col := map[string]int{}
	for k, names := range openAIColumns {
		col[k] = t.find(names...)
	}
	for _, k := range []string{"time", "model", "input", "output"} {
		if col[k] < 0 {
			return nil, fmt.Errorf("openai usage csv: no %s column (want one of %s)", k, strings.Join(openAIColumns[k], ", "))
		}
	}
	var lines []BillLine
	for t.next() {
		var b BillLine
		var err error
		if b.Day, err = t.day(col["time"], "unix"); err != nil {
			return nil, fmt.Errorf("openai usage csv: %w", err)
		}
		if b.Model = t.cell(col["model"]); b.Model == "" {
			return nil, fmt.Errorf("openai usage csv: line %d: empty model (export with group_by=model)", t.line())
		}
		b.Key = t.cell(col["key"])
		var in, inAudio, out, outAudio int64
		for _, f := range []struct {
			k string
			p *int64
		}{{"requests", &b.Requests}, {"input", &in}, {"input_audio", &inAudio}, {"cached", &b.Cached}, {"output", &out}, {"output_audio", &outAudio}} {
			if *f.p, err = t.count(col[f.k]); err != nil {
				return nil, fmt.Errorf("openai usage csv: %w", err)
			}
		}
		b.Input, b.Output = in+inAudio, out+outAudio
		b.NoCached = col["cached"] < 0
		switch v := strings.ToLower(t.cell(col["batch"])); v {
		case "true", "1":
			b.Batch = true
		case "", "false", "0", "null", "none":
		default:
			return nil, fmt.Errorf("openai usage csv: line %d: batch: want true or false; got %q", t.line(), v)
		}
		lines = append(lines, b)
	}
	if t.err != nil {
		return nil, fmt.Errorf("openai usage csv: %w", t.err)
	}
	return lines, nil
}

// ColumnMap says which column of a provider's CSV export holds what, for
// ParseGenericCSV. Column names match the header case-insensitively.
// Model and Day are required, so are Input and Output; the rest may be "".
type ColumnMap struct {
	Day string // date or time of the row
	// DayLayout is the Go time layout of Day ("2006-01-02" when empty;
	// "unix" for Unix seconds). A layout without a zone is read as UTC; a
	// time with a zone is converted to UTC before taking its date.
	DayLayout string
	Model     string
	Key       string
	Requests  string
	Input     string // input tokens; whether cached ones are included is for Reconcile to find out
	Cached    string // "" when the export has none: cached tokens are then not compared
	// CacheWrite is the cache-write tokens, "" when the export has none.
	// Like every count it may name several columns joined by + (Anthropic
	// exports the 5-minute and 1-hour writes apart), summed per row.
	CacheWrite string
	Output     string
	Cost       string // exact decimal amount
	// Currency is a column holding each row's ISO 4217 code; without one,
	// CostCurrency is the currency of every amount.
	Currency     string
	CostCurrency string
	Comma        rune // field separator; ',' when 0
}

// ParseGenericCSV reads any provider's usage export through a column map.
func ParseGenericCSV(r io.Reader, m ColumnMap) ([]BillLine, error) {
	if m.Day == "" || m.Model == "" || m.Input == "" || m.Output == "" {
		return nil, errors.New("generic csv: the column map needs day, model, input and output")
	}
	if m.Cost != "" && m.Currency == "" && checkCurrency(m.CostCurrency) != nil {
		return nil, fmt.Errorf("generic csv: cost currency %v", checkCurrency(m.CostCurrency))
	}
	comma := m.Comma
	if comma == 0 {
		comma = ','
	}
	t, err := readTable(r, comma)
	if err != nil {
		return nil, fmt.Errorf("generic csv: %w", err)
	}
	col := map[string]int{}
	sums := map[string][]int{} // count columns, each possibly a sum of several
	for _, c := range []struct{ k, name string }{
		{"day", m.Day}, {"model", m.Model}, {"key", m.Key}, {"requests", m.Requests}, {"input", m.Input},
		{"cached", m.Cached}, {"cache_write", m.CacheWrite}, {"output", m.Output}, {"cost", m.Cost}, {"currency", m.Currency},
	} {
		col[c.k] = -1
		if c.name == "" {
			continue
		}
		names := []string{c.name}
		if isCount(c.k) {
			names = strings.Split(c.name, "+")
		}
		for _, n := range names {
			i := t.find(strings.TrimSpace(n))
			if i < 0 {
				return nil, fmt.Errorf("generic csv: no column %q for %s", strings.TrimSpace(n), c.k)
			}
			col[c.k] = i
			sums[c.k] = append(sums[c.k], i)
		}
	}
	layout := m.DayLayout
	if layout == "" {
		layout = time.DateOnly
	}
	var lines []BillLine
	for t.next() {
		b := BillLine{Key: t.cell(col["key"]), NoCached: col["cached"] < 0}
		var err error
		if b.Day, err = t.day(col["day"], layout); err != nil {
			return nil, fmt.Errorf("generic csv: %w", err)
		}
		if b.Model = t.cell(col["model"]); b.Model == "" {
			return nil, fmt.Errorf("generic csv: line %d: empty model", t.line())
		}
		for _, f := range []struct {
			k string
			p *int64
		}{{"requests", &b.Requests}, {"input", &b.Input}, {"cached", &b.Cached}, {"cache_write", &b.CacheWrite}, {"output", &b.Output}} {
			for _, i := range sums[f.k] {
				n, err := t.count(i)
				if err != nil {
					return nil, fmt.Errorf("generic csv: %w", err)
				}
				*f.p += n
			}
		}
		if col["cost"] >= 0 && t.cell(col["cost"]) != "" {
			d, err := ParseDecimal(t.cell(col["cost"]))
			if err != nil {
				return nil, fmt.Errorf("generic csv: line %d: %s: %v", t.line(), t.header[col["cost"]], err)
			}
			cur := m.CostCurrency
			if col["currency"] >= 0 {
				cur = t.cell(col["currency"])
				if err := checkCurrency(cur); err != nil {
					return nil, fmt.Errorf("generic csv: line %d: %s: %v", t.line(), t.header[col["currency"]], err)
				}
			}
			b.Cost = &Money{int64(d), cur}
		}
		lines = append(lines, b)
	}
	if t.err != nil {
		return nil, fmt.Errorf("generic csv: %w", t.err)
	}
	return lines, nil
}

// isCount says whether a column-map key is a count, which may sum columns.
func isCount(k string) bool {
	switch k {
	case "requests", "input", "cached", "cache_write", "output":
		return true
	}
	return false
}

// table walks a CSV file with a header row.
type table struct {
	r      *csv.Reader
	header []string
	rec    []string
	err    error
}

func readTable(r io.Reader, comma rune) (*table, error) {
	cr := csv.NewReader(r)
	cr.Comma = comma
	cr.TrimLeadingSpace = true
	h, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, errors.New("empty file: no header row")
	}
	if err != nil {
		return nil, err
	}
	for i := range h {
		h[i] = strings.TrimSpace(h[i])
	}
	if len(h) > 0 {
		h[0] = strings.TrimPrefix(h[0], "\uFEFF") // spreadsheet exports start with a BOM
	}
	return &table{r: cr, header: h}, nil
}

func (t *table) next() bool {
	rec, err := t.r.Read()
	if err != nil {
		if !errors.Is(err, io.EOF) {
			t.err = err
		}
		return false
	}
	t.rec = rec
	return true
}

// find returns the index of the first header matching one of names, or -1.
func (t *table) find(names ...string) int {
	for _, n := range names {
		for i, h := range t.header {
			if strings.EqualFold(h, n) {
				return i
			}
		}
	}
	return -1
}

func (t *table) line() int {
	l, _ := t.r.FieldPos(0)
	return l
}

func (t *table) cell(i int) string {
	if i < 0 || i >= len(t.rec) {
		return ""
	}
	v := strings.TrimSpace(t.rec[i])
	if strings.EqualFold(v, "null") || strings.EqualFold(v, "none") || strings.EqualFold(v, "nan") {
		return "" // how JSON nulls come out of the API and pandas
	}
	return v
}

// count reads a token or request count. Pandas writes integer columns with
// missing values as floats ("1200.0"), so a zero fraction is accepted.
func (t *table) count(i int) (int64, error) {
	v := t.cell(i)
	if v == "" {
		return 0, nil
	}
	if w, frac, ok := strings.Cut(v, "."); ok && strings.Trim(frac, "0") == "" {
		v = w
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("line %d: %s: want a whole non-negative number; got %q", t.line(), t.header[i], t.rec[i])
	}
	return n, nil
}

// dayLayouts are the forms a time column takes in the exports seen: Unix
// seconds from the API, RFC 3339 from JSON tools, pandas' datetime text.
var dayLayouts = []string{time.RFC3339Nano, "2006-01-02 15:04:05Z07:00", "2006-01-02 15:04:05", time.DateOnly}

// day reads column i as a UTC date. layout "unix" means Unix seconds, but
// the OpenAI parser also takes the textual forms of dayLayouts.
func (t *table) day(i int, layout string) (string, error) {
	v := t.cell(i)
	bad := func() (string, error) {
		return "", fmt.Errorf("line %d: %s: not a date in the expected form; got %q", t.line(), t.header[i], v)
	}
	if layout == "unix" {
		s := v
		if w, frac, ok := strings.Cut(s, "."); ok && digits(frac) {
			s = w
		}
		if sec, err := strconv.ParseInt(s, 10, 64); err == nil {
			if sec < 0 || sec > 253402300799 { // 9999-12-31
				return bad()
			}
			return time.Unix(sec, 0).UTC().Format(time.DateOnly), nil
		}
		for _, l := range dayLayouts {
			if tm, err := time.Parse(l, v); err == nil {
				return tm.UTC().Format(time.DateOnly), nil
			}
		}
		return bad()
	}
	tm, err := time.Parse(layout, v)
	if err != nil {
		return bad()
	}
	return tm.UTC().Format(time.DateOnly), nil
}
