package scanner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/coord/stats"
	"github.com/tidemark-io/tidemark/pkg/coord/tasks"
)

// SweepSummary says what one merge sweep did.
type SweepSummary struct {
	// Skipped is set when another replica holds the merge-sweep lock; SkipReason
	// names the holder. Nothing else is set then.
	Skipped    bool   `json:"skipped"`
	SkipReason string `json:"skip_reason,omitempty"`
	// Eligible counts rows at or above the threshold, and rows with orphaned
	// shards; MergedSinceScan of them were left alone.
	Eligible int `json:"eligible"`
	// Enqueued counts new merge_wal tasks; Deduplicated counts enqueues that
	// found a live task for the target (they do not count against the cap).
	Enqueued     int `json:"enqueued"`
	Deduplicated int `json:"deduplicated"`
	// SkippedByCap counts eligible targets not tried because the cap of new
	// tasks was reached; being the least pending, they wait for the next sweep.
	SkippedByCap int `json:"skipped_by_cap"`
	// MergedSinceScan counts eligible targets whose merge_wal finished after their
	// stats row was scanned: the row still counts the generations that merge took,
	// and a merge now would find none of them. With a Rescan the sweep observes
	// such a target again (Rescanned of them) and merges on the fresh row; without
	// one, or when the rescan fails, the target waits for the next scan.
	MergedSinceScan int `json:"merged_since_scan"`
	Rescanned       int `json:"rescanned"`
	// Errors counts enqueues that failed (logged; tried again next sweep).
	Errors   int           `json:"errors"`
	Duration time.Duration `json:"duration"`
}

// MergeSweeper enqueues merge_wal tasks for the targets whose stats rows show too
// many pending WAL generations. It is safe for concurrent use; sweeps run one at a
// time.
type MergeSweeper struct {
	ts      *tasks.Queue
	rows    stats.Rows
	opts    options
	log     *slog.Logger
	metrics *sweepMetrics
	coord   *roundLock

	round chan struct{}

	// lastMerge is, by target, the merge_wal task this sweeper last enqueued or found
	// live (deduplicated). Only sweeps touch it, one at a time (round).
	lastMerge map[string]string
}

// NewMergeSweeper returns a MergeSweeper reading the stats rows under the task
// store's prefix and taking the "merge-sweep" coordination lock under lease.
func NewMergeSweeper(client *clientv3.Client, ts *tasks.Queue, lease Lease, opts ...Option) *MergeSweeper {
	o := buildOptions(opts)
	log := o.logger.With("component", "merge-sweep")
	return &MergeSweeper{
		ts:        ts,
		rows:      stats.NewRows(client, ts.Keys()),
		opts:      o,
		log:       log,
		metrics:   newSweepMetrics(o.registerer),
		coord:     &roundLock{ts: ts, name: MergeSweepLock, lease: lease, log: log},
		round:     make(chan struct{}, 1),
		lastMerge: map[string]string{},
	}
}

// Run sweeps at once and then every sweep interval until ctx is done, then gives
// up the merge-sweep lock.
func (sw *MergeSweeper) Run(ctx context.Context) {
	defer sw.coord.release(ctx)
	every(ctx, sw.opts.clock, sw.opts.sweepInterval, func(ctx context.Context) { _, _ = sw.Sweep(ctx) })
}

// Sweep runs one sweep, if this replica holds (or can take) the merge-sweep lock:
// it reads every stats row and enqueues merge_wal for each target with at least
// MERGE_WAL_MIN_GENERATIONS pending generations, most pending first, until the
// cap of new tasks is reached.
//
// Enqueues are deduplicated by the task queue, so the lock only keeps replicas
// from doubling the work: a sweep that races another (its lock lost mid-sweep)
// adds no second task for a target.
func (sw *MergeSweeper) Sweep(ctx context.Context) (SweepSummary, error) {
	select {
	case sw.round <- struct{}{}:
	case <-ctx.Done():
		return SweepSummary{}, ctx.Err()
	}
	defer func() { <-sw.round }()

	start := sw.opts.clock.Now()
	sum, err := sw.sweep(ctx)
	sum.Duration = sw.opts.clock.Since(start)
	sw.metrics.targets.WithLabelValues("enqueued").Add(float64(sum.Enqueued))
	sw.metrics.targets.WithLabelValues("deduplicated").Add(float64(sum.Deduplicated))
	sw.metrics.targets.WithLabelValues("capped").Add(float64(sum.SkippedByCap))
	sw.metrics.targets.WithLabelValues("error").Add(float64(sum.Errors))
	sw.metrics.targets.WithLabelValues("merged_since_scan").Add(float64(sum.MergedSinceScan))
	sw.metrics.targets.WithLabelValues("rescanned").Add(float64(sum.Rescanned))
	if err == nil && !sum.Skipped {
		sw.metrics.deduped.Set(float64(sum.Deduplicated))
	}
	switch {
	case err != nil && ctx.Err() != nil:
		sw.metrics.rounds.WithLabelValues("failed").Inc()
		sw.log.Info("merge sweep interrupted", "err", err)
	case err != nil:
		sw.metrics.rounds.WithLabelValues("failed").Inc()
		sw.log.Error("merge sweep failed", "err", err, "enqueued", sum.Enqueued, "deduplicated", sum.Deduplicated)
	case sum.Skipped:
		sw.metrics.rounds.WithLabelValues("skipped").Inc()
		sw.log.Debug("merge sweep skipped", "reason", sum.SkipReason)
	default:
		sw.metrics.rounds.WithLabelValues("done").Inc()
		level := slog.LevelDebug
		if sum.Enqueued+sum.SkippedByCap+sum.Errors > 0 {
			level = slog.LevelInfo
		}
		sw.log.Log(ctx, level, "merge sweep done", "eligible", sum.Eligible, "enqueued", sum.Enqueued,
			"deduplicated", sum.Deduplicated, "skipped_by_cap", sum.SkippedByCap,
			"merged_since_scan", sum.MergedSinceScan, "rescanned", sum.Rescanned, "errors", sum.Errors, "duration", sum.Duration.String())
	}
	return sum, err
}

type eligibleTarget struct {
	target  string
	pending int
}

func (sw *MergeSweeper) sweep(ctx context.Context) (SweepSummary, error) {
	var sum SweepSummary
	if _, err := sw.coord.hold(ctx); errors.Is(err, tasks.ErrCoordinationHeld) {
		return SweepSummary{Skipped: true, SkipReason: err.Error()}, nil
	} else if err != nil {
		return sum, fmt.Errorf("merge sweep: %w", err)
	}
	stored, err := sw.rows.All(ctx)
	if err != nil {
		return sum, fmt.Errorf("merge sweep: %w", err)
	}
	orphaned := func(stats.Row) []string { return nil }
	if sw.opts.orphans != nil {
		if orphaned, err = sw.opts.orphans(ctx); err != nil {
			// Merges by pending count go on; orphans wait for the next sweep.
			sw.log.Warn("merge sweep: orphaned shards not checked", "err", err)
			orphaned = func(stats.Row) []string { return nil }
		}
	}
	for target := range sw.lastMerge {
		if _, ok := stored[target]; !ok {
			delete(sw.lastMerge, target) // the store is gone, or not scanned
		}
	}
	var eligible []eligibleTarget
	for target, r := range stored {
		if r.Err != nil {
			sw.log.Warn("merge sweep: stats row skipped", "target", target, "err", r.Err)
			continue
		}
		// Orphaned shards are due for adoption whatever a merge did to the count, so
		// a recent merge holds back only a target eligible by its count.
		orphans := len(orphaned(r.Row)) > 0
		if !orphans && r.Row.PendingWALGenerations < sw.opts.minGenerations {
			continue
		}
		sum.Eligible++
		pending := r.Row.PendingWALGenerations
		if !orphans && sw.mergedSinceScan(ctx, target, r.Row) {
			sum.MergedSinceScan++
			fresh, ok := sw.rescan(ctx, target)
			if !ok || fresh.PendingWALGenerations < sw.opts.minGenerations {
				continue
			}
			sum.Rescanned++
			pending = fresh.PendingWALGenerations
		}
		eligible = append(eligible, eligibleTarget{target: target, pending: pending})
	}
	// Worst first: the most pending generations make the slowest reads.
	sort.Slice(eligible, func(i, j int) bool {
		if eligible[i].pending != eligible[j].pending {
			return eligible[i].pending > eligible[j].pending
		}
		return eligible[i].target < eligible[j].target
	})

	for i, e := range eligible {
		if sum.Enqueued >= sw.opts.maxEnqueues {
			sum.SkippedByCap = len(eligible) - i
			break
		}
		task, dedup, err := sw.ts.Enqueue(ctx, tasks.KindMergeWAL, e.target)
		switch {
		case err != nil && ctx.Err() != nil:
			return sum, fmt.Errorf("merge sweep: %w", err)
		case err != nil:
			sum.Errors++
			sw.log.Warn("merge sweep: enqueue failed", "target", e.target, "pending_wal_generations", e.pending, "err", err)
		case dedup:
			sw.lastMerge[e.target] = task.ID
			sum.Deduplicated++
		default:
			sw.lastMerge[e.target] = task.ID
			sum.Enqueued++
			sw.log.Info("merge_wal enqueued", "task", task.ID, "target", e.target, "pending_wal_generations", e.pending)
		}
	}
	return sum, nil
}

// rescan observes target again, if the sweep has a Rescan; ok is false without one
// or when it fails (logged: the target waits for the next scan, as without one).
func (sw *MergeSweeper) rescan(ctx context.Context, target string) (stats.Row, bool) {
	if sw.opts.rescan == nil {
		return stats.Row{}, false
	}
	row, err := sw.opts.rescan(ctx, target)
	if err != nil {
		sw.log.Warn("merge sweep: rescan of a target merged since its row failed; it waits for the next scan", "target", target, "err", err)
		return stats.Row{}, false
	}
	return row, true
}

// mergedSinceScan reports whether the stats row r of target predates the end of
// the target's last merge_wal: a merge that finished (done) after r was scanned
// took generations r still counts, so enqueueing another now would call every
// worker to merge what is left of them, often nothing. The next scan writes a row
// after the merge (it rewrites a row whose numbers changed, and a merge that merged
// anything changed the base version), which ends the wait.
//
// The wait is bounded by two scan intervals after the merge: a row still older than
// the merge by then was observed unchanged since (the merge merged nothing, e.g.
// the generations are a missing worker's shard that is not orphaned yet), so its
// count stands, and the target is merged again as before, once per bound at worst.
//
// The last merge is the one this sweeper enqueued or found live; one Get of its
// record per sweep. A merge it never saw (a requeue between sweeps, another
// replica's sweep before a failover) is not waited for: at worst one round that
// merges nothing, as before. A failed merge is never waited for: the next sweep
// retries it (see tasks.Cooldown). Any error reading the task counts as no merge.
func (sw *MergeSweeper) mergedSinceScan(ctx context.Context, target string, r stats.Row) bool {
	id, ok := sw.lastMerge[target]
	if !ok {
		return false
	}
	task, err := sw.ts.Get(ctx, id)
	switch {
	case errors.Is(err, tasks.ErrTaskNotFound):
		delete(sw.lastMerge, target) // pruned
		return false
	case err != nil:
		sw.log.Warn("merge sweep: last merge of the target not read; its row is taken as it is", "target", target, "task", id, "err", err)
		return false
	case task.State.Live():
		return false // the enqueue deduplicates onto it
	}
	bound := task.FinishedAt.Add(2 * sw.opts.scanInterval)
	if task.State != tasks.StateDone || !task.FinishedAt.After(r.ScannedAt) || !sw.opts.clock.Now().Before(bound) {
		delete(sw.lastMerge, target)
		return false
	}
	sw.log.Debug("merge sweep: the stats row predates the last merge", "target", target,
		"task", id, "finished_at", task.FinishedAt, "scanned_at", r.ScannedAt,
		"pending_wal_generations", r.PendingWALGenerations)
	return true
}
