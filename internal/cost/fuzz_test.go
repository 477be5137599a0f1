package cost

import (
	"os"
	"strings"
	"testing"
	"time"
)

func FuzzParseDecimal(f *testing.F) {
	for _, s := range []string{"0.1", "2.50", "-0.000000001", "9223372036.854775807", "1e3", "NaN", ".5", "", "0.1234567891", "+7"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDecimal(s)
		if err != nil {
			return
		}
		// What parses prints back to a form that parses to the same value.
		back, err := ParseDecimal(d.String())
		if err != nil || back != d {
			t.Fatalf("%q → %d → %q → %d, %v", s, int64(d), d.String(), int64(back), err)
		}
		if m := (Money{int64(d), "USD"}).String(); !strings.HasSuffix(m, " USD") {
			t.Fatalf("money %q", m)
		}
	})
}

func checkLines(t *testing.T, lines []BillLine) {
	t.Helper()
	for _, l := range lines {
		if _, err := time.Parse(time.DateOnly, l.Day); err != nil {
			t.Fatalf("day %q: %v", l.Day, err)
		}
		if l.Model == "" || l.Requests < 0 || l.Input < 0 || l.Cached < 0 || l.Output < 0 {
			t.Fatalf("bad line %+v", l)
		}
	}
	// Whatever parses must reconcile without panicking.
	Reconcile(lines, []LedgerLine{{Day: "2026-11-02", Model: "m", Input: 1, CutStreams: 1, TokenizerInput: 1}}, DefaultTolerance())
}

func FuzzParseOpenAIUsageCSV(f *testing.F) {
	if b, err := os.ReadFile("testdata/openai_usage.csv"); err == nil {
		f.Add(string(b))
	}
	f.Add("start_time,model,input_tokens,output_tokens\n2026-11-02 10:00:00,m,1.0,null\n")
	f.Add("aggregation_timestamp,snapshot_id,n_context_tokens_total,n_generated_tokens_total\n\"1\",\"m\",2,3\n")
	f.Fuzz(func(t *testing.T, s string) {
		lines, err := ParseOpenAIUsageCSV(strings.NewReader(s))
		if err == nil {
			checkLines(t, lines)
		}
	})
}

func FuzzParseGenericCSV(f *testing.F) {
	if b, err := os.ReadFile("testdata/generic_bill.csv"); err == nil {
		f.Add(string(b), "2006/01/02")
	}
	f.Add("日期,模型,API Key,请求次数,输入Tokens,缓存命中Tokens,输出Tokens,金额\n1793577600,m,k,1,2,3,4,0.5\n", "unix")
	f.Fuzz(func(t *testing.T, s, layout string) {
		m := genericMap
		m.DayLayout = layout
		lines, err := ParseGenericCSV(strings.NewReader(s), m)
		if err == nil {
			checkLines(t, lines)
		}
	})
}

func FuzzConfig(f *testing.F) {
	if b, err := os.ReadFile("testdata/prices.good.yml"); err == nil {
		f.Add(string(b))
	}
	f.Add("prices:\n  - {model: a*, currency: USD, input: 1, output: -1}\n")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := decodeConfig(t, []byte(s))
		if err != nil {
			return
		}
		tab, err := NewTable(c)
		if err != nil {
			return
		}
		for _, p := range c.Prices {
			if _, _, ok := tab.Lookup(strings.TrimSuffix(p.Model, "*"), p.Upstream, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)); !ok {
				t.Fatalf("no price for the configured model %q", p.Model)
			}
		}
		for _, g := range c.GPUHours {
			g.Allocate([]HourRow{{Input: 10, Cached: 3, Output: 7}, {Output: 1}})
		}
	})
}
