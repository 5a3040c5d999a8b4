package wal_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
)

// TestUnsealedRowsAreReplayedAndSealedOnce: rows acknowledged but not sealed when
// the writer died come back in the next writer's memtable and are sealed once.
func TestUnsealedRowsAreReplayedAndSealedOnce(t *testing.T) {
	b := objstoretest.Mem(t)
	w := openWriter(t, b, testShard)
	mustAppend(t, w, "a", "b")
	mustSeal(t, w)
	mustAppend(t, w, "c")
	mustAppend(t, w, "d", "e")
	w.Abandon()

	w2 := openWriter(t, b, testShard)
	if st := w2.Stats(); st.MemtableRows != 3 {
		t.Fatalf("replayed %d rows, want 3 (c, d, e)", st.MemtableRows)
	}
	g := mustSeal(t, w2)
	if g.Generation != 2 || g.Rows != 3 {
		t.Fatalf("sealed generation %d with %d rows, want 2 with 3", g.Generation, g.Rows)
	}
	// Opening again replays nothing: the seal moved replay_after past every entry.
	w2.Abandon()
	w3 := openWriter(t, b, testShard)
	if st := w3.Stats(); st.MemtableRows != 0 {
		t.Fatalf("third writer replayed %d rows, want 0", st.MemtableRows)
	}
	if g, err := w3.Seal(context.Background()); g != nil || err != nil {
		t.Fatalf("seal of an empty memtable: %+v, %v; want a no-op", g, err)
	}
	checkExactlyOnce(t, sealedRows(t, b, testShard), []string{"a", "b", "c", "d", "e"})
}

// TestCrashBetweenManifestWriteAndEntryDeletion: a seal writes the manifest, then
// the process dies before deleting the sealed entries. The next writer must skip
// them (they are at or below replay_after), or every row in them would be sealed a
// second time.
func TestCrashBetweenManifestWriteAndEntryDeletion(t *testing.T) {
	raw := objstoretest.Mem(t)
	f := objstore.NewFaults(nil)
	b := objstore.WithFaults(raw, f)
	w := openWriter(t, b, testShard)
	mustAppend(t, w, "a")
	mustAppend(t, w, "b")
	f.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpDelete}, KeyContains: "/entries/"})
	mustSeal(t, w)
	if n := len(entryKeys(t, raw, testShard)); n != 3 { // fence, a, b
		t.Fatalf("%d entries left, want the 3 sealed ones (deletes were failing)", n)
	}
	w.Abandon()
	f.Clear()

	w2 := openWriter(t, raw, testShard)
	if st := w2.Stats(); st.MemtableRows != 0 {
		t.Fatalf("replayed %d already sealed rows", st.MemtableRows)
	}
	mustAppend(t, w2, "c")
	mustSeal(t, w2)
	checkExactlyOnce(t, sealedRows(t, raw, testShard), []string{"a", "b", "c"})
	// The second seal also cleaned up what the first one could not delete, all
	// but w2's kept range (its open's top and fence: fence.go), rewritten as fences.
	kept := w2.Stats().Manifest.KeptEntries
	if len(kept) != 1 {
		t.Fatalf("kept_entries %+v, want w2's range", kept)
	}
	if keys := entryKeys(t, raw, testShard); uint64(len(keys)) != kept[0].To-kept[0].From+1 {
		t.Errorf("entries left after a clean seal: %v, want only the kept range %+v", keys, kept[0])
	}
}

// TestMissingEntryHaltsReplay: entries above replay_after are never deleted, so a
// gap means acknowledged rows are gone; sealing around it would hide that.
func TestMissingEntryHaltsReplay(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	w := openWriter(t, b, testShard)
	mustAppend(t, w, "a")
	mustAppend(t, w, "b")
	w.Abandon()
	keys := entryKeys(t, b, testShard)
	if err := b.Delete(ctx, keys[1]); err != nil {
		t.Fatal(err)
	}
	_, err := wal.OpenWriter(ctx, b, testDir, testShard, inputSchema)
	if !errors.Is(err, wal.ErrCorrupt) {
		t.Fatalf("open with a missing entry: %v, want ErrCorrupt", err)
	}
	t.Log(err)
}

// TestCorruptEntryHaltsReplay: an undecodable entry is named in the error.
func TestCorruptEntryHaltsReplay(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	w := openWriter(t, b, testShard)
	mustAppend(t, w, "a")
	w.Abandon()
	keys := entryKeys(t, b, testShard)
	bad := keys[len(keys)-1]
	data, err := b.Get(ctx, bad)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, bad); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(ctx, bad, data[:len(data)/2]); err != nil {
		t.Fatal(err)
	}
	_, err = wal.OpenWriter(ctx, b, testDir, testShard, inputSchema)
	if !errors.Is(err, wal.ErrCorrupt) {
		t.Fatalf("open with a truncated entry: %v, want ErrCorrupt", err)
	}
	if !strings.Contains(err.Error(), bad) {
		t.Errorf("error %q does not name %s", err, bad)
	}
}

// TestSeqIncreasesPerWriterAcrossReopenWithClockBackwards: last-write-wins relies on
// a later write of the same shard having a higher _seq, even when the host clock
// steps back between two runs of the worker.
func TestSeqIncreasesPerWriterAcrossReopenWithClockBackwards(t *testing.T) {
	for _, sealFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("sealed before reopen=%v", sealFirst), func(t *testing.T) {
			b := objstoretest.Mem(t)
			start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
			clk := testingclock.NewFakePassiveClock(start)
			w := openWriter(t, b, testShard, wal.WithClock(clk))
			var order []string
			for i := range 5 {
				id := fmt.Sprintf("a%d", i)
				mustAppend(t, w, id) // same millisecond: the logical counter ticks
				order = append(order, id)
			}
			if sealFirst {
				mustSeal(t, w)
			}
			if err := w.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			clk.SetTime(start.Add(-time.Hour))
			w2 := openWriter(t, b, testShard, wal.WithClock(clk))
			for i := range 5 {
				id := fmt.Sprintf("b%d", i)
				mustAppend(t, w2, id)
				order = append(order, id)
				clk.SetTime(clk.Now().Add(time.Millisecond))
			}
			mustSeal(t, w2)
			rows := sealedRows(t, b, testShard)
			var seqs []uint64
			for _, id := range order {
				if len(rows[id]) != 1 {
					t.Fatalf("id %s sealed %d times", id, len(rows[id]))
				}
				seqs = append(seqs, rows[id][0].seq)
			}
			if !slices.IsSortedFunc(seqs, func(a, b uint64) int {
				if a < b {
					return -1
				}
				return 1 // equal counts as out of order: strictly increasing
			}) {
				t.Fatalf("_seq in append order %v is not strictly increasing: %v", order, seqs)
			}
			// The wall-clock part still tracks the clock when it is ahead.
			if got := seqs[0] >> 16; got != uint64(start.UnixMilli()) {
				t.Errorf("first _seq has wall time %d ms, want %d", got, start.UnixMilli())
			}
		})
	}
}
