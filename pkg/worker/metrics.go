package worker

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark-io/tidemark/internal/refmetrics"
	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
)

// Metrics are the worker's Prometheus series. Where the reference system
// (lance-context) measures the same thing, the series has its name, type, labels
// and label values, so its dashboards and alerts keep working against Tidemark;
// tidemark_* names are for what it does not measure. Seals and merges are counted
// separately: a failed merge is never a failed flush.
type Metrics struct {
	// Flushes counts seals by the flush sweeper, shutdown and ?flush=true:
	// result=ok|failed|timeout, kind=rollout|generic.
	Flushes *prometheus.CounterVec
	// Cleanups counts merges run by the sweepers (count and time triggers) that
	// did something: result=merged|failed|timeout, and busy (no merge slot was
	// free, nothing ran; Tidemark's own value). A merge that found nothing to
	// merge is not counted, as in the reference.
	Cleanups *prometheus.CounterVec
	// GenerationsReclaimed counts generations the sweepers' merges folded into
	// base tables, by kind (the master's merges are in MergedGenerations).
	GenerationsReclaimed *prometheus.CounterVec
	// Merges counts every merge by trigger=master|request|count|time and result.
	Merges *prometheus.CounterVec
	// MergeDuration times merges by trigger.
	MergeDuration *prometheus.HistogramVec
	// MergedGenerations counts generations merged into base tables, by kind.
	MergedGenerations *prometheus.CounterVec
	// PendingGenerations is, per resident store, the generations above the merged
	// watermarks that a read fans out over (tidemark_wal_pending_generations).
	PendingGenerations *prometheus.GaugeVec
	// ReadPendingGenerations samples, on every read, the pending generations it
	// fans out over (rollout_wal_pending_generations, the reference's unlabelled
	// histogram).
	ReadPendingGenerations prometheus.Histogram
	// ReadFanoutWarnings counts reads over more pending generations than the warn
	// threshold.
	ReadFanoutWarnings *prometheus.CounterVec
	// HTTP counts and times HTTP requests by method, path (the route pattern
	// without its method, e.g. /api/v1/rollouts/{name}; "unknown" when none
	// matched) and status code; Requests and RequestDuration are its series.
	HTTP            *refmetrics.HTTP
	Requests        *prometheus.CounterVec
	RequestDuration *prometheus.HistogramVec
	// AddDuration times the durable WAL append of a successful rollout add;
	// AddErrors counts failed ones. AddRequestDuration times a successful add
	// request past its body parsing (append plus ?flush), by flush=true|false.
	AddDuration        prometheus.Histogram
	AddErrors          prometheus.Counter
	AddRequestDuration *prometheus.HistogramVec
	// FlushDuration times seals of rollout stores by outcome: sealed (a memtable
	// became a generation), noop (nothing to seal), fenced (the writer's epoch
	// was superseded); FlushErrors counts the other failures.
	FlushDuration *prometheus.HistogramVec
	FlushErrors   prometheus.Counter
	// MergeRequestDuration times the worker's handling of a master-driven merge.
	MergeRequestDuration prometheus.Histogram
	// MergePhaseDuration times each phase of a merge pass (merge.Phase) by
	// result ok|error; MergePhaseErrors counts the failed ones by phase: where
	// merges die.
	MergePhaseDuration *prometheus.HistogramVec
	MergePhaseErrors   *prometheus.CounterVec
	// AppendedRows counts rows acknowledged by adds, by kind.
	AppendedRows *prometheus.CounterVec
	// FeedPages counts the change feed's answered pages (empty ones included:
	// a long poll that ended without rows), FeedRows the rows they carried, by
	// store kind.
	FeedPages *prometheus.CounterVec
	FeedRows  *prometheus.CounterVec
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
	// DrainedFiles counts the drained generation files whose delete delay passed,
	// by what the cleanup sweeper made of them: deleted, failed (the delete failed)
	// or dropped (the delete queue was full). Failed and dropped files are garbage
	// that the next garbage collection deletes. Merges delete none.
	DrainedFiles *prometheus.CounterVec
	// VerifyProblems counts problems verify and repair tasks found, by store kind;
	// RepairDroppedFragments the fragments repairs removed. Either rising needs a
	// human: data is missing or damaged.
	VerifyProblems         *prometheus.CounterVec
	RepairDroppedFragments *prometheus.CounterVec
	// BackpressureDelay observes, by store kind, the wait of every add that its
	// store's backpressure slowed (Server.admitAdd); an add that did not wait is
	// not observed. BackpressureRefusals counts adds refused (503) because their
	// store had RefuseGenerations pending generations or more.
	BackpressureDelay    *prometheus.HistogramVec
	BackpressureRefusals *prometheus.CounterVec
	// ConsumerLagRefusals counts adds refused (503 CONSUMER_LAG), by store kind,
	// because a named consumer of their store lagged beyond its max_consumer_lag.
	ConsumerLagRefusals *prometheus.CounterVec
	// BlobBudgetRejections counts adds and blob downloads refused (503) by the
	// in-flight blob budget; BlobBytes observes the size of every rollout
	// record's binary_payload added (the reference's names).
	BlobBudgetRejections prometheus.Counter
	BlobBytes            prometheus.Histogram
}

// NewMetrics creates the worker's series and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	h := refmetrics.NewHTTP(nil)
	m := &Metrics{
		HTTP: h, Requests: h.Requests, RequestDuration: h.Duration,
		Flushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollout_wal_flush_total", Help: "WAL seals (memtable to generation), by result (ok, failed, timeout) and store kind.",
		}, []string{"result", "kind"}),
		Cleanups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollout_wal_cleanup_total", Help: "Sweeper-driven WAL merges that merged or failed, by result (merged, failed, timeout, busy) and store kind.",
		}, []string{"result", "kind"}),
		GenerationsReclaimed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollout_wal_generations_reclaimed_total", Help: "WAL generations folded into base tables by the sweepers' merges, by store kind.",
		}, []string{"kind"}),
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
			Name: "tidemark_wal_pending_generations", Help: "Pending WAL generations (all shards, above the merged watermarks) of each resident store.",
		}, []string{"kind", "store"}),
		ReadPendingGenerations: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "rollout_wal_pending_generations", Help: "Pending WAL generations a read fanned out over, sampled on every read.",
			Buckets: []float64{0, 1, 4, 16, 64, 256, 1024, 4096},
		}),
		ReadFanoutWarnings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollout_wal_read_fanout_warnings_total", Help: "Reads that fanned out over more pending generations than the warn threshold.",
		}, []string{"kind"}),
		AddDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "rollout_add_duration_seconds", Help: "The durable WAL append of a successful rollout add.",
			Buckets: refmetrics.RequestBuckets,
		}),
		AddErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rollout_add_errors_total", Help: "Failed rollout adds (WAL appends).",
		}),
		AddRequestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "rollout_add_request_duration_seconds", Help: "A successful rollout add request past body parsing (append plus optional flush), by flush (true, false).",
			Buckets: refmetrics.RequestBuckets,
		}, []string{"flush"}),
		FlushDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "rollout_flush_duration_seconds", Help: "Seals of rollout stores, by outcome (sealed, noop, fenced).",
			Buckets: refmetrics.RequestBuckets,
		}, []string{"outcome"}),
		FlushErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rollout_flush_errors_total", Help: "Failed seals of rollout stores (a fenced writer is not counted: its outcome is fenced).",
		}),
		MergeRequestDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "rollout_wal_merge_request_duration_seconds", Help: "The worker's handling of a master-driven WAL merge.",
			Buckets: refmetrics.JobBuckets,
		}),
		MergePhaseDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "rollout_wal_merge_duration_seconds", Help: "Each phase of a WAL merge pass (read, append, commit, drain), by result.",
			Buckets: refmetrics.JobBuckets,
		}, []string{"phase", "result"}),
		MergePhaseErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollout_wal_merge_errors_total", Help: "WAL merge phases that failed, by phase: a pass stops at its first failing phase.",
		}, []string{"phase"}),
		AppendedRows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_appended_rows_total", Help: "Rows acknowledged durable by adds, by store kind.",
		}, []string{"kind"}),
		FeedPages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_feed_pages_total", Help: "Pages answered by the change feed (GET .../changes), empty ones included, by store kind.",
		}, []string{"kind"}),
		FeedRows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_feed_rows_total", Help: "Rows answered by the change feed, by store kind.",
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
		DrainedFiles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_wal_drained_files_total", Help: "Drained WAL generation files whose delete delay passed, by what the cleanup sweeper made of them (deleted, failed, dropped: the queue was full; failed and dropped ones are left for garbage collection).",
		}, []string{"result"}),
		VerifyProblems: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_verify_problems_total", Help: "Missing or damaged objects found by verify and repair tasks, by store kind.",
		}, []string{"kind"}),
		RepairDroppedFragments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_repair_dropped_fragments_total", Help: "Fragments removed by repair tasks (an operator's --drop-missing), by store kind.",
		}, []string{"kind"}),
		BackpressureDelay: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tidemark_add_backpressure_delay_seconds", Help: "The wait of each add its store's backpressure slowed (pending generations between the warn and refuse thresholds), by store kind.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}, []string{"kind"}),
		BackpressureRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_add_backpressure_refusals_total", Help: "Adds refused with 503 because their store had as many pending generations as the refuse threshold or more, by store kind.",
		}, []string{"kind"}),
		ConsumerLagRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_add_consumer_lag_refusals_total", Help: "Adds refused with 503 because a named consumer of their store lagged behind its horizon by more than the store's max_consumer_lag, by store kind.",
		}, []string{"kind"}),
		BlobBudgetRejections: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rollout_blob_budget_rejections_total", Help: "Adds and blob downloads refused with 503 by the in-flight blob budget.",
		}),
		BlobBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "rollout_blob_bytes", Help: "Size of each rollout record's binary_payload added, in bytes.",
			Buckets: prometheus.ExponentialBuckets(1024, 4, 10),
		}),
	}
	reg.MustRegister(m.BlobBudgetRejections, m.BlobBytes, m.BackpressureDelay, m.BackpressureRefusals, m.ConsumerLagRefusals)
	reg.MustRegister(m.FeedPages, m.FeedRows)
	reg.MustRegister(m.Compactions, m.CompactedFragments, m.CompactionBytes, m.CleanupObjects, m.CleanupBytes,
		m.DrainedFiles, m.VerifyProblems, m.RepairDroppedFragments)
	reg.MustRegister(m.ShardsAdopted, m.FencingRefusals, m.Flushes, m.Cleanups, m.Merges, m.MergeDuration, m.MergedGenerations,
		m.PendingGenerations, m.ReadFanoutWarnings, m.Requests, m.RequestDuration, m.AppendedRows)
	reg.MustRegister(m.GenerationsReclaimed, m.ReadPendingGenerations, m.AddDuration, m.AddErrors, m.AddRequestDuration,
		m.FlushDuration, m.FlushErrors, m.MergeRequestDuration, m.MergePhaseDuration, m.MergePhaseErrors)
	for _, p := range merge.Phases() {
		m.MergePhaseErrors.WithLabelValues(string(p))
	}
	// Every label value shows from the start, so a rate() has a zero to start from.
	for _, f := range []string{"true", "false"} {
		m.AddRequestDuration.WithLabelValues(f)
	}
	for _, o := range []string{FlushSealed, FlushNoop, FlushFenced} {
		m.FlushDuration.WithLabelValues(o)
	}
	for _, r := range []string{DrainedDeleted, DrainedFailed, DrainedDropped} {
		m.DrainedFiles.WithLabelValues(r)
	}
	for _, k := range registry.Kinds() {
		m.BackpressureDelay.WithLabelValues(string(k))
		m.BackpressureRefusals.WithLabelValues(string(k))
		m.FeedPages.WithLabelValues(string(k))
		m.FeedRows.WithLabelValues(string(k))
	}
	return m
}

// Label values of the reference's series, as it spells them.
const (
	// rollout_wal_flush_total{result}, rollout_wal_cleanup_total{result}.
	ResultOK      = "ok"
	ResultFailed  = "failed"
	ResultTimeout = "timeout"
	ResultMerged  = "merged"
	// ResultBusy is Tidemark's own: a sweeper merge that found no free merge slot.
	ResultBusy = "busy"
	// rollout_flush_duration_seconds{outcome}.
	FlushSealed = "sealed"
	FlushNoop   = "noop"
	FlushFenced = "fenced"
)

// Label values of tidemark_wal_drained_files_total{result}.
const (
	DrainedDeleted = "deleted"
	DrainedFailed  = "failed"
	DrainedDropped = "dropped"
)

// ObserveAdd records a rollout store's durable append that took d (the
// reference measures adds of rollout stores only).
func (m *Metrics) ObserveAdd(kind registry.Kind, d time.Duration, err error) {
	switch {
	case kind != registry.KindRollout:
	case err != nil:
		m.AddErrors.Inc()
	default:
		m.AddDuration.Observe(d.Seconds())
	}
}

// ObserveSeal records a seal of a store of kind that took d: sealed says it made
// a generation (false: nothing to seal). It counts rollout_wal_flush_total for
// every kind, and for rollout stores the reference's per-outcome duration and
// error count (a writer refused with wal.ErrFenced is the outcome fenced).
func (m *Metrics) ObserveSeal(kind string, sealed bool, err error, d time.Duration) {
	fenced := errors.Is(err, wal.ErrFenced)
	switch {
	case err != nil && errors.Is(err, context.DeadlineExceeded):
		m.Flushes.WithLabelValues(ResultTimeout, kind).Inc()
	case err != nil:
		m.Flushes.WithLabelValues(ResultFailed, kind).Inc()
	case sealed:
		m.Flushes.WithLabelValues(ResultOK, kind).Inc()
	}
	if kind != string(registry.KindRollout) {
		return
	}
	switch {
	case err != nil && fenced:
		m.FlushDuration.WithLabelValues(FlushFenced).Observe(d.Seconds())
	case err != nil:
		m.FlushErrors.Inc()
	case sealed:
		m.FlushDuration.WithLabelValues(FlushSealed).Observe(d.Seconds())
	default:
		m.FlushDuration.WithLabelValues(FlushNoop).Observe(d.Seconds())
	}
}

// ObserveMergePhase records one phase of a merge pass: merge.Config.OnPhase.
func (m *Metrics) ObserveMergePhase(p merge.Phase, took time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
		m.MergePhaseErrors.WithLabelValues(string(p)).Inc()
	}
	m.MergePhaseDuration.WithLabelValues(string(p), result).Observe(took.Seconds())
}
