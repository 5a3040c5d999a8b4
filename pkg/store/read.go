package store

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"golang.org/x/sync/errgroup"

	"github.com/tidemark-io/tidemark/pkg/table"
	"github.com/tidemark-io/tidemark/pkg/wal"
)

// genReadConcurrency bounds parallel generation reads of one request on a cold cache.
const genReadConcurrency = 8

// ListOptions selects rows of a List.
type ListOptions struct {
	Limit, Offset int
	// Filter, if set, returns for each row of a batch whether it matches.
	Filter func(rec arrow.RecordBatch) ([]bool, error)
}

// pendingRows is the newest version of every id found in a snapshot's pending
// generations.
type pendingRows struct {
	gens []*wal.GenerationData
	best map[string]rowRef
}

type rowRef struct {
	gen, rec, row int
	seq           uint64
}

// loadPending reads (through the cache) every generation above the watermarks and
// indexes the newest row per id across them.
func (s *Store) loadPending(ctx context.Context, snap *Snapshot) (*pendingRows, error) {
	pending := snap.Pending()
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
			ids, seqs, err := keyColumns(rec)
			if err != nil {
				return nil, fmt.Errorf("store %s: generation %s: %w", s.Target(), data.Key, err)
			}
			for i := 0; i < ids.Len(); i++ {
				id := ids.Value(i)
				if b, ok := p.best[id]; !ok || seqs.Value(i) >= b.seq {
					p.best[id] = rowRef{gen: gi, rec: ri, row: i, seq: seqs.Value(i)}
				}
			}
		}
	}
	return p, nil
}

func keyColumns(rec arrow.RecordBatch) (*array.String, *array.Uint64, error) {
	s := rec.Schema()
	ic, sc := s.FieldIndices(table.IDColumn), s.FieldIndices(table.SeqColumn)
	if len(ic) != 1 || len(sc) != 1 {
		return nil, nil, fmt.Errorf("batch without %s/%s columns", table.IDColumn, table.SeqColumn)
	}
	ids, ok1 := rec.Column(ic[0]).(*array.String)
	seqs, ok2 := rec.Column(sc[0]).(*array.Uint64)
	if !ok1 || !ok2 {
		return nil, nil, fmt.Errorf("%s/%s columns of types %s/%s", table.IDColumn, table.SeqColumn, rec.Column(ic[0]).DataType(), rec.Column(sc[0]).DataType())
	}
	return ids, seqs, nil
}

// Get returns the newest row for id across the base table and every pending
// generation as a one-row batch (table schema, _seq last), or nil if there is none.
// The caller releases it.
func (s *Store) Get(ctx context.Context, id string) (arrow.RecordBatch, error) {
	snap, err := s.Fresh(ctx)
	if err != nil {
		return nil, err
	}
	p, err := s.loadPending(ctx, snap)
	if err != nil {
		return nil, err
	}
	base, err := s.table.Get(ctx, snap.Base, id)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", s.Target(), err)
	}
	ref, inGen := p.best[id]
	if base != nil {
		_, seqs, err := keyColumns(base)
		if err != nil {
			base.Release()
			return nil, err
		}
		if !inGen || seqs.Value(0) > ref.seq {
			return base, nil
		}
		base.Release()
	}
	if !inGen {
		return nil, nil
	}
	return p.gens[ref.gen].Records[ref.rec].NewSlice(int64(ref.row), int64(ref.row)+1), nil
}

// List returns live rows in a stable order (base table rows in fragment order, then
// pending rows by shard and generation), skipping Offset matching rows and returning
// at most Limit (0: no limit), each as a one-row batch the caller releases.
func (s *Store) List(ctx context.Context, opts ListOptions) ([]arrow.RecordBatch, error) {
	snap, err := s.Fresh(ctx)
	if err != nil {
		return nil, err
	}
	p, err := s.loadPending(ctx, snap)
	if err != nil {
		return nil, err
	}
	var out []arrow.RecordBatch
	skip := opts.Offset
	full := func() bool { return opts.Limit > 0 && len(out) >= opts.Limit }
	// take appends the matching rows of rec for which keep is true.
	take := func(rec arrow.RecordBatch, keep func(i int) bool) error {
		var match []bool
		if opts.Filter != nil {
			var err error
			if match, err = opts.Filter(rec); err != nil {
				return err
			}
		}
		for i := 0; i < int(rec.NumRows()) && !full(); i++ {
			if !keep(i) || (match != nil && !match[i]) {
				continue
			}
			if skip > 0 {
				skip--
				continue
			}
			out = append(out, rec.NewSlice(int64(i), int64(i)+1))
		}
		return nil
	}
	errFull := fmt.Errorf("list full")
	err = s.table.Scan(ctx, snap.Base, table.ScanOptions{}, func(rec arrow.RecordBatch) error {
		ids, seqs, err := keyColumns(rec)
		if err != nil {
			return err
		}
		err = take(rec, func(i int) bool {
			ref, ok := p.best[ids.Value(i)]
			if ok && seqs.Value(i) > ref.seq {
				delete(p.best, ids.Value(i)) // the base row is newer than the pending one
				return true
			}
			return !ok
		})
		if err == nil && full() {
			return errFull
		}
		return err
	})
	if err != nil && err != errFull {
		release(out)
		return nil, fmt.Errorf("store %s: %w", s.Target(), err)
	}
	for gi, data := range p.gens {
		if full() {
			break
		}
		for ri, rec := range data.Records {
			ids, _, err := keyColumns(rec)
			if err != nil {
				release(out)
				return nil, err
			}
			err = take(rec, func(i int) bool {
				ref, ok := p.best[ids.Value(i)]
				return ok && ref.gen == gi && ref.rec == ri && ref.row == i
			})
			if err != nil {
				release(out)
				return nil, err
			}
		}
	}
	return out, nil
}

func release(recs []arrow.RecordBatch) {
	for _, r := range recs {
		r.Release()
	}
}
