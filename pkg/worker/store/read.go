package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"golang.org/x/sync/errgroup"

	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
	"github.com/tidemark-io/tidemark/pkg/storage/table"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
)

// genReadConcurrency bounds parallel generation reads of one request on a cold cache.
const genReadConcurrency = 8

// ListOptions selects rows of a List.
type ListOptions struct {
	Limit, Offset int
	// Filter, if set, returns for each row of a batch whether it matches.
	Filter func(rec arrow.RecordBatch) ([]bool, error)
	// FilterColumns, if set, are the only columns Filter reads: List's first
	// pass over the base table then reads them (with id and _seq) instead of
	// every column.
	FilterColumns []string
	// Columns, if not nil, are the columns List reads of the rows it returns from
	// the base table (id and _seq are always read), so that a blob the caller
	// leaves out of its answer is never read; rows from pending generations, in
	// memory already, come with every column and the caller leaves out the rest.
	Columns []string
}

// pendingRows is the newest version of every id found in a snapshot's pending
// generations.
type pendingRows struct {
	gens []*wal.GenerationData
	best map[string]rowRef
}

type rowRef struct {
	gen, rec, row int
	v             rowkey.Version
}

// baseRowLive reports whether a base-table row of id at version v is the live one:
// no pending row of id is newer. A pending row it beats is forgotten, so it is not
// listed as well.
func (p *pendingRows) baseRowLive(id string, v rowkey.Version) bool {
	if ref, ok := p.best[id]; ok {
		if !v.Newer(ref.v) {
			return false // the pending row is the live one
		}
		delete(p.best, id) // the base row is newer than the pending one
	}
	return true
}

// liveAt returns the pending row of id at generation gi, record ri, row i, if it is
// the live version of id (the newest pending one, not beaten by the base).
func (p *pendingRows) liveAt(id string, gi, ri, i int) (rowRef, bool) {
	ref, ok := p.best[id]
	return ref, ok && ref.gen == gi && ref.rec == ri && ref.row == i
}

// loadPending reads (through the cache) every generation above the watermarks and
// indexes the newest row per id across them.
func (s *Store) loadPending(ctx context.Context, snap *Snapshot) (*pendingRows, error) {
	pending := snap.Pending()
	if s.cfg.OnRead != nil {
		s.cfg.OnRead(s.Target(), len(pending))
	}
	if n := len(pending); n > s.cfg.RefuseGenerations {
		return nil, fmt.Errorf("store %s: %w: %d pending, refusing reads above %d until merges catch up",
			s.Target(), ErrOverloaded, n, s.cfg.RefuseGenerations)
	} else if n > s.cfg.WarnGenerations {
		s.log.Warn("read fans out over many pending WAL generations", "pending", n, "warn_threshold", s.cfg.WarnGenerations)
		if s.cfg.OnSlowRead != nil {
			s.cfg.OnSlowRead(s.Target(), n)
		}
	}
	p := &pendingRows{gens: make([]*wal.GenerationData, len(pending)), best: map[string]rowRef{}}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(genReadConcurrency)
	for i, pg := range pending {
		g.Go(func() error {
			data, err := s.cfg.Generations.Read(gctx, s.cfg.Bucket, pg.Key)
			if err != nil {
				return fmt.Errorf("store %s: generation %d of shard %s: %w", s.Target(), pg.Generation.Generation, pg.Shard, err)
			}
			p.gens[i] = data
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	for gi, data := range p.gens {
		for ri, rec := range data.Records {
			ids, seqs, err := rowkey.Columns(rec)
			if err != nil {
				return nil, fmt.Errorf("store %s: generation %s: %w", s.Target(), data.Key, err)
			}
			for i := 0; i < ids.Len(); i++ {
				id := ids.Value(i)
				v := rowkey.Version{Seq: seqs.Value(i), Shard: pending[gi].Shard}
				if b, ok := p.best[id]; !ok || !b.v.Newer(v) {
					p.best[id] = rowRef{gen: gi, rec: ri, row: i, v: v}
				}
			}
		}
	}
	return p, nil
}

// Get returns the newest row for id across the base table and every pending
// generation as a one-row batch (table schema, _seq last), or nil if there is none.
// The caller releases it.
func (s *Store) Get(ctx context.Context, id string) (arrow.RecordBatch, error) {
	snap, err := s.Fresh(ctx)
	if err != nil {
		return nil, err
	}
	return s.getIn(ctx, snap, id)
}

// getIn is Get over snap.
func (s *Store) getIn(ctx context.Context, snap *Snapshot, id string) (arrow.RecordBatch, error) {
	p, err := s.loadPending(ctx, snap)
	if err != nil {
		return nil, err
	}
	return s.newestIn(ctx, snap, p, id, nil)
}

// newestIn is getIn with snap's pending rows already loaded: the newer of id's
// base row (its columns cols names, nil: all) and its newest pending row (every
// column: it is in memory already), or nil.
func (s *Store) newestIn(ctx context.Context, snap *Snapshot, p *pendingRows, id string, cols []string) (arrow.RecordBatch, error) {
	base, baseV, err := s.table.GetColumns(ctx, snap.Base, id, cols)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", s.Target(), err)
	}
	ref, inGen := p.best[id]
	if base != nil {
		if !inGen || baseV.Newer(ref.v) {
			return base, nil
		}
		base.Release()
	}
	if !inGen {
		return nil, nil
	}
	return p.gens[ref.gen].Records[ref.rec].NewSlice(int64(ref.row), int64(ref.row)+1), nil
}

// List returns the live rows that match opts.Filter ordered by id (byte order),
// skipping Offset of them and returning at most Limit (0: no limit), each as a
// one-row batch the caller releases.
//
// The order is by id because it is the only order a merge cannot change: a merge
// moves rows from pending generations into new base fragments and replaces
// overwritten ones, which reorders any physical order, and offset paging over a
// physical order skipped the rows that moved. Ids are never removed from a store,
// so a row's rank among ids can only grow, and paging with offset through a store
// that changes between pages returns every row that existed when paging began at
// least once (a row inserted before the current page can push one row onto the
// next page twice, never off it).
//
// Memory is bounded by Offset+Limit ids, not by the store: a first pass reads the
// id and _seq columns (every column with a Filter) and keeps the smallest
// Offset+Limit matching ids; a second reads only the page's rows.
func (s *Store) List(ctx context.Context, opts ListOptions) ([]arrow.RecordBatch, error) {
	snap, err := s.Fresh(ctx)
	if err != nil {
		return nil, err
	}
	return s.listIn(ctx, snap, opts)
}

// listIn is List over snap.
func (s *Store) listIn(ctx context.Context, snap *Snapshot, opts ListOptions) ([]arrow.RecordBatch, error) {
	p, err := s.loadPending(ctx, snap)
	if err != nil {
		return nil, err
	}
	keep := 0 // 0: every id
	if opts.Limit > 0 {
		keep = opts.Offset + opts.Limit
	}
	sel := newIDSelection(keep)
	// Base rows: live unless a pending generation holds a newer row of the id.
	scan := table.ScanOptions{Columns: []string{rowkey.IDColumn, rowkey.SeqColumn}}
	if opts.Filter != nil {
		scan.Columns = nil
		if opts.FilterColumns != nil {
			scan.Columns = keyedColumns(snap.Base.ArrowSchema(), opts.FilterColumns)
		}
	}
	fromBase := map[string]bool{}
	err = s.table.Scan(ctx, snap.Base, scan, func(rec arrow.RecordBatch, shard string) error {
		ids, seqs, err := rowkey.Columns(rec)
		if err != nil {
			return err
		}
		match, err := filterRows(opts.Filter, rec)
		if err != nil {
			return err
		}
		for i := 0; i < ids.Len(); i++ {
			id := ids.Value(i)
			if !p.baseRowLive(id, rowkey.Version{Seq: seqs.Value(i), Shard: shard}) {
				continue
			}
			if match == nil || match[i] {
				if sel.add(id) {
					fromBase[id] = true
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", s.Target(), err)
	}
	pendingRow := map[string]rowRef{}
	for gi, data := range p.gens {
		for ri, rec := range data.Records {
			ids, _, err := rowkey.Columns(rec)
			if err != nil {
				return nil, err
			}
			var match []bool
			for i := 0; i < ids.Len(); i++ {
				ref, ok := p.liveAt(ids.Value(i), gi, ri, i)
				if !ok {
					continue
				}
				if match == nil && opts.Filter != nil {
					if match, err = filterRows(opts.Filter, rec); err != nil {
						return nil, err
					}
				}
				if match != nil && !match[i] {
					continue
				}
				if sel.add(ids.Value(i)) {
					pendingRow[ids.Value(i)] = ref
				}
			}
		}
	}
	page := sel.sorted()
	if opts.Offset >= len(page) {
		return nil, nil
	}
	page = page[opts.Offset:]
	if opts.Limit > 0 && len(page) > opts.Limit {
		page = page[:opts.Limit]
	}
	rows := make(map[string]arrow.RecordBatch, len(page))
	var baseIDs []string
	for _, id := range page {
		if ref, ok := pendingRow[id]; ok && !fromBase[id] {
			rows[id] = p.gens[ref.gen].Records[ref.rec].NewSlice(int64(ref.row), int64(ref.row)+1)
		} else {
			baseIDs = append(baseIDs, id)
		}
	}
	if len(baseIDs) > 0 {
		want := make(map[string]bool, len(baseIDs))
		for _, id := range baseIDs {
			want[id] = true
		}
		scan := table.ScanOptions{IDs: baseIDs}
		if opts.Columns != nil {
			scan.Columns = keyedColumns(snap.Base.ArrowSchema(), opts.Columns)
		}
		err = s.table.Scan(ctx, snap.Base, scan, func(rec arrow.RecordBatch, _ string) error {
			ids, _, err := rowkey.Columns(rec)
			if err != nil {
				return err
			}
			for i := 0; i < ids.Len(); i++ {
				if id := ids.Value(i); want[id] && rows[id] == nil {
					rows[id] = rec.NewSlice(int64(i), int64(i)+1)
				}
			}
			return nil
		})
		if err != nil {
			for _, r := range rows {
				r.Release()
			}
			return nil, fmt.Errorf("store %s: %w", s.Target(), err)
		}
	}
	out := make([]arrow.RecordBatch, 0, len(page))
	for _, id := range page {
		if r := rows[id]; r != nil {
			out = append(out, r)
		}
	}
	if len(out) != len(page) {
		release(out)
		return nil, fmt.Errorf("store %s: %d of %d listed rows vanished from snapshot version %d", s.Target(), len(page)-len(out), len(page), snap.Base.Version)
	}
	return out, nil
}

// keyedColumns is the columns of table schema ts, in its order, that cols names,
// with the row key columns (id, _seq) whether named or not.
func keyedColumns(ts *arrow.Schema, cols []string) []string {
	var out []string
	for _, f := range ts.Fields() {
		if f.Name == rowkey.IDColumn || f.Name == rowkey.SeqColumn || slices.Contains(cols, f.Name) {
			out = append(out, f.Name)
		}
	}
	return out
}

// filterRows evaluates filter on rec; nil filter: nil (every row matches).
func filterRows(filter func(arrow.RecordBatch) ([]bool, error), rec arrow.RecordBatch) ([]bool, error) {
	if filter == nil {
		return nil, nil
	}
	return filter(rec)
}

func release(recs []arrow.RecordBatch) {
	for _, r := range recs {
		r.Release()
	}
}
