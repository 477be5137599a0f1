package baseline

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tollgate-dev/tollgate/internal/alert"
)

// TestWatch: on a fake clock, runs at 0, 1h, 2h, 3h, 4h, 5h with results
// ok, drift, drift (model changed), drift (model changed), error, ok:
// a warning fires at 1h, turns critical at 2h (same start), is not
// repeated at 3h, the error at 4h changes nothing, and it resolves at 5h.
func TestWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		results := []struct {
			r   *Report
			err error
		}{
			{r: &Report{}},
			{r: &Report{Drift: true, Reasons: []string{"tpot_ms: median 10 → 20"}}},
			{r: &Report{Drift: true, ModelChanged: true, ModelReasons: []string{"served model \"a\" → \"b\""}}},
			{r: &Report{Drift: true, ModelChanged: true}},
			{err: errors.New("connection refused")},
			{r: &Report{Inconclusive: true, Failed: 3, Requests: 3}}, // neither raises nor resolves
			{r: &Report{}},
		}
		n := 0
		check := func(context.Context) (*Report, error) {
			res := results[n]
			n++
			time.Sleep(time.Minute) // the run itself takes a minute
			return res.r, res.err
		}
		var got []alert.Alert
		var errs int
		err := Watch(t.Context(), "v1", time.Hour, len(results), check,
			func(a alert.Alert) { got = append(got, a) },
			func(_ *Report, err error) {
				if err != nil {
					errs++
				}
			})
		if err != nil {
			t.Fatal(err)
		}
		if n != 7 || errs != 1 {
			t.Fatalf("%d runs, %d errors", n, errs)
		}
		type note struct {
			state    alert.State
			sev      alert.Severity
			at, from time.Duration
		}
		want := []note{
			{alert.Firing, alert.Warning, 1*time.Hour + 2*time.Minute, 1*time.Hour + 2*time.Minute},
			{alert.Firing, alert.Critical, 2*time.Hour + 3*time.Minute, 1*time.Hour + 2*time.Minute},
			{alert.Resolved, alert.Critical, 6*time.Hour + 7*time.Minute, 1*time.Hour + 2*time.Minute},
		}
		if len(got) != len(want) {
			t.Fatalf("%d notifications, want %d: %+v", len(got), len(want), got)
		}
		for i, w := range want {
			a := got[i]
			at := a.To.Sub(start)
			if a.State != w.state || a.Severity != w.sev || at != w.at || a.StartsAt.Sub(start) != w.from || a.Rule != RuleDrift || a.Labels["baseline"] != "v1" {
				t.Errorf("notification %d: %s %s at %v from %v, want %+v", i, a.State, a.Severity, at, a.StartsAt.Sub(start), w)
			}
		}
		if got[2].EndsAt.IsZero() {
			t.Error("resolved alert without an end")
		}
	})
}

func TestWatchNeedsInterval(t *testing.T) {
	err := Watch(t.Context(), "v1", 0, 0, nil, nil, nil)
	if err == nil {
		t.Fatal("no error without an interval")
	}
}
