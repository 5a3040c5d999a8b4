package master

import (
	"cmp"
	"context"
	"time"

	"github.com/tidemark-io/tidemark/pkg/scanner"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// compactDemandTimeout bounds the enqueue of a compaction on demand: one etcd
// transaction, on the finished task's goroutine.
const compactDemandTimeout = 10 * time.Second

// compactOnDemand enqueues a compaction of a store whose merge left at least
// MIN_FRAGMENTS level-0 fragments (a SchedulerConfig.OnDone). Merges on demand
// commit a fragment every few seconds to a busy store, and every level-0
// fragment is one more that each point read and each merge's conflict check
// probes; the compaction sweep, every COMPACTION_INTERVAL (10 min), would let
// hundreds pile up. The compaction runs in the store's maintenance lane, beside
// its merges (tasks.Kind.Lane): under the merge lock it held a busy store's
// merges back for its 7-22 s, which raised the store's pending generations more
// than its fragments did. The sweep stays the reconciliation (the stats it reads
// cover every store, and the other shapes' merges do not report their level 0);
// the enqueue deduplicates onto a compaction already queued or running.
func (m *Master) compactOnDemand(ctx context.Context, t tasks.Task, report tasks.Report) {
	threshold := cmp.Or(m.cfg.CompactionSweep.MinFragments, scanner.DefaultMinFragments)
	if t.Kind != tasks.KindMergeWAL || report.Stats.Level0Fragments < int64(threshold) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, compactDemandTimeout)
	defer cancel()
	task, dedup, err := m.tasks.Enqueue(ctx, tasks.KindCompact, t.Target)
	switch {
	case err != nil:
		m.log.Warn("compaction on demand: enqueue failed; the compaction sweep enqueues it later", "target", t.Target, "err", err)
	case !dedup:
		m.log.Info("compact enqueued on demand", "task", task.ID, "target", t.Target,
			"level0_fragments", report.Stats.Level0Fragments, "after", t.ID)
	}
}
