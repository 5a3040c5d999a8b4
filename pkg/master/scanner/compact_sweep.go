package scanner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/coord/stats"
	"github.com/tidemark-io/tidemark/pkg/coord/tasks"
)

// CompactionSummary says what one compaction sweep did.
type CompactionSummary struct {
	// Skipped is set when another replica holds the compaction-sweep lock.
	Skipped    bool   `json:"skipped"`
	SkipReason string `json:"skip_reason,omitempty"`
	// Eligible counts targets over a threshold (fragments, deleted rows, versions
	// since their last compact task); CoolingDown of them were left alone because
	// their compactions failed lately.
	Eligible    int `json:"eligible"`
	CoolingDown int `json:"cooling_down"`
	// Enqueued, Deduplicated, SkippedByCap and Errors are as in SweepSummary.
	Enqueued     int           `json:"enqueued"`
	Deduplicated int           `json:"deduplicated"`
	SkippedByCap int           `json:"skipped_by_cap"`
	Errors       int           `json:"errors"`
	Duration     time.Duration `json:"duration"`
}

// CompactionSweeper enqueues compact tasks: for targets with fragments to sort
// (written before sorted fragments), with at least MIN_FRAGMENTS level-0 fragments
// (each of which a point read probes), with a level over its capacity, with
// deleted rows at or over COMPACTION_DELETED_RATIO of their rows, or with
// CLEANUP_EVERY_VERSIONS versions committed since the last compact task this
// sweeper enqueued (the task's cleanup then deletes the manifests and files
// retention lets go, even with nothing to compact). Worst first (most level-0
// fragments),
// at most COMPACTION_MAX_ENQUEUES new tasks a sweep, none for a target whose
// compactions cool down after failures.
//
// Like the merge sweep, it only reads stats rows and enqueues (deduplicated by the
// task queue); one replica at a time sweeps, under the compaction-sweep lock.
type CompactionSweeper struct {
	ts      *tasks.Queue
	rows    stats.Rows
	opts    options
	log     *slog.Logger
	coord   *roundLock
	rounds  *prometheus.CounterVec
	targets *prometheus.CounterVec

	round chan struct{}
	// lastVersion is, by target, the base version its last compact task was
	// enqueued (or found live) at. In memory only: a new sweeper (a failover)
	// starts from 0, so each target with CLEANUP_EVERY_VERSIONS versions gets one
	// compact task more, and nothing is ever missed.
	lastVersion map[string]uint64
}

// NewCompactionSweeper returns a CompactionSweeper reading the stats rows under the
// task queue's prefix and taking the "compaction-sweep" lock under lease.
func NewCompactionSweeper(client *clientv3.Client, ts *tasks.Queue, lease Lease, opts ...Option) *CompactionSweeper {
	o := buildOptions(opts)
	log := o.logger.With("component", "compaction-sweep")
	return &CompactionSweeper{
		ts: ts, rows: stats.NewRows(client, ts.Keys()), opts: o, log: log,
		coord: &roundLock{ts: ts, name: CompactionSweepLock, lease: lease, log: log},
		rounds: register(o.registerer, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "master_compaction_sweep_rounds_total", Help: "Compaction sweeps, by result (done, skipped, failed).",
		}, []string{"result"})),
		targets: register(o.registerer, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "master_compaction_sweep_targets_total", Help: "Targets over a compaction threshold, by outcome (enqueued, deduplicated, capped, cooling_down, error).",
		}, []string{"outcome"})),
		round:       make(chan struct{}, 1),
		lastVersion: map[string]uint64{},
	}
}

// Run sweeps every compaction interval until ctx is done, then gives up the lock.
func (sw *CompactionSweeper) Run(ctx context.Context) {
	defer sw.coord.release(ctx)
	every(ctx, sw.opts.clock, sw.opts.compactionInterval, func(ctx context.Context) { _, _ = sw.Sweep(ctx) })
}

// Sweep runs one compaction sweep if this replica holds (or can take) the lock.
func (sw *CompactionSweeper) Sweep(ctx context.Context) (CompactionSummary, error) {
	select {
	case sw.round <- struct{}{}:
	case <-ctx.Done():
		return CompactionSummary{}, ctx.Err()
	}
	defer func() { <-sw.round }()
	start := sw.opts.clock.Now()
	sum, err := sw.sweep(ctx)
	sum.Duration = sw.opts.clock.Since(start)
	for outcome, n := range map[string]int{"enqueued": sum.Enqueued, "deduplicated": sum.Deduplicated,
		"capped": sum.SkippedByCap, "cooling_down": sum.CoolingDown, "error": sum.Errors} {
		sw.targets.WithLabelValues(outcome).Add(float64(n))
	}
	switch {
	case err != nil:
		sw.rounds.WithLabelValues("failed").Inc()
		sw.log.Warn("compaction sweep failed", "err", err, "enqueued", sum.Enqueued)
	case sum.Skipped:
		sw.rounds.WithLabelValues("skipped").Inc()
	default:
		sw.rounds.WithLabelValues("done").Inc()
		level := slog.LevelDebug
		if sum.Enqueued+sum.SkippedByCap+sum.Errors > 0 {
			level = slog.LevelInfo
		}
		sw.log.Log(ctx, level, "compaction sweep done", "eligible", sum.Eligible, "enqueued", sum.Enqueued,
			"deduplicated", sum.Deduplicated, "skipped_by_cap", sum.SkippedByCap, "cooling_down", sum.CoolingDown,
			"errors", sum.Errors, "duration", sum.Duration.String())
	}
	return sum, err
}

// needsCompaction says why r's target is due for a compact task ("" if it is not).
func (sw *CompactionSweeper) needsCompaction(r stats.Row) string {
	total := r.RowCount + r.DeletedRows
	last, seen := sw.lastVersion[r.Target]
	switch {
	case seen && r.Version == last:
		// Unchanged since its last compact task, which left it as it is (nothing
		// worth rewriting: e.g. many fragments, each big): the next commit makes it
		// worth a look again.
		return ""
	case r.UnsortedFragments > 0:
		return fmt.Sprintf("%d fragments to sort (written before sorted fragments)", r.UnsortedFragments)
	case r.Level0Fragments >= sw.opts.minFragments:
		return fmt.Sprintf("%d level-0 fragments", r.Level0Fragments)
	case r.SpillingLevels > 0:
		return fmt.Sprintf("%d levels over their capacity", r.SpillingLevels)
	case r.DeletedRows > 0 && float64(r.DeletedRows) >= sw.opts.deletedRatio*float64(total):
		return fmt.Sprintf("%d of %d rows deleted", r.DeletedRows, total)
	case r.Version >= last+sw.opts.cleanupVersions:
		return fmt.Sprintf("%d versions since the last compaction", r.Version-last)
	}
	return ""
}

func (sw *CompactionSweeper) sweep(ctx context.Context) (CompactionSummary, error) {
	var sum CompactionSummary
	if _, err := sw.coord.hold(ctx); errors.Is(err, tasks.ErrCoordinationHeld) {
		return CompactionSummary{Skipped: true, SkipReason: err.Error()}, nil
	} else if err != nil {
		return sum, fmt.Errorf("compaction sweep: %w", err)
	}
	stored, err := sw.rows.All(ctx)
	if err != nil {
		return sum, fmt.Errorf("compaction sweep: %w", err)
	}
	for target := range sw.lastVersion {
		if _, ok := stored[target]; !ok {
			delete(sw.lastVersion, target)
		}
	}
	type due struct {
		row    stats.Row
		reason string
	}
	var eligible []due
	now := sw.opts.clock.Now()
	for _, r := range stored {
		if r.Err != nil {
			continue // the merge sweep logs it
		}
		reason := sw.needsCompaction(r.Row)
		if reason == "" {
			continue
		}
		sum.Eligible++
		cd, ok, err := sw.ts.Cooldown(ctx, tasks.KindCompact, r.Row.Target)
		if err != nil && ctx.Err() != nil {
			return sum, fmt.Errorf("compaction sweep: %w", err)
		}
		if err == nil && ok && now.Before(cd.Until) {
			sum.CoolingDown++
			continue
		}
		eligible = append(eligible, due{row: r.Row, reason: reason})
	}
	sort.Slice(eligible, func(i, j int) bool {
		a, b := eligible[i].row, eligible[j].row
		if a.Level0Fragments != b.Level0Fragments {
			return a.Level0Fragments > b.Level0Fragments
		}
		return a.Target < b.Target
	})
	for i, e := range eligible {
		if sum.Enqueued >= sw.opts.maxCompactionEnqueues {
			sum.SkippedByCap = len(eligible) - i
			break
		}
		task, dedup, err := sw.ts.Enqueue(ctx, tasks.KindCompact, e.row.Target)
		switch {
		case err != nil && ctx.Err() != nil:
			return sum, fmt.Errorf("compaction sweep: %w", err)
		case err != nil:
			sum.Errors++
			sw.log.Warn("compaction sweep: enqueue failed", "target", e.row.Target, "err", err)
			continue
		case dedup:
			sum.Deduplicated++
		default:
			sum.Enqueued++
			sw.log.Info("compact enqueued", "task", task.ID, "target", e.row.Target, "reason", e.reason,
				"fragments", e.row.FragmentCount, "level0_fragments", e.row.Level0Fragments, "deleted_rows", e.row.DeletedRows, "version", e.row.Version)
		}
		sw.lastVersion[e.row.Target] = e.row.Version
	}
	return sum, nil
}
