package prometheus_test

import (
	"net"
	"os"
	"slices"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate-dev/tollgate/internal/config"
)

const (
	scrapeFile  = "prometheus.yml"
	replicaFile = "../tollgate-replica.yaml"
)

// TestPromtoolCheckConfig: the reference deployment's scrape config is
// valid for Prometheus, rule file included.
func TestPromtoolCheckConfig(t *testing.T) {
	runPromtool(t, "check", "config", scrapeFile)
}

// scrapeConfig is the part of prometheus.yml these tests read.
type scrapeConfig struct {
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		MetricsPath   string `yaml:"metrics_path"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

// TestReferenceDeployment: the example replica config loads with
// tollgate's own loader (strict: an unknown or misspelt key fails) into
// the deployment the docs describe — ClickHouse ledger, a local queue
// directory, quotas and alert leadership through Redis — and Prometheus
// scrapes three replicas directly, on the port the replicas listen on,
// with the rules beside it loaded.
func TestReferenceDeployment(t *testing.T) {
	env := map[string]string{
		"TOLLGATE_CLICKHOUSE_URL": "http://tollgate:secret@clickhouse:8123",
		"TOLLGATE_REDIS_URL":      "redis://:secret@redis:6379/0",
		"OPENAI_API_KEY":          "sk-test",
		"SEARCH_TEAM_KEY":         "search-key-0123456789abcdef",
		"TOLLGATE_API_ADMIN":      "admin-token-0123456789abcdef",
		"TOLLGATE_API_READ":       "read-token-0123456789abcdef",
	}
	b, err := os.ReadFile(replicaFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(b, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("%s: %v", replicaFile, err)
	}
	switch {
	case cfg.Store.Backend != "clickhouse" || cfg.Store.ClickHouse.URL != env["TOLLGATE_CLICKHOUSE_URL"]:
		t.Errorf("store: backend %q at %q; want clickhouse at $TOLLGATE_CLICKHOUSE_URL", cfg.Store.Backend, cfg.Store.ClickHouse.URL)
	case cfg.QueueDir() != "/var/lib/tollgate/queue":
		t.Errorf("queue dir %q; want each replica's local /var/lib/tollgate/queue", cfg.QueueDir())
	case cfg.Quotas.Redis.URL != env["TOLLGATE_REDIS_URL"] || cfg.Replicas.Redis.URL != env["TOLLGATE_REDIS_URL"]:
		t.Errorf("quotas.redis.url %q, replicas.redis.url %q; want both $TOLLGATE_REDIS_URL", cfg.Quotas.Redis.URL, cfg.Replicas.Redis.URL)
	case cfg.Store.Retention.Ledger == 0 || cfg.Store.Retention.Details == 0:
		t.Errorf("retention %+v; want the ledger and details bounded", cfg.Store.Retention)
	}
	_, port, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		t.Fatalf("listen %q: %v", cfg.Listen, err)
	}

	b, err = os.ReadFile(scrapeFile)
	if err != nil {
		t.Fatal(err)
	}
	var sc scrapeConfig
	if err := yaml.Unmarshal(b, &sc); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(sc.RuleFiles, rulesFile) {
		t.Errorf("rule_files %v; want %s", sc.RuleFiles, rulesFile)
	}
	var targets []string
	for _, job := range sc.ScrapeConfigs {
		if job.JobName != "tollgate" {
			continue
		}
		if job.MetricsPath != "/metrics" {
			t.Errorf("metrics_path %q; tollgate serves /metrics", job.MetricsPath)
		}
		for _, s := range job.StaticConfigs {
			targets = append(targets, s.Targets...)
		}
	}
	if len(targets) != 3 {
		t.Fatalf("job tollgate scrapes %v; want three replicas", targets)
	}
	for _, target := range targets {
		if _, p, err := net.SplitHostPort(target); err != nil || p != port {
			t.Errorf("target %q: want each replica on the port it listens on (%s)", target, port)
		}
	}
}
