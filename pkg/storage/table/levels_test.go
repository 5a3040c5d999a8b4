package table

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

// unsortedWrites makes a handle write fragments as format 1 did.
func unsortedWrites() Option { return func(o *Options) { o.unsortedWrites = true } }

// checkGetMany checks that one GetMany of ids (distinct, in random order) answers
// each id as the model has it, in the order asked.
func checkGetMany(t testing.TB, tb *Table, m *Manifest, md *model, ids []string) {
	t.Helper()
	var got []string
	err := tb.GetMany(context.Background(), m, ids, nil, func(i int, rec arrow.RecordBatch, v rowkey.Version) error {
		id := rec.Column(0).(*array.String).Value(0)
		if id != ids[i] {
			return fmt.Errorf("row %d is %s, asked for %s", i, id, ids[i])
		}
		if r := md.rows[id]; rec.Column(1).(*array.Int64).Value(0) != r.value || v != md.ver[id] {
			return fmt.Errorf("%s: value %d at %+v, want %d at %+v", id, rec.Column(1).(*array.Int64).Value(0), v, r.value, md.ver[id])
		}
		got = append(got, id)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, id := range ids {
		if _, ok := md.rows[id]; ok {
			want = append(want, id)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("GetMany answered %v, want %v", got, want)
	}
}

// A table written before format 2 (unsorted fragments, no key indexes) and then by
// this build (sorted ones), with merges of several shards that overwrite each
// other's ids with newer and older writes, answers every read as the model of its
// commits says, before and after each compaction; compactions sort the old
// fragments first, then move rows down into levels of disjoint fragments, until
// nothing is left to do.
func TestUnsortedAndSortedFragmentsReadTheSameThroughCompactions(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(11, 12))
	b := memBucket(t)
	old := createTable(t, b, unsortedWrites(), rowGroups(16))
	md := newModel()
	gens := map[string]uint64{}
	commit := func(tb *Table, n int) *Manifest {
		shard := fmt.Sprint("w", rng.IntN(3))
		gens[shard]++
		rows := overwrite(rng, shard, n, 90, 40)
		md.landed(shard, rows)
		return appendShard(t, tb, shard, gens[shard], rows...)
	}
	for range 6 {
		commit(old, 20)
	}
	m := old.Latest()
	for _, f := range m.Fragments {
		if f.Sorted || f.Index != nil {
			t.Fatalf("old handle wrote a sorted fragment %s", f.Path)
		}
	}
	tb, err := Open(ctx, b, "rollout/t", rowGroups(16), WithCacheBytes(1<<16))
	if err != nil {
		t.Fatal(err)
	}
	for range 6 {
		m = commit(tb, 20)
	}
	check := func(what string, m *Manifest) {
		t.Helper()
		md.check(t, tb, m)
		ids := make([]string, 0, 100)
		for _, i := range rng.Perm(100) {
			ids = append(ids, fmt.Sprintf("id-%02d", i))
		}
		checkGetMany(t, tb, m, md, ids[:1+rng.IntN(len(ids))])
		fresh, err := Open(ctx, b, "rollout/t", WithCacheBytes(0))
		if err != nil {
			t.Fatal(err)
		}
		md.check(t, fresh, m)
	}
	check("before compaction", m)
	sorted := false
	for i := 0; ; i++ {
		if i == 40 {
			t.Fatalf("still compacting after %d compactions: levels %+v", i, tb.Latest().Levels())
		}
		before := tb.Latest()
		res, err := tb.Compact(ctx, CompactOptions{TargetRows: 25, MaxSources: 8})
		if err != nil {
			t.Fatal(err)
		}
		if res == (CompactResult{}) {
			t.Logf("%d compactions; levels %+v, %d fragments", i, tb.Latest().Levels(), len(tb.Latest().Fragments))
			break
		}
		after := tb.Latest()
		check(fmt.Sprintf("after compaction %d (%+v)", i, res), after)
		checkSortedOutputs(t, tb, before, after)
		if lv := after.Levels(); lv.Unsorted == 0 {
			sorted = true
		} else if sorted {
			t.Fatalf("unsorted fragments came back: %+v", lv)
		}
		// A merge between compactions lands on the levels like any other.
		if i%3 == 2 {
			check("after a merge", commit(tb, 10))
		}
	}
	lv := tb.Latest().Levels()
	if !sorted || lv.Unsorted != 0 || lv.Spilling != 0 || lv.Level0 > 1 {
		t.Fatalf("levels at the end %+v", lv)
	}
}
