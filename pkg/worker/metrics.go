package worker

import (
	"github.com/prometheus/client_golang/prometheus"
)

// readSeries are the series of the store handles' read hooks, which the worker
// wires itself (every part reads through the same handles).
type readSeries struct {
	// ReadPendingGenerations samples, on every read, the pending generations it
	// fans out over (rollout_wal_pending_generations, the reference's unlabelled
	// histogram).
	ReadPendingGenerations prometheus.Histogram
	// ReadFanoutWarnings counts reads over more pending generations than the warn
	// threshold.
	ReadFanoutWarnings *prometheus.CounterVec
}

// newReadSeries creates the series and registers them with reg.
func newReadSeries(reg prometheus.Registerer) *readSeries {
	m := &readSeries{
		ReadPendingGenerations: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "rollout_wal_pending_generations", Help: "Pending WAL generations a read fanned out over, sampled on every read.",
			Buckets: []float64{0, 1, 4, 16, 64, 256, 1024, 4096},
		}),
		ReadFanoutWarnings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollout_wal_read_fanout_warnings_total", Help: "Reads that fanned out over more pending generations than the warn threshold.",
		}, []string{"kind"}),
	}
	reg.MustRegister(m.ReadPendingGenerations, m.ReadFanoutWarnings)
	return m
}
