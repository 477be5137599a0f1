package wal

import "github.com/prometheus/client_golang/prometheus"

// metrics holds the histograms; counters and gauges are functions over the
// WAL's own state, so Stats and /metrics never disagree.
type metrics struct {
	commit    prometheus.Histogram
	groupSize prometheus.Histogram
}

func newMetrics() metrics {
	return metrics{
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tollgate_wal_commit_seconds",
			Help:    "Time from Append to the entry being durable (its group's fsync done).",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 18), // 50µs to 6.5s
		}),
		groupSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tollgate_wal_group_size",
			Help:    "Entries per commit group, i.e. sharing one write and one fsync.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14), // 1 to 8192
		}),
	}
}

func (m metrics) register(w *WAL, reg prometheus.Registerer) {
	if reg == nil {
		return
	}
	counter := func(name, help string, v func() uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(v()) })
	}
	gauge := func(name, help string, v func(s Stats) int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help},
			func() float64 { return float64(v(w.Stats())) })
	}
	reg.MustRegister(
		m.commit, m.groupSize,
		counter("tollgate_wal_appends_total", "Entries accepted by Append.", w.st.appends.Load),
		counter("tollgate_wal_fsyncs_total", "fsync calls: one per commit group, plus segment creation and directory syncs.", w.st.fsyncs.Load),
		counter("tollgate_wal_ship_errors_total", "Failed sink calls while shipping; the batch is retried.", w.st.shipErrors.Load),
		counter("tollgate_wal_full_total", "Appends refused with ErrFull: unshipped data at MaxBytes, or the disk too slow to keep up.", w.st.full.Load),
		counter("tollgate_wal_truncated_bytes_total", "Bytes of torn tail removed by recovery at open.", w.st.truncated.Load),
		gauge("tollgate_wal_unshipped_bytes", "Bytes appended and not yet shipped (the spill backlog).", func(s Stats) int64 { return s.UnshippedBytes }),
		gauge("tollgate_wal_unshipped_entries", "Entries appended and not yet shipped.", func(s Stats) int64 { return s.UnshippedEntries }),
	)
}
