package rpc

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the WorkerService's own series: adoptions, maintenance tasks and
// exports (its merges and seals are counted in mergesvc.Metrics).
type Metrics struct {
	// ShardsAdopted counts shards of gone workers this worker drained and retired
	// (AdoptShard), by store kind.
	ShardsAdopted *prometheus.CounterVec
	// Compactions counts compact tasks run here, by result=success|noop|failure
	// (noop: nothing was worth rewriting; its cleanup still ran).
	Compactions *prometheus.CounterVec
	// CompactedFragments and CompactionBytes count source fragments rewritten and
	// bytes written by compactions, by store kind.
	CompactedFragments *prometheus.CounterVec
	CompactionBytes    *prometheus.CounterVec
	// CleanupObjects and CleanupBytes count objects (manifests and files, of base
	// tables and WAL shards) deleted by garbage collection, by store kind.
	CleanupObjects *prometheus.CounterVec
	CleanupBytes   *prometheus.CounterVec
	// VerifyProblems counts problems verify and repair tasks found, by store kind;
	// RepairDroppedFragments the fragments repairs removed. Either rising needs a
	// human: data is missing or damaged.
	VerifyProblems         *prometheus.CounterVec
	RepairDroppedFragments *prometheus.CounterVec
	// Exports counts exports run here, by result=success|failure|cancelled;
	// ExportedRows and ExportedBytes the rows and Parquet bytes of those that
	// succeeded, by store kind.
	Exports       *prometheus.CounterVec
	ExportedRows  *prometheus.CounterVec
	ExportedBytes *prometheus.CounterVec
}

// NewMetrics creates the series and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		ShardsAdopted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_shards_adopted_total", Help: "Shards of workers that did not come back that this worker drained and retired, by store kind.",
		}, []string{"kind"}),
		Compactions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollout_compaction_total", Help: "Compact tasks run by this worker, by result (success, noop, failure).",
		}, []string{"result"}),
		CompactedFragments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_compaction_rewritten_fragments_total", Help: "Source fragments rewritten by compactions, by store kind.",
		}, []string{"kind"}),
		CompactionBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_compaction_written_bytes_total", Help: "Bytes of fragments and bloom filters written by compactions, by store kind.",
		}, []string{"kind"}),
		CleanupObjects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_cleanup_deleted_objects_total", Help: "Manifests and files deleted by garbage collection (base tables and WAL shards), by store kind.",
		}, []string{"kind"}),
		CleanupBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_cleanup_deleted_bytes_total", Help: "Bytes of the objects deleted by garbage collection, by store kind.",
		}, []string{"kind"}),
		VerifyProblems: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_verify_problems_total", Help: "Missing or damaged objects found by verify and repair tasks, by store kind.",
		}, []string{"kind"}),
		RepairDroppedFragments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_repair_dropped_fragments_total", Help: "Fragments removed by repair tasks (an operator's --drop-missing), by store kind.",
		}, []string{"kind"}),
		Exports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_exports_total", Help: "Export tasks run by this worker, by result (success, failure, cancelled).",
		}, []string{"result"}),
		ExportedRows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_export_rows_total", Help: "Rows written by the exports that succeeded, by store kind.",
		}, []string{"kind"}),
		ExportedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_export_bytes_total", Help: "Bytes of Parquet files written by the exports that succeeded, by store kind.",
		}, []string{"kind"}),
	}
	reg.MustRegister(m.Exports, m.ExportedRows, m.ExportedBytes, m.ShardsAdopted, m.Compactions, m.CompactedFragments, m.CompactionBytes, m.CleanupObjects, m.CleanupBytes, m.VerifyProblems, m.RepairDroppedFragments)
	return m
}
