package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// AnalyticsStore is a whole backend, as the gateway's CLI and API use.
type AnalyticsStore interface {
	store.Backend
}

// RunAnalytics checks the rollup contract: a report equals the sums over
// the ledger rows it covers — whatever the grouping, after replays, after
// re-rating — for a backend whose report time zone is UTC.
func RunAnalytics(t *testing.T, open func(t *testing.T) AnalyticsStore) {
	runEach(t, open, analyticsTests())
}

// RunAnalyticsOnly runs the named tests of RunAnalytics, for a backend
// that implements part of store.Backend so far (the others answer
// "not implemented"); a name the suite does not have fails.
func RunAnalyticsOnly(t *testing.T, open func(t *testing.T) AnalyticsStore, names ...string) {
	all := analyticsTests()
	var some []namedTest[AnalyticsStore]
	for _, n := range names {
		i := slices.IndexFunc(all, func(tt namedTest[AnalyticsStore]) bool { return tt.name == n })
		if i < 0 {
			t.Errorf("RunAnalyticsOnly: no test %q", n)
			continue
		}
		some = append(some, all[i])
	}
	runEach(t, open, some)
}

func analyticsTests() []namedTest[AnalyticsStore] {
	return []namedTest[AnalyticsStore]{
		{"ReportEqualsLedgerSums", testReportSums},
		{"ReportIdempotent", testReportIdempotent},
		{"ReportRanges", testReportRanges},
		{"ReportAcrossMonths", testReportAcrossMonths},
		{"ReportMeasures", testReportMeasures},
		{"ReportCurrenciesApart", testReportCurrencies},
		{"UsageMissingOnlyWhereMetered", testUsageMissingMetered},
		{"Rerate", testRerate},
		{"Prompts", testPrompts},
		{"Events", testEvents},
		{"Prune", testPrune},
		{"PruneRollupsByMonth", testPruneRollupsByMonth},
		{"BadDimension", testBadDimension},
		{"SetEngineTiming", testSetEngineTiming},
		{"EngineSamples", testEngineSamples},
		{"WindowMinutes", testWindowMinutes},
		{"WindowHours", testWindowHours},
		{"WindowDays", testWindowDays},
		{"ReportByMinute", testReportByMinute},
		{"ReportByEndUser", testReportByEndUser},
	}
}

// day0 is a UTC midnight; analytics records arrive over three days.
var day0 = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// billed returns n varied records over three days: several users, models,
// templates, failures, cut streams, retries and two currencies.
func billed(n int) []*record.Record {
	out := make([]*record.Record, n)
	for i := range n {
		r := Record(i)
		r.Arrival = day0.Add(time.Duration(i) * 3 * 24 * time.Hour / time.Duration(n))
		r.Cost = record.Cost{Nanos: int64(1000 + i*37), Currency: "USD", PriceVersion: "v1"}
		if i%11 == 0 {
			r.Cost.Currency = "CNY"
		}
		r.Retries = i % 3 / 2
		if i%9 == 0 {
			r.Usage.Source = record.SourceChunks
		}
		if i%6 == 0 {
			r.FinishReason = "length"
		}
		r.PromptSHA256 = fmt.Sprintf("p%d", i%5)
		r.Finish()
		out[i] = r
	}
	return out
}

// sums groups records the way a report should.
func sums(recs []*record.Record, key func(*record.Record) string) map[string]store.Totals {
	m := map[string]store.Totals{}
	for _, r := range recs {
		k := key(r) + "|" + r.Cost.Currency
		t := m[k]
		t.Add(store.TotalsOf(r))
		m[k] = t
	}
	return m
}

func reportMap(t *testing.T, s AnalyticsStore, q store.ReportQuery) map[string]store.Totals {
	t.Helper()
	rows, err := s.Report(context.Background(), q)
	if err != nil {
		t.Fatalf("Report(%+v): %v", q, err)
	}
	m := map[string]store.Totals{}
	for _, r := range rows {
		k := strings.Join(r.Keys, "/") + "|" + r.Currency
		if _, dup := m[k]; dup {
			t.Errorf("Report(%+v): group %q twice", q, k)
		}
		m[k] = r.Totals
	}
	return m
}

func testReportSums(t *testing.T, s AnalyticsStore) {
	recs := billed(300)
	insert(t, s, recs...)
	cases := []struct {
		by  []store.Dim
		key func(*record.Record) string
	}{
		{nil, func(*record.Record) string { return "" }},
		{[]store.Dim{store.DimUser, store.DimDay}, func(r *record.Record) string { return r.UserID + "/" + r.Arrival.UTC().Format(time.DateOnly) }},
		{[]store.Dim{store.DimBizLine, store.DimMonth}, func(r *record.Record) string { return r.BizLine + "/" + r.Arrival.UTC().Format("2006-01") }},
		{[]store.Dim{store.DimModel, store.DimServedModel}, func(r *record.Record) string { return r.Model + "/" + r.ServedModel }},
		{[]store.Dim{store.DimTemplate}, func(r *record.Record) string { return r.TemplateID }},
		{[]store.Dim{store.DimKey, store.DimUpstream}, func(r *record.Record) string { return r.KeyID + "/" + r.Upstream }},
		{[]store.Dim{store.DimHour}, func(r *record.Record) string { return r.Arrival.UTC().Truncate(time.Hour).Format(time.RFC3339) }},
	}
	for _, tc := range cases {
		want := sums(recs, tc.key)
		got := reportMap(t, s, store.ReportQuery{GroupBy: tc.by})
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("group by %v (-ledger sums +report):\n%s", tc.by, diff)
		}
	}
	// Filtered: one user's totals.
	want := sums(filter(recs, func(r *record.Record) bool { return r.UserID == "user-3" }), func(*record.Record) string { return "" })
	got := reportMap(t, s, store.ReportQuery{Where: map[store.Dim]string{store.DimUser: "user-3"}})
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("where user-3 (-want +got):\n%s", diff)
	}
}

func filter(recs []*record.Record, keep func(*record.Record) bool) []*record.Record {
	var out []*record.Record
	for _, r := range recs {
		if keep(r) {
			out = append(out, r)
		}
	}
	return out
}

func testReportIdempotent(t *testing.T, s AnalyticsStore) {
	recs := billed(60)
	insert(t, s, recs...)
	insert(t, s, recs[10:40]...) // a replay: ledger and rollups unchanged
	got := reportMap(t, s, store.ReportQuery{})
	want := sums(recs, func(*record.Record) string { return "" })
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("after a replay (-want +got):\n%s", diff)
	}
}

func testReportRanges(t *testing.T, s AnalyticsStore) {
	recs := billed(240)
	insert(t, s, recs...)
	ranges := []struct{ from, to time.Time }{
		{day0, day0.Add(24 * time.Hour)},                                    // a whole day: day rollups
		{day0.Add(24 * time.Hour), day0.Add(72 * time.Hour)},                // two days
		{day0.Add(5 * time.Hour), day0.Add(30 * time.Hour)},                 // inside days: hour rollups
		{day0.Add(30*time.Hour + 10*time.Minute), day0.Add(50 * time.Hour)}, // from rounds down to the hour
	}
	for _, rg := range ranges {
		from := rg.from.Truncate(time.Hour)
		in := filter(recs, func(r *record.Record) bool { return !r.Arrival.Before(from) && r.Arrival.Before(rg.to) })
		want := sums(in, func(r *record.Record) string { return r.UserID + "/" + r.Arrival.UTC().Format(time.DateOnly) })
		got := reportMap(t, s, store.ReportQuery{From: rg.from, To: rg.to, GroupBy: []store.Dim{store.DimUser, store.DimDay}})
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("[%v, %v) (-want +got):\n%s", rg.from, rg.to, diff)
		}
	}
}

func testReportAcrossMonths(t *testing.T, s AnalyticsStore) { ReportPeriods(t, s, time.UTC) }

// ReportPeriods checks periods a store may answer from several rollups at
// once (months, days, the hours at the ends): every combination of period,
// grouping and filter equals the ledger's sums, with days and months in
// loc, the store's report time zone. s must be empty.
func ReportPeriods(t *testing.T, s AnalyticsStore, loc *time.Location) {
	start := time.Date(2026, 1, 20, 0, 0, 0, 0, loc)
	recs := make([]*record.Record, 700)
	for i := range recs {
		r := Record(i)
		// About 70 days, at odd minutes, so every hour and day differs.
		r.Arrival = start.Add(time.Duration(i)*143*time.Minute + time.Duration(i%13)*time.Minute)
		r.Cost = record.Cost{Nanos: int64(500 + i*13), Currency: "USD", PriceVersion: "v1"}
		if i%10 == 0 {
			r.Cost.Currency = "CNY"
		}
		if i%8 == 0 {
			r.FinishReason = "length"
		}
		r.Finish()
		recs[i] = r
	}
	insert(t, s, recs...)
	at := func(month time.Month, day, hour int) time.Time {
		return time.Date(2026, month, day, hour, 0, 0, 0, loc)
	}
	ranges := []struct{ from, to time.Time }{
		{},                           // everything
		{at(2, 1, 0), at(3, 1, 0)},   // one whole month
		{at(1, 25, 0), at(3, 10, 0)}, // days, a month, days
		{at(1, 25, 5), at(3, 10, 7)}, // hours, days, a month, days, hours
		{time.Time{}, at(2, 15, 3)},  // unbounded start
		{at(2, 3, 13), time.Time{}},  // unbounded end
		{at(2, 10, 0), at(2, 10, 5)}, // inside a day
		{at(1, 31, 22), at(2, 1, 2)}, // across a month's end, hours only
		{at(1, 31, 22), at(3, 1, 2)}, // hours, a month, hours
		{at(2, 1, 0), at(2, 28, 0)},  // days of one month
		{at(1, 1, 0), at(5, 1, 0)},   // months beyond the data
		{at(3, 31, 23), at(4, 1, 1)}, // hours after the data
		{at(3, 7, 0), at(3, 10, 0)},  // days across New York's spring change
		{at(3, 8, 1), at(3, 9, 5)},   // hours of a 23-hour day (in Havana: a day that starts at 01:00)
		{at(3, 7, 12), at(3, 10, 0)}, // hours, then the day whose midnight Havana skips
		{at(3, 5, 0), at(3, 8, 12)},  // days, then hours of that day
		{at(3, 8, 0), at(3, 9, 0)},   // that day alone (in Havana its midnight does not exist)
	}
	type by struct {
		dims []store.Dim
		key  func(*record.Record) string
	}
	day := func(r *record.Record) string { return r.Arrival.In(loc).Format(time.DateOnly) }
	month := func(r *record.Record) string { return r.Arrival.In(loc).Format("2006-01") }
	groupings := []by{
		{nil, func(*record.Record) string { return "" }},
		{[]store.Dim{store.DimUser}, func(r *record.Record) string { return r.UserID }},
		{[]store.Dim{store.DimUser, store.DimDay}, func(r *record.Record) string { return r.UserID + "/" + day(r) }},
		{[]store.Dim{store.DimBizLine, store.DimMonth}, func(r *record.Record) string { return r.BizLine + "/" + month(r) }},
		{[]store.Dim{store.DimModel, store.DimServedModel}, func(r *record.Record) string { return r.Model + "/" + r.ServedModel }},
		{[]store.Dim{store.DimModel, store.DimTemplate, store.DimMonth}, func(r *record.Record) string {
			return r.Model + "/" + r.TemplateID + "/" + month(r)
		}},
		{[]store.Dim{store.DimKey, store.DimMonth}, func(r *record.Record) string { return r.KeyID + "/" + month(r) }},
		{[]store.Dim{store.DimUser, store.DimModel}, func(r *record.Record) string { return r.UserID + "/" + r.Model }},
		{[]store.Dim{store.DimMonth, store.DimDay}, func(r *record.Record) string { return month(r) + "/" + day(r) }},
	}
	filters := []map[store.Dim]string{
		nil,
		{store.DimUser: "user-3"},
		{store.DimBizLine: "biz-1", store.DimTemplate: "tpl-2"},
		{store.DimKey: "key-4"},
	}
	match := func(r *record.Record, f map[store.Dim]string) bool {
		v := map[store.Dim]string{store.DimUser: r.UserID, store.DimBizLine: r.BizLine, store.DimTemplate: r.TemplateID, store.DimKey: r.KeyID}
		for d, want := range f {
			if v[d] != want {
				return false
			}
		}
		return true
	}
	// Hour rollups are UTC hours: where midnight is not on one (India),
	// only periods of whole local days can be exact.
	midnight := func(t time.Time) bool {
		lt := t.In(loc)
		return t.IsZero() || lt.Hour() == 0 && lt.Minute() == 0 && lt.Second() == 0
	}
	offHours := at(2, 1, 0).Unix()%3600 != 0
	for _, rg := range ranges {
		if offHours && !(midnight(rg.from) && midnight(rg.to)) {
			continue
		}
		for _, g := range groupings {
			for _, f := range filters {
				in := filter(recs, func(r *record.Record) bool {
					return (rg.from.IsZero() || !r.Arrival.Before(rg.from)) && (rg.to.IsZero() || r.Arrival.Before(rg.to)) && match(r, f)
				})
				want := sums(in, g.key)
				got := reportMap(t, s, store.ReportQuery{From: rg.from, To: rg.to, GroupBy: g.dims, Where: f})
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("[%v, %v) by %v where %v (-ledger sums +report):\n%s", rg.from, rg.to, g.dims, f, diff)
				}
			}
		}
	}
	// Rows come sorted by their keys, then currency.
	rows, err := s.Report(context.Background(), store.ReportQuery{GroupBy: []store.Dim{store.DimUser, store.DimMonth}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.IsSortedFunc(rows, func(a, b store.ReportRow) int {
		if c := slices.Compare(a.Keys, b.Keys); c != 0 {
			return c
		}
		return strings.Compare(a.Currency, b.Currency)
	}) {
		t.Error("report rows are not sorted by keys, then currency")
	}
}

// testReportMeasures: asking for some measures gives exactly those sums,
// the rest zero; an unknown name is refused, naming it.
func testReportMeasures(t *testing.T, s AnalyticsStore) {
	recs := billed(120)
	insert(t, s, recs...)
	ctx := context.Background()
	q := store.ReportQuery{GroupBy: []store.Dim{store.DimUser, store.DimMonth}}
	all, err := s.Report(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	q.Measures = []string{"output_tokens", "cost_nanos", "e2e_sum_ns"}
	some, err := s.Report(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if len(some) != len(all) {
		t.Fatalf("%d groups with some measures, %d with all", len(some), len(all))
	}
	for i := range all {
		var want store.Totals
		for _, m := range store.Measures {
			if slices.Contains(q.Measures, m.Name) {
				*m.Field(&want) = *m.Field(&all[i].Totals)
			}
		}
		if want.Output == 0 || want.CostNanos == 0 || want.E2ESumNS == 0 {
			t.Fatalf("group %v: the measures asked for are zero in the full report too; the check needs them", all[i].Keys)
		}
		if diff := cmp.Diff(want, some[i].Totals); diff != "" || !slices.Equal(some[i].Keys, all[i].Keys) {
			t.Errorf("group %v with measures %v (-want +got):\n%s", all[i].Keys, q.Measures, diff)
		}
	}
	q.Measures = []string{"requests", "tokens"}
	if _, err := s.Report(ctx, q); err == nil || !strings.Contains(err.Error(), `"tokens"`) {
		t.Errorf("unknown measure: err = %v, want one naming \"tokens\"", err)
	}
}

func testReportCurrencies(t *testing.T, s AnalyticsStore) {
	recs := billed(33)
	insert(t, s, recs...)
	rows, err := s.Report(context.Background(), store.ReportQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var cur []string
	for _, r := range rows {
		cur = append(cur, r.Currency)
	}
	slices.Sort(cur)
	if !slices.Equal(cur, []string{"CNY", "USD"}) {
		t.Errorf("currencies = %v, want one row each for CNY and USD", cur)
	}
}

func testRerate(t *testing.T, s AnalyticsStore) {
	recs := billed(100)
	insert(t, s, recs...)
	ctx := context.Background()
	// Re-rate the second day at a flat price in EUR.
	from, to := day0.Add(24*time.Hour), day0.Add(48*time.Hour)
	rate := func(r *record.Record) record.Cost {
		return record.Cost{Nanos: r.Usage.InputTokens * 10, Currency: "EUR", PriceVersion: "v2"}
	}
	n, err := s.Rerate(ctx, from, to, rate)
	if err != nil {
		t.Fatal(err)
	}
	var want []*record.Record
	changed := 0
	for _, r := range recs {
		c := *r
		if !r.Arrival.Before(from) && r.Arrival.Before(to) {
			c.Cost = rate(r)
			changed++
		}
		want = append(want, &c)
	}
	if n != changed {
		t.Errorf("Rerate changed %d rows, want %d", n, changed)
	}
	got := reportMap(t, s, store.ReportQuery{GroupBy: []store.Dim{store.DimDay}})
	wantSums := sums(want, func(r *record.Record) string { return r.Arrival.UTC().Format(time.DateOnly) })
	for k, v := range got { // moved-out groups remain as zero rows
		if v == (store.Totals{}) {
			delete(got, k)
		}
	}
	if diff := cmp.Diff(wantSums, got); diff != "" {
		t.Errorf("rollups after rerate (-want +got):\n%s", diff)
	}
	// The ledger rows carry the new cost and price version.
	rows, err := s.Requests(ctx, store.Filter{Since: from, Until: to, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Cost.Currency != "EUR" || r.Cost.PriceVersion != "v2" {
			t.Fatalf("row %s not re-rated: %+v", r.RequestID, r.Cost)
		}
	}
	// Re-rating again with the same prices changes nothing.
	if n, err := s.Rerate(ctx, from, to, rate); err != nil || n != 0 {
		t.Errorf("second Rerate = %d, %v; want 0", n, err)
	}
}

func testPrompts(t *testing.T, s AnalyticsStore) {
	recs := billed(50) // prompt hashes p0..p4, 10 each
	recs[0].PromptSHA256 = "unique"
	insert(t, s, recs...)
	rows, err := s.Prompts(context.Background(), time.Time{}, time.Time{}, 2, 10)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int64{}
	for _, r := range rows {
		count[r.PromptSHA256] += r.Requests
	}
	if count["unique"] != 0 || len(count) != 5 {
		t.Errorf("prompts = %v, want p0..p4 and not the unique one", count)
	}
	for i := 1; i < len(rows); i++ {
		if rows[i].Requests > rows[i-1].Requests {
			t.Errorf("not most requests first: %d then %d", rows[i-1].Requests, rows[i].Requests)
		}
	}
	// Each row sums its prompt's requests in one currency, and holds the
	// measures the waste report prices a duplicate with, no others.
	groups := map[string]*store.PromptRow{}
	for _, r := range recs {
		k := r.PromptSHA256 + "|" + r.Model + "|" + r.TemplateID + "|" + r.Cost.Currency
		p := groups[k]
		if p == nil {
			p = &store.PromptRow{PromptSHA256: r.PromptSHA256, Model: r.Model, TemplateID: r.TemplateID}
			groups[k] = p
		}
		p.Requests++
		p.Input += r.Usage.InputTokens
		p.Output += r.Usage.OutputTokens
		p.CostNanos += r.Cost.Nanos
	}
	var want []store.PromptRow
	for _, p := range groups {
		if p.Requests >= 2 {
			want = append(want, *p)
		}
	}
	byKey := func(a, b store.PromptRow) int {
		return strings.Compare(fmt.Sprint(a.PromptSHA256, a.Model, a.TemplateID, a.CostNanos), fmt.Sprint(b.PromptSHA256, b.Model, b.TemplateID, b.CostNanos))
	}
	got, err := s.Prompts(context.Background(), time.Time{}, time.Time{}, 2, 1000)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(want, byKey)
	slices.SortFunc(got, byKey)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("prompts (-want +got):\n%s", diff)
	}
}

func testEvents(t *testing.T, s AnalyticsStore) {
	ctx := context.Background()
	evs := []store.Event{
		{At: day0, Kind: "quota_warning", Subject: "user:a", Message: "80% of daily_tokens", Data: `{"share":0.8}`},
		{At: day0.Add(time.Minute), Kind: "quota_exceeded", Subject: "user:a", Message: "over"},
		{At: day0.Add(2 * time.Minute), Kind: "quota_warning", Subject: "biz:b", Message: "80%"},
	}
	if err := s.AddEvents(ctx, evs); err != nil {
		t.Fatal(err)
	}
	got, err := s.Events(ctx, day0, "quota_warning", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Subject != "biz:b" || !got[1].At.Equal(day0) || got[1].Data != `{"share":0.8}` {
		t.Errorf("Events = %+v", got)
	}
	if all, _ := s.Events(ctx, day0.Add(time.Minute), "", 10); len(all) != 2 {
		t.Errorf("Events since +1m = %d, want 2", len(all))
	}
}

func testPrune(t *testing.T, s AnalyticsStore) {
	ctx := context.Background()
	recs := billed(90)
	for _, r := range recs {
		r.Sampled = true
	}
	insert(t, s, recs...)
	now := day0.Add(72 * time.Hour)
	// Details older than a day go; ledger older than two days goes.
	if _, err := s.Prune(ctx, now, store.Retention{Details: 24 * time.Hour, Ledger: 48 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		got, err := s.Request(ctx, r.RequestID)
		age := now.Sub(r.Arrival)
		switch {
		case age > 48*time.Hour:
			if !errors.Is(err, store.ErrNotFound) {
				t.Errorf("%s (age %v) kept past ledger retention", r.RequestID, age)
			}
		case age > 24*time.Hour:
			if err != nil || got[0].Timeline != nil {
				t.Errorf("%s (age %v): err %v, want the row without its timeline", r.RequestID, age, err)
			}
		default:
			if err != nil || got[0].Timeline == nil {
				t.Errorf("%s (age %v): err %v, want the row with its timeline", r.RequestID, age, err)
			}
		}
	}
	// Single-use prompts of closed days are gone; repeated ones stay.
	perDay := map[string]int64{}
	for _, r := range recs {
		perDay[fmt.Sprintf("%s|%s|%s|%s|%s", r.Arrival.UTC().Format(time.DateOnly), r.PromptSHA256, r.Model, r.TemplateID, r.Cost.Currency)]++
	}
	var kept int64
	for _, n := range perDay {
		if n > 1 {
			kept += n
		}
	}
	rows, err := s.Prompts(ctx, time.Time{}, time.Time{}, 1, 1000)
	var got int64
	for _, r := range rows {
		got += r.Requests
	}
	if err != nil || got != kept || kept == 0 {
		t.Errorf("prompt rows after pruning count %d requests (err %v), want %d (the repeated ones)", got, err, kept)
	}
	// Rollups outlive the ledger: reports over the pruned days still add up.
	if got := reportMap(t, s, store.ReportQuery{}); sumRequests(got) != 90 {
		t.Errorf("rollups after pruning the ledger count %d requests, want 90", sumRequests(got))
	}
}

func sumRequests(m map[string]store.Totals) int64 {
	var n int64
	for _, t := range m {
		n += t.Requests
	}
	return n
}

func testBadDimension(t *testing.T, s AnalyticsStore) {
	if _, err := s.Report(context.Background(), store.ReportQuery{GroupBy: []store.Dim{"prompt"}}); err == nil {
		t.Error("Report accepted an unknown dimension")
	}
	if _, err := s.Report(context.Background(), store.ReportQuery{Where: map[store.Dim]string{store.DimDay: "2026-03-01"}}); err == nil {
		t.Error("Report accepted a filter on day (use From/To)")
	}
}

func testSetEngineTiming(t *testing.T, s AnalyticsStore) {
	ctx := context.Background()
	recs := billed(10)
	insert(t, s, recs...)
	r := recs[3]
	et := record.EngineTiming{Signal: "vllm-span", Queue: 20 * time.Millisecond, Prefill: 50 * time.Millisecond, Decode: 600 * time.Millisecond}
	if err := s.SetEngineTiming(ctx, r.RequestID, et); err != nil {
		t.Fatal(err)
	}
	if err := s.SetEngineTiming(ctx, "no-such-request", et); err != nil {
		t.Errorf("amending an unknown request: %v, want it ignored", err)
	}
	got, err := s.Request(ctx, r.RequestID)
	if err != nil {
		t.Fatal(err)
	}
	want := *r
	want.EngineTiming = &et
	want.Finish()
	if diff := cmp.Diff(want.Derived.Segments, got[0].Derived.Segments); diff != "" || got[0].EngineTiming == nil || *got[0].EngineTiming != et {
		t.Errorf("amended row (-want +got):\n%s", diff)
	}
	// The rollups carry the new segments: sums equal the amended ledger.
	amended := make([]*record.Record, len(recs))
	for i, x := range recs {
		amended[i] = x
	}
	amended[3] = &want
	wantSums := sums(amended, func(*record.Record) string { return "" })
	gotSums := reportMap(t, s, store.ReportQuery{})
	if diff := cmp.Diff(wantSums, gotSums); diff != "" {
		t.Errorf("rollups after amendment (-want +got):\n%s", diff)
	}
}

func testEngineSamples(t *testing.T, s AnalyticsStore) {
	ctx := context.Background()
	nan := math.NaN()
	ss := []store.EngineSample{
		{At: day0, Upstream: "a", Model: "m", Up: true, Running: 3, Waiting: 1, KVCacheUsage: 0.5, PrefixCacheHitRate: nan, TTFTP50: 0.1, TTFTP95: 0.2, TTFTP99: 0.3, PromptTokensPerS: 100, GenerationTokensPerS: 50},
		{At: day0.Add(time.Minute), Upstream: "a", Up: false, Running: nan, Waiting: nan, KVCacheUsage: nan, PrefixCacheHitRate: nan, TTFTP50: nan, TTFTP95: nan, TTFTP99: nan, PromptTokensPerS: nan, GenerationTokensPerS: nan},
		{At: day0, Upstream: "b", Up: true, Running: 1},
	}
	if err := s.AddEngineSamples(ctx, ss); err != nil {
		t.Fatal(err)
	}
	got, err := s.EngineSamples(ctx, day0, day0.Add(time.Hour), "a")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ss[:2], got, cmpopts.EquateNaNs()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if all, _ := s.EngineSamples(ctx, day0, day0.Add(time.Hour), ""); len(all) != 3 {
		t.Errorf("all upstreams: %d samples, want 3", len(all))
	}
}

// testWindowMinutes: minutes come back byte for byte, in [from, to), a
// minute written twice (two replicas) twice; retention drops old ones.
func testWindowMinutes(t *testing.T, s AnalyticsStore) {
	ctx := context.Background()
	at := func(min int) time.Time { return day0.Add(time.Duration(min) * time.Minute) }
	in := []store.WindowMinute{
		{Minute: at(0), Model: "m", BizLine: "b", Upstream: "u", Template: "t", Data: []byte{1, 0, 255}},
		{Minute: at(1), Model: "m", Data: []byte{2}},
		{Minute: at(1), Model: "m", Data: []byte{3}}, // another replica's
		{Minute: at(90), Model: "m2", Data: []byte{4}},
	}
	if err := s.AddWindowMinutes(ctx, in); err != nil {
		t.Fatal(err)
	}
	got, err := s.WindowMinutes(ctx, at(0), at(2))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in[:3], got, cmpopts.SortSlices(func(a, b store.WindowMinute) bool {
		return a.Minute.Before(b.Minute) || a.Minute.Equal(b.Minute) && string(a.Data) < string(b.Data)
	})); diff != "" {
		t.Errorf("WindowMinutes [0, 2) (-want +got):\n%s", diff)
	}
	if _, err := s.Prune(ctx, at(90), store.Retention{Minute: 30 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	got, err = s.WindowMinutes(ctx, at(0), at(100))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Model != "m2" {
		t.Errorf("after pruning to 30 minutes: %+v, want only the minute at 90", got)
	}
}

// testWindowHours: hours come back byte for byte, in [from, to), an hour
// written twice (two replicas) twice; Retention.Hour drops old ones and
// Retention.Minute does not.
func testWindowHours(t *testing.T, s AnalyticsStore) {
	ctx := context.Background()
	at := func(h int) time.Time { return day0.Add(time.Duration(h) * time.Hour) }
	in := []store.WindowHour{
		{Hour: at(0), Model: "m", BizLine: "b", Upstream: "u", Template: "t", Data: []byte{1, 0, 255}},
		{Hour: at(1), Model: "m", Data: []byte{2}},
		{Hour: at(1), Model: "m", Data: []byte{3}}, // another replica's
		{Hour: at(30), Model: "m2", Data: []byte{4}},
	}
	if err := s.AddWindowHours(ctx, in); err != nil {
		t.Fatal(err)
	}
	got, err := s.WindowHours(ctx, at(0), at(2))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in[:3], got, cmpopts.SortSlices(func(a, b store.WindowHour) bool {
		return a.Hour.Before(b.Hour) || a.Hour.Equal(b.Hour) && string(a.Data) < string(b.Data)
	})); diff != "" {
		t.Errorf("WindowHours [0, 2) (-want +got):\n%s", diff)
	}
	if _, err := s.Prune(ctx, at(30), store.Retention{Minute: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if got, err = s.WindowHours(ctx, at(0), at(31)); err != nil || len(got) != 4 {
		t.Errorf("after pruning minutes: %d hours (%v), want 4", len(got), err)
	}
	if _, err := s.Prune(ctx, at(30), store.Retention{Hour: 10 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	got, err = s.WindowHours(ctx, at(0), at(31))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Model != "m2" {
		t.Errorf("after pruning to 10 hours: %+v, want only the hour at 30", got)
	}
}

// testWindowDays: a day comes back byte for byte with its bounds; a
// second write of the same day (another replica's compactor) writes
// nothing; a day without traffic is one empty row; Retention.Day drops
// old days and Retention.Hour does not.
func testWindowDays(t *testing.T, s AnalyticsStore) {
	ctx := context.Background()
	day := func(d int) (time.Time, time.Time) { return day0.AddDate(0, 0, d), day0.AddDate(0, 0, d+1) }
	s0, e0 := day(0)
	in := []store.WindowDay{
		{Start: s0, End: e0, Model: "m", BizLine: "b", Upstream: "u", Template: "t", Data: []byte{1, 0, 255}},
		{Start: s0, End: e0, Model: "m2", Data: []byte{2}},
	}
	if ok, err := s.AddWindowDay(ctx, s0, e0, in); err != nil || !ok {
		t.Fatalf("first write of day 0: %v, %v; want true, nil", ok, err)
	}
	if ok, err := s.AddWindowDay(ctx, s0, e0, []store.WindowDay{{Start: s0, End: e0, Model: "x", Data: []byte{9}}}); err != nil || ok {
		t.Fatalf("second write of day 0: %v, %v; want false, nil", ok, err)
	}
	s1, e1 := day(1)
	if ok, err := s.AddWindowDay(ctx, s1, e1, nil); err != nil || !ok {
		t.Fatalf("empty day 1: %v, %v; want true, nil", ok, err)
	}
	s40, e40 := day(40)
	if _, err := s.AddWindowDay(ctx, s40, e40, []store.WindowDay{{Start: s40, End: e40, Model: "m3", Data: []byte{4}}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.WindowDays(ctx, s0, s1)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, got, cmpopts.SortSlices(func(a, b store.WindowDay) bool { return a.Model < b.Model })); diff != "" {
		t.Errorf("WindowDays of day 0 (-want +got):\n%s", diff)
	}
	got, err = s.WindowDays(ctx, s1, e1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !got[0].Start.Equal(s1) || !got[0].End.Equal(e1) || got[0].Model != "" || len(got[0].Data) != 0 {
		t.Errorf("WindowDays of the empty day 1: %+v, want one empty row with its bounds", got)
	}
	if _, err := s.Prune(ctx, s40, store.Retention{Hour: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if got, err = s.WindowDays(ctx, s0, e40); err != nil || len(got) != 4 {
		t.Errorf("after pruning hours: %d day rows (%v), want 4", len(got), err)
	}
	if _, err := s.Prune(ctx, s40, store.Retention{Day: 10 * 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if got, err = s.WindowDays(ctx, s0, e40); err != nil || len(got) != 1 || got[0].Model != "m3" {
		t.Errorf("after pruning to 10 days: %+v (%v), want only day 40", got, err)
	}
}

// testPruneRollupsByMonth: day rollups go a whole month at a time, with
// the month's own rollup, so a report read from months and one read from
// days agree after retention.
func testPruneRollupsByMonth(t *testing.T, s AnalyticsStore) {
	ctx := context.Background()
	start := time.Date(2026, 1, 20, 0, 0, 0, 0, time.UTC)
	recs := make([]*record.Record, 300)
	for i := range recs {
		r := Record(i)
		r.Arrival = start.Add(time.Duration(i) * 5 * time.Hour) // to the end of March
		r.Cost = record.Cost{Nanos: 100, Currency: "USD"}
		r.Finish()
		recs[i] = r
	}
	insert(t, s, recs...)
	now := time.Date(2026, 3, 15, 0, 0, 0, 0, time.UTC)
	if _, err := s.Prune(ctx, now, store.Retention{Day: 30 * 24 * time.Hour}); err != nil { // cut: Feb 13
		t.Fatal(err)
	}
	total := func(q store.ReportQuery) int64 {
		rows, err := s.Report(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, r := range rows {
			n += r.Requests
		}
		return n
	}
	feb := func(r *record.Record) bool { return !r.Arrival.Before(time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)) }
	want := int64(len(filter(recs, feb)))
	for _, q := range []store.ReportQuery{
		{},                                   // months where it can
		{GroupBy: []store.Dim{store.DimDay}}, // days only
		{GroupBy: []store.Dim{store.DimKey}}, // the full day rollup
		{GroupBy: []store.Dim{store.DimUser, store.DimMonth}},
	} {
		if got := total(q); got != want {
			t.Errorf("after retention, grouped by %v: %d requests, want %d (February on: January gone whole, February kept whole)", q.GroupBy, got, want)
		}
	}
}

// testReportByMinute: grouped by minute, a report reads the minute rollups
// and equals the ledger's sums per UTC minute, within a range that starts
// and ends mid-hour; dimensions minutes do not keep are refused.
func testReportByMinute(t *testing.T, s AnalyticsStore) {
	recs := billed(300)
	// Several requests in some minutes, so minutes really sum.
	for i, r := range recs[:40] {
		r.Arrival = day0.Add(10*time.Hour + time.Duration(i%7)*time.Minute + time.Duration(i)*time.Second)
	}
	insert(t, s, recs...)
	minute := func(r *record.Record) string { return r.Arrival.UTC().Truncate(time.Minute).Format(time.RFC3339) }
	from, to := day0.Add(10*time.Hour+2*time.Minute+30*time.Second), day0.Add(30*time.Hour+17*time.Minute)
	inRange := func(r *record.Record) bool {
		return !r.Arrival.Before(from.Truncate(time.Minute)) && r.Arrival.Before(to)
	}
	cases := []struct {
		q   store.ReportQuery
		key func(*record.Record) string
		in  func(*record.Record) bool
	}{
		{store.ReportQuery{GroupBy: []store.Dim{store.DimMinute}}, minute, nil},
		{store.ReportQuery{GroupBy: []store.Dim{store.DimMinute, store.DimModel}, From: from, To: to},
			func(r *record.Record) string { return minute(r) + "/" + r.Model }, inRange},
		{store.ReportQuery{GroupBy: []store.Dim{store.DimUpstream, store.DimMinute}, Where: map[store.Dim]string{store.DimBizLine: recs[0].BizLine},
			Measures: []string{"requests", "errors", "cost_nanos"}},
			func(r *record.Record) string { return r.Upstream + "/" + minute(r) }, func(r *record.Record) bool { return r.BizLine == recs[0].BizLine }},
	}
	for _, tc := range cases {
		sel := recs
		if tc.in != nil {
			sel = filter(recs, tc.in)
		}
		want := sums(sel, tc.key)
		if tc.q.Measures != nil {
			for k, v := range want {
				want[k] = store.Totals{Requests: v.Requests, Errors: v.Errors, CostNanos: v.CostNanos}
			}
		}
		got := reportMap(t, s, tc.q)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%+v (-ledger sums +report):\n%s", tc.q, diff)
		}
	}
	for _, q := range []store.ReportQuery{
		{GroupBy: []store.Dim{store.DimMinute, store.DimTemplate}},
		{GroupBy: []store.Dim{store.DimMinute}, Where: map[store.Dim]string{store.DimUser: "user-3"}},
		{GroupBy: []store.Dim{store.DimMinute, store.DimHour}},
	} {
		if _, err := s.Report(context.Background(), q); err == nil {
			t.Errorf("Report(%+v) accepted what minutes do not keep", q)
		}
	}
}

// testUsageMissingMetered: an upstream's answer without usage counts as
// "usage missing" only on an endpoint whose answers carry usage. Token
// counting, stored-response requests and pass-through answer without it
// by design; counted, they fired the usage_missing_share alert on agent
// traffic.
func testUsageMissingMetered(t *testing.T, s AnalyticsStore) {
	var recs []*record.Record
	for i, ep := range []string{"chat", "responses", "messages", "count_tokens", "responses_item", "files", "other"} {
		r := Record(i)
		r.Arrival = day0.Add(time.Duration(i) * time.Minute)
		r.Endpoint, r.Upstream, r.UpstreamStatus = ep, "up", 200
		r.Usage = record.Usage{Source: record.SourceNone}
		r.Cost = record.Cost{Currency: "USD"}
		r.Finish()
		recs = append(recs, r)
	}
	insert(t, s, recs...)
	rows, err := s.Report(t.Context(), store.ReportQuery{From: day0, To: day0.Add(time.Hour), Measures: []string{"requests", "usage_missing"}})
	if err != nil {
		t.Fatal(err)
	}
	var got store.Totals
	for _, r := range rows {
		got.Add(r.Totals)
	}
	if got.Requests != int64(len(recs)) || got.UsageMissing != 3 {
		t.Errorf("requests %d, usage missing %d; want %d and 3 (chat, responses, messages)", got.Requests, got.UsageMissing, len(recs))
	}
}

// testReportByEndUser: the end user a body named is a report dimension of
// its own, beside (never instead of) the key's user; reports by it count
// the requests that named one, over whole and ragged periods alike.
func testReportByEndUser(t *testing.T, s AnalyticsStore) {
	recs := billed(240)
	for i, r := range recs {
		if i%4 != 0 {
			r.EndUser = fmt.Sprintf("customer-%d", i%7)
		}
	}
	insert(t, s, recs...)
	named := filter(recs, func(r *record.Record) bool { return r.EndUser != "" })
	cases := []struct {
		from, to time.Time
		by       []store.Dim
		where    map[store.Dim]string
		key      func(*record.Record) string
	}{
		{by: []store.Dim{store.DimEndUser}, key: func(r *record.Record) string { return r.EndUser }},
		{by: []store.Dim{store.DimEndUser, store.DimDay}, key: func(r *record.Record) string {
			return r.EndUser + "/" + r.Arrival.UTC().Format(time.DateOnly)
		}},
		{by: []store.Dim{store.DimMonth, store.DimEndUser, store.DimUser}, key: func(r *record.Record) string {
			return r.Arrival.UTC().Format("2006-01") + "/" + r.EndUser + "/" + r.UserID
		}},
		{by: []store.Dim{store.DimEndUser, store.DimHour}, key: func(r *record.Record) string {
			return r.EndUser + "/" + r.Arrival.UTC().Truncate(time.Hour).Format(time.RFC3339)
		}},
		// Ragged: hours at both ends, a whole day between.
		{from: day0.Add(5 * time.Hour), to: day0.Add(53 * time.Hour), by: []store.Dim{store.DimEndUser, store.DimModel},
			key: func(r *record.Record) string { return r.EndUser + "/" + r.Model }},
		{where: map[store.Dim]string{store.DimEndUser: "customer-3"}, by: []store.Dim{store.DimBizLine},
			key: func(r *record.Record) string { return r.BizLine }},
	}
	for _, tc := range cases {
		in := filter(named, func(r *record.Record) bool {
			return (tc.from.IsZero() || !r.Arrival.Before(tc.from)) && (tc.to.IsZero() || r.Arrival.Before(tc.to)) &&
				(tc.where == nil || r.EndUser == tc.where[store.DimEndUser])
		})
		want := sums(in, tc.key)
		got := reportMap(t, s, store.ReportQuery{From: tc.from, To: tc.to, GroupBy: tc.by, Where: tc.where})
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("[%v, %v) by %v where %v (-ledger sums +report):\n%s", tc.from, tc.to, tc.by, tc.where, diff)
		}
	}
	// The other reports are unchanged by the end-user rollups.
	if diff := cmp.Diff(sums(recs, func(*record.Record) string { return "" }), reportMap(t, s, store.ReportQuery{})); diff != "" {
		t.Errorf("total (-ledger sums +report):\n%s", diff)
	}
	for _, q := range []store.ReportQuery{
		{GroupBy: []store.Dim{store.DimEndUser, store.DimKey}},
		{GroupBy: []store.Dim{store.DimMinute, store.DimEndUser}},
		{Where: map[store.Dim]string{store.DimEndUser: ""}},
	} {
		if _, err := s.Report(t.Context(), q); err == nil || !strings.Contains(err.Error(), "end") {
			t.Errorf("Report(%+v) = %v; want an error naming the end user's limits", q, err)
		}
	}
}
