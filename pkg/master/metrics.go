package master

import (
	"errors"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// Metrics are the master's own series. The scanner and the merge sweep register
// theirs (master_stats_*, master_merge_sweep_*) in the same registry.
type Metrics struct {
	// Tasks counts tasks this replica ran to the end, by kind and result (done,
	// skipped: the store was deleted, failed). Tasks released at shutdown are not
	// counted: another run finishes them.
	Tasks *prometheus.CounterVec
	// TaskDuration times those runs, by kind.
	TaskDuration *prometheus.HistogramVec
	// QueueDepth is the number of queued tasks (every replica sees the same queue),
	// refreshed every probe interval.
	QueueDepth prometheus.Gauge
	// MergeWorkerDuration times each worker's merge of a merge_wal fan-out, by
	// result: ok, unreachable (skipped before admission), error (stopped the fan-out).
	MergeWorkerDuration *prometheus.HistogramVec
	// MergeEmptyRounds counts merge_wal tasks this replica ran to done that merged
	// no generation on any worker and adopted no shard: a call to every worker for
	// nothing. The merge sweep waits for a stats row scanned after a target's last
	// merge so that these stay rare; a steady rate means it does not.
	MergeEmptyRounds prometheus.Counter
	// EtcdUp is 1 while etcd answers this replica's probe, 0 while it does not.
	EtcdUp prometheus.Gauge
}

// NewRegistry returns a Prometheus registry holding the Go runtime and process
// collectors, for Config.Metrics.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// NewMetrics creates the master's series and registers them with reg (none is
// registered when reg is nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Tasks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "master_tasks_total",
			Help: "Tasks run to the end by this replica, by kind and result (done, skipped: the store was deleted, failed).",
		}, []string{"kind", "result"}),
		TaskDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "master_task_duration_seconds",
			Help:    "Duration of task runs by this replica, by kind.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 16), // 50 ms .. ~27 min
		}, []string{"kind"}),
		QueueDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "master_task_queue_depth",
			Help: "Queued tasks (P/queue/), as this replica last read them.",
		}),
		MergeWorkerDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "master_merge_wal_worker_duration_seconds",
			Help:    "Duration of one worker's merge in a merge_wal fan-out, by result (ok, unreachable, error).",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 16),
		}, []string{"result"}),
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
		reg.MustRegister(m.Tasks, m.TaskDuration, m.QueueDepth, m.MergeWorkerDuration, m.MergeEmptyRounds, m.EtcdUp)
	}
	// Every label value shows from the start, so a rate() has a zero to start from.
	for _, k := range tasks.Kinds() {
		for _, r := range []string{OutcomeDone, OutcomeSkipped, OutcomeFailed} {
			m.Tasks.WithLabelValues(string(k), r)
		}
	}
	for _, r := range []string{"ok", "unreachable", "error"} {
		m.MergeWorkerDuration.WithLabelValues(r)
	}
	return m
}

// ObserveTask is a SchedulerConfig.OnFinish: it counts and times a finished run,
// and counts a merge_wal that merged nothing.
func (m *Metrics) ObserveTask(kind tasks.Kind, outcome, detail string, _ error, d time.Duration) {
	m.Tasks.WithLabelValues(string(kind), outcome).Inc()
	m.TaskDuration.WithLabelValues(string(kind)).Observe(d.Seconds())
	if kind == tasks.KindMergeWAL && outcome == OutcomeDone && mergedNothing(detail) {
		m.MergeEmptyRounds.Inc()
	}
}

// mergedNothing reports whether detail, a FanOut's, says that no generation was
// merged and no shard adopted. The detail is the only account of a run the
// scheduler gets back (Runner); fanout_test.go holds the two to the same words.
func mergedNothing(detail string) bool {
	return strings.HasPrefix(detail, "merged 0 generations ") && !strings.Contains(detail, "adopted")
}

// ObserveWorker is a FanOut.OnWorkerDone: it times one worker's merge by result.
func (m *Metrics) ObserveWorker(_ Worker, d time.Duration, err error) {
	result := "ok"
	switch {
	case errors.Is(err, ErrUnreachable):
		result = "unreachable"
	case err != nil:
		result = "error"
	}
	m.MergeWorkerDuration.WithLabelValues(result).Observe(d.Seconds())
}
