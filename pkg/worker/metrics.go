package worker

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the worker's Prometheus series. Names follow the reference system
// where it had them (rollout_wal_*), so existing dashboards keep working. Seals and
// merges are counted separately: a failed merge is never a failed flush.
type Metrics struct {
	// Flushes counts seals by the flush sweeper, shutdown and ?flush=true:
	// result=success|failure, kind=rollout|generic.
	Flushes *prometheus.CounterVec
	// Cleanups counts merges run by the sweepers (count and time triggers):
	// result=success|failure|busy|timeout.
	Cleanups *prometheus.CounterVec
	// Merges counts every merge by trigger=master|request|count|time and result.
	Merges *prometheus.CounterVec
	// MergeDuration times merges by trigger.
	MergeDuration *prometheus.HistogramVec
	// MergedGenerations counts generations merged into base tables, by kind.
	MergedGenerations *prometheus.CounterVec
	// PendingGenerations is, per resident store, the generations above the merged
	// watermarks that a read fans out over.
	PendingGenerations *prometheus.GaugeVec
	// ReadFanoutWarnings counts reads over more pending generations than the warn
	// threshold.
	ReadFanoutWarnings *prometheus.CounterVec
	// Requests counts HTTP requests by route pattern, method and status code.
	Requests *prometheus.CounterVec
	// RequestDuration times HTTP requests by route pattern.
	RequestDuration *prometheus.HistogramVec
	// AppendedRows counts rows acknowledged by adds, by kind.
	AppendedRows *prometheus.CounterVec
	// FencingRefusals counts merge calls refused for a stale fencing token, by
	// kind: a master merging under a claim that was superseded. Any increase means
	// two claims of one target were live at once (a takeover after a lost lease);
	// the refusal is what kept them from merging together.
	FencingRefusals *prometheus.CounterVec
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
	// BlobBudgetRejections counts adds and blob downloads refused (503) by the
	// in-flight blob budget; BlobBytes observes the size of every rollout
	// record's binary_payload added (the reference's names).
	BlobBudgetRejections prometheus.Counter
	BlobBytes            prometheus.Histogram
}

// NewMetrics creates the worker's series and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Flushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollout_wal_flush_total", Help: "WAL seals (memtable to generation), by result and store kind.",
		}, []string{"result", "kind"}),
		Cleanups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollout_wal_cleanup_total", Help: "Sweeper-driven WAL merges, by result (success, failure, busy, timeout) and store kind.",
		}, []string{"result", "kind"}),
		Merges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_merge_total", Help: "Merges of this worker's WAL shard into base tables, by trigger and result.",
		}, []string{"trigger", "result"}),
		MergeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tidemark_merge_duration_seconds", Help: "Duration of merges, by trigger.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}, []string{"trigger"}),
		MergedGenerations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_merged_generations_total", Help: "WAL generations merged into base tables, by store kind.",
		}, []string{"kind"}),
		PendingGenerations: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rollout_wal_pending_generations", Help: "Pending WAL generations (all shards, above the merged watermarks) of each resident store.",
		}, []string{"kind", "store"}),
		ReadFanoutWarnings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollout_wal_read_fanout_warnings_total", Help: "Reads that fanned out over more pending generations than the warn threshold.",
		}, []string{"kind"}),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_http_requests_total", Help: "HTTP requests by route, method and status code.",
		}, []string{"route", "method", "code"}),
		RequestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tidemark_http_request_duration_seconds", Help: "HTTP request latency by route.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"route"}),
		AppendedRows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_appended_rows_total", Help: "Rows acknowledged durable by adds, by store kind.",
		}, []string{"kind"}),
		FencingRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_merge_fencing_refusals_total", Help: "Merge calls refused for a fencing token older than the newest seen for the target, by store kind.",
		}, []string{"kind"}),
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
		BlobBudgetRejections: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rollout_blob_budget_rejections_total", Help: "Adds and blob downloads refused with 503 by the in-flight blob budget.",
		}),
		BlobBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "rollout_blob_bytes", Help: "Size of each rollout record's binary_payload added, in bytes.",
			Buckets: prometheus.ExponentialBuckets(1024, 4, 10),
		}),
	}
	reg.MustRegister(m.BlobBudgetRejections, m.BlobBytes)
	reg.MustRegister(m.Compactions, m.CompactedFragments, m.CompactionBytes, m.CleanupObjects, m.CleanupBytes,
		m.VerifyProblems, m.RepairDroppedFragments)
	reg.MustRegister(m.ShardsAdopted, m.FencingRefusals, m.Flushes, m.Cleanups, m.Merges, m.MergeDuration, m.MergedGenerations,
		m.PendingGenerations, m.ReadFanoutWarnings, m.Requests, m.RequestDuration, m.AppendedRows)
	return m
}
