package merge

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/testutil/storetest"
)

// A merge of the whole store commits every shard's pending generations in one
// version, whichever worker runs it, and each owner's drain then empties its
// shard. Invariant: a store's merge cycle is one commit, not one per worker.
func TestAStoreMergeCommitsEveryShardInOneVersion(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	shards := []*store.Store{storetest.Open(t, b, "w1", true), storetest.Open(t, b, "w2", false), storetest.Open(t, b, "w3", false)}
	storetest.AppendAndSeal(t, shards[0], "a", 1, "b", 1)
	storetest.AppendAndSeal(t, shards[1], "c", 2)
	storetest.AppendAndSeal(t, shards[1], "d", 2)
	storetest.AppendAndSeal(t, shards[2], "b", 3)
	before, err := shards[1].Table().Refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := New(Config{Logger: quiet()})
	r, err := m.MergeStore(ctx, shards[1], true)
	if err != nil {
		t.Fatal(err)
	}
	if r.Passes != 1 || r.Generations != 4 || r.Version != before.Version+1 {
		t.Fatalf("merge: %+v, want 4 generations in one pass and one version after %d", r, before.Version)
	}
	if want := map[string]uint64{"w1": 1, "w2": 2, "w3": 1}; !maps.Equal(r.Merged, want) {
		t.Fatalf("merged %v, want %v", r.Merged, want)
	}
	want := map[string]int64{"a": 1, "b": 3, "c": 2, "d": 2}
	for _, s := range shards {
		if got := storetest.Values(t, s); !maps.Equal(got, want) {
			t.Fatalf("%s reads %v, want %v", s.Shard(), got, want)
		}
	}
	// The runner drained its own shard; the others drain theirs.
	for _, s := range shards {
		if s != shards[1] {
			if _, err := m.DrainMerged(ctx, s, nil, 0); err != nil {
				t.Fatal(err)
			}
		}
		sm, err := wal.LoadShard(ctx, b, s.Entry().URI, s.Shard())
		if err != nil {
			t.Fatal(err)
		}
		if len(sm.Generations) != 0 || PendingOwn(s) != 0 {
			t.Fatalf("%s after its drain: %d generations in its manifest, %d pending", s.Shard(), len(sm.Generations), PendingOwn(s))
		}
	}
	if r, err := m.MergeStore(ctx, shards[0], true); err != nil || r.Passes != 0 {
		t.Fatalf("a merge with nothing pending: %+v %v, want no pass", r, err)
	}
}

// Store merges run on random workers while every worker appends and seals, some
// workers merge their own shard at the same time, and owners drain at random
// moments; between them a reader lists the store. Invariants: a sealed row, once
// listed, is listed by every later read (a drain never comes before the commit
// that covers it), no id is listed twice, and at the end every sealed row is in
// the base table once.
func TestStoreMergesRacingSealsOwnMergesAndDrainsLoseNoRow(t *testing.T) {
	ctx := context.Background()
	for iter := range 3 {
		rng := rand.New(rand.NewPCG(uint64(iter), 77))
		b := objstoretest.Mem(t)
		shards := []*store.Store{storetest.Open(t, b, "w1", true), storetest.Open(t, b, "w2", false), storetest.Open(t, b, "w3", false)}
		m := New(Config{Logger: quiet(), MaxGenerations: 3})

		var mu sync.Mutex
		sealed := map[string]bool{} // ids sealed (visible to reads) so far
		stop := make(chan struct{})
		errs := make(chan error, 16)
		var wg sync.WaitGroup
		for i, s := range shards {
			wg.Go(func() { // an appender: unique ids, sealed in small generations
				for n := range 60 {
					select {
					case <-stop:
						return
					default:
					}
					id := fmt.Sprintf("%s-%04d", s.Shard(), n)
					if err := storetest.Append(ctx, s, int64(n), id); err != nil {
						errs <- err
						return
					}
					if n%2 == 1 {
						if _, err := s.Seal(ctx); err != nil {
							errs <- err
							return
						}
						mu.Lock()
						sealed[id], sealed[fmt.Sprintf("%s-%04d", s.Shard(), n-1)] = true, true
						mu.Unlock()
					}
				}
			})
			wg.Go(func() { // merges: of the whole store, of the own shard, drains
				r := rand.New(rand.NewPCG(uint64(iter), uint64(i)))
				for range 30 {
					select {
					case <-stop:
						return
					default:
					}
					var err error
					switch r.IntN(4) {
					case 0, 1:
						_, err = m.MergeStore(ctx, s, true)
					case 2:
						_, err = m.Merge(ctx, s, true)
					default:
						_, err = m.DrainMerged(ctx, s, nil, 0)
					}
					if err != nil {
						errs <- err
						return
					}
				}
			})
		}
		reader := shards[rng.IntN(len(shards))]
		for range 20 {
			mu.Lock()
			want := maps.Clone(sealed)
			mu.Unlock()
			got := storetest.Values(t, reader) // fails on an id listed twice
			for id := range want {
				if _, ok := got[id]; !ok {
					close(stop)
					wg.Wait()
					t.Fatalf("iteration %d: sealed id %s missing from a read through %s", iter, id, reader.Shard())
				}
			}
			select {
			case err := <-errs:
				close(stop)
				wg.Wait()
				t.Fatal(err)
			default:
			}
		}
		close(stop)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for _, s := range shards {
			if _, err := s.Seal(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := m.MergeStore(ctx, shards[0], true); err != nil {
			t.Fatal(err)
		}
		base, err := shards[0].Table().Refresh(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := storetest.Values(t, shards[0])
		for _, s := range shards {
			sm, err := wal.LoadShard(ctx, b, s.Entry().URI, s.Shard())
			if err != nil {
				t.Fatal(err)
			}
			if n := len(sm.Pending(base.Watermark(s.Shard()))); n != 0 {
				t.Fatalf("iteration %d: %s has %d generations pending after the last store merge", iter, s.Shard(), n)
			}
		}
		if int64(len(got)) != base.Stats().Rows {
			t.Fatalf("iteration %d: %d ids listed, base holds %d live rows", iter, len(got), base.Stats().Rows)
		}
		for id := range sealed {
			if _, ok := got[id]; !ok {
				t.Fatalf("iteration %d: sealed id %s missing at the end", iter, id)
			}
		}
	}
}
