package store

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"golang.org/x/sync/errgroup"

	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
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
	// StartAfter, if set, starts the list after this id: the rows with greater
	// ids (a cursor, the last id of the previous page). Offset counts from there.
	StartAfter *string
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

// loadPending reads (through the cache) every generation above the watermarks and
// indexes the newest row per id across them.
func (s *Store) loadPending(ctx context.Context, snap *Snapshot) (*pendingRows, error) {
	return s.loadPendingOf(ctx, snap.Pending())
}

// loadPendingOf is loadPending of some of a snapshot's pending generations (a
// feed page reads those whose _seq range reaches its cursor); p.gens are in the
// order of pending.
func (s *Store) loadPendingOf(ctx context.Context, pending []wal.PendingGeneration) (*pendingRows, error) {
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
// after opts.StartAfter when set, skipping Offset of them and returning at most
// Limit (0: no limit), each as a one-row batch the caller releases. It is Page's
// rows.
func (s *Store) List(ctx context.Context, opts ListOptions) ([]arrow.RecordBatch, error) {
	p, err := s.Page(ctx, opts)
	return p.Rows, err
}

// Page is one page of a list: its rows, and whether rows follow the last one (the
// next page then starts after Next, the last row's id).
type Page struct {
	Rows []arrow.RecordBatch
	More bool
	Next string
}

// Page is List with whether more rows follow. The order is by id because it is the
// only order a merge cannot change: a merge moves rows from pending generations
// into new base fragments and replaces overwritten ones, which reorders any
// physical order. Ids are never removed from a store, so a walk by StartAfter (a
// cursor: the last id of the previous page) through a store that changes between
// pages returns every row that existed when it began exactly once; a walk by
// Offset, at least once (a row inserted before the current page pushes one row
// onto the next page twice, never off it).
//
// A page costs what it passes over: the base table is walked in id order from
// StartAfter through the fragments' key indexes (table.Iter), merged with the
// pending rows from there on, and stops after Offset+Limit+1 matching rows; only
// the returned rows' columns are read, and with a Filter its columns of the rows
// passed over. Memory is the page, the row groups it reads, and the index of
// pending ids every read holds.
func (s *Store) Page(ctx context.Context, opts ListOptions) (Page, error) {
	snap, err := s.Fresh(ctx)
	if err != nil {
		return Page{}, err
	}
	return s.pageIn(ctx, snap, opts)
}

// pageIn is Page over snap.
func (s *Store) pageIn(ctx context.Context, snap *Snapshot, opts ListOptions) (Page, error) {
	p, err := s.loadPending(ctx, snap)
	if err != nil {
		return Page{}, err
	}
	var out Page
	err = s.walk(ctx, snap, p, opts, func(id string, rec arrow.RecordBatch, i int) (bool, error) {
		if opts.Limit > 0 && len(out.Rows) == opts.Limit {
			out.More = true
			return false, nil
		}
		out.Rows = append(out.Rows, rec.NewSlice(int64(i), int64(i)+1))
		out.Next = id
		return true, nil
	})
	if err != nil {
		release(out.Rows)
		return Page{}, err
	}
	if !out.More {
		out.Next = ""
	}
	return out, nil
}

// pendingAt is a live pending row in a walk: its id and where it is.
type pendingAt struct {
	id  string
	ref rowRef
}

// walk calls fn with every live row matching opts.Filter in id order, after
// opts.StartAfter when set and after opts.Offset matches, until fn says stop: base
// rows with the columns opts.Columns names (with the row key; every column when
// nil), pending rows whole (in memory already). The batch is valid during the call.
func (s *Store) walk(ctx context.Context, snap *Snapshot, p *pendingRows, opts ListOptions, fn func(id string, rec arrow.RecordBatch, i int) (bool, error)) error {
	after, all := "", opts.StartAfter == nil
	if !all {
		after = *opts.StartAfter
	}
	// The pending side: live pending rows after the start, in id order.
	pend := make([]pendingAt, 0, len(p.best))
	for id, ref := range p.best {
		if all || id > after {
			pend = append(pend, pendingAt{id, ref})
		}
	}
	slices.SortFunc(pend, func(a, b pendingAt) int { return strings.Compare(a.id, b.id) })
	masks := map[[2]int][]bool{} // filter results of pending batches, by (generation, batch)
	pendingMatch := func(ref rowRef) (bool, error) {
		if opts.Filter == nil {
			return true, nil
		}
		k := [2]int{ref.gen, ref.rec}
		m, ok := masks[k]
		if !ok {
			var err error
			if m, err = opts.Filter(p.gens[ref.gen].Records[ref.rec]); err != nil {
				return false, err
			}
			masks[k] = m
		}
		return m[ref.row], nil
	}
	ts := snap.Base.ArrowSchema()
	var cols, filterCols []string
	if opts.Columns != nil {
		cols = keyedColumns(ts, opts.Columns)
	}
	if opts.Filter != nil && opts.FilterColumns != nil {
		filterCols = keyedColumns(ts, opts.FilterColumns)
	}
	it, err := s.table.Iter(ctx, snap.Base, after, all)
	if err != nil {
		return fmt.Errorf("store %s: %w", s.Target(), err)
	}
	defer it.Close()
	more, err := it.Next(ctx)
	if err != nil {
		return fmt.Errorf("store %s: %w", s.Target(), err)
	}
	if more && opts.Filter == nil && opts.Offset == 0 && opts.Limit > 0 {
		// A page reads the columns of the rows it returns (and of the one after,
		// which says there are more): read the row groups they lie in at once.
		if err := it.Prefetch(ctx, cols, opts.Limit+1); err != nil {
			return fmt.Errorf("store %s: %w", s.Target(), err)
		}
	}
	skipped := 0
	for more || len(pend) > 0 {
		var id string
		base := false // the live row of id is the base row
		switch {
		case more && len(pend) > 0 && it.ID() == pend[0].id:
			id, base = it.ID(), it.Version().Newer(pend[0].ref.v)
		case more && (len(pend) == 0 || it.ID() < pend[0].id):
			id, base = it.ID(), true
		default:
			id = pend[0].id
		}
		var match bool
		if base {
			match = true
			if opts.Filter != nil {
				match, err = it.Match(ctx, filterCols, opts.Filter)
			}
		} else {
			match, err = pendingMatch(pend[0].ref)
		}
		if err != nil {
			return fmt.Errorf("store %s: %w", s.Target(), err)
		}
		if match && skipped < opts.Offset {
			skipped++
		} else if match {
			var rec arrow.RecordBatch
			var i int
			if base {
				rec, i, err = it.Row(ctx, cols)
				if err != nil {
					return fmt.Errorf("store %s: %w", s.Target(), err)
				}
			} else {
				ref := pend[0].ref
				rec, i = p.gens[ref.gen].Records[ref.rec], ref.row
			}
			cont, err := fn(id, rec, i)
			if err != nil || !cont {
				return err
			}
		}
		if len(pend) > 0 && pend[0].id == id {
			pend = pend[1:]
		}
		if more && it.ID() == id {
			if more, err = it.Next(ctx); err != nil {
				return fmt.Errorf("store %s: %w", s.Target(), err)
			}
		}
	}
	return nil
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

func release(recs []arrow.RecordBatch) {
	for _, r := range recs {
		r.Release()
	}
}
