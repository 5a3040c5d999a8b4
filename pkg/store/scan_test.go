package store_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/table"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/testutil/storetest"
)

// scanValues reads sc whole: id -> v, failing on an id handed out twice or a
// batch whose schema is not the scan's.
func scanValues(ctx context.Context, sc *store.Scan) (map[string]int64, error) {
	out := map[string]int64{}
	err := sc.Each(ctx, func(rec arrow.RecordBatch) error {
		if !rec.Schema().Equal(sc.Schema()) {
			return fmt.Errorf("batch schema %s, want %s", rec.Schema(), sc.Schema())
		}
		ids := rec.Column(0).(*array.String)
		var vs *array.Int64
		if i := rec.Schema().FieldIndices("v"); len(i) == 1 {
			vs = rec.Column(i[0]).(*array.Int64)
		}
		for i := 0; i < ids.Len(); i++ {
			if _, dup := out[ids.Value(i)]; dup {
				return fmt.Errorf("id %s scanned twice", ids.Value(i))
			}
			if vs != nil {
				out[ids.Value(i)] = vs.Value(i)
			} else {
				out[ids.Value(i)] = -1
			}
		}
		return nil
	})
	return out, err
}

// TestAScanHandsOutEachLiveRowOnceInItsNewestVersion guards Scan's invariant
// against the id-ordered read it must agree with: two shards overwrite random ids,
// merges, compactions (fragments of mixed shards) and pending generations mixed,
// and after every round a scan of the store now and of a retained version holds
// exactly what List does.
func TestAScanHandsOutEachLiveRowOnceInItsNewestVersion(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	w1 := storetest.Open(t, b, "w1", true)
	w2 := storetest.Open(t, b, "w2", false)
	mg := merge.New(merge.Config{Logger: storetest.Quiet()})
	rng := rand.New(rand.NewPCG(44, 1))
	var versions []uint64
	for round := range 12 {
		for _, w := range []*store.Store{w1, w2} {
			ids := make([]string, 1+rng.IntN(40))
			for i := range ids {
				ids[i] = fmt.Sprintf("id-%03d", rng.IntN(120))
			}
			if err := storetest.Append(ctx, w, int64(round*1000+rng.IntN(1000)), ids...); err != nil {
				t.Fatal(err)
			}
			if _, err := w.Seal(ctx); err != nil {
				t.Fatal(err)
			}
			if rng.IntN(3) > 0 {
				res, err := mg.Merge(ctx, w, true)
				if err != nil {
					t.Fatal(err)
				}
				versions = append(versions, res.Version)
			}
		}
		if round%4 == 3 {
			if _, err := w1.Table().Compact(ctx, table.CompactOptions{Level0Trigger: 2}); err != nil && !errors.Is(err, table.ErrConflict) {
				t.Fatal(err)
			}
		}
		for _, w := range []*store.Store{w1, w2} {
			want := storetest.Values(t, w)
			sc, err := w.OpenScan(ctx, store.ScanOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := scanValues(ctx, sc)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, want) {
				t.Fatalf("round %d: scan %v\nlist %v", round, got, want)
			}
			if sc.Estimate() < int64(len(got)) {
				t.Fatalf("estimate %d under the %d rows scanned", sc.Estimate(), len(got))
			}
		}
	}
	for _, v := range versions {
		view, err := w1.At(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		want, err := viewValues(ctx, view)
		if err != nil {
			t.Fatal(err)
		}
		sc, err := view.OpenScan(ctx, store.ScanOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := scanValues(ctx, sc)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, want) || sc.Version() != v {
			t.Fatalf("version %d: scan (version %d) %v\nlist %v", v, sc.Version(), got, want)
		}
	}
}

// TestAScanProjectsAndFilters checks that a scan's columns and filter select
// what they say, the filter's columns read but not handed out.
func TestAScanProjectsAndFilters(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	w := storetest.Open(t, b, "w1", true)
	mg := merge.New(merge.Config{Logger: storetest.Quiet()})
	storetest.AppendAndSeal(t, w, "a", 1, "b", 2, "c", 3)
	if _, err := mg.Merge(ctx, w, true); err != nil {
		t.Fatal(err)
	}
	storetest.AppendAndSeal(t, w, "b", 20, "d", 4) // pending: b is overwritten

	odd := func(rec arrow.RecordBatch) ([]bool, error) {
		vs := rec.Column(rec.Schema().FieldIndices("v")[0]).(*array.Int64)
		out := make([]bool, vs.Len())
		for i := range out {
			out[i] = vs.Value(i)%2 == 0
		}
		return out, nil
	}
	sc, err := w.OpenScan(ctx, store.ScanOptions{Columns: []string{}, Filter: odd, FilterColumns: []string{"v"}})
	if err != nil {
		t.Fatal(err)
	}
	if names := sc.Schema().Fields(); len(names) != 2 || names[0].Name != "id" || names[1].Name != "_seq" {
		t.Fatalf("schema %s, want id and _seq only", sc.Schema())
	}
	got, err := scanValues(ctx, sc)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int64{"b": -1, "d": -1}; !maps.Equal(got, want) {
		t.Fatalf("filtered scan %v, want %v", got, want)
	}
	if _, err := w.OpenScan(ctx, store.ScanOptions{Columns: []string{"nope"}}); err == nil {
		t.Fatal("a scan of an unknown column opened")
	}
}
