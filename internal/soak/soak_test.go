package soak

import (
	"bufio"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseGauges(t *testing.T) {
	const expo = `# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 42
go_goroutines_extra 7
tollgate_requests_in_flight{model="x"} 3
tollgate_requests_in_flight 9
`
	got, err := parseGauges(bufio.NewScanner(strings.NewReader(expo)), []string{"go_goroutines", "tollgate_requests_in_flight"})
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != 42 || got[1] != 9 {
		t.Errorf("got %v, want [42 9]", got)
	}
	if _, err := parseGauges(bufio.NewScanner(strings.NewReader(expo)), []string{"nope"}); err == nil || !strings.Contains(err.Error(), "nope not exposed") {
		t.Errorf("missing metric: err = %v", err)
	}
	if _, err := parseGauges(bufio.NewScanner(strings.NewReader("go_goroutines x\n")), []string{"go_goroutines"}); err == nil {
		t.Error("a value that is not a number was accepted")
	}
}

func TestJudge(t *testing.T) {
	o := Options{Duration: 10 * time.Minute, Warmup: 2 * time.Minute, Window: time.Minute, MaxGrowth: 0.05, GoroutineSlack: 0}
	samples := func(warm, end int64) []Sample {
		return []Sample{
			{At: 0, Phase: "idle", RSSKiB: 50, Goroutines: 20},
			{At: time.Minute, Phase: "load", RSSKiB: 500, Goroutines: 80}, // before the warm-up point: ignored
			{At: 2 * time.Minute, Phase: "load", RSSKiB: warm - 10, Goroutines: 80},
			{At: 2*time.Minute + 30*time.Second, Phase: "load", RSSKiB: warm + 10, Goroutines: 90},
			{At: 5 * time.Minute, Phase: "load", RSSKiB: 5000, Goroutines: 80}, // the middle: only the peak
			{At: 9*time.Minute + 30*time.Second, Phase: "load", RSSKiB: end, Goroutines: 80},
			{At: 10*time.Minute + 5*time.Second, Phase: "settle", RSSKiB: end, Goroutines: 20},
		}
	}
	for _, tc := range []struct {
		name          string
		warm, end     int64
		settled       time.Duration
		sent, failed  int64
		rows          int64
		wantFailures  int
		wantGrowthPct float64
	}{
		{name: "flat", warm: 1000, end: 1040, settled: 5 * time.Second, sent: 10, rows: 10, wantGrowthPct: 4},
		{name: "grew 5 %", warm: 1000, end: 1050, settled: 5 * time.Second, sent: 10, rows: 10, wantFailures: 1, wantGrowthPct: 5},
		{name: "goroutines stayed", warm: 1000, end: 1000, settled: -1, sent: 10, rows: 10, wantFailures: 1},
		{name: "failed and lost", warm: 1000, end: 1000, settled: time.Second, sent: 10, failed: 1, rows: 9, wantFailures: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := &Report{Samples: samples(tc.warm, tc.end), SettledAfter: tc.settled, GoroutinesBaseline: 20, Sent: tc.sent, Failed: tc.failed, LedgerRows: tc.rows}
			judge(rep, o, 10*time.Minute)
			if len(rep.Failures) != tc.wantFailures {
				t.Errorf("failures %q, want %d", rep.Failures, tc.wantFailures)
			}
			if rep.RSSWarmKiB != tc.warm || rep.RSSEndKiB != tc.end {
				t.Errorf("RSS warm %d end %d, want %d %d", rep.RSSWarmKiB, rep.RSSEndKiB, tc.warm, tc.end)
			}
			if got := 100 * rep.RSSGrowth; got < tc.wantGrowthPct-0.01 || got > tc.wantGrowthPct+0.01 {
				t.Errorf("growth %.2f %%, want %.2f %%", got, tc.wantGrowthPct)
			}
			if rep.GoroutinesPeak != 90 || rep.RSSPeakKiB != 5000 || rep.GoroutinesEnd != 20 {
				t.Errorf("peaks %d goroutines %d KiB, end %d goroutines", rep.GoroutinesPeak, rep.RSSPeakKiB, rep.GoroutinesEnd)
			}
		})
	}
}

func TestValidateNamesTheFlag(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Exe: "x", Dir: "d", Duration: 0, Rate: 1}, "--duration"},
		{Options{Exe: "x", Dir: "d", Duration: time.Hour, Rate: 0}, "--rps"},
		{Options{Exe: "x", Dir: "d", Duration: 3 * time.Minute, Rate: 1}, "--warmup"},
		{Options{Exe: "x", Dir: "d", Duration: time.Hour, Rate: 1, Interval: 2 * time.Minute}, "--interval"},
	} {
		tc.o.defaults()
		err := tc.o.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want one naming %s", tc.o, err, tc.want)
		}
	}
}
