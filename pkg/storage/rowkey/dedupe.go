package rowkey

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// NewestPerID keeps, for every id in recs, only the row with the highest _seq (on a
// tie, the later row), preserving input order. recs are rows of one shard (a seal's
// entries, a merge's generations), whose _seqs order its writes; across shards,
// compare Versions. Every batch must have a utf8 "id" and
// a uint64 "_seq" column. The result holds new references; the caller releases them.
// It is the one deduplication rule of Tidemark: WAL seals, merges and commits all
// use it, so last-write-wins means the same thing everywhere.
func NewestPerID(ctx context.Context, recs []arrow.RecordBatch) ([]arrow.RecordBatch, error) {
	type pos struct {
		rec, row int
		seq      uint64
	}
	win := map[string]pos{}
	cols := make([][2]arrow.Array, len(recs))
	for ri, rec := range recs {
		ids, seqs, err := Columns(rec)
		if err != nil {
			return nil, fmt.Errorf("deduplicate: batch %d: %w", ri, err)
		}
		cols[ri] = [2]arrow.Array{ids, seqs}
		for i := 0; i < ids.Len(); i++ {
			id, seq := ids.Value(i), seqs.Value(i)
			if w, ok := win[id]; !ok || seq >= w.seq {
				win[id] = pos{ri, i, seq}
			}
		}
	}
	kept := make([]arrow.RecordBatch, 0, len(recs))
	fail := func(err error) ([]arrow.RecordBatch, error) {
		for _, r := range kept {
			r.Release()
		}
		return nil, err
	}
	for ri, rec := range recs {
		ids := cols[ri][0].(*array.String)
		bld := array.NewBooleanBuilder(memory.DefaultAllocator)
		all, some := true, false
		for i := 0; i < ids.Len(); i++ {
			w := win[ids.Value(i)]
			keep := w.rec == ri && w.row == i
			all = all && keep
			some = some || keep
			bld.Append(keep)
		}
		mask := bld.NewBooleanArray()
		bld.Release()
		switch {
		case all:
			rec.Retain()
			kept = append(kept, rec)
		case some:
			f, err := compute.FilterRecordBatch(ctx, rec, mask, compute.DefaultFilterOptions())
			if err != nil {
				mask.Release()
				return fail(fmt.Errorf("deduplicate: %w", err))
			}
			kept = append(kept, f)
		}
		mask.Release()
	}
	return kept, nil
}
