package feed

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark-io/tidemark/pkg/registry"
)

// Metrics are the change feed's series (the consumers' lag is a collector read
// at scrape time, NewLagCollector).
type Metrics struct {
	// Pages counts the change feed's answered pages (empty ones included:
	// a long poll that ended without rows), Rows the rows they carried, by
	// store kind.
	Pages *prometheus.CounterVec
	Rows  *prometheus.CounterVec
	// ConsumerLagRefusals counts adds refused (503 CONSUMER_LAG), by store kind,
	// because a named consumer of their store lagged beyond its max_consumer_lag.
	ConsumerLagRefusals *prometheus.CounterVec
}

// NewMetrics creates the series and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Pages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_feed_pages_total", Help: "Pages answered by the change feed (GET .../changes), empty ones included, by store kind.",
		}, []string{"kind"}),
		Rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_feed_rows_total", Help: "Rows answered by the change feed, by store kind.",
		}, []string{"kind"}),
		ConsumerLagRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_add_consumer_lag_refusals_total", Help: "Adds refused with 503 because a named consumer of their store lagged behind its horizon by more than the store's max_consumer_lag, by store kind.",
		}, []string{"kind"}),
	}
	reg.MustRegister(m.Pages, m.Rows, m.ConsumerLagRefusals)
	for _, k := range registry.Kinds() {
		m.Pages.WithLabelValues(string(k))
		m.Rows.WithLabelValues(string(k))
	}
	return m
}
