package cost

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseOpenAIUsageCSV(t *testing.T) {
	f, err := os.Open("testdata/openai_usage.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := ParseOpenAIUsageCSV(f)
	if err != nil {
		t.Fatal(err)
	}
	mini, four := "gpt-4o-mini-2024-07-18", "gpt-4o-2024-08-06"
	want := []BillLine{
		{Day: "2026-11-02", Model: mini, Key: "key_abc123", Requests: 700, Input: 1400000, Cached: 500000, Output: 200000},
		{Day: "2026-11-02", Model: mini, Key: "key_abc123", Requests: 500, Input: 1000000, Cached: 300000, Output: 160000},
		{Day: "2026-11-02", Model: four, Key: "key_abc123", Requests: 303, Input: 904500, Cached: 100000, Output: 90000}, // audio added
		{Day: "2026-11-03", Model: mini, Key: "key_abc123", Requests: 800, Input: 1602000, Cached: 0, Output: 241250},
		{Day: "2026-11-03", Model: four, Key: "key_def456", Requests: 150, Input: 450640, Cached: 50000, Output: 59880},
		{Day: "2026-11-03", Model: four, Key: "key_abc123", Requests: 1000, Input: 2000000, Output: 500000, Batch: true},
		{Day: "2026-11-04", Model: mini, Key: "key_abc123", Requests: 1000, Input: 1999950, Cached: 400000, Output: 303000},
		{Day: "2026-11-04", Model: four, Key: "key_abc123", Requests: 201, Input: 602100, Output: 50060},
		{Day: "2026-11-04", Model: "gpt-4.1-nano-2025-04-14", Key: "key_abc123", Requests: 20, Input: 30000, Output: 5000},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}
}

func TestParseOpenAIUsageCSVForms(t *testing.T) {
	cases := []struct {
		name, csv string
		want      []BillLine
	}{
		{"pandas datetimes, float counts, nulls, any order, BOM, no cached column",
			"\uFEFFModel,Start_Time,End_Time,Input_Tokens,Output_Tokens,Num_Model_Requests,api_key_id\n" +
				"gpt-4o,2026-11-02 23:59:59+00:00,2026-11-03 00:00:00+00:00,1200.0,NaN,3.0,null\n" +
				"gpt-4o,2026-11-03T07:30:00+08:00,x,5,6,1,\n",
			[]BillLine{
				{Day: "2026-11-02", Model: "gpt-4o", Requests: 3, Input: 1200, NoCached: true},
				{Day: "2026-11-02", Model: "gpt-4o", Requests: 1, Input: 5, Output: 6, NoCached: true}, // 07:30+08:00 is the 2nd in UTC
			}},
		{"legacy /v1/usage names",
			"aggregation_timestamp,n_requests,operation,snapshot_id,n_context_tokens_total,n_generated_tokens_total\n" +
				"1793577600,7,completion,gpt-3.5-turbo-0125,700,70\n",
			[]BillLine{{Day: "2026-11-02", Model: "gpt-3.5-turbo-0125", Requests: 7, Input: 700, Output: 70, NoCached: true}}},
		{"header only", "start_time,model,input_tokens,output_tokens\n", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseOpenAIUsageCSV(strings.NewReader(c.csv))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("lines (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseOpenAIUsageCSVErrors(t *testing.T) {
	const head = "start_time,model,input_tokens,output_tokens,batch\n"
	for _, c := range []struct{ name, csv, want string }{
		{"empty", "", "openai usage csv: empty file: no header row"},
		{"no model column", "start_time,input_tokens,output_tokens\n1,2,3\n",
			"openai usage csv: no model column (want one of model, snapshot_id)"},
		{"no time column", "model,input_tokens,output_tokens\n", "openai usage csv: no time column (want one of start_time, start_time_iso, aggregation_timestamp)"},
		{"empty model", head + "1793577600,,1,1,false\n", "openai usage csv: line 2: empty model (export with group_by=model)"},
		{"bad count", head + "1793577600,m,1.5,1,false\n", `openai usage csv: line 2: input_tokens: want a whole non-negative number; got "1.5"`},
		{"negative count", head + "1793577600,m,1,-1,false\n", `openai usage csv: line 2: output_tokens: want a whole non-negative number; got "-1"`},
		{"bad time", head + "yesterday,m,1,1,false\n", `openai usage csv: line 2: start_time: not a date in the expected form; got "yesterday"`},
		{"bad batch", head + "1793577600,m,1,1,maybe\n", `openai usage csv: line 2: batch: want true or false; got "maybe"`},
		{"ragged row", head + "1793577600,m,1\n", "openai usage csv: record on line 2: wrong number of fields"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseOpenAIUsageCSV(strings.NewReader(c.csv))
			if err == nil || err.Error() != c.want {
				t.Errorf("error:\n got %v\nwant %s", err, c.want)
			}
		})
	}
}

var genericMap = ColumnMap{
	Day: "日期", DayLayout: "2006/01/02", Model: "模型", Key: "API Key", Requests: "请求次数",
	Input: "输入Tokens", Cached: "缓存命中Tokens", Output: "输出Tokens", Cost: "金额", CostCurrency: "CNY",
}

func TestParseGenericCSV(t *testing.T) {
	f, err := os.Open("testdata/generic_bill.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := ParseGenericCSV(f, genericMap)
	if err != nil {
		t.Fatal(err)
	}
	cny := func(s string) *Money { return &Money{int64(MustDecimal(s)), "CNY"} }
	want := []BillLine{
		{Day: "2026-11-02", Model: "deepseek-chat", Key: "sk-****a1b2", Requests: 500, Input: 400000, Cached: 600000, Output: 200000, Cost: cny("0.42")},
		{Day: "2026-11-03", Model: "deepseek-chat", Key: "sk-****a1b2", Requests: 402, Input: 506000, Cached: 300000, Output: 100000, Cost: cny("0.278")},
		{Day: "2026-11-03", Model: "deepseek-reasoner", Key: "sk-****a1b2", Requests: 298, Input: 500000, Cached: 100000, Output: 80000, Cost: cny("1.15")},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}
}

func TestParseGenericCSVForms(t *testing.T) {
	m := ColumnMap{Day: "ts", DayLayout: "unix", Model: "m", Input: "in", Output: "out", Cost: "usd", Currency: "cur", Comma: ';'}
	got, err := ParseGenericCSV(strings.NewReader("ts;m;in;out;usd;cur\n1793663999;x;1;2;0.1;USD\n1793664000;x;3;4;;\n"), m)
	if err != nil {
		t.Fatal(err)
	}
	want := []BillLine{
		{Day: "2026-11-02", Model: "x", Input: 1, Output: 2, NoCached: true, Cost: &Money{100000000, "USD"}},
		{Day: "2026-11-03", Model: "x", Input: 3, Output: 4, NoCached: true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}
	// A zoned layout is converted to UTC before the date is taken.
	m = ColumnMap{Day: "when", DayLayout: "2006-01-02 15:04 -0700", Model: "m", Input: "in", Output: "out"}
	got, err = ParseGenericCSV(strings.NewReader("when,m,in,out\n2026-11-03 07:00 +0800,x,1,1\n"), m)
	if err != nil || len(got) != 1 || got[0].Day != "2026-11-02" {
		t.Errorf("zoned day: %+v, %v", got, err)
	}
}

func TestParseGenericCSVErrors(t *testing.T) {
	base := ColumnMap{Day: "d", Model: "m", Input: "i", Output: "o"}
	withCost := base
	withCost.Cost = "c"
	withCur := withCost
	withCur.Currency = "cur"
	for _, c := range []struct {
		name string
		m    ColumnMap
		csv  string
		want string
	}{
		{"incomplete map", ColumnMap{Day: "d"}, "", "generic csv: the column map needs day, model, input and output"},
		{"cost without currency", withCost, "", `generic csv: cost currency must be an ISO 4217 code such as USD or CNY; got ""`},
		{"missing column", base, "d,m,i\n", `generic csv: no column "o" for output`},
		{"bad date", base, "d,m,i,o\n11/02/2026,x,1,1\n", `generic csv: line 2: d: not a date in the expected form; got "11/02/2026"`},
		{"bad cost", withCur, "d,m,i,o,c,cur\n2026-11-02,x,1,1,$3,USD\n", `generic csv: line 2: c: must be a decimal number such as 0.15; got "$3"`},
		{"bad currency cell", withCur, "d,m,i,o,c,cur\n2026-11-02,x,1,1,3,dollars\n", `generic csv: line 2: cur: must be an ISO 4217 code such as USD or CNY; got "dollars"`},
		{"empty model", base, "d,m,i,o\n2026-11-02,,1,1\n", "generic csv: line 2: empty model"},
		{"bad count", base, "d,m,i,o\n2026-11-02,x,1k,1\n", `generic csv: line 2: i: want a whole non-negative number; got "1k"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseGenericCSV(strings.NewReader(c.csv), c.m)
			if err == nil || err.Error() != c.want {
				t.Errorf("error:\n got %v\nwant %s", err, c.want)
			}
		})
	}
}
