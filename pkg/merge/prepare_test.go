package merge

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/testutil/storetest"
)

// TestAPreparedMergeChangesNothingUntilCommitted: a prepared pass stages its files
// and holds its slot, but no version is committed and no generation drained until
// Commit; Abort deletes what it staged and gives the slot back. Invariant: a
// prepare that is never committed (its master died, its token was superseded)
// changes nothing a reader or another merge sees and leaves no file behind.
func TestAPreparedMergeChangesNothingUntilCommitted(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	f := newFixture(t, b, Config{Concurrency: 1})
	f.add(t, 1, "a", "b")
	f.seal(t)
	if _, err := f.m.Merge(ctx, f.s, true); err != nil {
		t.Fatal(err)
	}
	f.add(t, 2, "a", "c")
	f.seal(t)
	before, err := f.s.Table().Refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keys := objstoretest.Keys(t, b)
	want := map[string]int64{"a": 2, "b": 1, "c": 2}

	p, err := f.m.prepare(ctx, f.s, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.first.pick) != 1 || p.first.rows != 2 {
		t.Fatalf("prepared %d generations, %d rows; want 1, 2", len(p.first.pick), p.first.rows)
	}
	staged := 0
	for k := range objstoretest.Keys(t, b) {
		if !keys[k] {
			staged++
		}
	}
	if staged == 0 {
		t.Fatal("prepare staged no file")
	}
	if m, err := f.s.Table().Refresh(ctx); err != nil || m.Version != before.Version {
		t.Fatalf("base after prepare: %v %v, want version %d", m, err, before.Version)
	}
	if got := f.values(t); !maps.Equal(got, want) {
		t.Fatalf("values after prepare: %v, want %v", got, want)
	}
	if _, err := f.m.Merge(ctx, f.s, false); !errors.Is(err, ErrBusy) {
		t.Fatalf("merge beside a prepared one with one slot: %v, want ErrBusy", err)
	}

	p.Abort(ctx)
	if got := objstoretest.Keys(t, b); !maps.Equal(got, keys) {
		t.Fatalf("objects after abort differ from before prepare: %d, want %d", len(got), len(keys))
	}
	if _, err := p.commit(ctx); !errors.Is(err, errEnded) {
		t.Fatalf("commit after abort: %v, want errEnded", err)
	}
	r, err := f.m.Merge(ctx, f.s, false)
	if err != nil || r.Generations != 1 {
		t.Fatalf("merge after abort: %+v %v", r, err)
	}
	if got := f.values(t); !maps.Equal(got, want) {
		t.Fatalf("values after the merge: %v, want %v", got, want)
	}
}

// TestShardsPreparedAtOnceCommitInTurnAsSerialMergesWould: three shards write
// overlapping ids; every round all three prepare at once, then commit one after
// another in a random order, each rebasing onto the commits before it (the
// table's optimistic commit, as for any race). Invariant: every id ends with the
// row the reads showed before the merges, the newest by (_seq, shard) across
// shards, exactly once, whatever the commit order, and nothing stays pending.
func TestShardsPreparedAtOnceCommitInTurnAsSerialMergesWould(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(len(t.Name())), 16))
	b := objstoretest.Mem(t)
	shards := []*store.Store{storetest.Open(t, b, "w1", true), storetest.Open(t, b, "w2", false), storetest.Open(t, b, "w3", false)}
	m := New(Config{Logger: quiet(), MaxGenerations: 2})
	v := int64(0)
	for round := range 6 {
		for _, s := range shards {
			for range 1 + rng.IntN(4) {
				var ids []string
				for range 1 + rng.IntN(5) {
					ids = append(ids, fmt.Sprintf("id-%02d", rng.IntN(12)))
				}
				slices.Sort(ids)
				ids = slices.Compact(ids)
				v++
				if err := storetest.Append(ctx, s, v, ids...); err != nil {
					t.Fatal(err)
				}
				if _, err := s.Seal(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		want := storetest.Values(t, shards[0])
		prepared := make([]*prepared, len(shards))
		errs := make(chan error, len(shards))
		for i, s := range shards {
			go func() {
				var err error
				prepared[i], err = m.prepare(ctx, s, true)
				errs <- err
			}()
		}
		for range shards {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		order := rng.Perm(len(shards))
		for _, i := range order {
			if _, err := prepared[i].commit(ctx); err != nil {
				t.Fatalf("round %d: commit of %s (order %v): %v", round, shards[i].Shard(), order, err)
			}
		}
		for _, s := range shards {
			if got := storetest.Values(t, s); !maps.Equal(got, want) {
				t.Fatalf("round %d, commit order %v: %s reads %v, want %v", round, order, s.Shard(), got, want)
			}
			if n := PendingOwn(s); n != 0 {
				t.Fatalf("round %d: %s has %d generations pending", round, s.Shard(), n)
			}
		}
	}
}

// TestAPreparedMergeWhoseGenerationsAnotherMergeCommittedAddsNothingTwice: while a
// pass waits prepared for its turn, another merge of the same shard (the worker's
// own sweep, or a MergeWal of a newer claim) commits some or all of its
// generations. Invariant: the prepared commit then adds no row a second time and
// leaves every id at its newest value, whether the other merge took every
// generation (the watermark covers the pass) or only the older ones.
func TestAPreparedMergeWhoseGenerationsAnotherMergeCommittedAddsNothingTwice(t *testing.T) {
	for _, all := range []bool{true, false} {
		t.Run(fmt.Sprintf("other merge took all: %v", all), func(t *testing.T) {
			ctx := context.Background()
			f := newFixture(t, objstoretest.Mem(t), Config{Concurrency: 2})
			f.add(t, 1, "a", "b")
			f.seal(t)
			f.add(t, 2, "b", "c")
			f.seal(t)
			want := f.values(t)
			p, err := f.m.prepare(ctx, f.s, true)
			if err != nil {
				t.Fatal(err)
			}
			other := New(Config{Logger: quiet(), MaxGenerations: 1})
			if all {
				other = New(Config{Logger: quiet()})
			}
			if _, err := other.MergeOnce(ctx, f.s, true); err != nil {
				t.Fatal(err)
			}
			r, err := p.commit(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if all && r.Generations != 0 {
				t.Fatalf("the prepared commit merged %d generations another merge had committed", r.Generations)
			}
			// What the pass staged and never committed is deleted, not left to GC.
			m, err := f.s.Table().Refresh(ctx)
			if err != nil {
				t.Fatal(err)
			}
			referenced := map[string]bool{}
			for _, fr := range m.Fragments {
				referenced[fr.Path], referenced[fr.Bloom] = true, true
				if fr.Index != nil {
					referenced[fr.Index.Path] = true
				}
				if fr.Deletions != nil {
					referenced[fr.Deletions.Path] = true
				}
			}
			objs, err := f.bucket.List(ctx, f.s.Entry().URI+"/data/")
			if err != nil || len(objs) == 0 {
				t.Fatalf("list data files: %d, %v", len(objs), err)
			}
			for _, o := range objs {
				if rel := strings.TrimPrefix(o.Key, f.s.Entry().URI+"/"); !referenced[rel] {
					t.Errorf("%s: staged by the prepared pass, referenced by no version, not deleted", rel)
				}
			}
			if got := f.values(t); !maps.Equal(got, want) {
				t.Fatalf("values %v, want %v", got, want)
			}
			if n := f.baseRows(t); n != int64(len(want)) {
				t.Fatalf("%d live base rows, want %d (one per id)", n, len(want))
			}
			if n := PendingOwn(f.s); n != 0 {
				t.Fatalf("%d generations pending", n)
			}
		})
	}
}
