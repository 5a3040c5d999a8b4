package scanner

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark-io/tidemark/internal/refmetrics"
	"github.com/tidemark-io/tidemark/pkg/coord/stats"
	"github.com/tidemark-io/tidemark/pkg/registry"
)

// scanMetrics are the Scanner's series. Where the reference system
// (lance-context) has a series for the same measurement, it has its name and
// type (master_scan_*, master_wal_pending_*, master_experiments, ...).
type scanMetrics struct {
	// rounds counts scan rounds by result: done, skipped (another replica holds
	// the lock), failed.
	rounds *prometheus.CounterVec
	// duration times rounds that ran.
	duration prometheus.Histogram
	// observed counts store observations by mode: probe (base version unchanged,
	// no manifest read) or full.
	observed *prometheus.CounterVec
	// stores is the number of registered stores in the last round.
	stores prometheus.Gauge
	// written counts stats rows written, by op: put or delete.
	written *prometheus.CounterVec
	// conflicts counts rows another writer changed during a round (left for the
	// next round).
	conflicts prometheus.Counter
	// errors counts stores whose observation failed.
	errors prometheus.Counter
	// lastRound is the Unix time the last round that ran finished.
	lastRound prometheus.Gauge
	// pendingTotal and pendingMax are the sum and the largest of every store's
	// pending WAL generations as of the last round (a store the round could not
	// observe counts with its previous row).
	pendingTotal, pendingMax prometheus.Gauge
	// skipped and full are the stores the last round probed (base version
	// unchanged, no manifest read) and observed in full.
	skipped, full prometheus.Gauge
	// experiments, rolloutRows and rolloutFragments describe the rollout stores
	// (the reference's experiments) as of the last round.
	experiments, rolloutRows, rolloutFragments prometheus.Gauge
}

func newScanMetrics(reg prometheus.Registerer) *scanMetrics {
	return &scanMetrics{
		rounds: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "master_stats_scan_rounds_total", Help: "Stats scan rounds, by result (done, skipped, failed).",
		}, []string{"result"})),
		duration: register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "master_scan_duration_seconds", Help: "Duration of stats scan rounds that ran.",
			Buckets: refmetrics.RequestBuckets,
		})),
		observed: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "master_stats_stores_scanned_total", Help: "Store observations by mode: probe (base version unchanged, no manifest read) or full.",
		}, []string{"mode"})),
		stores: register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "master_stats_stores", Help: "Registered stores (both kinds) in the last scan round.",
		})),
		written: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "master_stats_rows_written_total", Help: "Stats rows written to etcd, by op (put, delete).",
		}, []string{"op"})),
		conflicts: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "master_stats_row_conflicts_total", Help: "Stats rows changed by another writer during a round, left for the next round.",
		})),
		errors: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "master_stats_scan_errors_total", Help: "Stores whose observation failed (the row keeps its previous value).",
		})),
		lastRound: register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "master_stats_last_scan_timestamp_seconds", Help: "Unix time the last scan round that ran finished.",
		})),
		pendingTotal: gauge(reg, "master_wal_pending_generations_total", "Pending WAL generations summed over every store, as of the last scan round (a gauge despite its _total suffix, as in the reference)."),
		pendingMax:   gauge(reg, "master_wal_pending_generations_max", "Pending WAL generations of the store that has most, as of the last scan round."),
		skipped:      gauge(reg, "master_scan_experiments_skipped", "Stores the last scan round probed only (base version unchanged)."),
		full:         gauge(reg, "master_scan_experiments_observed", "Stores the last scan round observed in full."),
		experiments:  gauge(reg, "master_experiments", "Rollout stores seen by the last scan round."),
		rolloutRows:  gauge(reg, "master_rollout_rows", "Live base-table rows of every rollout store as of the last scan round."),
		rolloutFragments: gauge(reg, "master_rollout_fragments",
			"Base-table fragments of every rollout store as of the last scan round."),
	}
}

// gauge registers (or finds) the gauge name with reg.
func gauge(reg prometheus.Registerer, name, help string) prometheus.Gauge {
	return register(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help}))
}

// observeRound sets the gauges that describe the stores as of a round: rows are
// the stores' rows by target (observed this round, or their previous one), kinds
// their kinds.
func (m *scanMetrics) observeRound(rows map[registry.Target]stats.Row, kinds map[registry.Target]registry.Kind, probed, observed int) {
	var total, most, rollouts, rowCount, fragments int64
	for target, r := range rows {
		p := int64(r.PendingWALGenerations)
		total += p
		most = max(most, p)
		if kinds[target] == registry.KindRollout {
			rollouts++
			rowCount += r.RowCount
			fragments += int64(r.FragmentCount)
		}
	}
	m.pendingTotal.Set(float64(total))
	m.pendingMax.Set(float64(most))
	m.skipped.Set(float64(probed))
	m.full.Set(float64(observed))
	m.experiments.Set(float64(rollouts))
	m.rolloutRows.Set(float64(rowCount))
	m.rolloutFragments.Set(float64(fragments))
}

// newMergeSweepMetrics are the MergeSweeper's series.
func newMergeSweepMetrics(reg prometheus.Registerer) *sweepMetrics {
	return &sweepMetrics{
		rounds: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "master_merge_sweep_rounds_total", Help: "Merge sweeps, by result (done, skipped, failed).",
		}, []string{"result"})),
		// merged_since_scan: a merge finished after their stats row was scanned;
		// rescanned: of those, observed again and still due.
		targets: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "master_merge_sweep_targets_total", Help: "Targets at or above MERGE_WAL_MIN_GENERATIONS, by outcome (enqueued, deduplicated, capped, merged_since_scan: a merge finished after their stats row was scanned, rescanned: of those, observed again and still due, error).",
		}, []string{"outcome"})),
		deduped: gauge(reg, "master_merge_sweep_deduped", "Targets the last merge sweep found a live merge_wal task for (deduplicated enqueues)."),
	}
}

// register registers c with reg (if any) and returns the collector in use: c, or
// the equal one already registered by another Scanner or sweeper.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(fmt.Sprintf("scanner: register metrics: %v", err))
	}
	return c
}
