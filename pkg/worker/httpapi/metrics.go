package httpapi

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark-io/tidemark/internal/refmetrics"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/worker/feed"
)

// Metrics are the HTTP data API's series: requests, adds, their backpressure and
// the blob budget; Feed are the change feed's, whose routes the API serves (its
// merges and seals are counted in mergesvc.Metrics).
type Metrics struct {
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
	// AppendedRows counts rows acknowledged by adds, by kind.
	AppendedRows *prometheus.CounterVec
	// BackpressureDelay observes, by store kind, the wait of every add that its
	// store's backpressure slowed (Server.admitAdd); an add that did not wait is
	// not observed. BackpressureRefusals counts adds refused (503) because their
	// store had RefuseGenerations pending generations or more.
	BackpressureDelay    *prometheus.HistogramVec
	BackpressureRefusals *prometheus.CounterVec
	// BlobBudgetRejections counts adds and blob downloads refused (503) by the
	// in-flight blob budget; BlobBytes observes the size of every rollout
	// record's binary_payload added (the reference's names).
	BlobBudgetRejections prometheus.Counter
	BlobBytes            prometheus.Histogram
	// Feed are the change feed's series.
	Feed *feed.Metrics
}

// NewMetrics creates the series and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	h := refmetrics.NewHTTP(nil)
	m := &Metrics{
		HTTP: h, Requests: h.Requests, RequestDuration: h.Duration, Feed: feed.NewMetrics(reg),
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
		AppendedRows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_appended_rows_total", Help: "Rows acknowledged durable by adds, by store kind.",
		}, []string{"kind"}),
		BackpressureDelay: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tidemark_add_backpressure_delay_seconds", Help: "The wait of each add its store's backpressure slowed (pending generations between the warn and refuse thresholds), by store kind.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}, []string{"kind"}),
		BackpressureRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_add_backpressure_refusals_total", Help: "Adds refused with 503 because their store had as many pending generations as the refuse threshold or more, by store kind.",
		}, []string{"kind"}),
		BlobBudgetRejections: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rollout_blob_budget_rejections_total", Help: "Adds and blob downloads refused with 503 by the in-flight blob budget.",
		}),
		BlobBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "rollout_blob_bytes", Help: "Size of each rollout record's binary_payload added, in bytes.",
			Buckets: prometheus.ExponentialBuckets(1024, 4, 10),
		}),
	}
	reg.MustRegister(m.Requests, m.RequestDuration, m.AddDuration, m.AddErrors, m.AddRequestDuration, m.AppendedRows, m.BackpressureDelay, m.BackpressureRefusals, m.BlobBudgetRejections, m.BlobBytes)
	// Every label value shows from the start, so a rate() has a zero to start from.
	for _, f := range []string{"true", "false"} {
		m.AddRequestDuration.WithLabelValues(f)
	}
	for _, k := range registry.Kinds() {
		m.BackpressureDelay.WithLabelValues(string(k))
		m.BackpressureRefusals.WithLabelValues(string(k))
	}
	return m
}

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
