package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/store/clickhouse/chtest"
)

// A first "report --config --tz X" on an empty ClickHouse database reads
// in X but records store.timezone as the rollup zone: --tz is a report
// zone, and the rollups are the fleet's.
func TestReportTZIsNotRollupZone(t *testing.T) {
	chURL := chtest.Server(t)
	db := chtest.Database()
	dropDatabase(t, chURL, db)
	cfg := clickHouseConfig(t, chURL, db)
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, append(b, []byte("  timezone: Asia/Shanghai\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, err := runCmd(t, "report", "models", "--config", cfg, "--tz", "Asia/Kolkata", "--from", "2025-03-01", "--to", "2025-04-01", "--format", "csv")
	if err != nil {
		t.Fatalf("report: %v\n%s", err, stderr)
	}
	zone, err := chtest.Exec(context.Background(), chURL, "SELECT text FROM "+db+".rollup_state WHERE name = 'zone' ORDER BY at LIMIT 1")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(zone) != "Asia/Shanghai" {
		t.Errorf("rollup zone recorded by a report with --tz Asia/Kolkata: %q, want store.timezone Asia/Shanghai", zone)
	}
}
