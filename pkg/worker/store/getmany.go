package store

import (
	"context"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"golang.org/x/sync/errgroup"
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
// single get does). An id given twice is read twice: callers
// deduplicate.
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

// getManyWindow is how many ids of a GetMany are read at once: their base-table
// reads (one object-store request each, the pending rows are in memory) overlap,
// and at most this many rows are held before fn takes them in order.
const getManyWindow = 16

// getManyIn is GetMany over snap: ids are read a window at a time, the window's
// reads concurrently, and handed to fn in the order of ids.
func (s *Store) getManyIn(ctx context.Context, snap *Snapshot, ids, cols []string, fn func(rec arrow.RecordBatch) error) error {
	p, err := s.loadPending(ctx, snap)
	if err != nil {
		return err
	}
	size := getManyWindow
	if s.readsBlob(cols) {
		size = 1
	}
	rows := make([]arrow.RecordBatch, size)
	for start := 0; start < len(ids); start += size {
		window := ids[start:min(start+size, len(ids))]
		g, gctx := errgroup.WithContext(ctx)
		for i, id := range window {
			g.Go(func() error {
				var err error
				rows[i], err = s.newestIn(gctx, snap, p, id, cols)
				return err
			})
		}
		err := g.Wait()
		for i := range window {
			if err == nil && rows[i] != nil {
				err = fn(rows[i])
			}
			if rows[i] != nil {
				rows[i].Release()
				rows[i] = nil
			}
		}
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
