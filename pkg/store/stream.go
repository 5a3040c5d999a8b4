package store

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark-io/tidemark/pkg/rowkey"
	"github.com/tidemark-io/tidemark/pkg/table"
)

// BucketName names the bucket the stores live in (its URL without credentials).
func (ss *Stores) BucketName() string { return ss.cfg.Bucket.String() }

// Stream calls fn with every live row that matches filter (nil: every row), as
// its batch and row index, from one snapshot: the base table's rows fragment by
// fragment, then the pending generations' rows. The batch is valid only during
// the call.
//
// It is List without a limit for any number of rows: memory is one batch at a
// time plus the index of pending ids every read holds, never the store. The
// price is the order, which is storage order rather than List's id order: an id
// order needs every id at once. An error from fn stops the stream and is
// returned.
//
// cols, if not nil, are the columns read of the base table's rows (id and _seq
// always), as ListOptions.Columns: they must include every column filter reads.
// Rows from pending generations come with every column.
func (s *Store) Stream(ctx context.Context, filter func(arrow.RecordBatch) ([]bool, error), cols []string, fn func(rec arrow.RecordBatch, row int) error) error {
	snap, err := s.Fresh(ctx)
	if err != nil {
		return err
	}
	return s.streamIn(ctx, snap, filter, cols, fn)
}

// streamIn is Stream over snap.
func (s *Store) streamIn(ctx context.Context, snap *Snapshot, filter func(arrow.RecordBatch) ([]bool, error), cols []string, fn func(rec arrow.RecordBatch, row int) error) error {
	p, err := s.loadPending(ctx, snap)
	if err != nil {
		return err
	}
	var scan table.ScanOptions
	if cols != nil {
		scan.Columns = keyedColumns(snap.Base.ArrowSchema(), cols)
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
				if err := fn(rec, i); err != nil {
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
				if err := fn(rec, i); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
