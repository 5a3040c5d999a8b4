package scanner

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// scanMetrics are the Scanner's series.
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
}

func newScanMetrics(reg prometheus.Registerer) *scanMetrics {
	return &scanMetrics{
		rounds: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "master_stats_scan_rounds_total", Help: "Stats scan rounds, by result (done, skipped, failed).",
		}, []string{"result"})),
		duration: register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "master_stats_scan_duration_seconds", Help: "Duration of stats scan rounds that ran.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 16),
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
	}
}

// sweepMetrics are the MergeSweeper's series.
type sweepMetrics struct {
	// rounds counts sweeps by result: done, skipped, failed.
	rounds *prometheus.CounterVec
	// targets counts targets over the threshold by outcome: enqueued,
	// deduplicated, capped (left for the next sweep), merged_since_scan (a merge
	// finished after their stats row was scanned), rescanned (of those, observed
	// again and still due), error.
	targets *prometheus.CounterVec
}

func newSweepMetrics(reg prometheus.Registerer) *sweepMetrics {
	return &sweepMetrics{
		rounds: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "master_merge_sweep_rounds_total", Help: "Merge sweeps, by result (done, skipped, failed).",
		}, []string{"result"})),
		targets: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "master_merge_sweep_targets_total", Help: "Targets at or above MERGE_WAL_MIN_GENERATIONS, by outcome (enqueued, deduplicated, capped, merged_since_scan: a merge finished after their stats row was scanned, rescanned: of those, observed again and still due, error).",
		}, []string{"outcome"})),
	}
}

// register registers c with reg (if any) and returns the collector in use: c, or
// the equal one already registered by another Scanner or MergeSweeper.
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
