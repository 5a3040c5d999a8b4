package wal_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/tidemark-io/tidemark/internal/testutil/testwait"
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
// delete delay and is removed by a later drain.
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
	exists := func(g *wal.Generation) bool {
		ok, err := b.Exists(ctx, wal.GenerationKey(testDir, *g))
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	drain := func(upTo uint64) wal.DrainResult {
		t.Helper()
		res, err := wal.Drain(ctx, b, testDir, testShard, upTo, epoch, wal.WithClock(clk), wal.WithDeleteDelay(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	drain(1)
	if !exists(g1) {
		t.Fatal("generation 1's file was deleted by the drain that removed it")
	}
	clk.SetTime(clk.Now().Add(30 * time.Second))
	if res := drain(2); res.Deleted != 0 || !exists(g1) {
		t.Fatalf("deleted %d files before the delete delay passed", res.Deleted)
	}
	clk.SetTime(clk.Now().Add(31 * time.Second))
	res := drain(2) // nothing left to drain, but generation 1's delay has passed
	if res.Deleted != 1 || exists(g1) {
		t.Fatalf("deleted %d files, generation 1 exists: %v", res.Deleted, exists(g1))
	}
	if !exists(g2) {
		t.Fatal("generation 2 was deleted before its delay passed")
	}
	if got := res.Manifest.DeferredDeletes; len(got) != 1 || got[0].Path != g2.Path {
		t.Errorf("deferred deletes %+v, want generation 2's file", got)
	}
}

// A writer's drain deletes the files that came due after it releases the seal lock:
// a seal goes on while those deletes are still in flight. Failure it guards: a
// drain deleted them one by one under the lock, inside a merge's serialized
// commit, and once the delete delay first expired a 20-worker cluster's backlog
// stepped up (BENCHMARKS.md, sustained ingest).
func TestAWritersDrainDeletesDueFilesOutsideTheSealLock(t *testing.T) {
	ctx := context.Background()
	f := objstore.NewFaults(nil)
	b := objstore.WithFaults(objstoretest.Mem(t), f)
	clk := testingclock.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	w := openWriter(t, b, testShard, wal.WithClock(clk), wal.WithDeleteDelay(time.Minute))
	var gens []*wal.Generation
	for i := range 3 {
		mustAppend(t, w, fmt.Sprint("g", i))
		gens = append(gens, mustSeal(t, w))
	}
	if _, err := w.Drain(ctx, 3); err != nil {
		t.Fatal(err)
	}
	clk.SetTime(clk.Now().Add(2 * time.Minute))

	release := make(chan struct{})
	var inDelete atomic.Int32
	f.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpDelete}, KeyContains: "/gen/",
		Before: func(context.Context, objstore.Op, string) {
			inDelete.Add(1)
			<-release
		}})
	done := make(chan wal.DrainResult, 1)
	go func() {
		res, err := w.Drain(ctx, 3) // nothing to drain; the 3 files are due
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	testwait.For(t, 10*time.Second, "the drain's deletes in flight", func() (bool, string) {
		n := inDelete.Load()
		return n == 3, fmt.Sprintf("%d of 3 deletes started", n)
	})
	mustAppend(t, w, "during")
	mustSeal(t, w) // would wait for the deletes if the drain still held the lock
	close(release)
	if res := <-done; res.Deleted != 3 {
		t.Fatalf("deleted %d files, want 3", res.Deleted)
	}
	for _, g := range gens {
		if ok, err := b.Exists(ctx, wal.GenerationKey(testDir, *g)); err != nil || ok {
			t.Fatalf("generation %d: exists %v, %v; want deleted", g.Generation, ok, err)
		}
	}
}
