package main

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"testing"
)

// TestBenchOverheadSmoke runs `tollgate bench overhead --smoke --json` end
// to end with short arms: the mock, the bare proxy and two gateways as
// real processes (this test binary acting as tollgate). It checks only
// correctness — every arm served, nothing lost, the report's keys — never
// speed.
func TestBenchOverheadSmoke(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("bench overhead reads /proc and pins CPUs: Linux only")
	}
	if testing.Short() {
		t.Skip("starts several processes")
	}
	t.Setenv("TOLLGATE_TEST_AS_MAIN", "1")
	var out, errb bytes.Buffer
	err := run(context.Background(), []string{"bench", "overhead", "--smoke", "--json", "--duration", "400ms", "--warmup", "100ms",
		"--rates", "50", "--workers", "4", "--sse", "8", "--frames", "4", "--ttft", "5ms", "--itl", "5ms", "--dir", t.TempDir()}, &out, &errb)
	if err != nil {
		t.Fatalf("bench overhead: %v\nstderr:\n%s", err, errb.String())
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(out.Bytes(), &keys); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	for _, k := range []string{"cpu_ratio_b_over_a", "rps_ratio_b_over_a", "added_p50_ms_b_over_a", "rows_lost", "frames_lost", "machine", "rounds"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("report lacks %q", k)
		}
	}
	var rep struct {
		RowsLost    int  `json:"rows_lost"`
		FramesLost  int  `json:"frames_lost_all_arms"`
		TokensMatch bool `json:"tokens_match"`
		Rounds      []struct {
			Arms map[string]struct {
				JSON       []struct{ OK, Errors int }
				Saturation struct{ OK int }
				SSE        []struct{ OK, Errors int }
			} `json:"arms"`
			Integrity struct {
				MockRequests int64 `json:"mock_requests"`
				LedgerRows   int64 `json:"ledger_rows"`
				B0Rows       int64 `json:"b0_ledger_rows"`
			} `json:"integrity"`
		} `json:"rounds"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.RowsLost != 0 || rep.FramesLost != 0 || !rep.TokensMatch {
		t.Errorf("rows lost %d, frames lost %d, tokens match %v; want 0, 0, true", rep.RowsLost, rep.FramesLost, rep.TokensMatch)
	}
	if len(rep.Rounds) != 1 {
		t.Fatalf("%d rounds, want 1 (smoke)", len(rep.Rounds))
	}
	rd := rep.Rounds[0]
	for _, arm := range []string{"D", "A", "B", "B0"} {
		a, ok := rd.Arms[arm]
		if !ok || len(a.JSON) != 1 || len(a.SSE) != 1 {
			t.Errorf("arm %s missing or incomplete: %+v", arm, a)
			continue
		}
		if a.JSON[0].OK == 0 || a.Saturation.OK == 0 || a.SSE[0].OK == 0 {
			t.Errorf("arm %s served JSON %d, saturation %d, streams %d; want some of each", arm, a.JSON[0].OK, a.Saturation.OK, a.SSE[0].OK)
		}
	}
	if in := rd.Integrity; in.LedgerRows == 0 || in.LedgerRows != in.MockRequests || in.B0Rows != 0 {
		t.Errorf("ledger: %d rows for %d requests the mock sent through B, %d rows for B0 (ledger off); want equal, and 0",
			in.LedgerRows, in.MockRequests, in.B0Rows)
	}
}
