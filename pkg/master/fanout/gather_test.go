package fanout

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

// gatheringWorker merges "the store" for every shard named in shards and counts
// the drains it is asked for.
type gatheringWorker struct {
	countingWorker
	shards        []string
	storeMerges   atomic.Int32
	drains        atomic.Int32
	storeInFlight *atomic.Int32 // shared: store merges in flight across workers
	storeMax      *atomic.Int32
}

func (w *gatheringWorker) MergeStore(_ context.Context, r *tidemarkv1.MergeStoreRequest) (*tidemarkv1.MergeStoreResponse, error) {
	w.storeMerges.Add(1)
	raiseMax(w.storeMax, w.storeInFlight.Add(1))
	defer w.storeInFlight.Add(-1)
	merged := map[string]uint64{}
	for _, s := range w.shards {
		merged[s] = uint64(r.GetFencingToken())
	}
	return &tidemarkv1.MergeStoreResponse{Generations: int64(2 * len(w.shards)), Rows: 10, BaseVersion: 42, InstanceId: w.name, Merged: merged}, nil
}

func (w *gatheringWorker) DrainMerged(context.Context, *tidemarkv1.DrainMergedRequest) (*tidemarkv1.DrainMergedResponse, error) {
	w.drains.Add(1)
	return &tidemarkv1.DrainMergedResponse{Reclaimed: 2, InstanceId: w.name}, nil
}

// The gather shape: each task is ONE store merge, on a worker that rotates with
// the fencing token (never two at once), and every other worker whose shard it
// merged is asked to drain, once; a worker that cannot be reached is passed over
// for the next, without failing the task (its shard is merged from the bucket).
func TestGatherMergesTheStoreOnceAndHasTheOthersDrain(t *testing.T) {
	var inFlight, maxSeen atomic.Int32
	names := []string{"w0", "w1", "w2", "w3"}
	var ws []*gatheringWorker
	var disc StaticDiscovery
	for _, n := range names {
		w := &gatheringWorker{countingWorker: countingWorker{name: n}, shards: names, storeInFlight: &inFlight, storeMax: &maxSeen}
		ws = append(ws, w)
		disc = append(disc, serve(t, n, w))
	}
	caller := NewGRPCCaller(GRPCCallerConfig{})
	t.Cleanup(func() { caller.Close() })
	f := New(Config{Discovery: disc, Caller: caller})
	var mergedBy []string
	for token := int64(1); token <= 8; token++ {
		before := make([]int32, len(ws))
		for i, w := range ws {
			before[i] = w.storeMerges.Load()
		}
		r, err := f.Run(context.Background(), claimFor("s", token))
		if err != nil {
			t.Fatal(err)
		}
		if r.Stats.GenerationsMerged != 8 || r.Stats.BaseVersion != 42 || r.Stats.WorkersMerged != 4 {
			t.Fatalf("token %d: report %+v, want 8 generations at version 42 across 4 workers", token, r.Stats)
		}
		var by []string
		for i, w := range ws {
			if w.storeMerges.Load() > before[i] {
				by = append(by, w.name)
			}
		}
		if len(by) != 1 {
			t.Fatalf("token %d: the store was merged by %v, want one worker", token, by)
		}
		mergedBy = append(mergedBy, by[0])
	}
	slices.Sort(mergedBy)
	if got := slices.Compact(mergedBy); len(got) != len(names) {
		t.Fatalf("merges ran on %v over 8 tasks, want every worker in turn", got)
	}
	for _, w := range ws {
		// 8 tasks, each drained by the 3 workers that did not merge.
		if got := w.drains.Load() + w.storeMerges.Load(); got != 8 {
			t.Fatalf("%s: %d drains and %d merges, want 8 in all", w.name, w.drains.Load(), w.storeMerges.Load())
		}
		if w.calls.Load() != 0 {
			t.Fatalf("%s: %d MergeWal in the gather shape", w.name, w.calls.Load())
		}
	}
	if maxSeen.Load() != 1 {
		t.Fatalf("%d store merges at once", maxSeen.Load())
	}

	// The worker whose turn it is cannot be reached: the next one merges.
	dead := Worker{InstanceID: "gone", GRPCAddr: deadAddr(t)}
	f = New(Config{Discovery: StaticDiscovery{dead, disc[1]}, Caller: caller})
	r, err := f.Run(context.Background(), claimFor("s", 2)) // 2 % 2 == 0: the dead worker's turn
	if err != nil || r.Stats.GenerationsMerged != 8 {
		t.Fatalf("with the merging worker unreachable: %+v %v, want the next worker to merge", r.Stats, err)
	}
}

// A worker of an older version does not know MergeStore: the task merges on
// every worker in turn, as the serial shape does (the rolling upgrade's case).
func TestGatherFallsBackToSerialOnAWorkerWithoutMergeStore(t *testing.T) {
	log := &orderLog{}
	var inFlight, maxSeen atomic.Int32
	var workers StaticDiscovery
	var cws []*countingWorker
	for i := range 3 {
		w := &countingWorker{name: fmt.Sprintf("w%d", i), commits: log, inFlight: &inFlight, maxSeen: &maxSeen}
		cws = append(cws, w)
		workers = append(workers, startWorker(t, w))
	}
	caller := NewGRPCCaller(GRPCCallerConfig{})
	t.Cleanup(func() { caller.Close() })
	r, err := New(Config{Discovery: workers, Caller: caller, Shape: Gather}).Run(context.Background(), claimFor("s", 5))
	if err != nil {
		t.Fatal(err)
	}
	if order := log.get(); len(order) != 3 || r.Stats.WorkersMerged != 3 {
		t.Fatalf("merges %v, report %+v: want the serial shape's 3 merges", log.get(), r.Stats)
	}
	if maxSeen.Load() != 1 {
		t.Fatalf("max merges in flight %d, want 1 (one after another)", maxSeen.Load())
	}
	for _, w := range cws {
		if w.calls.Load() != 1 {
			t.Fatalf("%s merged %d times, want 1", w.name, w.calls.Load())
		}
	}
}
