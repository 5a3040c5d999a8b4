package wal_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
)

// TestSnapshotCountsPendingGenerationsOverShards: a read fans out over every shard's
// generations above that shard's merged watermark, not only the local writer's.
func TestSnapshotCountsPendingGenerationsOverShards(t *testing.T) {
	ctx := context.Background()
	raw := objstoretest.Mem(t)
	f := objstore.NewFaults(nil)
	b := objstore.WithFaults(raw, f)
	sealN := func(w *wal.Writer, n int) {
		for i := range n {
			mustAppend(t, w, w.Stats().Shard+"-"+string(rune('a'+i)))
			mustSeal(t, w)
		}
	}
	s1, s2 := openWriter(t, b, "s1"), openWriter(t, b, "s2")
	openWriter(t, b, "s3") // opened, nothing sealed
	sealN(s1, 3)
	sealN(s2, 1)

	snap, err := wal.LoadSnapshot(ctx, b, testDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Shards) != 3 {
		t.Fatalf("snapshot has shards %v, want s1, s2, s3", snap.Shards)
	}
	for _, c := range []struct {
		watermarks map[string]uint64
		want       int
	}{
		{nil, 4},
		{map[string]uint64{"s1": 2}, 2},
		{map[string]uint64{"s1": 3, "s2": 1}, 0},
		{map[string]uint64{"s1": 9, "s3": 5}, 1},
	} {
		if got := snap.PendingGenerations(c.watermarks); got != c.want {
			t.Errorf("pending with watermarks %v: %d, want %d", c.watermarks, got, c.want)
		}
	}
	pending := snap.Pending(map[string]uint64{"s1": 1})
	var got []string
	for _, p := range pending {
		got = append(got, p.Shard+"/"+string(rune('0'+p.Generation.Generation)))
	}
	if want := []string{"s1/2", "s1/3", "s2/1"}; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("pending %v, want %v", got, want)
	}

	// Refreshing an unchanged store reads no manifest: prove it by failing every
	// manifest read and every entry or generation read.
	rule := f.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpGet}, KeyContains: "/_manifests/"})
	same, err := snap.Refresh(ctx, b)
	if err != nil {
		t.Fatalf("refresh of an unchanged store: %v", err)
	}
	for name, m := range snap.Shards {
		if same.Shards[name] != m {
			t.Errorf("shard %s: refresh re-read an unchanged manifest", name)
		}
	}
	if rule.Fired() != 0 {
		t.Errorf("refresh tried %d manifest reads", rule.Fired())
	}
	rule.Remove()

	sealN(s2, 1)
	next, err := same.Refresh(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if next.Shards["s2"] == same.Shards["s2"] || len(next.Shards["s2"].Generations) != 2 {
		t.Errorf("refresh missed s2's new generation")
	}
	if next.Shards["s1"] != same.Shards["s1"] {
		t.Errorf("refresh re-read s1, which did not change")
	}
	if _, err := wal.LoadShard(ctx, b, testDir, "nobody"); !errors.Is(err, wal.ErrNoShard) {
		t.Errorf("load of a missing shard: %v, want ErrNoShard", err)
	}
}

// TestGenerationCacheServesRepeatedReadsWithoutStorage: the reference system
// re-opened every pending generation on every read; a cached read makes no request.
func TestGenerationCacheServesRepeatedReadsWithoutStorage(t *testing.T) {
	ctx := context.Background()
	raw := objstoretest.Mem(t)
	f := objstore.NewFaults(nil)
	b := objstore.WithFaults(raw, f)
	w := openWriter(t, b, testShard)
	mustAppend(t, w, "a", "b", "c")
	g := mustSeal(t, w)
	key := wal.GenerationKey(testDir, *g)

	c := wal.NewGenerationCache(64 << 20)
	first, err := c.Read(ctx, b, key)
	if err != nil {
		t.Fatal(err)
	}
	if first.Rows != 3 || first.Bytes != g.Bytes {
		t.Fatalf("decoded %d rows / %d bytes, manifest says %d / %d", first.Rows, first.Bytes, g.Rows, g.Bytes)
	}
	before := f.TotalRequests()
	again, err := c.Read(ctx, b, key)
	if err != nil {
		t.Fatal(err)
	}
	if n := f.TotalRequests() - before; n != 0 {
		t.Errorf("a cached read made %d requests", n)
	}
	if again != first {
		t.Error("a cached read returned a different value")
	}
	if st := c.Stats(); st.Hits != 1 || st.Entries != 1 || st.Bytes != g.Bytes {
		t.Errorf("cache stats %+v", st)
	}

	// A budget smaller than the generation caches nothing: every read goes out.
	tiny := wal.NewGenerationCache(g.Bytes - 1)
	gets := f.Requests(objstore.OpGet)
	for range 2 {
		if _, err := tiny.Read(ctx, b, key); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.Requests(objstore.OpGet) - gets; n != 2 {
		t.Errorf("uncacheable reads made %d GETs, want 2", n)
	}
	if _, err := c.Read(ctx, b, key+".missing"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("read of a deleted generation: %v, want ErrNotFound", err)
	}
}
