package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

// GetMany calls fn with the newest row of each id of ids that has one, in the
// order of ids, as Get would answer it; an id with no row is skipped. Every id is
// read from one snapshot (one refresh, one load of the pending generations), so
// a merge committing meanwhile cannot show one id before it and another after.
//
// cols, if not nil, names the columns the caller wants: a row from the base
// table is read with those alone (a blob not asked for is never read), one from
// a pending generation, already in memory, comes with every column, so the
// caller still leaves out what it did not ask for.
//
// Rows are handed over one at a time, each a one-row batch released when fn
// returns (fn must not keep it); at most getManyWindow rows are held at once,
// whatever the number of ids, and one when the columns read include a blob
// column (a blob may be as large as a request body: a batch holds one, as a
// single get does). An id given twice is handed over twice.
func (s *Store) GetMany(ctx context.Context, ids, cols []string, fn func(rec arrow.RecordBatch) error) error {
	snap, err := s.Fresh(ctx)
	if err != nil {
		return err
	}
	return s.getManyIn(ctx, snap, ids, cols, fn)
}

// GetMany is Store.GetMany as of the view's version.
func (v *View) GetMany(ctx context.Context, ids, cols []string, fn func(rec arrow.RecordBatch) error) error {
	return v.failure(ctx, v.s.getManyIn(ctx, v.snap, ids, cols, fn))
}

// getManyWindow is how many ids of a GetMany are looked up together: the base
// table reads each key-index block and row group they touch once
// (table.GetMany), and at most this many rows are held before fn takes them in
// order.
const getManyWindow = 128

// getManyIn is GetMany over snap: ids are read a window at a time, and handed to
// fn in the order of ids.
func (s *Store) getManyIn(ctx context.Context, snap *Snapshot, ids, cols []string, fn func(rec arrow.RecordBatch) error) error {
	p, err := s.loadPending(ctx, snap)
	if err != nil {
		return err
	}
	return s.getManyWith(ctx, snap, p, ids, cols, fn)
}

// getManyWith is getManyIn with snap's pending rows already loaded.
func (s *Store) getManyWith(ctx context.Context, snap *Snapshot, p *pendingRows, ids, cols []string, fn func(rec arrow.RecordBatch) error) error {
	size := getManyWindow
	if s.readsBlob(cols) {
		size = 1
	}
	for start := 0; start < len(ids); start += size {
		if err := s.getWindow(ctx, snap, p, ids[start:min(start+size, len(ids))], cols, fn); err != nil {
			return err
		}
	}
	return nil
}

// getWindow reads one window of a GetMany: the base rows of its distinct ids in one
// table.GetMany, then each id's newer of its base row and its newest pending row.
func (s *Store) getWindow(ctx context.Context, snap *Snapshot, p *pendingRows, window, cols []string, fn func(rec arrow.RecordBatch) error) error {
	first := make(map[string]int, len(window)) // id -> position in uniq
	var uniq []string
	for _, id := range window {
		if _, ok := first[id]; !ok {
			first[id] = len(uniq)
			uniq = append(uniq, id)
		}
	}
	type baseRow struct {
		rec arrow.RecordBatch
		v   rowkey.Version
	}
	base := make([]baseRow, len(uniq))
	defer func() {
		for _, b := range base {
			if b.rec != nil {
				b.rec.Release()
			}
		}
	}()
	err := s.table.GetMany(ctx, snap.Base, uniq, cols, func(i int, row arrow.RecordBatch, v rowkey.Version) error {
		row.Retain()
		base[i] = baseRow{row, v}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store %s: %w", s.Target(), err)
	}
	for _, id := range window {
		b := base[first[id]]
		ref, inGen := p.best[id]
		var row arrow.RecordBatch
		switch {
		case b.rec != nil && (!inGen || b.v.Newer(ref.v)):
			row = b.rec
			row.Retain()
		case inGen:
			row = p.gens[ref.gen].Records[ref.rec].NewSlice(int64(ref.row), int64(ref.row)+1)
		default:
			continue
		}
		err := fn(row)
		row.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// readsBlob reports whether a read of cols (nil: every column) reads a blob
// column.
func (s *Store) readsBlob(cols []string) bool {
	if cols == nil {
		return len(s.blobs) > 0
	}
	for _, c := range cols {
		if slices.Contains(s.blobs, c) {
			return true
		}
	}
	return false
}
