package budget

import "github.com/prometheus/client_golang/prometheus"

// Collector exports each budget's burn as of the tracker's last read:
// tollgate_budget_usage_ratio{budget, scope, period}. Budgets come from
// the configuration, so the labels are bounded by it.
type Collector struct {
	t     *Tracker
	ratio *prometheus.Desc
}

// NewCollector is the tracker's collector, for a registry.
func NewCollector(t *Tracker) *Collector {
	return &Collector{t: t, ratio: prometheus.NewDesc("tollgate_budget_usage_ratio",
		"Share of each budget used in its current period (the larger of tokens and cost), as of the last read of the ledger; 1 is 100 %.",
		[]string{"budget", "scope", "period"}, nil)}
}

func (c *Collector) Describe(ch chan<- *prometheus.Desc) { ch <- c.ratio }

func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.t.Statuses() {
		ch <- prometheus.MustNewConstMetric(c.ratio, prometheus.GaugeValue, s.Share, s.Name, s.Scope+":"+s.Subject, s.Period)
	}
}
