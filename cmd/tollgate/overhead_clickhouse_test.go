package main

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/store/clickhouse/chtest"
)

// TestBenchOverheadClickHouse runs the smoke run with --clickhouse: arm BC
// (tollgate with its ledger in a real ClickHouse server) runs beside the
// others, every request it answered has its row in ClickHouse with the
// mock's token sums, and the report compares it with B. Correctness only,
// never speed.
func TestBenchOverheadClickHouse(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("bench overhead reads /proc and pins CPUs: Linux only")
	}
	if testing.Short() {
		t.Skip("starts several processes")
	}
	chURL := chtest.Server(t)
	t.Setenv("TOLLGATE_TEST_AS_MAIN", "1")
	var out, errb bytes.Buffer
	err := run(context.Background(), []string{"bench", "overhead", "--smoke", "--json", "--duration", "400ms", "--warmup", "100ms",
		"--rates", "50", "--workers", "4", "--sse", "8", "--frames", "4", "--ttft", "5ms", "--itl", "5ms", "--dir", t.TempDir(),
		"--clickhouse", chURL}, &out, &errb)
	if err != nil {
		t.Fatalf("bench overhead: %v\nstderr:\n%s", err, errb.String())
	}
	var rep struct {
		RowsLost    int  `json:"rows_lost"`
		TokensMatch bool `json:"tokens_match"`
		Metrics     map[string]json.RawMessage
		Rounds      []struct {
			Order []string `json:"order"`
			Arms  map[string]struct {
				JSON       []struct{ OK int }
				Saturation struct {
					OK        int
					CPUPerReq float64 `json:"cpu_us_per_req"`
				}
				SSE []struct{ OK int }
			} `json:"arms"`
			Integrity struct {
				BC *struct {
					MockRequests int64 `json:"mock_requests"`
					LedgerRows   int64 `json:"ledger_rows"`
					TokensMatch  bool  `json:"tokens_match"`
				} `json:"bc"`
			} `json:"integrity"`
		} `json:"rounds"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("output is not the JSON report: %v\n%s", err, out.String())
	}
	if rep.RowsLost != 0 || !rep.TokensMatch || len(rep.Rounds) != 1 {
		t.Fatalf("rows lost %d, tokens match %v, %d rounds; want 0, true, 1", rep.RowsLost, rep.TokensMatch, len(rep.Rounds))
	}
	rd := rep.Rounds[0]
	if !strings.Contains(strings.Join(rd.Order, " "), "BC") {
		t.Errorf("order %v lacks BC", rd.Order)
	}
	bc, ok := rd.Arms["BC"]
	if !ok || len(bc.JSON) != 1 || bc.JSON[0].OK == 0 || bc.Saturation.OK == 0 || len(bc.SSE) != 1 || bc.SSE[0].OK == 0 {
		t.Fatalf("arm BC missing or served nothing: %+v", bc)
	}
	if bc.Saturation.CPUPerReq <= 0 {
		t.Errorf("BC's CPU per request %g; want it measured", bc.Saturation.CPUPerReq)
	}
	in := rd.Integrity.BC
	if in == nil || in.LedgerRows == 0 || in.LedgerRows != in.MockRequests || !in.TokensMatch {
		t.Fatalf("BC's ledger in ClickHouse: %+v; want a row per request the mock sent through BC, equal token sums", in)
	}
	for _, k := range []string{"cpu_ratio_bc_over_b", "rps_ratio_bc_over_a", "sat_cpu_us_per_req_BC"} {
		if _, ok := rep.Metrics[k]; !ok {
			t.Errorf("report lacks metric %q", k)
		}
	}
	// The round's database is dropped once checked.
	if n, err := chtest.Exec(context.Background(), chURL, "SELECT count() FROM system.databases WHERE name LIKE 'tollgate_overhead_%'"); err != nil || n != "0" {
		t.Errorf("databases left behind: %s (err %v)", n, err)
	}
}
