package store

import (
	"context"

	"github.com/apache/arrow-go/v18/arrow"
)

// GetMany calls fn with the newest row of each id of ids that has one, in the
// order of ids, as Get would answer it; an id with no row is skipped. Every id is
// read from one snapshot (one refresh, one load of the pending generations), so
// a merge committing meanwhile cannot show one id before it and another after.
//
// Rows are read and handed over one at a time, each a one-row batch released
// when fn returns (fn must not keep it), so memory holds one row, not the batch.
// An id given twice is read twice: callers deduplicate.
func (s *Store) GetMany(ctx context.Context, ids []string, fn func(rec arrow.RecordBatch) error) error {
	snap, err := s.Fresh(ctx)
	if err != nil {
		return err
	}
	return s.getManyIn(ctx, snap, ids, fn)
}

// GetMany is Store.GetMany as of the view's version.
func (v *View) GetMany(ctx context.Context, ids []string, fn func(rec arrow.RecordBatch) error) error {
	return v.failure(ctx, v.s.getManyIn(ctx, v.snap, ids, fn))
}

// getManyIn is GetMany over snap.
func (s *Store) getManyIn(ctx context.Context, snap *Snapshot, ids []string, fn func(rec arrow.RecordBatch) error) error {
	p, err := s.loadPending(ctx, snap)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return err
		}
		rec, err := s.newestIn(ctx, snap, p, id)
		if err != nil {
			return err
		}
		if rec == nil {
			continue
		}
		err = fn(rec)
		rec.Release()
		if err != nil {
			return err
		}
	}
	return nil
}
