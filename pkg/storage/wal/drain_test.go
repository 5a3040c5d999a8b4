package wal_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
)

func generationNumbers(m *wal.Manifest) []uint64 {
	var out []uint64
	for _, g := range m.Generations {
		out = append(out, g.Generation)
	}
	return out
}

// TestGenerationSealedDuringDrainIsKept: a merge prepared against generation 1
// drains while the writer seals generation 2. If the drain wrote the manifest it
// read (instead of editing the latest one), generation 2 would vanish from the
// shard manifest before any merge saw it: acknowledged rows gone from every read.
func TestGenerationSealedDuringDrainIsKept(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	w := openWriter(t, b, testShard)
	mustAppend(t, w, "a")
	mustSeal(t, w)
	mustAppend(t, w, "b")
	prepared, err := wal.LoadShard(ctx, b, testDir, testShard)
	if err != nil {
		t.Fatal(err)
	}

	var once sync.Once
	sealDuringDrain := wal.WithBeforeManifestWrite(func(txnID string) {
		if !strings.HasPrefix(txnID, "drain") {
			return
		}
		// The drain has read the manifest and is about to write its edit: the seal
		// lands first, so the drain's write loses the race.
		once.Do(func() {
			if g := mustSeal(t, w); g == nil || g.Generation != 2 {
				t.Errorf("seal during drain: %+v", g)
			}
		})
	})
	res, err := wal.Drain(ctx, b, testDir, testShard, 1, prepared.WriterEpoch, sealDuringDrain, wal.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if res.Generations != 1 || res.Rows != 1 {
		t.Errorf("drain removed %d generations / %d rows, want 1 / 1", res.Generations, res.Rows)
	}
	m, err := wal.LoadShard(ctx, b, testDir, testShard)
	if err != nil {
		t.Fatal(err)
	}
	if got := generationNumbers(m); len(got) != 1 || got[0] != 2 {
		t.Fatalf("generations after the drain: %v, want [2]", got)
	}
	if m.CurrentGeneration != 2 {
		t.Errorf("current_generation %d, want 2", m.CurrentGeneration)
	}
	if rows := sealedRows(t, b, testShard); len(rows["b"]) != 1 {
		t.Errorf("row b of generation 2 is gone: %v", rows)
	}
	// Draining again is a no-op, and the writer keeps sealing on top of the drain.
	if res, err := wal.Drain(ctx, b, testDir, testShard, 1, prepared.WriterEpoch); err != nil || res.Generations != 0 {
		t.Errorf("second drain: %+v, %v", res, err)
	}
	mustAppend(t, w, "c")
	if g := mustSeal(t, w); g.Generation != 3 {
		t.Errorf("next seal made generation %d, want 3", g.Generation)
	}
}

// TestDrainChecksThePreparedEpoch: a drain prepared before the shard changed hands
// must not edit the new owner's manifest, and never claims an epoch itself.
func TestDrainChecksThePreparedEpoch(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	w := openWriter(t, b, testShard)
	mustAppend(t, w, "a")
	mustSeal(t, w)
	epoch := w.Stats().Epoch
	openWriter(t, b, testShard) // epoch+1
	_, err := wal.Drain(ctx, b, testDir, testShard, 1, epoch)
	if !errors.Is(err, wal.ErrFenced) {
		t.Fatalf("drain prepared under epoch %d: %v, want ErrFenced", epoch, err)
	}
	m, err := wal.LoadShard(ctx, b, testDir, testShard)
	if err != nil {
		t.Fatal(err)
	}
	if m.WriterEpoch != epoch+1 || len(m.Generations) != 1 {
		t.Errorf("manifest after a refused drain: epoch %d, generations %v", m.WriterEpoch, generationNumbers(m))
	}
	res, err := wal.Drain(ctx, b, testDir, testShard, 1, epoch+1)
	if err != nil || res.Generations != 1 {
		t.Fatalf("drain under the current epoch: %+v, %v", res, err)
	}
	if res.Manifest.WriterEpoch != epoch+1 {
		t.Errorf("the drain changed writer_epoch to %d", res.Manifest.WriterEpoch)
	}
	if _, err := wal.Drain(ctx, b, testDir, "nobody", 1, 1); !errors.Is(err, wal.ErrNoShard) {
		t.Errorf("drain of a missing shard: %v, want ErrNoShard", err)
	}
}

// TestDrainedFilesAreDeletedLater: a reader that took its snapshot just before a
// drain still reads the drained generation, so its file outlives the drain by the
// delete delay; a later drain takes it out of deferred_deletes and hands it to the
// delete queue, whose deleter removes it.
func TestDrainedFilesAreDeletedLater(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	clk := testingclock.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	w := openWriter(t, b, testShard, wal.WithClock(clk))
	mustAppend(t, w, "a")
	g1 := mustSeal(t, w)
	mustAppend(t, w, "b")
	g2 := mustSeal(t, w)
	epoch := w.Stats().Epoch
	q := wal.NewDeleteQueue(0)
	drain := func(upTo uint64) wal.DrainResult {
		t.Helper()
		res, err := wal.Drain(ctx, b, testDir, testShard, upTo, epoch, wal.WithClock(clk),
			wal.WithDeleteDelay(time.Minute), wal.WithDeleteQueue(q))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	drain(1)
	mustExist(t, b, wal.GenerationKey(testDir, *g1), true) // not by the drain that removed it
	clk.SetTime(clk.Now().Add(30 * time.Second))
	if res := drain(2); res.Due != 0 || q.Len() != 0 {
		t.Fatalf("%d files due, %d queued before the delete delay passed", res.Due, q.Len())
	}
	clk.SetTime(clk.Now().Add(31 * time.Second))
	res := drain(2) // nothing left to drain, but generation 1's delay has passed
	if res.Due != 1 || res.Dropped != 0 || q.Len() != 1 {
		t.Fatalf("drain: %d due, %d dropped, %d queued; want generation 1's file queued", res.Due, res.Dropped, q.Len())
	}
	if got := res.Manifest.DeferredDeletes; len(got) != 1 || got[0].Path != g2.Path {
		t.Errorf("deferred deletes %+v, want generation 2's file", got)
	}
	mustExist(t, b, wal.GenerationKey(testDir, *g1), true) // queued, not deleted
	if r := q.Delete(ctx); r.Deleted != 1 || r.Failed != 0 || r.Dropped != 0 {
		t.Fatalf("queue's delete: %+v, want generation 1's file deleted", r)
	}
	mustExist(t, b, wal.GenerationKey(testDir, *g1), false)
	mustExist(t, b, wal.GenerationKey(testDir, *g2), true) // its delay has not passed
}

// A drain is inside a merge's serialized commit, so it writes its manifest edit and
// sends no delete: the files that came due go to the delete queue, and its deleter
// (the worker's cleanup sweeper) deletes them afterwards. Failure it guards: drains
// deleted the files themselves, 8 at a time inside the merge's answer, and once the
// delete delay first expired a 20-worker cluster's backlog stepped up
// (BENCHMARKS.md, sustained ingest).
func TestAWritersDrainSendsNoDeletes(t *testing.T) {
	ctx := context.Background()
	f := objstore.NewFaults(nil)
	b := objstore.WithFaults(objstoretest.Mem(t), f)
	clk := testingclock.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	q := wal.NewDeleteQueue(0)
	w := openWriter(t, b, testShard, wal.WithClock(clk), wal.WithDeleteDelay(time.Minute), wal.WithDeleteQueue(q))
	var gens []*wal.Generation
	for i := range 3 {
		mustAppend(t, w, fmt.Sprint("g", i))
		gens = append(gens, mustSeal(t, w))
	}
	if _, err := w.Drain(ctx, 3); err != nil {
		t.Fatal(err)
	}
	clk.SetTime(clk.Now().Add(2 * time.Minute))
	mustAppend(t, w, "g3")
	g3 := mustSeal(t, w)

	before := f.Requests(objstore.OpDelete)
	res, err := w.Drain(ctx, 4) // drains generation 4; the first 3 files are due
	if err != nil {
		t.Fatal(err)
	}
	if n := f.Requests(objstore.OpDelete) - before; n != 0 {
		t.Fatalf("the drain sent %d deletes, want none", n)
	}
	if res.Generations != 1 || res.Due != 3 || res.Dropped != 0 || q.Len() != 3 {
		t.Fatalf("drain: %d drained, %d due, %d dropped, %d queued; want 1, 3, 0, 3", res.Generations, res.Due, res.Dropped, q.Len())
	}
	select {
	case <-q.Ready():
	default:
		t.Fatal("the queue did not wake its deleter")
	}
	for _, g := range gens {
		mustExist(t, b, wal.GenerationKey(testDir, *g), true)
	}

	r := q.Delete(ctx)
	if r.Deleted != 3 || r.Failed != 0 {
		t.Fatalf("queue's delete: %+v, want 3 deleted", r)
	}
	if n := f.Requests(objstore.OpDelete) - before; n != 3 {
		t.Fatalf("%d deletes sent, want the 3 due files'", n)
	}
	for _, g := range gens {
		mustExist(t, b, wal.GenerationKey(testDir, *g), false)
	}
	mustExist(t, b, wal.GenerationKey(testDir, *g3), true) // drained now: its delay runs
	if q.Len() != 0 {
		t.Fatalf("%d files still queued", q.Len())
	}
}

// A full queue drops what does not fit rather than hold the drain: the manifest no
// longer lists the dropped files, which are garbage for Cleanup, and a failed
// delete is not retried by the queue (Cleanup's too).
func TestDeleteQueueIsBounded(t *testing.T) {
	ctx := context.Background()
	f := objstore.NewFaults(nil)
	b := objstore.WithFaults(objstoretest.Mem(t), f)
	clk := testingclock.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	q := wal.NewDeleteQueue(2)
	w := openWriter(t, b, testShard, wal.WithClock(clk), wal.WithDeleteDelay(time.Minute), wal.WithDeleteQueue(q))
	for i := range 3 {
		mustAppend(t, w, fmt.Sprint("g", i))
		mustSeal(t, w)
	}
	if _, err := w.Drain(ctx, 3); err != nil {
		t.Fatal(err)
	}
	clk.SetTime(clk.Now().Add(2 * time.Minute))
	res, err := w.Drain(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if res.Due != 3 || res.Dropped != 1 || q.Len() != 2 {
		t.Fatalf("drain into a queue of 2: %d due, %d dropped, %d queued; want 3, 1, 2", res.Due, res.Dropped, q.Len())
	}
	if m := res.Manifest; len(m.DeferredDeletes) != 0 {
		t.Fatalf("deferred deletes %+v after the drain, want none", m.DeferredDeletes)
	}
	f.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpDelete}, KeyContains: "/gen/"})
	r := q.Delete(ctx)
	if r.Deleted != 0 || r.Failed != 2 || r.Dropped != 1 || !errors.Is(r.Err, objstore.ErrInjected) {
		t.Fatalf("queue's delete under failing deletes: %+v, want 2 failed (injected), 1 dropped", r)
	}
	if q.Len() != 0 {
		t.Fatalf("%d files queued again after failing; Cleanup is their backstop", q.Len())
	}
}
