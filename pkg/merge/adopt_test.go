package merge

import (
	"context"
	"errors"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/wal"
)

// TestAdoptionDrainsTheShardOfAWorkerThatIsGoneAndFencesItShouldItReturn: w1
// acknowledges rows (some sealed, some only in WAL entries) and stops answering
// without closing anything; w2 adopts its shard. Production failure (DESIGN.md
// problem 5): a shard whose worker never returned stayed unmerged, its unsealed rows
// visible to no one. Invariants: after the adoption every acknowledged row of w1 is
// readable through w2 exactly once, nothing of w1's shard is pending, and the shard
// is retired; w1, still alive, is fenced on its next append (it never overwrites
// what the adopter replayed), opens a new epoch on the next one, and its rows then
// appear once, with the shard live again.
func TestAdoptionDrainsTheShardOfAWorkerThatIsGoneAndFencesItShouldItReturn(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	w1 := &fixture{bucket: b, s: openStore(t, b, "w1", true)}
	w2 := &fixture{bucket: b, s: openStore(t, b, "w2", false)}
	w1.add(t, 1, "a", "b")
	w1.seal(t)
	w1.add(t, 2, "b", "c") // acknowledged, never sealed
	w2.add(t, 7, "z")
	w2.seal(t)

	adopter := store.NewStores(store.Config{Bucket: b, Shard: "w2", Logger: quiet(), SnapshotTTL: -1,
		WALOptions: []wal.Option{wal.WithLogger(quiet())}}, 0)
	orphan, err := adopter.OpenShard(ctx, w1.s.Entry().Kind, w1.s.Entry().Name, "w1")
	if err != nil {
		t.Fatal(err)
	}
	m := New(Config{Logger: quiet()})
	res, err := m.Adopt(ctx, orphan, "w2")
	if err != nil {
		t.Fatal(err)
	}
	if err := orphan.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !res.Retired || res.Sealed != 2 || res.Merged.Generations != 2 {
		t.Fatalf("adoption %+v: want 2 rows sealed, 2 generations merged, retired", res)
	}
	want := map[string]int64{"a": 1, "b": 2, "c": 2, "z": 7}
	if got := w2.values(t); !equalValues(got, want) {
		t.Fatalf("through w2 after the adoption: %v, want %v", got, want)
	}
	sm, err := wal.LoadShard(ctx, b, w1.s.Entry().URI, "w1")
	if err != nil {
		t.Fatal(err)
	}
	if sm.Retired == nil || sm.Retired.By != "w2" || len(sm.Generations) != 0 {
		t.Fatalf("w1's shard after the adoption: retired %+v, %d generations; want retired by w2, none", sm.Retired, len(sm.Generations))
	}
	// Adopting it again finds it retired and changes nothing.
	again, err := adopter.OpenShard(ctx, w1.s.Entry().Kind, w1.s.Entry().Name, "w1")
	if err != nil {
		t.Fatal(err)
	}
	if res, err := m.Adopt(ctx, again, "w2"); err != nil || !res.Retired || res.Sealed != 0 || res.Merged.Generations != 0 {
		t.Fatalf("second adoption: %+v, %v; want retired, nothing done", res, err)
	}
	_ = again.Close(ctx)

	// w1 comes back to life: its first append is fenced, the next reopens.
	if err := w1.tryAdd(ctx, 3, "c"); !errors.Is(err, wal.ErrFenced) {
		t.Fatalf("append through the fenced writer: %v, want ErrFenced", err)
	}
	w1.add(t, 4, "c", "d")
	w1.seal(t)
	want = map[string]int64{"a": 1, "b": 2, "c": 4, "d": 4, "z": 7}
	for name, f := range map[string]*fixture{"w1": w1, "w2": w2} {
		if got := f.values(t); !equalValues(got, want) {
			t.Fatalf("through %s after w1 returned: %v, want %v", name, got, want)
		}
	}
	if sm, err = wal.LoadShard(ctx, b, w1.s.Entry().URI, "w1"); err != nil || sm.Retired != nil {
		t.Fatalf("w1's shard after it wrote again: %+v, %v; want live", sm, err)
	}
}

func equalValues(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
