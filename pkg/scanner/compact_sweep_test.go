package scanner

import (
	"slices"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/coord/stats"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// putStatsRow writes a stats row directly, standing for an earlier scan.
func (e *env) putStatsRow(r stats.Row) {
	e.t.Helper()
	r.Kind, r.Name = r.Target.Kind, r.Target.Name
	if _, err := e.client.Put(e.ctx, e.ts.Prefix()+"/stats/"+r.Target.String(), stats.Encode(r)); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) queuedCompactions() []string {
	e.t.Helper()
	list, _, err := e.ts.List(e.ctx, tasks.ListFilter{State: tasks.StateQueued, Kind: tasks.KindCompact})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, task := range list {
		out = append(out, task.Target.String())
	}
	return out
}

func (e *env) compactionSweep(sw *CompactionSweeper) SweepSummary {
	e.t.Helper()
	sum, err := sw.Sweep(e.ctx)
	if err != nil || sum.Skipped {
		e.t.Fatalf("compaction sweep: %+v, %v", sum, err)
	}
	return sum
}

// The sweep enqueues compact for each reason a table needs one - many level-0
// fragments, many deleted rows, many versions since its last compact task (their
// cleanup) - most level-0 fragments first, within the cap, and leaves a target
// alone while its row has not changed since the compact task it already had.
func TestCompactionSweepEnqueuesByEachThresholdWorstFirst(t *testing.T) {
	e := newEnv(t)
	e.putStatsRow(stats.Row{Target: registry.MustParseTarget("many"), Version: 5, FragmentCount: 40, Level0Fragments: 40, RowCount: 400})
	e.putStatsRow(stats.Row{Target: registry.MustParseTarget("generic:more"), Version: 5, FragmentCount: 50, Level0Fragments: 50, RowCount: 500})
	// Many fragments, but in levels within their capacity: nothing to do.
	e.putStatsRow(stats.Row{Target: registry.MustParseTarget("leveled"), Version: 5, FragmentCount: 60, Level0Fragments: 1, RowCount: 5000})
	e.putStatsRow(stats.Row{Target: registry.MustParseTarget("deleted"), Version: 5, FragmentCount: 3, RowCount: 60, DeletedRows: 40})
	e.putStatsRow(stats.Row{Target: registry.MustParseTarget("old"), Version: 150, FragmentCount: 2, RowCount: 10})
	e.putStatsRow(stats.Row{Target: registry.MustParseTarget("fine"), Version: 50, FragmentCount: 5, RowCount: 100, DeletedRows: 1})
	sw := NewCompactionSweeper(e.client, e.ts, StaticLease(e.grant()), CompactionSweepConfig{Logger: e.log,
		MinFragments: 32, DeletedRatio: 0.2, CleanupEveryVersions: 100, MaxEnqueues: 3})

	sum := e.compactionSweep(sw)
	if sum.Eligible != 4 || sum.Enqueued != 3 || sum.SkippedByCap != 1 {
		t.Fatalf("first sweep = %+v, want 4 eligible, 3 enqueued, 1 capped", sum)
	}
	if got := e.queuedCompactions(); !slices.Equal(got, []string{"generic:more", "many", "deleted"}) {
		t.Fatalf("queued compactions = %v, want the most fragments first", got)
	}
	// The capped one now; the three with a task at their row's version are not
	// asked again.
	sum = e.compactionSweep(sw)
	if sum.Eligible != 1 || sum.Enqueued != 1 {
		t.Fatalf("second sweep = %+v, want old enqueued and nothing else", sum)
	}

	// Once their tasks are gone, unchanged rows are not enqueued again: a compact
	// task already found them as they are.
	for {
		c, err := e.ts.Claim(e.ctx, e.grant(), tasks.ClaimFilter{Kinds: []tasks.Kind{tasks.KindCompact}})
		if err != nil {
			break
		}
		if _, err := e.ts.Finish(e.ctx, c, tasks.Result{Report: tasks.Report{Detail: "nothing to compact"}}); err != nil {
			t.Fatal(err)
		}
	}
	if sum = e.compactionSweep(sw); sum.Eligible != 0 || sum.Enqueued != 0 {
		t.Fatalf("sweep over unchanged rows = %+v, want nothing", sum)
	}
	// A commit since makes a target worth a look again.
	e.putStatsRow(stats.Row{Target: registry.MustParseTarget("many"), Version: 6, FragmentCount: 41, Level0Fragments: 41, RowCount: 410})
	if sum = e.compactionSweep(sw); sum.Enqueued != 1 {
		t.Fatalf("sweep after a commit = %+v, want many enqueued", sum)
	}
}

// Fragments written before sorted fragments, and a level over its capacity, each
// make a table due for compaction whatever its level-0 count.
func TestCompactionSweepEnqueuesUnsortedAndSpillingTables(t *testing.T) {
	e := newEnv(t)
	e.putStatsRow(stats.Row{Target: registry.MustParseTarget("upgraded"), Version: 5, FragmentCount: 2, Level0Fragments: 2, UnsortedFragments: 1, RowCount: 400})
	e.putStatsRow(stats.Row{Target: registry.MustParseTarget("spilling"), Version: 5, FragmentCount: 12, Level0Fragments: 0, SpillingLevels: 1, RowCount: 500})
	e.putStatsRow(stats.Row{Target: registry.MustParseTarget("settled"), Version: 5, FragmentCount: 12, Level0Fragments: 1, RowCount: 500})
	sw := NewCompactionSweeper(e.client, e.ts, StaticLease(e.grant()), CompactionSweepConfig{Logger: e.log, MinFragments: 8})
	if sum := e.compactionSweep(sw); sum.Eligible != 2 || sum.Enqueued != 2 {
		t.Fatalf("sweep = %+v, want the upgraded and the spilling table", sum)
	}
	got := e.queuedCompactions()
	slices.Sort(got)
	if !slices.Equal(got, []string{"spilling", "upgraded"}) {
		t.Fatalf("queued compactions = %v", got)
	}
}
