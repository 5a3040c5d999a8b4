package merge

import (
	"context"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/testutil/storetest"
)

// TestWritesWithOneSeqFromTwoShardsResolveTheSameWayInEveryMergeOrder gives two
// shards' writes of one id the same _seq (their writers' clocks read the same
// millisecond, as two skewed workers that both count one above an observed token
// do) and reads the id before, between and after merging the two shards, in both
// orders. Production failure: ties had no second key, so pending rows won over the
// base and a merge's rows over the ones they replaced: a reader saw w2's row, then,
// once w2 was merged, w1's, with no newer write. Invariant: every read of a version
// (seq, shard) pair agrees, whatever has been merged.
func TestWritesWithOneSeqFromTwoShardsResolveTheSameWayInEveryMergeOrder(t *testing.T) {
	for _, order := range [][]string{{"w1", "w2"}, {"w2", "w1"}} {
		t.Run(order[0]+" merged first", func(t *testing.T) {
			ctx := context.Background()
			b := objstoretest.Mem(t)
			now := time.UnixMilli(1_800_000_000_000)
			w1 := storetest.Open(t, b, "w1", true, wal.WithClock(clocktesting.NewFakePassiveClock(now)))
			w2 := storetest.Open(t, b, "w2", false, wal.WithClock(clocktesting.NewFakePassiveClock(now)))
			storetest.AppendAndSeal(t, w1, "x", 1)
			storetest.AppendAndSeal(t, w2, "x", 2)
			if s1, s2 := seqOf(t, w1, "x"), seqOf(t, w2, "x"); s1 != s2 {
				t.Fatalf("the writers issued _seq %d and %d; the test needs a tie", s1, s2)
			}
			// w2 sorts after w1: its row wins the tie, through both workers.
			reads := func(when string) {
				t.Run(when, func(t *testing.T) {
					for _, s := range []*store.Store{w1, w2} {
						storetest.WantValue(t, s, "x", 2)
						wantListed(t, s, "x", 2)
					}
				})
			}
			reads("before any merge")
			m := New(Config{Logger: quiet()})
			byShard := map[string]*store.Store{"w1": w1, "w2": w2}
			for _, shard := range order {
				if _, err := m.Merge(ctx, byShard[shard], true); err != nil {
					t.Fatal(err)
				}
				reads("after merging " + shard)
			}
		})
	}
}

// seqOf is the _seq of id's live row read through s.
func seqOf(t *testing.T, s *store.Store, id string) uint64 {
	t.Helper()
	rec, err := s.Get(context.Background(), id)
	if err != nil || rec == nil {
		t.Fatalf("get %s: %v, %v", id, rec, err)
	}
	defer rec.Release()
	_, seqs, err := rowkey.Columns(rec)
	if err != nil {
		t.Fatal(err)
	}
	return seqs.Value(0)
}

// wantListed fails unless a list through s shows id with value v.
func wantListed(t *testing.T, s *store.Store, id string, v int64) {
	t.Helper()
	recs, err := s.List(context.Background(), store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	for _, r := range recs {
		ids := r.Column(0).(*array.String)
		for i := 0; i < ids.Len(); i++ {
			if ids.Value(i) == id {
				if got := r.Column(1).(*array.Int64).Value(i); got != v {
					t.Fatalf("list: %s = %d, want %d", id, got, v)
				}
				return
			}
		}
	}
	t.Fatalf("list: %s missing, want %d", id, v)
}
