package wal_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
)

// later makes a Cleanup see every object as older than the default safety window.
func later() wal.Option {
	return wal.WithClock(testingclock.NewFakePassiveClock(time.Now().Add(2 * time.Hour)))
}

func mustCleanup(t testing.TB, b *objstore.Bucket, r wal.Retention, opts ...wal.Option) wal.CleanupResult {
	t.Helper()
	opts = append([]wal.Option{wal.WithLogger(testLogger(t))}, opts...)
	res, err := wal.Cleanup(context.Background(), b, testDir, testShard, r, opts...)
	if err != nil {
		t.Fatalf("cleanup: %v", err)
	}
	return res
}

func shardKey(rel string) string { return fmt.Sprintf("%s/_wal/%s/%s", testDir, testShard, rel) }

// manifestVersions lists the shard's manifest version objects.
func manifestVersions(t testing.TB, b *objstore.Bucket) []string {
	t.Helper()
	objs, err := b.List(context.Background(), shardKey("_manifests/"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		out = append(out, o.Key[len(shardKey("_manifests/")):])
	}
	return out
}

func mustExist(t testing.TB, b *objstore.Bucket, key string, want bool) {
	t.Helper()
	ok, err := b.Exists(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if ok != want {
		t.Errorf("%s exists: %v, want %v", key, ok, want)
	}
}

// TestCleanupPrunesOldManifestVersions: every seal writes a shard manifest version.
// Cleanup keeps the newest KeepManifests (at least 2) and whatever is younger than
// the safety window, and the writer, readers holding pruned versions and the next
// opener all keep working.
func TestCleanupPrunesOldManifestVersions(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	w := openWriter(t, b, testShard)
	var acked []string
	for i := range 20 {
		id := fmt.Sprintf("r%d", i)
		mustAppend(t, w, id)
		acked = append(acked, id)
		mustSeal(t, w)
	}
	oldSnap, err := wal.LoadSnapshot(ctx, b, testDir)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(manifestVersions(t, b)); n != 21 {
		t.Fatalf("%d manifest versions, want 21 (open + 20 seals)", n)
	}
	if res := mustCleanup(t, b, wal.Retention{}); res != (wal.CleanupResult{}) {
		t.Fatalf("cleanup within the safety window deleted %+v", res)
	}
	if res := mustCleanup(t, b, wal.Retention{KeepManifests: 3}, later()); res.ManifestsDeleted != 18 {
		t.Fatalf("pruned %d versions, want 18", res.ManifestsDeleted)
	}
	if got := manifestVersions(t, b); len(got) != 3 || got[0] != fmt.Sprintf("%020d.json", 19) {
		t.Fatalf("versions left %v, want 19-21", got)
	}
	if res := mustCleanup(t, b, wal.Retention{KeepManifests: 1}, later()); res.ManifestsDeleted != 1 {
		t.Fatalf("KeepManifests 1 pruned %d, want 1 (at least 2 are kept)", res.ManifestsDeleted)
	}

	// The writer's manifest (version 21) is kept; one a drain wrote meanwhile
	// would not matter either: edits always start from the latest.
	mustAppend(t, w, "after")
	acked = append(acked, "after")
	mustSeal(t, w)
	mustCleanup(t, b, wal.Retention{KeepManifests: 2}, later())
	mustAppend(t, w, "after2")
	acked = append(acked, "after2")
	mustSeal(t, w)
	// A snapshot taken before the prune holds version 21, now pruned.
	snap, err := oldSnap.Refresh(ctx, b)
	if err != nil {
		t.Fatalf("refresh of a snapshot whose version was pruned: %v", err)
	}
	if got := snap.Shards[testShard].Version; got != 23 {
		t.Errorf("refreshed snapshot has version %d, want 23", got)
	}
	checkExactlyOnce(t, sealedRows(t, b, testShard), acked)

	// The next opener claims its epoch on top of the pruned log.
	w.Abandon()
	w2 := openWriter(t, b, testShard)
	if st := w2.Stats(); st.Epoch != 2 || st.MemtableRows != 0 {
		t.Fatalf("reopened: epoch %d, %d replayed rows; want 2, 0", st.Epoch, st.MemtableRows)
	}
	mustAppend(t, w2, "w2")
	mustSeal(t, w2)
	checkExactlyOnce(t, sealedRows(t, b, testShard), append(acked, "w2"))
}

// TestCleanupNeverDeletesUnsealedEntries: entries are addressed by position, not
// listed in the manifest. Sealed leftovers (a seal's delete failed, then its writer
// crashed) below replay_after are garbage; the entry at replay_after and everything
// above are acknowledged rows or fences, kept however old they are.
func TestCleanupNeverDeletesUnsealedEntries(t *testing.T) {
	raw := objstoretest.Mem(t)
	f := objstore.NewFaults(nil)
	b := objstore.WithFaults(raw, f)
	w := openWriter(t, b, testShard)
	f.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpDelete}, KeyContains: "/entries/"})
	mustAppend(t, w, "a") // position 2 (1 is the open's fence)
	mustSeal(t, w)
	mustAppend(t, w, "b") // 3
	mustSeal(t, w)        // replay_after 3; 1-3 left behind
	f.Clear()
	mustAppend(t, w, "c") // 4: unsealed
	mustAppend(t, w, "d") // 5: unsealed
	w.Abandon()
	if n := len(entryKeys(t, raw, testShard)); n != 5 {
		t.Fatalf("%d entries before cleanup, want 5", n)
	}

	res := mustCleanup(t, raw, wal.Retention{}, later())
	if res.FilesDeleted != 2 || res.BytesDeleted <= 0 {
		t.Errorf("cleanup deleted %d files (%d bytes), want the 2 sealed entries below replay_after", res.FilesDeleted, res.BytesDeleted)
	}
	keys := entryKeys(t, raw, testShard)
	want := []string{shardKey(fmt.Sprintf("entries/%020d.arrow", 3)), shardKey(fmt.Sprintf("entries/%020d.arrow", 4)), shardKey(fmt.Sprintf("entries/%020d.arrow", 5))}
	if !slices.Equal(keys, want) {
		t.Fatalf("entries left %v, want %v", keys, want)
	}
	if has, err := wal.HasUnsealed(context.Background(), raw, testDir, testShard); err != nil || !has {
		t.Fatalf("HasUnsealed after cleanup: %v, %v", has, err)
	}
	w2 := openWriter(t, raw, testShard)
	if st := w2.Stats(); st.MemtableRows != 2 {
		t.Fatalf("replayed %d rows, want c and d", st.MemtableRows)
	}
	mustSeal(t, w2)
	checkExactlyOnce(t, sealedRows(t, raw, testShard), []string{"a", "b", "c", "d"})
}

// TestCleanupDeletesOnlyUnreferencedGenerationFiles: a generation file is deleted
// only when no kept manifest lists it (generations or deferred_deletes), its number
// is not above current_generation (a seal in progress), and it is older than the
// window; drained files wait for their delete delay, names Cleanup does not know
// are left alone.
func TestCleanupDeletesOnlyUnreferencedGenerationFiles(t *testing.T) {
	ctx := context.Background()
	raw := objstoretest.Mem(t)
	f := objstore.NewFaults(nil)
	b := objstore.WithFaults(raw, f)
	clk := testingclock.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	w := openWriter(t, b, testShard, wal.WithClock(clk))
	var gens []*wal.Generation
	for _, id := range []string{"a", "b", "c"} {
		mustAppend(t, w, id)
		gens = append(gens, mustSeal(t, w))
	}
	epoch := w.Stats().Epoch
	drain := func(upTo uint64) {
		t.Helper()
		if _, err := wal.Drain(ctx, b, testDir, testShard, upTo, epoch, wal.WithClock(clk),
			wal.WithDeleteDelay(time.Minute), wal.WithLogger(testLogger(t))); err != nil {
			t.Fatal(err)
		}
	}
	drain(1) // generation 1's file waits in deferred_deletes
	put := func(rel string) string {
		t.Helper()
		key := shardKey(rel)
		if err := raw.Put(ctx, key, []byte("x")); err != nil {
			t.Fatal(err)
		}
		return key
	}
	orphan := put("gen/0123456789abcdef_gen_2.arrow")     // a failed seal's file
	inProgress := put("gen/0123456789abcdef_gen_9.arrow") // above current_generation: a seal in progress
	unknown := []string{put("gen/notes.txt"), put("other/x.arrow"), put("entries/stray.arrow")}
	genKey := func(g *wal.Generation) string { return wal.GenerationKey(testDir, *g) }

	if res := mustCleanup(t, raw, wal.Retention{}); res.FilesDeleted != 0 {
		t.Fatalf("cleanup deleted %d files younger than the window", res.FilesDeleted)
	}
	res := mustCleanup(t, raw, wal.Retention{KeepManifests: 100}, later())
	if res.FilesDeleted != 1 || res.BytesDeleted != 1 {
		t.Errorf("deleted %d files (%d bytes), want the orphan only", res.FilesDeleted, res.BytesDeleted)
	}
	mustExist(t, raw, orphan, false)
	for _, k := range append([]string{inProgress, genKey(gens[0]), genKey(gens[1]), genKey(gens[2])}, unknown...) {
		mustExist(t, raw, k, true)
	}

	// Generation 1's delete delay passes; the drain takes it out of the manifest
	// with no delete queue to hand it to (as when the worker dies before its
	// sweeper deletes it): the file is garbage that only older versions still name.
	clk.SetTime(clk.Now().Add(2 * time.Minute))
	deletes := f.Requests(objstore.OpDelete)
	drain(2)
	if n := f.Requests(objstore.OpDelete) - deletes; n != 0 {
		t.Fatalf("the drain sent %d deletes, want none", n)
	}
	if m, err := wal.LoadShard(ctx, raw, testDir, testShard); err != nil || len(m.DeferredDeletes) != 1 {
		t.Fatalf("after the second drain: %+v, %v; want generation 2 deferred", m, err)
	}
	mustExist(t, raw, genKey(gens[0]), true)
	mustCleanup(t, raw, wal.Retention{KeepManifests: 100}, later())
	mustExist(t, raw, genKey(gens[0]), true) // kept versions still list it
	mustAppend(t, w, "d")
	mustSeal(t, w) // the newest two versions no longer name generation 1
	res = mustCleanup(t, raw, wal.Retention{KeepManifests: 2}, later())
	if res.FilesDeleted != 1 {
		t.Errorf("deleted %d files, want generation 1's", res.FilesDeleted)
	}
	mustExist(t, raw, genKey(gens[0]), false)
	for _, k := range append([]string{inProgress, genKey(gens[1]), genKey(gens[2])}, unknown...) {
		mustExist(t, raw, k, true)
	}
	checkExactlyOnce(t, sealedRows(t, raw, testShard), []string{"c", "d"})
}

// TestCleanupCollectsDrainedFilesTheSweeperNeverDeleted: a drain hands the files
// whose delete delay passed to the worker's delete queue, which is memory; the
// worker can die before its sweeper deletes them. Cleanup is the backstop: it
// collects them once no kept manifest version lists them, and never while one
// does, so never inside the delete delay (a reader's snapshot may still read them)
// however few versions it keeps.
func TestCleanupCollectsDrainedFilesTheSweeperNeverDeleted(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	clk := testingclock.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	lost := wal.NewDeleteQueue(0) // never deleted from: its process dies
	w := openWriter(t, b, testShard, wal.WithClock(clk), wal.WithDeleteDelay(time.Minute), wal.WithDeleteQueue(lost))
	seal := func(id string) *wal.Generation {
		t.Helper()
		mustAppend(t, w, id)
		return mustSeal(t, w)
	}
	drained := []*wal.Generation{seal("a"), seal("b"), seal("c")}
	if _, err := w.Drain(ctx, 3); err != nil {
		t.Fatal(err)
	}
	kept := []*wal.Generation{seal("d"), seal("e"), seal("f")} // versions that still list the drained files go
	genKey := func(g *wal.Generation) string { return wal.GenerationKey(testDir, *g) }

	// Inside the delay the latest version lists them under deferred_deletes.
	mustCleanup(t, b, wal.Retention{KeepManifests: 2}, later())
	for _, g := range append(drained, kept...) {
		mustExist(t, b, genKey(g), true)
	}

	clk.SetTime(clk.Now().Add(2 * time.Minute))
	res, err := w.Drain(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if res.Due != 3 || lost.Len() != 3 {
		t.Fatalf("drain after the delay: %d due, %d queued; want 3", res.Due, lost.Len())
	}
	mustCleanup(t, b, wal.Retention{KeepManifests: 2}, later())
	for _, g := range drained {
		mustExist(t, b, genKey(g), true) // the version before the drain is kept and lists them
	}
	kept = append(kept, seal("g"))
	if res := mustCleanup(t, b, wal.Retention{KeepManifests: 2}, later()); res.FilesDeleted != 3 {
		t.Errorf("cleanup deleted %d files, want the 3 drained ones", res.FilesDeleted)
	}
	for _, g := range drained {
		mustExist(t, b, genKey(g), false)
	}
	for _, g := range kept {
		mustExist(t, b, genKey(g), true)
	}
	checkExactlyOnce(t, sealedRows(t, b, testShard), []string{"d", "e", "f", "g"})
}

// TestCleanupKeepsARetiredShardWorking: an adopter retired the shard; Cleanup leaves
// it retired and loadable (adoption reads it), the drain of its deferred files still
// works, the old owner is still fenced, and the worker that comes back reopens it.
func TestCleanupKeepsARetiredShardWorking(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	w1 := openWriter(t, b, testShard)
	mustAppend(t, w1, "a")
	mustSeal(t, w1)
	mustAppend(t, w1, "b") // unsealed: the adopter replays it

	ad := openWriter(t, b, testShard)
	g := mustSeal(t, ad)
	if _, err := ad.Drain(ctx, g.Generation); err != nil {
		t.Fatal(err)
	}
	if _, err := ad.Retire(ctx, "adopter"); err != nil {
		t.Fatal(err)
	}
	mustCleanup(t, b, wal.Retention{KeepManifests: 2}, later())
	if got := manifestVersions(t, b); len(got) != 2 {
		t.Errorf("versions left %v, want 2", got)
	}

	m, err := wal.LoadShard(ctx, b, testDir, testShard)
	if err != nil || m.Retired == nil || m.Retired.By != "adopter" || len(m.Generations) != 0 {
		t.Fatalf("retired shard after cleanup: %+v, %v", m, err)
	}
	if err := b.Put(ctx, testDir+"/_wal/-stray/x", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if names, err := wal.Shards(ctx, b, testDir); err != nil || !slices.Equal(names, []string{testShard}) {
		t.Fatalf("shards after cleanup: %v, %v; want the retired shard only (not the stray directory)", names, err)
	}
	if has, err := wal.HasUnsealed(ctx, b, testDir, testShard); err != nil || has {
		t.Fatalf("HasUnsealed: %v, %v", has, err)
	}
	if _, err := wal.Drain(ctx, b, testDir, testShard, 0, m.WriterEpoch, wal.WithDeleteDelay(-1)); err != nil {
		t.Fatalf("drain of the retired shard's deferred files: %v", err)
	}
	if err := appendIDs(ctx, w1, "late"); !errors.Is(err, wal.ErrFenced) {
		t.Fatalf("the old owner's append after cleanup: %v, want ErrFenced", err)
	}

	back := openWriter(t, b, testShard)
	if m := back.Stats().Manifest; m.Retired != nil {
		t.Fatal("reopening did not clear retired")
	}
	mustAppend(t, back, "c")
	mustSeal(t, back)
	checkExactlyOnce(t, sealedRows(t, b, testShard), []string{"c"})
}

// TestKeptRangesStayBoundedAndStillFence: every open after the first records a kept
// range; seals merge those below what they cleaned, so the list does not grow with
// every open, and every stale writer is still fenced after the merges and cleanups.
func TestKeptRangesStayBoundedAndStillFence(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	var (
		writers []*wal.Writer
		acked   []string
	)
	for i := range 6 {
		w := openWriter(t, b, testShard)
		writers = append(writers, w)
		for j := range 2 {
			id := fmt.Sprintf("w%d-%d", i, j)
			mustAppend(t, w, id)
			acked = append(acked, id)
			mustSeal(t, w)
		}
		mustAppend(t, w, fmt.Sprintf("w%d-unsealed", i)) // replayed by the next writer
		acked = append(acked, fmt.Sprintf("w%d-unsealed", i))
		mustCleanup(t, b, wal.Retention{KeepManifests: 2}, later())
		if kept := w.Stats().Manifest.KeptEntries; len(kept) > 2 {
			t.Errorf("epoch %d: %d kept ranges %+v, want at most 2", w.Stats().Epoch, len(kept), kept)
		}
	}
	last := writers[len(writers)-1]
	mustSeal(t, last)
	for i, w := range writers[:len(writers)-1] {
		if err := appendIDs(ctx, w, fmt.Sprintf("late-%d", i)); !errors.Is(err, wal.ErrFenced) {
			t.Errorf("stale writer of epoch %d: %v, want ErrFenced", w.Stats().Epoch, err)
		}
	}
	mustAppend(t, last, "end")
	mustSeal(t, last)
	got := sealedRows(t, b, testShard)
	checkExactlyOnce(t, got, append(acked, "end"))
	for i := range writers {
		if len(got[fmt.Sprintf("late-%d", i)]) != 0 {
			t.Errorf("a stale writer's row late-%d was sealed", i)
		}
	}
}

// TestCleanupInterruptedByFaultsLeavesAShardThatReplays: Cleanup against a store that
// fails a third of all requests (writes half the time after landing) stops part-way
// again and again; after every attempt the shard loads, and at the end a writer
// replays it fully and nothing acknowledged is lost.
func TestCleanupInterruptedByFaultsLeavesAShardThatReplays(t *testing.T) {
	objstoretest.ForEachDriver(t, func(t *testing.T, open func(testing.TB) *objstore.Bucket) {
		ctx := context.Background()
		raw := open(t)
		wf := objstore.NewFaults(nil)
		wb := objstore.WithFaults(raw, wf)
		w := openWriter(t, wb, testShard)
		var acked []string
		for i := range 30 {
			id := fmt.Sprintf("r%d", i)
			if i%3 == 0 {
				// Some seals leave their entries behind.
				wf.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpDelete}, KeyContains: "/entries/", Times: 1})
			}
			mustAppend(t, w, id)
			acked = append(acked, id)
			if i%2 == 0 {
				mustSeal(t, w)
			}
		}
		if _, err := w.Drain(ctx, 3); err != nil {
			t.Fatal(err)
		}
		if err := raw.Put(ctx, shardKey("gen/0123456789abcdef_gen_1.arrow"), []byte("orphan")); err != nil {
			t.Fatal(err)
		}
		w.Abandon() // r29 is unsealed

		f := objstore.NewFaults(rand.NewPCG(3, 5))
		fb := objstore.WithFaults(raw, f)
		f.SetErrorRate(0.3)
		f.SetWritePhase(objstore.FailBeforeOrAfterWrite)
		failed := 0
		for range 40 {
			_, err := wal.Cleanup(ctx, fb, testDir, testShard, wal.Retention{KeepManifests: 2}, later(), wal.WithLogger(testLogger(t)))
			if err != nil {
				failed++
			}
			if _, err := wal.LoadShard(ctx, raw, testDir, testShard); err != nil {
				t.Fatalf("load after an interrupted cleanup: %v", err)
			}
			if has, err := wal.HasUnsealed(ctx, raw, testDir, testShard); err != nil || !has {
				t.Fatalf("HasUnsealed after an interrupted cleanup: %v, %v", has, err)
			}
		}
		if failed == 0 {
			t.Fatal("no cleanup was interrupted")
		}
		mustCleanup(t, raw, wal.Retention{KeepManifests: 2}, later())
		if got := manifestVersions(t, raw); len(got) != 2 {
			t.Errorf("versions left %v, want 2", got)
		}
		mustExist(t, raw, shardKey("gen/0123456789abcdef_gen_1.arrow"), false)

		w2 := openWriter(t, raw, testShard)
		if st := w2.Stats(); st.MemtableRows != 1 {
			t.Fatalf("replayed %d rows, want r29", st.MemtableRows)
		}
		mustSeal(t, w2)
		sealed := sealedRows(t, raw, testShard)
		// Generations 1-3 were drained (merged); their rows are not in the shard.
		merged := 0
		for _, id := range acked {
			if len(sealed[id]) == 0 {
				merged++
			}
		}
		if merged != 5 { // r0-r4: the first three seals
			t.Errorf("%d acknowledged rows not in a generation, want the 5 drained ones", merged)
		}
		checkExactlyOnce(t, sealed, acked[5:])
	})
}

// TestCleanupWhileAWriterAppendsSealsAndDrains runs Cleanup in a loop, with random
// retentions, against a live writer appending and sealing (some of its entry
// deletes fail, leaving sealed leftovers), a merge draining, and readers. The
// safety window is short (hundreds of milliseconds) so pruning keeps up with the
// edits. Invariants: no error anywhere, every manifest a reader loads names only
// generation files that exist, and every acknowledged row ends up exactly once in
// a drained or a sealed generation, also after a final Cleanup that treats
// everything as old ran over the unsealed entries of the crashed writer.
func TestCleanupWhileAWriterAppendsSealsAndDrains(t *testing.T) {
	for _, d := range []struct {
		name string
		open func(testing.TB) *objstore.Bucket
	}{{"mem", objstoretest.Mem}, {"file", objstoretest.File}} {
		t.Run(d.name, func(t *testing.T) {
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 1))
			var rngMu sync.Mutex
			randDur := func(lo, hi time.Duration) time.Duration {
				rngMu.Lock()
				defer rngMu.Unlock()
				return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
			}
			ctx := context.Background()
			raw := d.open(t)
			wf := objstore.NewFaults(rand.NewPCG(seed, 2))
			wb := objstore.WithFaults(raw, wf)
			wf.SetErrorRate(0.3, objstore.OpDelete)
			// Its failed deletes would flood the log.
			w := openWriter(t, wb, testShard, wal.WithLogger(slog.New(slog.DiscardHandler)))
			epoch := w.Stats().Epoch

			var (
				mu      sync.Mutex
				acked   []string
				merged  = map[string]int{}
				pruned  int
				stop    = make(chan struct{})
				wg      sync.WaitGroup
				counter atomic.Int64
			)
			stopped := func() bool {
				select {
				case <-stop:
					return true
				default:
					return false
				}
			}
			for range 3 {
				wg.Go(func() {
					for !stopped() {
						id := fmt.Sprintf("id%d", counter.Add(1))
						if err := appendIDs(ctx, w, id); err != nil {
							t.Errorf("append %s: %v", id, err)
							return
						}
						mu.Lock()
						acked = append(acked, id)
						mu.Unlock()
					}
				})
			}
			wg.Go(func() { // sealer
				for !stopped() {
					time.Sleep(randDur(0, 3*time.Millisecond))
					if _, err := w.Seal(ctx); err != nil {
						t.Errorf("seal: %v", err)
						return
					}
				}
			})
			wg.Go(func() { // merge: read the oldest generations, then drain them
				cache := wal.NewGenerationCache(0)
				for !stopped() {
					time.Sleep(randDur(5*time.Millisecond, 30*time.Millisecond))
					m, err := wal.LoadShard(ctx, raw, testDir, testShard)
					if err != nil {
						t.Errorf("merge: load: %v", err)
						return
					}
					gens := m.Generations[:min(len(m.Generations), 3)]
					if len(gens) == 0 {
						continue
					}
					var ids []string
					for _, g := range gens {
						data, err := cache.Read(ctx, raw, wal.GenerationKey(testDir, g))
						if err != nil {
							t.Errorf("merge: read generation %d: %v", g.Generation, err)
							return
						}
						for _, rec := range data.Records {
							col := rec.Column(0).(*array.String)
							for i := range col.Len() {
								ids = append(ids, col.Value(i))
							}
						}
					}
					if _, err := wal.Drain(ctx, raw, testDir, testShard, gens[len(gens)-1].Generation, epoch,
						wal.WithLogger(testLogger(t))); err != nil {
						t.Errorf("merge: drain: %v", err)
						return
					}
					mu.Lock()
					for _, id := range ids {
						merged[id]++
					}
					mu.Unlock()
				}
			})
			wg.Go(func() { // reader: every generation a loaded manifest names exists
				var snap *wal.Snapshot
				for !stopped() {
					time.Sleep(randDur(0, 5*time.Millisecond))
					var err error
					if snap == nil {
						snap, err = wal.LoadSnapshot(ctx, raw, testDir)
					} else {
						snap, err = snap.Refresh(ctx, raw)
					}
					if err != nil {
						t.Errorf("reader: %v", err)
						return
					}
					m := snap.Shards[testShard]
					for _, g := range m.Generations {
						if ok, err := raw.Exists(ctx, wal.GenerationKey(testDir, g)); err != nil || !ok {
							t.Errorf("reader: manifest %d names generation %d, exists %v (%v)", m.Version, g.Generation, ok, err)
							return
						}
					}
				}
			})
			wg.Go(func() { // cleanup
				for !stopped() {
					time.Sleep(randDur(0, 20*time.Millisecond))
					r := wal.Retention{
						KeepManifests: int(randDur(2, 5)),
						SafetyWindow:  randDur(300*time.Millisecond, 800*time.Millisecond),
					}
					res, err := wal.Cleanup(ctx, raw, testDir, testShard, r, wal.WithLogger(testLogger(t)))
					if err != nil {
						t.Errorf("cleanup: %v", err)
						return
					}
					mu.Lock()
					pruned += res.ManifestsDeleted
					mu.Unlock()
				}
			})
			time.Sleep(2500 * time.Millisecond)
			close(stop)
			wg.Wait()
			if t.Failed() {
				return
			}
			if pruned == 0 {
				t.Error("no manifest version was pruned")
			}
			wf.Clear()
			w.Abandon() // a crash: the last rows stay in entries

			mustCleanup(t, raw, wal.Retention{KeepManifests: 2}, later())
			w2 := openWriter(t, raw, testShard)
			mustSeal(t, w2)
			sealed := sealedRows(t, raw, testShard)
			lost := 0
			for _, id := range acked {
				n := len(sealed[id]) + merged[id]
				if n != 1 {
					if lost < 10 {
						t.Errorf("acknowledged id %s: sealed %d times, merged %d times", id, len(sealed[id]), merged[id])
					}
					lost++
				}
			}
			t.Logf("%d rows acknowledged, %d merged, %d versions pruned, %d versions left",
				len(acked), len(merged), pruned, len(manifestVersions(t, raw)))
		})
	}
}

// TestLoadShardWhoseLatestIsPrunedWhileReading: a reader finds version v newest,
// then, before it reads v, newer versions are written and v is pruned. The reader
// searches again instead of failing.
func TestLoadShardWhoseLatestIsPrunedWhileReading(t *testing.T) {
	ctx := context.Background()
	raw := objstoretest.Mem(t)
	w := openWriter(t, raw, testShard)
	mustAppend(t, w, "a")
	mustSeal(t, w)
	f := objstore.NewFaults(nil)
	b := objstore.WithFaults(raw, f)
	rule := f.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpGet}, KeyContains: "/_manifests/", Times: 1,
		Before: func(context.Context, objstore.Op, string) {
			for _, id := range []string{"b", "c", "d"} {
				mustAppend(t, w, id)
				mustSeal(t, w)
			}
			mustCleanup(t, raw, wal.Retention{KeepManifests: 2}, later())
		}})
	m, err := wal.LoadShard(ctx, b, testDir, testShard)
	if err != nil {
		t.Fatalf("load while the version found was pruned: %v", err)
	}
	if rule.Fired() != 1 || m.Version != 5 {
		t.Fatalf("loaded version %d (rule fired %d times), want 5", m.Version, rule.Fired())
	}
}
