package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
	"github.com/tidemark-io/tidemark/pkg/storage/table"
)

// BucketName names the bucket the stores live in (its URL without credentials).
func (ss *Stores) BucketName() string { return ss.cfg.Bucket.String() }

// Stream calls fn with every live row that matches opts.Filter (nil: every row),
// after opts.Offset of them, as its batch and row index, from one snapshot: the
// base table's rows fragment by fragment, then the pending generations' rows.
// The batch is valid only during the call.
//
// It is List without a limit for any number of rows: memory is one batch at a
// time plus the index of pending ids every read holds, never the store. The
// price is the order, which is storage order rather than List's id order: an id
// order needs every id at once. An error from fn stops the stream and is
// returned.
//
// opts.Limit is not read. opts.Columns are read of the base table's rows as
// List reads them, with the columns the filter reads (every column when a
// filter's columns are not given).
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
	filter := opts.Filter
	var scan table.ScanOptions
	if cols := opts.streamColumns(); cols != nil {
		scan.Columns = keyedColumns(snap.Base.ArrowSchema(), cols)
	}
	skipped := 0
	emit := func(rec arrow.RecordBatch, i int) error {
		if skipped < opts.Offset {
			skipped++
			return nil
		}
		return fn(rec, i)
	}
	err = s.table.Scan(ctx, snap.Base, scan, func(rec arrow.RecordBatch, shard string) error {
		ids, seqs, err := rowkey.Columns(rec)
		if err != nil {
			return err
		}
		match, err := filterRows(filter, rec)
		if err != nil {
			return err
		}
		for i := 0; i < ids.Len(); i++ {
			id := ids.Value(i)
			if !p.baseRowLive(id, rowkey.Version{Seq: seqs.Value(i), Shard: shard}) {
				continue
			}
			if match == nil || match[i] {
				if err := emit(rec, i); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store %s: %w", s.Target(), err)
	}
	for gi, data := range p.gens {
		for ri, rec := range data.Records {
			ids, _, err := rowkey.Columns(rec)
			if err != nil {
				return err
			}
			var match []bool
			for i := 0; i < ids.Len(); i++ {
				if _, ok := p.liveAt(ids.Value(i), gi, ri, i); !ok {
					continue
				}
				if match == nil && filter != nil {
					if match, err = filterRows(filter, rec); err != nil {
						return err
					}
				}
				if match != nil && !match[i] {
					continue
				}
				if err := emit(rec, i); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// streamColumns are the columns a Stream of o reads of the base table's rows:
// Columns and the columns the filter reads, or every column (nil) when there is
// a filter whose columns are not given.
func (o ListOptions) streamColumns() []string {
	switch {
	case o.Columns == nil || o.Filter == nil:
		return o.Columns
	case o.FilterColumns == nil:
		return nil
	}
	cols := slices.Clone(o.Columns)
	for _, c := range o.FilterColumns {
		if !slices.Contains(cols, c) {
			cols = append(cols, c)
		}
	}
	return cols
}
