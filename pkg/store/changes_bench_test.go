package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/testutil/storetest"
)

// BenchmarkChangesPage reads a feed page of 100 rows from a store of 100
// fragments of 1,000 rows (ids spread over the whole key space, as merges of
// many writers make them), nothing pending: after a late cursor (behind the
// last two fragments: what a consumer that keeps up asks) and from the start
// (every fragment's _seq range overlaps the zero cursor), side by side. A page
// refreshes the snapshot (it must see everything sealed before the horizon was
// read); requests/op counts every request, fragments/op the fragments whose
// objects the page read.
func BenchmarkChangesPage(b *testing.B) {
	ctx := context.Background()
	const fragments, perFragment = 100, 1000
	mem := objstoretest.Mem(b)
	w := storetest.Open(b, mem, "w1", true)
	mg := merge.New(merge.Config{Logger: storetest.Quiet()})
	rng := rand.New(rand.NewPCG(1, 2))
	for range fragments {
		ids := make([]string, perFragment)
		for i := range ids {
			ids[i] = fmt.Sprintf("id-%08d", rng.IntN(1<<26))
		}
		slices.Sort(ids)
		if err := storetest.Append(ctx, w, 1, slices.Compact(ids)...); err != nil {
			b.Fatal(err)
		}
		if _, err := w.Seal(ctx); err != nil {
			b.Fatal(err)
		}
		if _, err := mg.Merge(ctx, w, true); err != nil {
			b.Fatal(err)
		}
	}
	var seqs []uint64
	for _, f := range w.Snapshot().Base.Fragments {
		seqs = append(seqs, f.SeqMax)
	}
	slices.Sort(seqs)
	h := seqs[len(seqs)-1]

	faults := objstore.NewFaults(nil)
	reads := countFragmentReads(faults)
	ss := store.NewStores(store.Config{Bucket: objstore.WithFaults(mem, faults), Shard: "r", Logger: storetest.Quiet()}, 0)
	b.Cleanup(func() { _ = ss.Close(context.Background()) })
	reader, release, err := ss.Open(ctx, registry.KindGeneric, "g")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(release)

	for _, c := range []struct {
		name   string
		cursor rowkey.Position
	}{
		{"late", rowkey.After(seqs[len(seqs)-3])},
		{"start", rowkey.Position{}},
	} {
		b.Run(c.name, func(b *testing.B) {
			faults.ResetCounters()
			frags := 0
			for b.Loop() {
				reads.take()
				p, err := reader.Changes(ctx, store.ChangesOptions{After: c.cursor, Horizon: h, Limit: 100})
				if err != nil || len(p.Changes) != 100 {
					b.Fatalf("page: %d rows, %v", len(p.Changes), err)
				}
				p.Release()
				frags += len(reads.take())
			}
			b.ReportMetric(float64(faults.TotalRequests())/float64(b.N), "requests/op")
			b.ReportMetric(float64(frags)/float64(b.N), "fragments/op")
		})
	}
}
