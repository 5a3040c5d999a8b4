package scanner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/coord/stats"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// MergeSweeper enqueues merge_wal tasks for the targets whose stats rows show at
// least MERGE_WAL_MIN_GENERATIONS pending WAL generations, or orphaned shards to
// adopt: most pending first, at most MaxEnqueues (256) new tasks a sweep,
// none for a target whose row predates its last merge (see mergedSinceScan). It
// is safe for concurrent use; sweeps run one at a time.
type MergeSweeper struct {
	sweeper
}

// NewMergeSweeper returns a MergeSweeper reading the stats rows under the task
// queue's prefix and taking the "merge-sweep" coordination lock under lease.
func NewMergeSweeper(client *clientv3.Client, ts *tasks.Queue, lease Lease, cfg MergeSweepConfig) *MergeSweeper {
	cfg = cfg.withDefaults()
	r := &mergeRule{cfg: cfg, ts: ts}
	sw := &MergeSweeper{newSweeper(client, ts, lease, sweepSpec{
		name: "merge sweep", component: "merge-sweep", lock: MergeSweepLock, kind: tasks.KindMergeWAL,
		interval: cfg.Interval, maxEnqueues: cfg.MaxEnqueues, own: []string{"merged_since_scan", "rescanned"},
		badRow: slog.LevelWarn,
	}, r, cfg.Clock, cfg.Logger, newMergeSweepMetrics(cfg.Registerer))}
	r.log = sw.log
	return sw
}

// mergeRule is the merge sweep's rule.
type mergeRule struct {
	cfg MergeSweepConfig
	ts  *tasks.Queue
	log *slog.Logger
	// orphaned names a row's orphaned shards during a sweep (prepare).
	orphaned func(stats.Row) []string
}

func noOrphans(stats.Row) []string { return nil }

func (m *mergeRule) prepare(ctx context.Context) {
	m.orphaned = noOrphans
	if m.cfg.Orphans == nil {
		return
	}
	orphaned, err := m.cfg.Orphans(ctx)
	if err != nil {
		// Merges by pending count go on; orphans wait for the next sweep.
		m.log.Warn("merge sweep: orphaned shards not checked", "err", err)
		return
	}
	m.orphaned = orphaned
}

// due: enough pending generations, or (urgently) orphaned shards, which are due
// for adoption whatever a merge did to the count.
func (m *mergeRule) due(r stats.Row, _ enqueues) (string, bool) {
	if len(m.orphaned(r)) > 0 {
		return "orphaned shards", true
	}
	if r.PendingWALGenerations < m.cfg.MinGenerations {
		return "", false
	}
	return fmt.Sprintf("%d pending generations", r.PendingWALGenerations), false
}

// holdBack holds back a target merged since its row was scanned, unless a rescan
// shows it still due.
func (m *mergeRule) holdBack(ctx context.Context, c *candidate, last enqueues, sum *SweepSummary) (bool, error) {
	if !m.mergedSinceScan(ctx, c.row, last) {
		return false, nil
	}
	sum.MergedSinceScan++
	fresh, ok := m.rescan(ctx, c.row.Target)
	if !ok || fresh.PendingWALGenerations < m.cfg.MinGenerations {
		return true, nil
	}
	sum.Rescanned++
	c.row = fresh
	return false, nil
}

// severity: the most pending generations make the slowest reads.
func (m *mergeRule) severity(r stats.Row) int { return r.PendingWALGenerations }

func (m *mergeRule) attrs(c candidate) []any {
	return []any{"pending_wal_generations", c.row.PendingWALGenerations}
}

// rescan observes target again, if the sweep has a Rescan; ok is false without one
// or when it fails (logged: the target waits for the next scan, as without one).
func (m *mergeRule) rescan(ctx context.Context, target registry.Target) (stats.Row, bool) {
	if m.cfg.Rescan == nil {
		return stats.Row{}, false
	}
	row, err := m.cfg.Rescan(ctx, target)
	if err != nil {
		m.log.Warn("merge sweep: rescan of a target merged since its row failed; it waits for the next scan", "target", target, "err", err)
		return stats.Row{}, false
	}
	return row, true
}

// mergedSinceScan reports whether the stats row r predates the end of its
// target's last merge_wal: a merge that finished (done) after r was scanned took
// generations r still counts, so enqueueing another now would call every worker
// to merge what is left of them, often nothing. The next scan writes a row after
// the merge (it rewrites a row whose numbers changed, and a merge that merged
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
func (m *mergeRule) mergedSinceScan(ctx context.Context, r stats.Row, last enqueues) bool {
	target := r.Target
	e, ok := last[target]
	if !ok {
		return false
	}
	task, err := m.ts.Get(ctx, e.task)
	switch {
	case errors.Is(err, tasks.ErrTaskNotFound):
		delete(last, target) // pruned
		return false
	case err != nil:
		m.log.Warn("merge sweep: last merge of the target not read; its row is taken as it is", "target", target, "task", e.task, "err", err)
		return false
	case task.State.Live():
		return false // the enqueue deduplicates onto it
	}
	bound := task.FinishedAt.Add(2 * m.cfg.ScanInterval)
	if task.State != tasks.StateDone || !task.FinishedAt.After(r.ScannedAt) || !m.cfg.Clock.Now().Before(bound) {
		delete(last, target)
		return false
	}
	m.log.Debug("merge sweep: the stats row predates the last merge", "target", target,
		"task", e.task, "finished_at", task.FinishedAt, "scanned_at", r.ScannedAt,
		"pending_wal_generations", r.PendingWALGenerations)
	return true
}
