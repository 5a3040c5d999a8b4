package scanner

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/coord/stats"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// CompactionSweeper enqueues compact tasks: for targets with fragments to sort
// (written before sorted fragments), with at least MIN_FRAGMENTS level-0 fragments
// (each of which a point read probes), with a level past its target (in rows), with
// deleted rows at or over COMPACTION_DELETED_RATIO of their rows, or with
// CleanupEveryVersions (100) versions committed since the last compact task this
// sweeper enqueued (the task's cleanup then deletes the manifests and files
// retention lets go, even with nothing to compact). Worst first (most level-0
// fragments), at most MaxEnqueues (16) new tasks a sweep, none for a
// target whose compactions cool down after failures.
//
// Like the merge sweep, it only reads stats rows and enqueues (deduplicated by the
// task queue); one replica at a time sweeps, under the compaction-sweep lock.
type CompactionSweeper struct {
	sweeper
}

// NewCompactionSweeper returns a CompactionSweeper reading the stats rows under the
// task queue's prefix and taking the "compaction-sweep" lock under lease.
func NewCompactionSweeper(client *clientv3.Client, ts *tasks.Queue, lease Lease, cfg CompactionSweepConfig) *CompactionSweeper {
	cfg = cfg.withDefaults()
	reg := cfg.Registerer
	m := &sweepMetrics{
		rounds: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "master_compaction_sweep_rounds_total", Help: "Compaction sweeps, by result (done, skipped, failed).",
		}, []string{"result"})),
		targets: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "master_compaction_sweep_targets_total", Help: "Targets over a compaction threshold, by outcome (enqueued, deduplicated, capped, cooling_down, error).",
		}, []string{"outcome"})),
	}
	return &CompactionSweeper{newSweeper(client, ts, lease, sweepSpec{
		name: "compaction sweep", component: "compaction-sweep", lock: CompactionSweepLock, kind: tasks.KindCompact,
		interval: cfg.Interval, maxEnqueues: cfg.MaxEnqueues, own: []string{"cooling_down"},
		badRow: slog.LevelDebug, // the merge sweep warns of it
	}, &compactionRule{cfg: cfg, ts: ts}, cfg.Clock, cfg.Logger, m)}
}

// compactionRule is the compaction sweep's rule.
type compactionRule struct {
	cfg CompactionSweepConfig
	ts  *tasks.Queue
	now time.Time // the sweep's start (prepare)
}

func (c *compactionRule) prepare(context.Context) { c.now = c.cfg.Clock.Now() }

// due says why r's target is due for a compact task.
func (c *compactionRule) due(r stats.Row, last enqueues) (string, bool) {
	prev, seen := last[r.Target]
	return CompactionReason(c.cfg, r, prev.version, seen), false
}

// CompactionReason is the compaction sweep's rule: why the store of stats row r is
// due for a compact task ("" when it is not), given the version of its row when
// the sweep last enqueued one (seen false: never).
func CompactionReason(cfg CompactionSweepConfig, r stats.Row, last uint64, seen bool) string {
	total := r.RowCount + r.DeletedRows
	switch {
	case seen && r.Version == last:
		// Unchanged since its last compact task, which left it as it is (nothing
		// worth rewriting: e.g. many fragments, each big): the next commit makes it
		// worth a look again.
		return ""
	case r.UnsortedFragments > 0:
		return fmt.Sprintf("%d fragments to sort (written before sorted fragments)", r.UnsortedFragments)
	case r.Level0Fragments >= cfg.MinFragments:
		return fmt.Sprintf("%d level-0 fragments", r.Level0Fragments)
	case r.SpillingLevels > 0:
		return fmt.Sprintf("%d levels past their targets", r.SpillingLevels)
	case r.DeletedRows > 0 && float64(r.DeletedRows) >= cfg.DeletedRatio*float64(total):
		return fmt.Sprintf("%d of %d rows deleted", r.DeletedRows, total)
	case r.Version >= last+uint64(cfg.CleanupEveryVersions):
		return fmt.Sprintf("%d versions since the last compaction", r.Version-last)
	}
	return ""
}

// holdBack holds back a target whose compactions cool down after failures.
func (c *compactionRule) holdBack(ctx context.Context, cand *candidate, _ enqueues, sum *SweepSummary) (bool, error) {
	cd, ok, err := c.ts.Cooldown(ctx, tasks.KindCompact, cand.row.Target)
	if err != nil && ctx.Err() != nil {
		return false, err
	}
	if err == nil && ok && c.now.Before(cd.Until) {
		sum.CoolingDown++
		return true, nil
	}
	return false, nil
}

// severity: the most level-0 fragments, each probed by a point read.
func (c *compactionRule) severity(r stats.Row) int { return r.Level0Fragments }

func (c *compactionRule) attrs(cand candidate) []any {
	r := cand.row
	return []any{"reason", cand.reason, "fragments", r.FragmentCount, "level0_fragments", r.Level0Fragments,
		"deleted_rows", r.DeletedRows, "version", r.Version}
}
