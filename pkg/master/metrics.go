package master

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark-io/tidemark/internal/refmetrics"
	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// Metrics are the master's own series. The scanner and the merge sweep register
// theirs (master_stats_*, master_scan_*, master_merge_sweep_*, master_wal_*) in
// the same registry. Where the reference system (lance-context) measures the
// same thing, a series has its name, type, labels and label values.
type Metrics struct {
	// Tasks counts tasks this replica ran to the end, by kind and result (success,
	// skipped: the store was deleted, failed). Tasks released at shutdown are not
	// counted: another run finishes them.
	Tasks *prometheus.CounterVec
	// TaskDuration times those runs' work, by kind.
	TaskDuration *prometheus.HistogramVec
	// TaskPhaseDuration times each phase of a task's life, by kind and phase
	// (claim, permit_wait, work, commit).
	TaskPhaseDuration *prometheus.HistogramVec
	// Enqueued counts successful enqueues by kind, a deduplicated one included
	// (it returned the live task), as the reference counts them.
	Enqueued *prometheus.CounterVec
	// QueueDepth is the number of queued tasks (every replica sees the same queue),
	// refreshed every probe interval.
	QueueDepth prometheus.Gauge
	// MergeWorkerDuration times each worker's merge of a merge_wal fan-out;
	// MergeWorkers counts them by result: ok, failed, and unreachable (skipped
	// before admission; Tidemark's own value, the reference counts it failed).
	MergeWorkerDuration prometheus.Histogram
	MergeWorkers        *prometheus.CounterVec
	// GenerationsReclaimed counts generations merged by merge_wal tasks, as their
	// stats report them (a failed task's partial progress included).
	GenerationsReclaimed prometheus.Counter
	// MergeEmptyRounds counts merge_wal tasks this replica ran to done that merged
	// no generation on any worker and adopted no shard: a call to every worker for
	// nothing. The merge sweep waits for a stats row scanned after a target's last
	// merge so that these stay rare; a steady rate means it does not.
	MergeEmptyRounds prometheus.Counter
	// EtcdUp is 1 while etcd answers this replica's probe, 0 while it does not.
	EtcdUp prometheus.Gauge
	// HTTP counts and times the HTTP API's requests (http_requests_total).
	HTTP *refmetrics.HTTP
}

// NewMetrics creates the master's series and registers them with reg (none is
// registered when reg is nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Tasks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "master_tasks_total",
			Help: "Tasks run to the end by this replica, by kind and result (success, skipped: the store was deleted, failed, retried: an export queued to run again after a failure a retry may mend).",
		}, []string{"kind", "result"}),
		TaskDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "master_task_duration_seconds",
			Help:    "Duration of task runs' work by this replica, by kind (success or failure is on master_tasks_total).",
			Buckets: refmetrics.JobBuckets,
		}, []string{"kind"}),
		TaskPhaseDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "master_task_phase_duration_seconds",
			Help:    "Task latency by kind and phase (claim, permit_wait, work, commit).",
			Buckets: refmetrics.JobBuckets,
		}, []string{"kind", "phase"}),
		Enqueued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "master_task_enqueued_total",
			Help: "Successful task enqueues by kind, deduplicated ones included.",
		}, []string{"kind"}),
		QueueDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "master_task_queue_depth",
			Help: "Queued tasks (P/queue/), as this replica last read them.",
		}),
		MergeWorkerDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "master_merge_wal_worker_duration_seconds",
			Help:    "Duration of one worker's merge call in a merge_wal fan-out.",
			Buckets: refmetrics.JobBuckets,
		}),
		MergeWorkers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "master_merge_wal_workers_total",
			Help: "Worker merge calls of merge_wal fan-outs, by result (ok, failed, unreachable: skipped before admission).",
		}, []string{"result"}),
		GenerationsReclaimed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "master_merge_wal_generations_reclaimed_total",
			Help: "WAL generations folded into base tables by merge_wal tasks.",
		}),
		MergeEmptyRounds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "master_merge_wal_empty_rounds_total",
			Help: "merge_wal tasks run to done by this replica that merged no generation and adopted no shard.",
		}),
		EtcdUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "master_etcd_up",
			Help: "1 while etcd answers this replica's probe, 0 while it does not.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Tasks, m.TaskDuration, m.QueueDepth, m.MergeWorkerDuration, m.MergeEmptyRounds, m.EtcdUp,
			m.TaskPhaseDuration, m.Enqueued, m.MergeWorkers, m.GenerationsReclaimed)
	}
	m.HTTP = refmetrics.NewHTTP(reg)
	// Every label value shows from the start, so a rate() has a zero to start from.
	for _, k := range tasks.Kinds() {
		for _, r := range []string{OutcomeDone, OutcomeSkipped, OutcomeFailed, OutcomeRetried} {
			m.Tasks.WithLabelValues(string(k), r)
		}
	}
	for _, k := range tasks.Kinds() {
		m.Enqueued.WithLabelValues(string(k))
	}
	for _, r := range []string{WorkerOK, WorkerFailed, WorkerUnreachable} {
		m.MergeWorkers.WithLabelValues(r)
	}
	return m
}

// master_merge_wal_workers_total's result values: ok and failed as the reference
// says them, unreachable Tidemark's own.
const (
	WorkerOK          = "ok"
	WorkerFailed      = "failed"
	WorkerUnreachable = "unreachable"
)

// ObserveEnqueue is a tasks.WithOnEnqueue hook: it counts an enqueue of kind.
func (m *Metrics) ObserveEnqueue(kind tasks.Kind, _ bool) {
	m.Enqueued.WithLabelValues(string(kind)).Inc()
}

// ObservePhase is a SchedulerConfig.OnPhase: it times one phase of a task.
func (m *Metrics) ObservePhase(kind tasks.Kind, phase string, d time.Duration) {
	m.TaskPhaseDuration.WithLabelValues(string(kind), phase).Observe(d.Seconds())
}

// ObserveTask is a SchedulerConfig.OnFinish: it counts and times a finished run,
// and counts the generations a merge_wal merged and a merge_wal that merged
// nothing, from the run's stats (never its detail, whose words may change).
func (m *Metrics) ObserveTask(kind tasks.Kind, outcome string, report tasks.Report, _ error, d time.Duration) {
	m.Tasks.WithLabelValues(string(kind), outcome).Inc()
	m.TaskDuration.WithLabelValues(string(kind)).Observe(d.Seconds())
	if kind != tasks.KindMergeWAL {
		return
	}
	s := report.Stats
	m.GenerationsReclaimed.Add(float64(s.GenerationsMerged))
	// Workers > 0: the run called workers (a runner that counts nothing is no round).
	if outcome == OutcomeDone && s.Workers > 0 && s.GenerationsMerged == 0 && s.ShardsAdopted == 0 {
		m.MergeEmptyRounds.Inc()
	}
}

// ObserveWorker is a fanout.FanOut.OnWorkerDone: it times one worker's merge call and
// counts it by result.
func (m *Metrics) ObserveWorker(_ fanout.Worker, d time.Duration, err error) {
	result := WorkerOK
	switch {
	case errors.Is(err, fanout.ErrUnreachable):
		result = WorkerUnreachable
	case err != nil:
		result = WorkerFailed
	}
	m.MergeWorkers.WithLabelValues(result).Inc()
	m.MergeWorkerDuration.Observe(d.Seconds())
}
