package sweep

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidemark-io/tidemark/pkg/registry"
)

// Metrics are the sweeps' own series (their seals and merges are counted in
// mergesvc.Metrics, with everyone else's).
type Metrics struct {
	// Cleanups counts merges run by the sweepers (count and time triggers) that
	// did something: result=merged|failed|timeout, and busy (no merge slot was
	// free, nothing ran; Tidemark's own value). A merge that found nothing to
	// merge is not counted, as in the reference.
	Cleanups *prometheus.CounterVec
	// GenerationsReclaimed counts generations the sweepers' merges folded into
	// base tables, by kind (every merge is in mergesvc.Metrics.MergedGenerations).
	GenerationsReclaimed *prometheus.CounterVec
	// DrainedFiles counts the drained generation files whose delete delay passed,
	// by what the cleanup sweeper made of them: deleted, failed (the delete failed)
	// or dropped (the delete queue was full). Failed and dropped files are garbage
	// that the next garbage collection deletes. Merges delete none.
	DrainedFiles *prometheus.CounterVec
}

// NewMetrics creates the series and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Cleanups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollout_wal_cleanup_total", Help: "Sweeper-driven WAL merges that merged or failed, by result (merged, failed, timeout, busy) and store kind.",
		}, []string{"result", "kind"}),
		GenerationsReclaimed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollout_wal_generations_reclaimed_total", Help: "WAL generations folded into base tables by the sweepers' merges, by store kind.",
		}, []string{"kind"}),
		DrainedFiles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_wal_drained_files_total", Help: "Drained WAL generation files whose delete delay passed, by what the cleanup sweeper made of them (deleted, failed, dropped: the queue was full; failed and dropped ones are left for garbage collection).",
		}, []string{"result"}),
	}
	reg.MustRegister(m.Cleanups, m.GenerationsReclaimed, m.DrainedFiles)
	for _, r := range []string{DrainedDeleted, DrainedFailed, DrainedDropped} {
		m.DrainedFiles.WithLabelValues(r)
	}
	// The reference's series show from the start, also on a worker of a cluster,
	// whose sweeps never merge (the master decides): its dashboards find them at
	// zero rather than missing.
	for _, k := range registry.Kinds() {
		m.Cleanups.WithLabelValues(ResultMerged, string(k))
		m.GenerationsReclaimed.WithLabelValues(string(k))
	}
	return m
}

// Label values of rollout_wal_cleanup_total{result} that are the sweeps' own
// (the others are mergesvc's ResultFailed and ResultTimeout).
const (
	ResultMerged = "merged"
	// ResultBusy is Tidemark's own: a sweeper merge that found no free merge slot.
	ResultBusy = "busy"
)

// Label values of tidemark_wal_drained_files_total{result}.
const (
	DrainedDeleted = "deleted"
	DrainedFailed  = "failed"
	DrainedDropped = "dropped"
)
