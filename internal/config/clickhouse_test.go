package config

import (
	"testing"
	"time"
)

// TestClickHouseStoreSection: the backend switch, the section's defaults,
// and ClickHouse's batching defaults applied only where the file sets none.
func TestClickHouseStoreSection(t *testing.T) {
	cases := []struct {
		name, yml string
		backend   string
		batch     int
		flush     time.Duration
		db        string
		timeout   time.Duration
	}{
		{"default is sqlite", "", "sqlite", 4096, 200 * time.Millisecond, "tollgate", 30 * time.Second},
		{"sqlite keeps its batching", "store: {backend: sqlite}", "sqlite", 4096, 200 * time.Millisecond, "tollgate", 30 * time.Second},
		{"clickhouse defaults", "store: {backend: clickhouse, clickhouse: {url: 'http://127.0.0.1:8123'}}",
			"clickhouse", ClickHouseBatchSize, ClickHouseFlushInterval, "tollgate", 30 * time.Second},
		{"clickhouse, batch_size set", "store: {backend: clickhouse, batch_size: 5000, clickhouse: {url: 'http://h:8123', database: gw, timeout: 5s}}",
			"clickhouse", 5000, ClickHouseFlushInterval, "gw", 5 * time.Second},
		{"clickhouse, flush_interval set", "store: {backend: clickhouse, flush_interval: 3s, clickhouse: {url: 'https://u:p@h:8443'}}",
			"clickhouse", ClickHouseBatchSize, 3 * time.Second, "tollgate", 30 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Parse([]byte(c.yml), noEnv)
			if err != nil {
				t.Fatal(err)
			}
			s := cfg.Store
			if s.Backend != c.backend || s.BatchSize != c.batch || s.FlushInterval != c.flush || s.ClickHouse.Database != c.db || s.ClickHouse.Timeout != c.timeout {
				t.Errorf("store = backend %q batch %d flush %v db %q timeout %v; want %q %d %v %q %v",
					s.Backend, s.BatchSize, s.FlushInterval, s.ClickHouse.Database, s.ClickHouse.Timeout, c.backend, c.batch, c.flush, c.db, c.timeout)
			}
		})
	}
}
