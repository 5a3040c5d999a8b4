package table

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

// ScanOptions selects what Scan returns.
type ScanOptions struct {
	// Columns projects the output (nil: every column, _seq included).
	Columns []string
	// IDs, when non-nil, restricts the scan to rows with these ids; fragments that
	// cannot hold any of them (bounds, bloom filter) are not opened.
	IDs []string
	// AnyShard hands fn whole row-group batches and "" for the shard: a reader that
	// needs no row's shard (a full snapshot read) is spared the cuts at shard runs,
	// which in a compacted fragment of many shards leave batches of a few rows.
	AnyShard bool
}

// Scan streams the live rows of manifest m to fn, fragment by fragment in manifest
// order, with the shard that wrote them (Fragment.ShardAt: with a row's _seq, its
// rowkey.Version), unless opts.AnyShard. Every batch holds rows of one shard: a batch of a fragment with
// shard runs is cut at the runs' boundaries. Batches are only valid during the
// call; fn must Retain what it keeps.
func (t *Table) Scan(ctx context.Context, m *Manifest, opts ScanOptions, fn func(rec arrow.RecordBatch, shard string) error) error {
	s := m.ArrowSchema()
	cols := opts.Columns
	if cols == nil {
		for _, f := range s.Fields() {
			cols = append(cols, f.Name)
		}
	}
	for _, c := range cols {
		if len(s.FieldIndices(c)) == 0 {
			return fmt.Errorf("scan %s: unknown column %q", t.dir, c)
		}
	}
	var want map[string]bool
	read := cols
	if opts.IDs != nil {
		want = make(map[string]bool, len(opts.IDs))
		for _, id := range opts.IDs {
			want[id] = true
		}
		// The filter needs the id column; read it first and project it away after.
		read = []string{rowkey.IDColumn}
		for _, c := range cols {
			if c != rowkey.IDColumn {
				read = append(read, c)
			}
		}
	}
	project := projection(read, cols)
	for _, f := range m.Fragments {
		if f.LiveRows() == 0 {
			continue
		}
		if want != nil {
			hit, err := t.mayContainAny(ctx, f, opts.IDs)
			if err != nil {
				return err
			}
			if !hit {
				continue
			}
		}
		if err := t.scanFragment(ctx, s, f, read, want, project, opts.AnyShard, fn); err != nil {
			return err
		}
	}
	return nil
}

func (t *Table) mayContainAny(ctx context.Context, f Fragment, ids []string) (bool, error) {
	for _, id := range ids {
		ok, err := t.mayContain(ctx, f, id)
		if err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

func (t *Table) scanFragment(ctx context.Context, s *arrow.Schema, f Fragment, read []string, want map[string]bool, project []int, anyShard bool, fn func(arrow.RecordBatch, string) error) error {
	dv, err := t.deletions(ctx, f)
	if err != nil {
		return err
	}
	ff, err := t.openFragment(ctx, s, f)
	if err != nil {
		return err
	}
	defer ff.Close()
	emit := func(rec arrow.RecordBatch, offset int64, shard string) error {
		n := rec.NumRows()
		var ids *array.String
		if want != nil {
			ids = rec.Column(0).(*array.String)
		}
		keep := func(i int64) bool {
			return !dv.Contains(uint32(offset+i)) && (ids == nil || want[ids.Value(int(i))])
		}
		all := true
		for i := int64(0); i < n && all; i++ {
			all = keep(i)
		}
		out := rec
		if !all {
			bld := array.NewBooleanBuilder(memory.DefaultAllocator)
			defer bld.Release()
			kept := 0
			for i := int64(0); i < n; i++ {
				k := keep(i)
				if k {
					kept++
				}
				bld.Append(k)
			}
			if kept == 0 {
				return nil
			}
			mask := bld.NewBooleanArray()
			defer mask.Release()
			filtered, err := compute.FilterRecordBatch(ctx, rec, mask, compute.DefaultFilterOptions())
			if err != nil {
				return fmt.Errorf("fragment %s: filter: %w", ff.key, err)
			}
			defer filtered.Release()
			out = filtered
		}
		if project != nil {
			p := selectColumns(out, project)
			defer p.Release()
			out = p
		}
		return fn(out, shard)
	}
	if anyShard {
		return ff.read(ctx, read, nil, func(rec arrow.RecordBatch, offset int64) error {
			return emit(rec, offset, "")
		})
	}
	runs := f.runs()
	if f.MixedShards {
		// A sorted fragment of several shards has each row's shard in its key index.
		return ff.read(ctx, read, nil, func(rec arrow.RecordBatch, offset int64) error {
			vs, err := t.versionsSorted(ctx, f, offset, offset+rec.NumRows())
			if err != nil {
				return err
			}
			for i := 0; i < len(vs); {
				j := i + 1
				for j < len(vs) && vs[j].Shard == vs[i].Shard {
					j++
				}
				part := rec.NewSlice(int64(i), int64(j))
				err := emit(part, offset+int64(i), vs[i].Shard)
				part.Release()
				if err != nil {
					return err
				}
				i = j
			}
			return nil
		})
	}
	return ff.read(ctx, read, nil, func(rec arrow.RecordBatch, offset int64) error {
		// Cut the batch at shard-run boundaries (zero-copy slices) before filtering,
		// so each call of fn names the shard of every row it gets.
		end := offset + rec.NumRows()
		var runStart int64
		for _, r := range runs {
			lo, hi := max(runStart, offset), min(runStart+r.Rows, end)
			runStart += r.Rows
			switch {
			case lo >= hi:
				continue
			case lo == offset && hi == end:
				return emit(rec, offset, r.Shard)
			}
			part := rec.NewSlice(lo-offset, hi-offset)
			err := emit(part, lo, r.Shard)
			part.Release()
			if err != nil || runStart >= end {
				return err
			}
		}
		return nil
	})
}

// projection maps the output columns to their positions in the columns read, or
// returns nil when they are the same list.
func projection(read, out []string) []int {
	if len(read) == len(out) {
		same := true
		for i := range read {
			same = same && read[i] == out[i]
		}
		if same {
			return nil
		}
	}
	idx := make([]int, len(out))
	for i, c := range out {
		for j, r := range read {
			if r == c {
				idx[i] = j
			}
		}
	}
	return idx
}

func selectColumns(rec arrow.RecordBatch, idx []int) arrow.RecordBatch {
	fields := make([]arrow.Field, len(idx))
	cols := make([]arrow.Array, len(idx))
	for i, j := range idx {
		fields[i] = rec.Schema().Field(j)
		cols[i] = rec.Column(j)
	}
	return array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, rec.NumRows())
}
