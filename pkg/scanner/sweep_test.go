package scanner

import (
	"slices"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The reference system merged generic stores only by the workers' own timers; the
// sweep must route them to the master's queue under their generic: target.
func TestSweepEnqueuesGenericRowNextToRolloutRow(t *testing.T) {
	e := newEnv(t)
	e.createRollout("r", 8)
	e.createGeneric("g", 9)
	e.createGeneric("small", 2)
	e.scan(e.scanner(e.grant()))
	reg := prometheus.NewRegistry()
	sw := e.sweeper(e.grant(), WithRegisterer(reg))

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
	sw := e.sweeper(e.grant(), WithMaxEnqueues(2))

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
	sum := e.sweep(e.sweeper(e.grant(), WithMinGenerations(3)))
	if sum.Eligible != 1 || sum.Enqueued != 1 {
		t.Fatalf("sweep with threshold 3 = %+v, want a only", sum)
	}
}

func TestOnlyOneReplicaSweeps(t *testing.T) {
	e := newEnv(t)
	e.putRow("a", 9)
	replicas := []*MergeSweeper{
		NewMergeSweeper(e.client, e.replica("replica-a"), StaticLease(e.grant()), WithLogger(e.log)),
		NewMergeSweeper(e.client, e.replica("replica-b"), StaticLease(e.grant()), WithLogger(e.log)),
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
