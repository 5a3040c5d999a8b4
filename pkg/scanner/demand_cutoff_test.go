package scanner

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// a dedupe key that outlived its task (LiveIDs itself says
// "probably live") makes MergeDemand skip the store for good: it never calls
// Enqueue, which is what replaces a stale key. A store due only by age (below
// MERGE_WAL_MIN_GENERATIONS, so the merge sweep never enqueues it either) is
// never merged on demand.
func TestMergeDemandReplacesADedupeKeyThatOutlivedItsTask(t *testing.T) {
	w := newDemandWorld(t)
	if _, err := w.client.Put(w.ctx, w.ts.Keys().Dedupe(string(tasks.KindMergeWAL), "quiet"), "01900000-0000-7000-8000-000000000000"); err != nil {
		t.Fatal(err)
	}
	w.publish("w1", gens("quiet", 1, w.clk.Now().Add(-40*time.Second)))
	for i := range 5 {
		sum := w.round()
		t.Logf("round %d: %+v", i, sum)
		w.clk.Step(time.Minute)
	}
	if got := w.queuedTargets(); len(got) == 0 {
		t.Fatalf("quiet (40 s old, then 5 min old) never enqueued: the stale dedupe key counts as a live merge for ever")
	}
}

// a merge MergeDemand did not enqueue itself (the merge
// sweep's, an operator's) leaves no cutoff: right after it finishes, the record
// that predates it counts again and a merge that finds nothing is enqueued.
func TestMergeDemandCutsOffEntriesAfterAMergeItDidNotEnqueue(t *testing.T) {
	w := newDemandWorld(t)
	w.publish("w1", gens("a", 8, w.clk.Now()))
	if _, _, err := w.ts.Enqueue(w.ctx, tasks.KindMergeWAL, registry.MustParseTarget("a")); err != nil { // the merge sweep's
		t.Fatal(err)
	}
	if sum := w.round(); sum.Live != 1 {
		t.Fatalf("round = %+v, want a live", sum)
	}
	w.clk.Step(time.Second)
	w.finish("a", nil)
	if sum := w.round(); sum.Enqueued != 0 {
		t.Fatalf("round right after the sweep's merge = %+v: a merge enqueued on a record that predates the merge (it finds nothing)", sum)
	}
}

// the cutoff compares two clocks: the View's arrival time
// (this replica's) and the task's StartedAt (the claiming replica's). A claimer
// 20 s ahead hides the worker's post-merge record for demandSettle: a hot store
// still due waits ~10 s more after every merge.
func TestMergeDemandCutoffIsARevisionNotAClock(t *testing.T) {
	w := newDemandWorld(t)
	start := w.clk.Now()
	w.publish("w1", gens("hot", 16, start))
	if sum := w.round(); sum.Enqueued != 1 {
		t.Fatalf("round = %+v", sum)
	}
	ahead := clocktesting.NewFakeClock(start.Add(20 * time.Second))
	b := tasksOn(w, "replica-b", ahead)
	c, err := b.Claim(w.ctx, w.grant(), tasks.ClaimFilter{Kinds: []tasks.Kind{tasks.KindMergeWAL}})
	if err != nil || c == nil {
		t.Fatalf("claim: %v %v", c, err)
	}
	ahead.Step(time.Second)
	if _, err := b.Finish(w.ctx, c, tasks.Result{}); err != nil {
		t.Fatal(err)
	}
	w.clk.Step(time.Second)
	// The worker merged 8 and republishes: still due (8 more pending).
	w.publish("w1", gens("hot", 8, start.Add(time.Second)))
	if sum := w.round(); sum.Enqueued != 1 {
		t.Fatalf("round on the post-merge record = %+v: not enqueued, the record 'arrived before' a start stamped by a clock 20 s ahead", sum)
	}
}

func tasksOn(w *demandWorld, holder string, clk tasks.Clock) *tasks.Queue {
	return tasks.New(w.client, w.ts.Prefix(), tasks.WithHolder(holder), tasks.WithLogger(w.log), tasks.WithClock(clk))
}

// A merge skipped because its store was deleted leaves the entries of workers that
// still hold an idle handle of it: they must not bring a merge of nothing every
// demandSettle, for ever. The cutoff holds until an entry of the store changes (a
// store re-created under the name and written).
func TestMergeDemandIgnoresTheStaleEntriesOfADeletedStore(t *testing.T) {
	w := newDemandWorld(t)
	w.publish("w1", gens("gone", 8, w.clk.Now()))
	if sum := w.round(); sum.Enqueued != 1 {
		t.Fatalf("round = %+v, want gone enqueued", sum)
	}
	c, err := w.ts.Claim(w.ctx, w.grant(), tasks.ClaimFilter{Kinds: []tasks.Kind{tasks.KindMergeWAL}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.ts.Finish(w.ctx, c, tasks.Result{Report: tasks.Report{Detail: tasks.SkippedDetail}}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		w.clk.Step(demandSettle)
		if sum := w.round(); sum.Enqueued != 0 {
			t.Fatalf("round after the deleted store's merge = %+v: merged again on the stale entry", sum)
		}
	}
	w.publish("w1", gens("gone", 9, w.clk.Now())) // re-created and written
	if sum := w.round(); sum.Enqueued != 1 {
		t.Fatalf("round on a new entry of the name = %+v, want it enqueued", sum)
	}
}
