package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/soak"
)

// TestSoakShort runs the soak harness for a few seconds against real
// children — this test binary as `tollgate sim` and `tollgate serve` — and
// checks what it counted; the limits are loose, since a short run on a
// shared machine says nothing about growth (the half-hour run does, see
// docs/benchmarks.md).
func TestSoakShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a simulator and a gateway; -short skips it")
	}
	t.Setenv("TOLLGATE_TEST_AS_MAIN", "1") // the children are this binary as tollgate
	var progress bytes.Buffer
	rep, err := soak.Run(context.Background(), soak.Options{
		Exe: os.Args[0], Dir: t.TempDir(),
		Duration: 4 * time.Second, Rate: 20, Warmup: time.Second, Window: time.Second, Interval: 500 * time.Millisecond,
		Settle: 2 * time.Minute, MaxGrowth: 100, GoroutineSlack: 1000,
		Progress: &progress,
	})
	if err != nil {
		t.Fatalf("soak: %v\n%s", err, progress.String())
	}
	if rep.Sent < 40 || rep.OK != rep.Sent || rep.Failed != 0 {
		t.Errorf("sent %d, ok %d, failed %d (first: %s); want about 80 sent, all ok", rep.Sent, rep.OK, rep.Failed, rep.FirstError)
	}
	if rep.LedgerRows != rep.Sent {
		t.Errorf("ledger rows %d, want %d (one per request sent)", rep.LedgerRows, rep.Sent)
	}
	if rep.GoroutinesBaseline <= 0 || rep.GoroutinesPeak <= rep.GoroutinesBaseline || rep.RSSWarmKiB <= 0 || rep.RSSEndKiB <= 0 {
		t.Errorf("figures not read from the gateway: baseline %d, peak %d goroutines, RSS warm %d end %d KiB",
			rep.GoroutinesBaseline, rep.GoroutinesPeak, rep.RSSWarmKiB, rep.RSSEndKiB)
	}
	if !rep.Passed() || rep.SettledAfter < 0 {
		t.Errorf("failures %q, settled after %s", rep.Failures, rep.SettledAfter)
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	if !strings.Contains(text.String(), "PASS") {
		t.Errorf("text report does not say PASS:\n%s", text.String())
	}
}

func TestSoakBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "soak", "--rps", "0"}, "--rps"},
		{[]string{"bench", "soak", "--duration", "3m"}, "--warmup"},
		{[]string{"bench", "soak", "--interval", "2m"}, "--interval"},
	} {
		err := run(context.Background(), tc.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want one naming %s", tc.args, err, tc.want)
		}
	}
}
