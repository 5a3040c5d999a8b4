package table

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

// sortByID returns the rows of recs (of schema s, each id at most once) in
// increasing id order, as new batches of at most chunk rows each; the caller
// releases them. Rows already in order are returned as they are (retained), so a
// merge of rows written in id order copies nothing.
//
// Memory: the rows are copied a chunk at a time into the sorted batches, after a
// copy into one batch when there are several: up to twice the rows besides the
// input, for as long as the caller keeps the result. A merge holds its rows anyway;
// this is what writing them sorted costs.
func sortByID(ctx context.Context, s *arrow.Schema, recs []arrow.RecordBatch, chunk int64) ([]arrow.RecordBatch, error) {
	out, _, err := sortByIDWith(ctx, s, recs, chunk)
	return out, err
}

// sortByIDWith is sortByID that also returns the permutation: the k-th row of the
// result is row perm[k] of recs (counted across the batches).
func sortByIDWith(ctx context.Context, s *arrow.Schema, recs []arrow.RecordBatch, chunk int64) ([]arrow.RecordBatch, []int, error) {
	type pos struct {
		id  string
		row int64
	}
	var rows []pos
	sorted := true
	var n int64
	for _, rec := range recs {
		ids, _, err := rowkey.Columns(rec)
		if err != nil {
			return nil, nil, err
		}
		for i := 0; i < ids.Len(); i++ {
			id := ids.Value(i)
			if len(rows) > 0 && id <= rows[len(rows)-1].id {
				sorted = false
			}
			rows = append(rows, pos{id: id, row: n})
			n++
		}
	}
	perm := make([]int, len(rows))
	if sorted {
		for k := range perm {
			perm[k] = k
		}
		for _, r := range recs {
			r.Retain()
		}
		return slices.Clone(recs), perm, nil
	}
	slices.SortFunc(rows, func(a, b pos) int { return strings.Compare(a.id, b.id) })
	for i := range rows {
		if i > 0 && rows[i].id == rows[i-1].id {
			return nil, nil, fmt.Errorf("sort by id: id %q appears twice (rows must be deduplicated first)", rows[i].id)
		}
		perm[i] = int(rows[i].row)
	}
	// One batch (a merge of one generation, a compaction's chunk of one piece) is
	// taken from as it is; several are copied into one first, since Take of a
	// nested column across chunks would concatenate them at every take.
	all := recs[0]
	all.Retain()
	if len(recs) > 1 {
		all.Release()
		var err error
		if all, err = concatBatches(s, recs); err != nil {
			return nil, nil, err
		}
	}
	defer all.Release()
	var out []arrow.RecordBatch
	fail := func(err error) ([]arrow.RecordBatch, []int, error) {
		for _, r := range out {
			r.Release()
		}
		return nil, nil, err
	}
	bld := array.NewInt64Builder(memory.DefaultAllocator)
	defer bld.Release()
	for start := 0; start < len(rows); start += int(chunk) {
		for _, r := range rows[start:min(start+int(chunk), len(rows))] {
			bld.Append(r.row)
		}
		idx := bld.NewInt64Array()
		res, err := compute.Take(ctx, *compute.DefaultTakeOptions(), compute.NewDatumWithoutOwning(all), compute.NewDatumWithoutOwning(idx))
		idx.Release()
		if err != nil {
			return fail(fmt.Errorf("sort by id: %w", err))
		}
		rd, ok := res.(*compute.RecordDatum)
		if !ok {
			res.Release()
			return fail(fmt.Errorf("sort by id: take returned a %s", res.Kind()))
		}
		out = append(out, rd.Value)
	}
	return out, perm, nil
}
