package store

import (
	"context"

	"github.com/apache/arrow-go/v18/arrow"
)

// BucketName names the bucket the stores live in (its URL without credentials).
func (ss *Stores) BucketName() string { return ss.cfg.Bucket.String() }

// Stream calls fn with every live row that matches opts.Filter (nil: every row),
// after opts.StartAfter when set and after opts.Offset of them, in id order, as
// its batch and row index, from one snapshot. The batch is valid only during the
// call.
//
// It is List without its limit, for any number of rows: memory is the row groups
// being read plus the index of pending ids every read holds, never the store. An
// error from fn stops the stream and is returned. opts.Limit is not read.
func (s *Store) Stream(ctx context.Context, opts ListOptions, fn func(rec arrow.RecordBatch, row int) error) error {
	snap, err := s.Fresh(ctx)
	if err != nil {
		return err
	}
	return s.streamIn(ctx, snap, opts, fn)
}

// streamIn is Stream over snap.
func (s *Store) streamIn(ctx context.Context, snap *Snapshot, opts ListOptions, fn func(rec arrow.RecordBatch, row int) error) error {
	p, err := s.loadPending(ctx, snap)
	if err != nil {
		return err
	}
	return s.walk(ctx, snap, p, opts, func(_ string, rec arrow.RecordBatch, i int) (bool, error) {
		return true, fn(rec, i)
	})
}
