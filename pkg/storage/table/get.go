package table

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"golang.org/x/sync/errgroup"

	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

// Point reads. A get costs what it touches: for each fragment whose id range holds
// the id and whose bloom filter (when cached) does not exclude it, one key-index
// block (sorted fragments) and then one row group of the fragment that holds the
// live row. A batch of ids is looked up together, so ids that fall in one block or
// one row group share its read.

// bloomFirstIDs is how many candidate ids of one sorted fragment make its bloom
// filter worth reading before its key-index blocks: for one or a few ids the block
// reads cost no more than the filter's, and a filter that is not cached is read
// only when it may save several.
const bloomFirstIDs = 4

// rowAt is where the live row of an id is: fragment frag of the manifest (-1: no
// live row), row offset off, and the row's version.
type rowAt struct {
	frag int
	off  uint32
	v    rowkey.Version
}

// Get returns the live row for id in manifest m as a one-row batch with every
// column, and its version, or nil when the table has no live row for id. The
// caller releases it.
func (t *Table) Get(ctx context.Context, m *Manifest, id string) (arrow.RecordBatch, rowkey.Version, error) {
	return t.GetColumns(ctx, m, id, nil)
}

// GetColumns is Get reading only the columns of m's schema that cols names, in
// schema order (nil: every column): a row's columns a reader leaves out (a blob
// it was not asked for) are not read from storage at all.
func (t *Table) GetColumns(ctx context.Context, m *Manifest, id string, cols []string) (arrow.RecordBatch, rowkey.Version, error) {
	var row arrow.RecordBatch
	var v rowkey.Version
	err := t.GetMany(ctx, m, []string{id}, cols, func(_ int, r arrow.RecordBatch, rv rowkey.Version) error {
		r.Retain()
		row, v = r, rv
		return nil
	})
	if err != nil {
		return nil, rowkey.Version{}, err
	}
	return row, v, nil
}

// GetMany calls fn, in the order of ids, with the live row of every id of ids that
// has one in m (i its position in ids) as a one-row batch of the columns cols names
// (nil: every column) valid during the call, and the row's version. ids must be
// distinct. The ids are looked up together: one read per key-index block and per
// row group they touch, not per id. Memory: the found rows (copied out of their row
// groups) and the row groups being read, at most requestsInFlight at once.
func (t *Table) GetMany(ctx context.Context, m *Manifest, ids, cols []string, fn func(i int, row arrow.RecordBatch, v rowkey.Version) error) error {
	ctx = withRequestBudget(ctx, requestsInFlight)
	at, err := t.locate(ctx, m, ids)
	if err != nil {
		return err
	}
	rows, err := t.readRows(ctx, m, at, cols)
	if err != nil {
		return err
	}
	defer func() {
		for _, r := range rows {
			if r.rec != nil {
				r.rec.Release()
			}
		}
	}()
	for i, r := range rows {
		if r.rec == nil {
			continue
		}
		row := r.rec.NewSlice(int64(r.row), int64(r.row)+1)
		err := fn(i, row, at[i].v)
		row.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// locate returns, for every id of ids (distinct), where its live row is in m. The
// fragments that may hold some of the ids are looked into concurrently,
// lookupFragments at once (their requests within ctx's budget); of two live rows of one id (which a table never has) the
// newer version wins, on a tie the later fragment's, as a commit's incoming copy
// replaces the existing one.
func (t *Table) locate(ctx context.Context, m *Manifest, ids []string) ([]rowAt, error) {
	order := make([]int, len(ids)) // positions of ids in id order
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		switch {
		case ids[a] < ids[b]:
			return -1
		case ids[a] > ids[b]:
			return 1
		}
		return 0
	})
	sorted := make([]string, len(ids))
	for k, i := range order {
		sorted[k] = ids[i]
	}
	type found struct {
		pos int // in ids
		off uint32
		v   rowkey.Version
	}
	results := make([][]found, len(m.Fragments))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(lookupFragments)
	for fi, f := range m.Fragments {
		lo := sort.SearchStrings(sorted, f.IDMin)
		hi := sort.Search(len(sorted), func(k int) bool { return sorted[k] > f.IDMax })
		if lo >= hi || f.LiveRows() == 0 {
			continue
		}
		g.Go(func() error {
			cand := sorted[lo:hi]
			hits, err := t.lookupFragment(gctx, m, f, cand)
			if err != nil {
				return err
			}
			var dv *roaring.Bitmap
			for k, h := range hits {
				if !h.found {
					continue
				}
				if dv == nil {
					if dv, err = t.deletions(gctx, f); err != nil {
						return err
					}
				}
				if !dv.Contains(h.off) {
					results[fi] = append(results[fi], found{pos: order[lo+k], off: h.off, v: h.v})
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	at := make([]rowAt, len(ids))
	for i := range at {
		at[i].frag = -1
	}
	for fi, rs := range results {
		for _, r := range rs {
			if cur := &at[r.pos]; cur.frag < 0 || !cur.v.Newer(r.v) {
				*cur = rowAt{frag: fi, off: r.off, v: r.v}
			}
		}
	}
	return at, nil
}

// lookupFragment finds ids (ascending, distinct, within f's id range) in f: through
// its key index when f is sorted, through the in-memory index built from its id
// column otherwise (fragments written before format 2).
func (t *Table) lookupFragment(ctx context.Context, m *Manifest, f Fragment, ids []string) ([]indexHit, error) {
	hits := make([]indexHit, len(ids))
	// The bloom filter is a round trip spent to skip reads. For a sorted fragment a
	// false positive costs one key-index block, so the filter pays for itself from a
	// few ids on, unless the whole index is small (smallIndex): then the index is
	// read instead, exact for the same one request. For an unsorted one a hit costs
	// the whole in-memory key index: not worth a filter when that index is cached,
	// nor when so many ids are probed that some false positive (and so the key
	// index read anyway) is more likely than not.
	bf, cached := t.blooms.Get(f.Bloom)
	read := len(ids) >= bloomFirstIDs && !smallIndex(f)
	if !f.Sorted {
		_, indexed := t.keys.Get(f.Path)
		read = !indexed && !bloomUseless(len(ids))
	}
	if !cached && read {
		var err error
		if bf, err = t.bloom(ctx, f); err != nil {
			return nil, err
		}
	}
	cand, pos := ids, []int(nil)
	if bf != nil {
		cand = nil
		for k, id := range ids {
			if bf.TestString(id) {
				cand = append(cand, id)
				pos = append(pos, k)
			}
		}
		if len(cand) == 0 {
			return hits, nil
		}
	}
	var got []indexHit
	if f.Sorted {
		var err error
		if got, err = t.lookupSorted(ctx, f, cand); err != nil {
			return nil, err
		}
	} else {
		idx, err := t.keyIndex(ctx, m.ArrowSchema(), f)
		if err != nil {
			return nil, err
		}
		got = make([]indexHit, len(cand))
		for k, id := range cand {
			if o, ok := idx.offsets[id]; ok {
				got[k] = indexHit{found: true, off: o, v: rowkey.Version{Seq: idx.seqs[o], Shard: f.ShardAt(o)}}
			}
		}
	}
	if pos == nil {
		return got, nil
	}
	for k, h := range got {
		hits[pos[k]] = h
	}
	return hits, nil
}

// foundRow is a row readRows read: row row of rec.
type foundRow struct {
	rec arrow.RecordBatch
	row int
}

// readRows reads the rows at (frag -1: none) with the columns of m's schema that
// cols names (nil: every one): one read per row group that holds any of them,
// within ctx's budget of requests, decoded from the first row wanted to the last
// (readRowsAt). What is held is the rows, not the groups; the caller releases the
// batches (one batch may back several rows: each holds its own reference).
func (t *Table) readRows(ctx context.Context, m *Manifest, at []rowAt, cols []string) ([]foundRow, error) {
	s := m.ArrowSchema()
	var read []string
	for _, fld := range s.Fields() {
		if cols == nil || slices.Contains(cols, fld.Name) {
			read = append(read, fld.Name)
		}
	}
	byFrag := map[int][]int{} // fragment -> positions in at
	for i, a := range at {
		if a.frag >= 0 {
			byFrag[a.frag] = append(byFrag[a.frag], i)
		}
	}
	type groupJob struct {
		f     Fragment
		group int
		at    *indexGroup // where the group lies (sorted fragments)
		pos   []int       // positions in at, ascending offsets
	}
	// The row groups each fragment's rows are in come from its footer: read the
	// footers of the fragments not cached at once, not one round trip after another.
	frags := make([]int, 0, len(byFrag))
	for fi := range byFrag {
		frags = append(frags, fi)
	}
	slices.Sort(frags)
	perFrag := make([][]groupJob, len(frags))
	og, octx := errgroup.WithContext(ctx)
	og.SetLimit(lookupFragments)
	for k, fi := range frags {
		og.Go(func() error {
			f, pos := m.Fragments[fi], byFrag[fi]
			slices.SortFunc(pos, func(a, b int) int { return int(at[a].off) - int(at[b].off) })
			// A sorted fragment's key index says where its row groups are (its top
			// is cached by the lookup); an unsorted one's footer does.
			var groupOf func(off int64) (int, *indexGroup)
			if f.Sorted {
				top, err := t.indexTopOf(octx, f)
				if err != nil {
					return err
				}
				groupOf = func(off int64) (int, *indexGroup) {
					g, _, ok := top.groupOf(off)
					if !ok {
						return -1, nil
					}
					return g, &top.groups[g]
				}
			} else {
				ff, err := t.openFragment(octx, s, f) // reads the footer into the cache
				if err != nil {
					return err
				}
				defer ff.Close()
				groupOf = func(off int64) (int, *indexGroup) {
					g, _ := ff.rowGroupOf(off)
					return g, nil
				}
			}
			for _, p := range pos {
				g, gr := groupOf(int64(at[p].off))
				if g < 0 {
					return fmt.Errorf("fragment %s: %w: row %d past the end", t.key(f.Path), ErrCorrupt, at[p].off)
				}
				js := perFrag[k]
				if n := len(js) - 1; n >= 0 && js[n].group == g {
					js[n].pos = append(js[n].pos, p)
				} else {
					perFrag[k] = append(js, groupJob{f: f, group: g, at: gr, pos: []int{p}})
				}
			}
			return nil
		})
	}
	if err := og.Wait(); err != nil {
		return nil, err
	}
	var jobs []groupJob
	for _, js := range perFrag {
		jobs = append(jobs, js...)
	}
	out := make([]foundRow, len(at))
	fail := func(err error) ([]foundRow, error) {
		for _, r := range out {
			if r.rec != nil {
				r.rec.Release()
			}
		}
		return nil, err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(lookupFragments)
	for _, j := range jobs {
		g.Go(func() error {
			ff, err := t.openFragmentFor(gctx, s, j.f, j.at) // the footer and the group at once
			if err != nil {
				return err
			}
			defer ff.Close()
			start := ff.groupStart(j.group)
			offs := make([]int64, len(j.pos))
			for k, p := range j.pos {
				offs[k] = int64(at[p].off) - start
			}
			rows, err := ff.readRowsAt(gctx, read, j.group, offs)
			if err != nil {
				return err
			}
			for k, p := range j.pos {
				if k > 0 {
					rows.Retain()
				}
				out[p] = foundRow{rec: rows, row: k}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return fail(err)
	}
	for i, a := range at {
		if a.frag >= 0 && out[i].rec == nil {
			return fail(fmt.Errorf("fragment %s: %w: row %d not found in its row group", t.key(m.Fragments[a.frag].Path), ErrCorrupt, a.off))
		}
	}
	return out, nil
}

// takeRows copies rows idx of rec into a new batch.
func takeRows(ctx context.Context, rec arrow.RecordBatch, idx []int64) (arrow.RecordBatch, error) {
	bld := array.NewInt64Builder(memory.DefaultAllocator)
	defer bld.Release()
	bld.AppendValues(idx, nil)
	ia := bld.NewInt64Array()
	defer ia.Release()
	res, err := compute.Take(ctx, *compute.DefaultTakeOptions(), compute.NewDatumWithoutOwning(rec), compute.NewDatumWithoutOwning(ia))
	if err != nil {
		return nil, fmt.Errorf("take rows: %w", err)
	}
	rd, ok := res.(*compute.RecordDatum)
	if !ok {
		res.Release()
		return nil, fmt.Errorf("take rows: got a %s", res.Kind())
	}
	return rd.Value, nil
}
