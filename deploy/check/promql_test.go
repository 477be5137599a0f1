package check

import "github.com/prometheus/prometheus/promql/parser"

// promql is Prometheus' own PromQL parser with its default options, as a
// Prometheus server without feature flags parses rules and dashboards.
var promql = parser.NewParser(parser.Options{})
