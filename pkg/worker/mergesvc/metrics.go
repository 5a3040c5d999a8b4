package mergesvc

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

// Metrics are the series of merges and seals, whoever runs them (the HTTP API,
// the gRPC service, the sweeps). Where the reference system (lance-context)
// measures the same thing, the series has its name, type, labels and label
// values; tidemark_* names are for what it does not measure. Seals and merges are
// counted separately: a failed merge is never a failed flush.
type Metrics struct {
	// Flushes counts seals by the flush sweeper, shutdown and ?flush=true:
	// result=ok|failed|timeout, kind=rollout|generic.
	Flushes *prometheus.CounterVec
	// Merges counts every merge by trigger=master|request|count|time and result.
	Merges *prometheus.CounterVec
	// MergeDuration times merges by trigger.
	MergeDuration *prometheus.HistogramVec
	// MergedGenerations counts generations merged into base tables, by kind.
	MergedGenerations *prometheus.CounterVec
	// PendingGenerations is, per resident store, the generations above the merged
	// watermarks that a read fans out over (tidemark_wal_pending_generations).
	PendingGenerations *prometheus.GaugeVec
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
	// FencingRefusals counts merge calls refused for a stale fencing token, by
	// kind: a master merging under a claim that was superseded. Any increase means
	// two claims of one target were live at once (a takeover after a lost lease);
	// the refusal is what kept them from merging together.
	FencingRefusals *prometheus.CounterVec
}

// NewMetrics creates the series and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Flushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollout_wal_flush_total", Help: "WAL seals (memtable to generation), by result (ok, failed, timeout) and store kind.",
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
			Name: "tidemark_wal_pending_generations", Help: "Pending WAL generations (all shards, above the merged watermarks) of each resident store.",
		}, []string{"kind", "store"}),
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
		FencingRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_merge_fencing_refusals_total", Help: "Merge calls refused for a fencing token older than the newest seen for the target, by store kind.",
		}, []string{"kind"}),
	}
	reg.MustRegister(m.Flushes, m.Merges, m.MergeDuration, m.MergedGenerations, m.PendingGenerations, m.FlushDuration, m.FlushErrors, m.MergeRequestDuration, m.MergePhaseDuration, m.MergePhaseErrors, m.FencingRefusals)
	for _, p := range merge.Phases() {
		m.MergePhaseErrors.WithLabelValues(string(p))
	}
	// Every label value shows from the start, so a rate() has a zero to start from.
	for _, o := range []string{FlushSealed, FlushNoop, FlushFenced} {
		m.FlushDuration.WithLabelValues(o)
	}
	return m
}

// Label values of the reference's series, as it spells them.
const (
	// rollout_wal_flush_total{result}, rollout_wal_cleanup_total{result} (with
	// sweep's own).
	ResultOK      = "ok"
	ResultFailed  = "failed"
	ResultTimeout = "timeout"
	// rollout_flush_duration_seconds{outcome}.
	FlushSealed = "sealed"
	FlushNoop   = "noop"
	FlushFenced = "fenced"
)

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
