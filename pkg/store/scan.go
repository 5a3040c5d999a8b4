package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
	"github.com/tidemark-io/tidemark/pkg/storage/table"
)

// ScanOptions selects the rows and columns of a Scan.
type ScanOptions struct {
	// Columns are the columns read besides id and _seq, which are always read. nil
	// reads every column, blob columns included.
	Columns []string
	// Filter, if set, says for each row of a batch whether it is kept.
	// FilterColumns are the columns it reads (nil: any column); they are read too,
	// and left out of the output when Columns lacks them.
	Filter        func(rec arrow.RecordBatch) ([]bool, error)
	FilterColumns []string
}

// Scan is one snapshot of a store read whole in storage order: the base table
// fragment by fragment with its deletion vectors applied, then the pending rows
// that are the newest versions of their ids. It is the full read of exports and
// of snapshot streams, and it passes record batches, never rows: it costs what
// decoding the fragments costs, where the id-ordered walk of Page and Stream
// merges fragments row by row.
//
// Invariants: every live id of the snapshot is handed out exactly once, in its
// newest version (a base row an older pending row of its id cannot hide, a
// pending row a newer base row supersedes is left out), and no row of an
// overwritten version ever is. Memory is the row group being read and the pending
// generations every read of the snapshot holds, never the store.
type Scan struct {
	s      *Store
	snap   *Snapshot
	p      *pendingRows
	opts   ScanOptions
	schema *arrow.Schema
	read   []string
	// estimate is Estimate, counted once at open: progress reports ask for it
	// often, and the fragments do not change under a snapshot.
	estimate int64
	// failure explains an error of a read at a version (View.failure).
	failure func(ctx context.Context, err error) error
}

// OpenScan opens a Scan of the store now: a fresh snapshot, base and pending rows.
func (s *Store) OpenScan(ctx context.Context, opts ScanOptions) (*Scan, error) {
	snap, err := s.Fresh(ctx)
	if err != nil {
		return nil, err
	}
	return s.openScan(ctx, snap, opts, func(_ context.Context, err error) error { return err })
}

// OpenScan opens a Scan of the store as of the view's version: merged rows only.
func (v *View) OpenScan(ctx context.Context, opts ScanOptions) (*Scan, error) {
	sc, err := v.s.openScan(ctx, v.snap, opts, v.failure)
	return sc, v.failure(ctx, err)
}

func (s *Store) openScan(ctx context.Context, snap *Snapshot, opts ScanOptions, failure func(context.Context, error) error) (*Scan, error) {
	ts := snap.Base.ArrowSchema()
	for _, c := range append(slices.Clone(opts.Columns), opts.FilterColumns...) {
		if len(ts.FieldIndices(c)) == 0 {
			return nil, fmt.Errorf("store %s: scan: no column %q in the table's schema", s.Target(), c)
		}
	}
	sc := &Scan{s: s, snap: snap, opts: opts, failure: failure}
	out := columnNames(ts)
	if opts.Columns != nil {
		out = keyedColumns(ts, opts.Columns)
	}
	sc.read = out
	switch {
	case opts.Filter != nil && opts.FilterColumns == nil:
		sc.read = columnNames(ts)
	case opts.Filter != nil:
		sc.read = keyedColumns(ts, append(slices.Clone(out), opts.FilterColumns...))
	}
	fields := make([]arrow.Field, len(out))
	for i, c := range out {
		fields[i] = ts.Field(ts.FieldIndices(c)[0])
	}
	md := ts.Metadata()
	sc.schema = arrow.NewSchema(fields, &md)
	p, err := s.loadPending(ctx, snap)
	if err != nil {
		return nil, err
	}
	sc.p = p
	for _, f := range snap.Base.Fragments {
		sc.estimate += f.LiveRows()
	}
	sc.estimate += int64(len(p.best))
	return sc, nil
}

// Schema is the schema of every batch Each hands out: the table's columns the
// options select, in table order (id first, _seq last). It is known before any
// row is read.
func (sc *Scan) Schema() *arrow.Schema { return sc.schema }

// Version is the base-table version the scan reads (with the pending rows on top,
// for Store.OpenScan).
func (sc *Scan) Version() uint64 { return sc.snap.Base.Version }

// Estimate bounds the rows Each hands out from above: the base table's live rows
// and the pending rows, before filters and before pending rows hide base ones.
func (sc *Scan) Estimate() int64 { return sc.estimate }

// Each calls fn with the scan's rows in storage order, batch by batch, each batch
// of Schema. A batch is valid only during the call (Retain what is kept). An error
// from fn stops the scan and is returned.
func (sc *Scan) Each(ctx context.Context, fn func(rec arrow.RecordBatch) error) error {
	// Pending ids whose base row is newer: that row is handed out, the pending one
	// is not.
	baseNewer := map[string]bool{}
	err := sc.s.table.Scan(ctx, sc.snap.Base, table.ScanOptions{Columns: sc.read, AnyShard: true}, func(rec arrow.RecordBatch, _ string) error {
		keep, err := sc.baseKeep(ctx, rec, baseNewer)
		if err != nil {
			return err
		}
		return sc.emit(ctx, rec, keep, fn)
	})
	if err != nil {
		return sc.failure(ctx, fmt.Errorf("store %s: scan: %w", sc.s.Target(), err))
	}
	return sc.eachPending(ctx, baseNewer, fn)
}

// baseKeep says which rows of a base batch are live in the snapshot: all (nil)
// unless a pending row of the same id is newer. Where the two versions carry the
// same _seq the base row's shard decides, read by a point lookup (shards' seqs
// collide rarely; a full scan does not read every row's shard for them).
func (sc *Scan) baseKeep(ctx context.Context, rec arrow.RecordBatch, baseNewer map[string]bool) ([]bool, error) {
	if len(sc.p.best) == 0 {
		return nil, nil
	}
	ids, seqs, err := rowkey.Columns(rec)
	if err != nil {
		return nil, err
	}
	var keep []bool
	for i := 0; i < ids.Len(); i++ {
		id := ids.Value(i)
		ref, ok := sc.p.best[id]
		if !ok {
			continue
		}
		newer := seqs.Value(i) > ref.v.Seq
		if seqs.Value(i) == ref.v.Seq {
			row, v, err := sc.s.table.GetColumns(ctx, sc.snap.Base, id, []string{rowkey.IDColumn, rowkey.SeqColumn})
			if err != nil {
				return nil, err
			}
			if row != nil {
				row.Release()
				newer = v.Newer(ref.v)
			}
		}
		if newer {
			baseNewer[id] = true
			continue
		}
		if keep == nil {
			keep = make([]bool, ids.Len())
			for j := range keep {
				keep[j] = true
			}
		}
		keep[i] = false
	}
	return keep, nil
}

// eachPending hands out the pending rows that are the newest versions of their
// ids, generation by generation, batch by batch.
func (sc *Scan) eachPending(ctx context.Context, baseNewer map[string]bool, fn func(rec arrow.RecordBatch) error) error {
	type batchRef struct{ gen, rec int }
	rows := map[batchRef][]int{}
	for id, ref := range sc.p.best {
		if !baseNewer[id] {
			k := batchRef{ref.gen, ref.rec}
			rows[k] = append(rows[k], ref.row)
		}
	}
	order := make([]batchRef, 0, len(rows))
	for k := range rows {
		order = append(order, k)
	}
	slices.SortFunc(order, func(a, b batchRef) int { return cmp.Or(cmp.Compare(a.gen, b.gen), cmp.Compare(a.rec, b.rec)) })
	for _, k := range order {
		rec := sc.p.gens[k.gen].Records[k.rec]
		keep := make([]bool, rec.NumRows())
		for _, i := range rows[k] {
			keep[i] = true
		}
		if err := sc.emit(ctx, rec, keep, fn); err != nil {
			return err
		}
	}
	return nil
}

// emit hands fn the rows of rec that keep (nil: all) and the filter keep, in the
// scan's schema.
func (sc *Scan) emit(ctx context.Context, rec arrow.RecordBatch, keep []bool, fn func(rec arrow.RecordBatch) error) error {
	if sc.opts.Filter != nil {
		m, err := sc.opts.Filter(rec)
		if err != nil {
			return err
		}
		if keep == nil {
			keep = m
		} else {
			for i := range keep {
				keep[i] = keep[i] && m[i]
			}
		}
	}
	kept := len(keep)
	if keep != nil {
		kept = 0
		for _, k := range keep {
			if k {
				kept++
			}
		}
		if kept == 0 {
			return nil
		}
	}
	out, err := sc.conform(ctx, rec)
	if err != nil {
		return err
	}
	defer out.Release()
	if keep != nil && kept < len(keep) {
		bld := array.NewBooleanBuilder(memory.DefaultAllocator)
		defer bld.Release()
		bld.AppendValues(keep, nil)
		mask := bld.NewBooleanArray()
		defer mask.Release()
		filtered, err := compute.FilterRecordBatch(ctx, out, mask, compute.DefaultFilterOptions())
		if err != nil {
			return fmt.Errorf("store %s: scan: filter: %w", sc.s.Target(), err)
		}
		defer filtered.Release()
		out = filtered
	}
	return fn(out)
}

// conform returns rec's columns of the scan's schema, by name, in its order and
// types: base batches are in the table's types already, pending ones are the
// WAL's, which may order or type a column otherwise.
func (sc *Scan) conform(ctx context.Context, rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	fields := sc.schema.Fields()
	cols := make([]arrow.Array, len(fields))
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	for i, f := range fields {
		idx := rec.Schema().FieldIndices(f.Name)
		if len(idx) == 0 {
			return nil, fmt.Errorf("store %s: scan: a batch lacks column %q", sc.s.Target(), f.Name)
		}
		col := rec.Column(idx[0])
		if arrow.TypeEqual(col.DataType(), f.Type) {
			col.Retain()
			cols[i] = col
			continue
		}
		cast, err := compute.CastArray(ctx, col, compute.SafeCastOptions(f.Type))
		if err != nil {
			return nil, fmt.Errorf("store %s: scan: column %q from %s to %s: %w", sc.s.Target(), f.Name, col.DataType(), f.Type, err)
		}
		cols[i] = cast
	}
	return array.NewRecordBatch(sc.schema, cols, rec.NumRows()), nil
}

// columnNames is every column of s, in order.
func columnNames(s *arrow.Schema) []string {
	out := make([]string, s.NumFields())
	for i, f := range s.Fields() {
		out[i] = f.Name
	}
	return out
}
