package feed

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark-io/tidemark/pkg/coord/consumers"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// Bounds of one scrape of the consumer lag: a scrape reads the consumers of at
// most lagMaxStores of the stores this worker holds open (in target order), at
// most lagMaxConsumers in all, in one etcd round trip per 64 stores, and gives
// up after lagScrapeTimeout (the series of that scrape are then missing, not
// wrong).
const (
	lagMaxStores     = 1000
	lagMaxConsumers  = 1000
	lagScrapeTimeout = 2 * time.Second
)

// horizonReader is the part of Horizons the lag metric and the backpressure
// read: the store's horizon, and whether one is known yet.
type horizonReader interface {
	Horizon(ctx context.Context, target registry.Target) (h uint64, ok bool, err error)
}

// consumerLag is a collector of tidemark_feed_consumer_lag_seconds: for each
// named consumer of the stores this worker holds open, how far its committed
// cursor is behind the store's horizon, in the wall time the two _seqs carry
// (consumers.Record.Lag). It reads etcd at scrape time, so an idle worker writes nothing
// and a worker nobody scrapes reads nothing.
type consumerLag struct {
	stores   *store.Stores
	cursors  *consumers.Cursors
	horizons horizonReader // nil: no horizon, no series
	log      *slog.Logger
	desc     *prometheus.Desc
}

// NewLagCollector returns the collector of tidemark_feed_consumer_lag_seconds over
// the stores this worker holds open; register it where /metrics is served.
func NewLagCollector(stores *store.Stores, cursors *consumers.Cursors, horizons Horizons, log *slog.Logger) prometheus.Collector {
	var hr horizonReader // nil, not a nil Horizons: Collect tests for it
	if horizons != nil {
		hr = horizons
	}
	return newConsumerLag(stores, cursors, hr, log)
}

func newConsumerLag(stores *store.Stores, cursors *consumers.Cursors, horizons horizonReader, log *slog.Logger) *consumerLag {
	return &consumerLag{stores: stores, cursors: cursors, horizons: horizons, log: log,
		desc: prometheus.NewDesc("tidemark_feed_consumer_lag_seconds",
			"How far each named consumer's committed cursor is behind its store's feed horizon, in the wall time of their _seqs (stores this worker holds open).",
			[]string{"kind", "store", "consumer"}, nil)}
}

func (c *consumerLag) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect reports the lag of each consumer whose store has a horizon. A consumer
// that committed the zero cursor (nothing read) has no wall time to measure
// from, and a failed read of etcd or of a horizon leaves its series out of this
// scrape: the scrape itself never fails for them.
func (c *consumerLag) Collect(ch chan<- prometheus.Metric) {
	if c.horizons == nil {
		return
	}
	resident, releases := c.stores.Resident()
	targets := make([]registry.Target, len(resident))
	for i, st := range resident {
		targets[i] = st.Target()
		releases[i]()
	}
	slices.SortFunc(targets, registry.Target.Compare)
	targets = targets[:min(len(targets), lagMaxStores)]

	ctx, cancel := context.WithTimeout(context.Background(), lagScrapeTimeout)
	defer cancel()
	byTarget, more, err := c.cursors.ListMany(ctx, targets, lagMaxConsumers)
	if err != nil {
		c.log.Warn("consumer lag: consumers not listed; no lag series this scrape", "err", err)
		return
	}
	if more {
		c.log.Debug("consumer lag: more consumers than one scrape reports", "limit", lagMaxConsumers)
	}
	for _, target := range slices.SortedFunc(maps.Keys(byTarget), registry.Target.Compare) {
		h, ok, err := c.horizons.Horizon(ctx, target)
		if err != nil {
			c.log.Warn("consumer lag: horizon not read; the store's lag left out of this scrape", "target", target, "err", err)
			continue
		}
		if !ok {
			continue
		}
		for _, rec := range byTarget[target] {
			lag, ok := rec.Lag(h)
			if !ok {
				continue
			}
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, lag.Seconds(), string(target.Kind), target.Name, rec.Consumer)
		}
	}
}
