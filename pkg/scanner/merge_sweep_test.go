package scanner

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidemark-io/tidemark/pkg/coord/stats"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// The reference system merged generic stores only by the workers' own timers; the
// sweep must route them to the master's queue under their generic: target.
func TestSweepEnqueuesGenericRowNextToRolloutRow(t *testing.T) {
	e := newEnv(t)
	e.createRollout("r", 8)
	e.createGeneric("g", 9)
	e.createGeneric("small", 2)
	e.scan(e.scanner(e.grant(), Config{}))
	reg := prometheus.NewRegistry()
	sw := e.sweeper(e.grant(), MergeSweepConfig{Registerer: reg})

	sum := e.sweep(sw)
	if sum.Eligible != 2 || sum.Enqueued != 2 || sum.Deduplicated != 0 || sum.SkippedByCap != 0 {
		t.Fatalf("first sweep = %+v, want 2 eligible, 2 enqueued", sum)
	}
	// Worst first: g (9 pending) before r (8).
	if got := e.queuedTargets(); !slices.Equal(got, []string{"generic:g", "r"}) {
		t.Fatalf("queued merge_wal targets = %v, want [generic:g r]", got)
	}

	sum = e.sweep(sw)
	if sum.Eligible != 2 || sum.Enqueued != 0 || sum.Deduplicated != 2 {
		t.Fatalf("second sweep = %+v, want both deduplicated", sum)
	}
	if got := e.queuedTargets(); len(got) != 2 {
		t.Fatalf("queued merge_wal targets after the second sweep = %v", got)
	}
	if n := testutil.ToFloat64(sw.metrics.targets.WithLabelValues("enqueued")); n != 2 {
		t.Fatalf("enqueued metric = %v, want 2", n)
	}
	if n := testutil.ToFloat64(sw.metrics.targets.WithLabelValues("deduplicated")); n != 2 {
		t.Fatalf("deduplicated metric = %v, want 2", n)
	}
}

func TestSweepIsWorstFirstAndCapsNewTasksOnly(t *testing.T) {
	e := newEnv(t)
	e.putRow("a", 10)
	e.putRow("generic:b", 30)
	e.putRow("c", 20)
	e.putRow("d", 7) // under the threshold
	sw := e.sweeper(e.grant(), MergeSweepConfig{MaxEnqueues: 2})

	sum := e.sweep(sw)
	if sum.Eligible != 3 || sum.Enqueued != 2 || sum.SkippedByCap != 1 {
		t.Fatalf("first sweep = %+v, want 3 eligible, 2 enqueued, 1 skipped by the cap", sum)
	}
	if got := e.queuedTargets(); !slices.Equal(got, []string{"generic:b", "c"}) {
		t.Fatalf("queued = %v, want the two worst [generic:b c]", got)
	}

	// The two live tasks deduplicate and do not use up the cap: a gets its task.
	sum = e.sweep(sw)
	if sum.Enqueued != 1 || sum.Deduplicated != 2 || sum.SkippedByCap != 0 {
		t.Fatalf("second sweep = %+v, want 1 enqueued, 2 deduplicated", sum)
	}
	if got := e.queuedTargets(); !slices.Equal(got, []string{"generic:b", "c", "a"}) {
		t.Fatalf("queued = %v, want [generic:b c a]", got)
	}
}

func TestSweepThresholdOption(t *testing.T) {
	e := newEnv(t)
	e.putRow("a", 3)
	e.putRow("b", 2)
	sum := e.sweep(e.sweeper(e.grant(), MergeSweepConfig{MinGenerations: 3}))
	if sum.Eligible != 1 || sum.Enqueued != 1 {
		t.Fatalf("sweep with threshold 3 = %+v, want a only", sum)
	}
}

func TestOnlyOneReplicaSweeps(t *testing.T) {
	e := newEnv(t)
	e.putRow("a", 9)
	replicas := []*MergeSweeper{
		NewMergeSweeper(e.client, e.replica("replica-a"), StaticLease(e.grant()), MergeSweepConfig{Logger: e.log}),
		NewMergeSweeper(e.client, e.replica("replica-b"), StaticLease(e.grant()), MergeSweepConfig{Logger: e.log}),
	}
	var wg sync.WaitGroup
	sums := make([]SweepSummary, 2)
	for i, sw := range replicas {
		wg.Go(func() {
			var err error
			if sums[i], err = sw.Sweep(e.ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if sums[0].Skipped == sums[1].Skipped {
		t.Fatalf("sweeps = %+v, want exactly one skipped", sums)
	}
	if sums[0].Enqueued+sums[1].Enqueued != 1 {
		t.Fatalf("sweeps = %+v, want one task", sums)
	}
}

// mergeWorld is a scanner, a sweeper and a task queue on one fake clock, with
// rollout store r (3 pending generations, threshold 2) scanned once.
type mergeWorld struct {
	*env
	clk   *clocktesting.FakeClock
	ts    *tasks.Queue // e.ts on the fake clock: FinishedAt and ScannedAt compare
	store *store.Store
	stats *Scanner
	sw    *MergeSweeper
	reg   *prometheus.Registry
}

// newMergeWorld builds the world; orphans, if set, is the sweep's OrphanCheck.
func newMergeWorld(t *testing.T, orphans OrphanCheck) *mergeWorld {
	e := newEnv(t)
	clk := newFakeClock()
	w := &mergeWorld{env: e, clk: clk, reg: prometheus.NewRegistry(),
		ts: tasks.New(e.client, e.ts.Prefix(), tasks.WithClock(clk), tasks.WithLogger(e.log))}
	w.store = e.createRollout("r", 3)
	w.stats = e.scanner(e.grant(), Config{Clock: clk})
	e.scan(w.stats)
	w.sw = NewMergeSweeper(e.client, w.ts, StaticLease(e.grant()), w.sweepConfig(orphans, nil))
	return w
}

// sweepConfig is the world's sweep: on its clock, threshold 2, scans every minute.
func (w *mergeWorld) sweepConfig(orphans OrphanCheck, rescan Rescan) MergeSweepConfig {
	return MergeSweepConfig{Logger: w.log, Clock: w.clk, Registerer: w.reg, MinGenerations: 2,
		ScanInterval: time.Minute, Orphans: orphans, Rescan: rescan}
}

// runMerge claims the queued merge_wal of r a second later, merges r's shard if
// merge is set (a worker with generations to merge) and finishes the task with
// err, a second later again.
func (w *mergeWorld) runMerge(merge bool, err error) {
	w.t.Helper()
	w.clk.Step(time.Second)
	c, cerr := w.ts.Claim(w.ctx, w.grant(), tasks.ClaimFilter{Kinds: []tasks.Kind{tasks.KindMergeWAL}})
	if cerr != nil {
		w.t.Fatalf("claim: %v", cerr)
	}
	if merge {
		w.merge(w.store)
	}
	w.clk.Step(time.Second)
	if _, ferr := w.ts.Finish(w.ctx, c, tasks.Result{Err: err, Report: tasks.Report{Detail: "merged"}}); ferr != nil {
		w.t.Fatalf("finish: %v", ferr)
	}
}

// A merge that finished after its target's row was scanned took the generations the
// row counts. Sweeping on that row enqueued another merge_wal that called every
// worker and merged nothing ("merged 0 generations across 3/3 workers": 3 of 8 tasks
// of a make run session); the sweep now waits for the next scan's row.
func TestSweepWaitsForTheRowOfTheScanAfterTheLastMerge(t *testing.T) {
	w := newMergeWorld(t, nil)
	if sum := w.sweep(w.sw); sum.Enqueued != 1 {
		t.Fatalf("first sweep = %+v, want r enqueued", sum)
	}
	w.runMerge(true, nil)

	w.clk.Step(time.Second)
	sum := w.sweep(w.sw)
	if sum.Eligible != 1 || sum.MergedSinceScan != 1 || sum.Enqueued != 0 || sum.Deduplicated != 0 {
		t.Fatalf("sweep on the row scanned before the merge = %+v, want r left alone", sum)
	}
	if got := w.queuedTargets(); len(got) != 0 {
		t.Fatalf("queued after the merge = %v, want none", got)
	}
	if n := testutil.ToFloat64(w.sw.metrics.targets.WithLabelValues("merged_since_scan")); n != 1 {
		t.Fatalf("merged_since_scan metric = %v, want 1", n)
	}

	// The next scan sees what the merge left (nothing), then new generations: a row
	// scanned after the merge is swept as usual.
	w.env.scan(w.stats)
	if r, _ := w.row("r"); r.PendingWALGenerations != 0 {
		t.Fatalf("row after the merge pends %d generations, want 0", r.PendingWALGenerations)
	}
	w.sealedAdd(w.store)
	w.sealedAdd(w.store)
	w.clk.Step(time.Second)
	w.scan(w.stats)
	if sum := w.sweep(w.sw); sum.Enqueued != 1 || sum.MergedSinceScan != 0 {
		t.Fatalf("sweep on a row scanned after the merge = %+v, want r enqueued", sum)
	}
}

// A merge that merged nothing the scanner counts (the generations are a missing
// worker's, not yet orphaned) leaves the row as it was, so the next scan writes no
// newer one: the wait must end on its own, or r would never be merged again.
func TestSweepWaitsAtMostTwoScanIntervalsAfterTheMerge(t *testing.T) {
	w := newMergeWorld(t, nil)
	w.sweep(w.sw)
	w.runMerge(false, nil)
	w.scan(w.stats)
	if sum := w.sweep(w.sw); sum.MergedSinceScan != 1 {
		t.Fatalf("sweep right after the merge = %+v, want r left alone", sum)
	}
	w.clk.Step(2 * time.Minute)
	if sum := w.sweep(w.sw); sum.Enqueued != 1 || sum.MergedSinceScan != 0 {
		t.Fatalf("sweep two scan intervals after the merge = %+v, want r enqueued", sum)
	}
}

// A failed merge is retried by the next sweep (merge_wal failures never wait), and a
// target with an orphaned shard is merged for its adoption whatever a merge just did.
func TestSweepDoesNotWaitAfterAFailedMergeNorForOrphans(t *testing.T) {
	t.Run("failed", func(t *testing.T) {
		w := newMergeWorld(t, nil)
		w.sweep(w.sw)
		w.runMerge(true, errors.New("worker w2 (10.0.0.2:9090): unavailable"))
		if sum := w.sweep(w.sw); sum.Enqueued != 1 || sum.MergedSinceScan != 0 {
			t.Fatalf("sweep after a failed merge = %+v, want r enqueued", sum)
		}
	})
	t.Run("orphans", func(t *testing.T) {
		orphans := false
		w := newMergeWorld(t, func(context.Context) (func(stats.Row) []string, error) {
			return func(stats.Row) []string {
				if orphans {
					return []string{"w9"}
				}
				return nil
			}, nil
		})
		w.sweep(w.sw)
		w.runMerge(true, nil)
		orphans = true
		if sum := w.sweep(w.sw); sum.Enqueued != 1 || sum.MergedSinceScan != 0 {
			t.Fatalf("sweep of a target with an orphaned shard = %+v, want it enqueued", sum)
		}
	})
}

// With a Rescan, the sweep observes a target merged since its row was scanned
// instead of waiting for the next scan: what was sealed since is merged in this
// sweep, and what the merge left is not merged again (no empty round). Failure it
// guards: a busy store was merged once per STATS_SCAN_INTERVAL, and 20 workers
// sealing a generation a second piled thousands up between two scans
// (BENCHMARKS.md, sustained ingest).
func TestSweepRescansATargetMergedSinceItsRow(t *testing.T) {
	w := newMergeWorld(t, nil)
	cfg := w.sweepConfig(nil, w.stats.Rescan)
	cfg.Registerer = prometheus.NewRegistry()
	w.sw = NewMergeSweeper(w.client, w.ts, StaticLease(w.grant()), cfg)
	if sum := w.sweep(w.sw); sum.Enqueued != 1 {
		t.Fatalf("first sweep = %+v, want r enqueued", sum)
	}
	w.runMerge(true, nil)

	w.sealedAdd(w.store)
	w.sealedAdd(w.store)
	w.clk.Step(time.Second)
	if sum := w.sweep(w.sw); sum.MergedSinceScan != 1 || sum.Rescanned != 1 || sum.Enqueued != 1 {
		t.Fatalf("sweep after a merge and 2 new seals, no scan between = %+v, want r rescanned and enqueued", sum)
	}
	w.runMerge(true, nil)

	w.clk.Step(time.Second)
	if sum := w.sweep(w.sw); sum.MergedSinceScan != 1 || sum.Rescanned != 0 || sum.Enqueued != 0 {
		t.Fatalf("sweep right after a merge that took everything = %+v, want r rescanned and left alone", sum)
	}
	if r, _ := w.row("r"); r.PendingWALGenerations != 0 {
		t.Fatalf("row after the rescan pends %d generations, want 0", r.PendingWALGenerations)
	}
}
