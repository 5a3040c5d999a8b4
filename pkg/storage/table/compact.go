package table

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/bits-and-blooms/bloom/v3"
	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

// ErrConflict means a compaction lost to another rewrite of its sources: a source
// fragment is gone from the newest version (another compaction took it). Nothing
// was committed and the staged files were deleted; planning again starts afresh.
var ErrConflict = errors.New("compaction conflict")

// Defaults of CompactOptions.
const (
	DefaultTargetRows   = 65536
	DefaultMaxSources   = 64
	DefaultDeletedRatio = 0.2
)

// dedupFPRate is the false-positive rate of the filter that looks for an id live in
// two sources: a false positive only costs reading the id columns of the sources
// the suspect id may be in once more.
const dedupFPRate = 1e-7

// CompactOptions tune a compaction; a zero field means its default.
type CompactOptions struct {
	TargetRows   int64   // rows per output fragment (TARGET_ROWS_PER_FRAGMENT), default 65536
	MaxSources   int     // at most this many source fragments per compaction (COMPACTION_MAX_SOURCE_FRAGMENTS), default 64
	DeletedRatio float64 // a fragment whose deleted/rows >= this is rewritten whatever its size, default 0.2
}

func (o CompactOptions) withDefaults() CompactOptions {
	if o.TargetRows <= 0 {
		o.TargetRows = DefaultTargetRows
	}
	if o.MaxSources <= 0 {
		o.MaxSources = DefaultMaxSources
	}
	if o.DeletedRatio <= 0 {
		o.DeletedRatio = DefaultDeletedRatio
	}
	return o
}

// PlanCompaction returns the fragments of m one compaction would rewrite (in manifest
// order, at most MaxSources), or nil when the rewrite would not reduce anything:
//
//   - every fragment at or over DeletedRatio, whatever its size;
//   - small fragments (fewer than TargetRows/2 live rows), smallest first: the two
//     smallest, then each next one only while it holds no more live rows than all
//     those already picked together. Without that rule every compaction rewrote
//     every small fragment, the previous compaction's output included, so each row
//     was rewritten once per compaction until the table reached TargetRows/2 rows,
//     and the versions retained before each compaction kept a second copy of the
//     whole table. With it, outputs grow like a binary counter: a row is rewritten
//     about log2(TargetRows / rows per merge) times, and a compaction replaces
//     about as many bytes as it writes.
//
// Nothing is planned with fewer than 2 small fragments and none over the ratio.
func PlanCompaction(m *Manifest, o CompactOptions) []Fragment {
	o = o.withDefaults()
	picked := make([]bool, len(m.Fragments))
	var small []int
	n, deleted := 0, 0
	var sum int64 // live rows of the picked fragments
	for i, f := range m.Fragments {
		switch {
		case f.Deletions != nil && f.Rows > 0 && float64(f.Deletions.Count)/float64(f.Rows) >= o.DeletedRatio:
			if n < o.MaxSources {
				picked[i] = true
				n++
				deleted++
				sum += f.LiveRows()
			}
		case f.LiveRows() < o.TargetRows/2:
			small = append(small, i)
		}
	}
	slices.SortStableFunc(small, func(a, b int) int {
		return cmp.Compare(m.Fragments[a].LiveRows(), m.Fragments[b].LiveRows())
	})
	nSmall := 0
	for _, i := range small {
		live := m.Fragments[i].LiveRows()
		if n == o.MaxSources || (nSmall >= 2 && live > sum) {
			break
		}
		picked[i] = true
		n++
		nSmall++
		sum += live
	}
	if nSmall < 2 && deleted == 0 {
		return nil
	}
	plan := make([]Fragment, 0, n)
	for i, f := range m.Fragments {
		if picked[i] {
			plan = append(plan, f)
		}
	}
	return plan
}

// CompactResult says what a compaction did.
type CompactResult struct {
	Version      uint64 // the committed version (0 when nothing to do)
	Sources      int    // fragments rewritten
	Outputs      int    // fragments written
	RowsWritten  int64  // live rows carried over
	RowsDropped  int64  // deleted rows materialized away
	BytesRead    int64  // bytes of the source fragments
	BytesWritten int64  // bytes of the output fragments (+ bloom filters)
}

// Compact refreshes the table, plans against the newest version, rewrites the planned
// sources and commits. Nothing to do: a zero CompactResult and nil error.
//
// Why the result is the same table:
//
//   - Outputs hold exactly the sources' live rows (deletion vectors materialized),
//     each row with its _seq and, through the outputs' shard runs, its shard: every
//     row keeps its rowkey.Version, so every later tie between shards resolves as it
//     would have without the compaction. Sources hold at most one live row per id (a
//     table invariant); should two appear, the newest Version is kept, so outputs
//     hold at most one row per id as every fragment must.
//   - The commit is the newest version minus the sources plus the outputs, written
//     with put-if-absent, and the outputs are written before it: a crash leaves only
//     unreferenced files.
//   - On a lost race the newest version decides. Sources all present with their
//     deletion vectors unchanged: other commits only added fragments or touched other
//     fragments, which are kept, so committing on top is right. A source whose vector
//     grew (a merge deleted rows of it: newer rows arrived in its fragment): each
//     source row's place in the outputs is known, so the new deletions become
//     deletion vectors on the outputs (rebase). A source gone (another compaction
//     rewrote it) or whose vector lost a row: committing would duplicate or
//     resurrect rows, so the compaction aborts with ErrConflict.
//   - A merge that read a version with the sources and commits after the compaction
//     finds them gone: its rebase drops its deletions aimed at them and resolves its
//     rows against the outputs, which are new paths it has not checked.
//
// Memory: sources are read one row group at a time. Peak memory is one output
// fragment's rows (at most TargetRows, decoded) and its encoded Parquet bytes, one
// source row group, the sources' deletion vectors, an id filter of about 4 bytes per
// live source row, and the map from source rows to output rows, which holds one
// entry per stretch of consecutive rows kept (bounded by the deleted rows plus the
// outputs and shard runs, not by the rows).
func (t *Table) Compact(ctx context.Context, o CompactOptions) (CompactResult, error) {
	o = o.withDefaults()
	base, err := t.Refresh(ctx)
	if err != nil {
		return CompactResult{}, fmt.Errorf("compact %s: %w", t.dir, err)
	}
	sources := PlanCompaction(base, o)
	if sources == nil {
		return CompactResult{}, nil
	}
	c := &compaction{
		t: t, id: "compact-" + uuid.NewString(), base: base, sources: sources,
		target: o.TargetRows, staged: staged{t: t},
	}
	err = c.write(ctx)
	if err == nil {
		err = ctx.Err() // no manifest write with an ended context: its outcome would be unknown
	}
	if err != nil {
		c.Abort(context.WithoutCancel(ctx))
		return CompactResult{}, fmt.Errorf("compact %s: %w", t.dir, err)
	}
	m, err := t.commitOptimistic(ctx, c.id, c)
	if err != nil {
		return CompactResult{}, fmt.Errorf("compact %s: %w", t.dir, err)
	}
	c.res.Version = m.Version
	return c.res, nil
}

// compaction is one rewrite of source fragments into output fragments.
type compaction struct {
	t       *Table
	id      string
	base    *Manifest // the version the commit is built on
	sources []Fragment
	target  int64
	staged  staged

	srcDV []*roaring.Bitmap // the sources' vectors the rewrite materialized
	// moved maps each source's kept rows to the outputs, sorted by source offset.
	moved   [][]segment
	outputs []Fragment
	// outDV and outRef are the outputs' deletion vectors: rows other commits
	// deleted from the sources after the rewrite read them (rebase).
	outDV  []*roaring.Bitmap
	outRef []*DeletionRef
	res    CompactResult

	// The output being assembled: full row groups, the rows of the next one, its
	// shard runs, and its row count.
	groups  []arrow.RecordBatch
	pieces  []arrow.RecordBatch
	piecesN int64
	runs    []ShardRun
	rows    int64
}

// segment says that n consecutive kept rows of a source, from offset src, are rows
// outOff... of output out.
type segment struct {
	src, n uint32
	out    int
	outOff uint32
}

// rowLoc is a row of a source.
type rowLoc struct {
	src int
	off uint32
	v   rowkey.Version
}

// write reads the sources' live rows shard by shard (shard names in byte order,
// sources in manifest order) and writes them as outputs of at most target rows.
func (c *compaction) write(ctx context.Context) error {
	defer c.releasePending()
	s := c.base.ArrowSchema()
	c.srcDV = make([]*roaring.Bitmap, len(c.sources))
	c.moved = make([][]segment, len(c.sources))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(fragmentReads)
	var live, rows int64
	for i, f := range c.sources {
		live += f.LiveRows()
		rows += f.Rows
		c.res.BytesRead += f.Bytes
		g.Go(func() (err error) {
			c.srcDV[i], err = c.t.deletions(gctx, f)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	c.res.Sources = len(c.sources)
	winners, err := c.duplicates(ctx, s, live)
	if err != nil {
		return err
	}
	var shards []string
	for _, f := range c.sources {
		for _, r := range f.runs() {
			shards = append(shards, r.Shard)
		}
	}
	slices.Sort(shards)
	for _, shard := range slices.Compact(shards) {
		for i, f := range c.sources {
			var start int64
			for _, r := range f.runs() {
				if r.Shard == shard && liveIn(c.srcDV[i], start, start+r.Rows) > 0 {
					if err := c.copyRun(ctx, s, i, start, start+r.Rows, shard, winners); err != nil {
						return err
					}
				}
				start += r.Rows
			}
		}
	}
	if err := c.flush(ctx, s); err != nil {
		return err
	}
	for _, m := range c.moved {
		slices.SortFunc(m, func(a, b segment) int { return cmp.Compare(a.src, b.src) })
	}
	c.outDV = make([]*roaring.Bitmap, len(c.outputs))
	c.outRef = make([]*DeletionRef, len(c.outputs))
	c.res.Outputs = len(c.outputs)
	c.res.RowsDropped = rows - c.res.RowsWritten
	return nil
}

// liveIn counts the rows of [lo, hi) that dv does not delete.
func liveIn(dv *roaring.Bitmap, lo, hi int64) int64 {
	if hi <= lo {
		return 0
	}
	deleted := dv.Rank(uint32(hi - 1))
	if lo > 0 {
		deleted -= dv.Rank(uint32(lo - 1))
	}
	return hi - lo - int64(deleted)
}

// duplicates finds ids live in more than one source, which a table never has (at
// most one live row per id), without holding every id: a filter of the ids seen
// flags suspects, and only if there are any are the id columns of the sources that
// may hold them read again to find each suspect's newest row. It returns nil when
// there is no suspect, else the winning row of every suspect id.
func (c *compaction) duplicates(ctx context.Context, s *arrow.Schema, live int64) (map[string]rowLoc, error) {
	if live == 0 {
		return nil, nil
	}
	seen := bloom.NewWithEstimates(uint(live), dedupFPRate)
	suspects := map[string]bool{}
	for i := range c.sources {
		err := c.eachLiveID(ctx, s, i, func(id string, _ uint64, _ uint32) {
			if seen.TestOrAddString(id) {
				suspects[strings.Clone(id)] = true
			}
		})
		if err != nil {
			return nil, err
		}
	}
	if len(suspects) == 0 {
		return nil, nil
	}
	ids := make([]string, 0, len(suspects))
	for id := range suspects {
		ids = append(ids, id)
	}
	winners := make(map[string]rowLoc, len(suspects))
	for i, f := range c.sources {
		hit, err := c.t.mayContainAny(ctx, f, ids)
		if err != nil {
			return nil, err
		}
		if !hit {
			continue
		}
		err = c.eachLiveID(ctx, s, i, func(id string, seq uint64, off uint32) {
			if !suspects[id] {
				return
			}
			// Newest Version wins; of two equal ones (one write committed twice), the
			// later fragment's, as a commit's incoming copy replaces the existing one.
			loc := rowLoc{src: i, off: off, v: rowkey.Version{Seq: seq, Shard: f.ShardAt(off)}}
			if w, ok := winners[id]; !ok || !w.v.Newer(loc.v) {
				winners[id] = loc
			}
		})
		if err != nil {
			return nil, err
		}
	}
	return winners, nil
}

// eachLiveID calls fn with the id, _seq and offset of every live row of source i,
// from its cached key index or by reading its id and _seq columns a row group at a
// time (not cached: the source is about to be replaced).
func (c *compaction) eachLiveID(ctx context.Context, s *arrow.Schema, i int, fn func(id string, seq uint64, off uint32)) error {
	f, dv := c.sources[i], c.srcDV[i]
	if f.LiveRows() == 0 {
		return nil
	}
	if k, ok := c.t.keys.Get(f.Path); ok {
		for id, off := range k.offsets {
			if !dv.Contains(off) {
				fn(id, k.seqs[off], off)
			}
		}
		return nil
	}
	ff, err := c.t.openFragment(ctx, s, f)
	if err != nil {
		return err
	}
	defer ff.Close()
	return ff.read(ctx, []string{rowkey.IDColumn, rowkey.SeqColumn}, nil, func(rec arrow.RecordBatch, offset int64) error {
		ids, ok1 := rec.Column(0).(*array.String)
		seqs, ok2 := rec.Column(1).(*array.Uint64)
		if !ok1 || !ok2 {
			return fmt.Errorf("fragment %s: %w: id/_seq columns have types %s/%s", ff.key, ErrCorrupt, rec.Column(0).DataType(), rec.Column(1).DataType())
		}
		for j := 0; j < ids.Len(); j++ {
			if off := uint32(offset) + uint32(j); !dv.Contains(off) {
				fn(ids.Value(j), seqs.Value(j), off)
			}
		}
		return nil
	})
}

// copyRun appends the kept rows of source i in [lo, hi), a run of shard, to the
// outputs, reading only the row groups that hold them, one at a time.
func (c *compaction) copyRun(ctx context.Context, s *arrow.Schema, i int, lo, hi int64, shard string, winners map[string]rowLoc) error {
	f, dv := c.sources[i], c.srcDV[i]
	ff, err := c.t.openFragment(ctx, s, f)
	if err != nil {
		return err
	}
	defer ff.Close()
	first, _ := ff.rowGroupOf(lo)
	last, _ := ff.rowGroupOf(hi - 1)
	if first < 0 || last < 0 {
		return fmt.Errorf("fragment %s: %w: rows [%d,%d) past its end", ff.key, ErrCorrupt, lo, hi)
	}
	groups := make([]int, 0, last-first+1)
	for g := first; g <= last; g++ {
		groups = append(groups, g)
	}
	cols := make([]string, s.NumFields())
	for j, fld := range s.Fields() {
		cols[j] = fld.Name
	}
	idCol := s.FieldIndices(rowkey.IDColumn)[0]
	return ff.read(ctx, cols, groups, func(rec arrow.RecordBatch, offset int64) error {
		a, b := max(lo, offset), min(hi, offset+rec.NumRows())
		if a >= b {
			return nil
		}
		part := rec.NewSlice(a-offset, b-offset)
		defer part.Release()
		ids := part.Column(idCol).(*array.String)
		keep := make([]bool, b-a)
		var offs []uint32
		for j := range keep {
			off := uint32(a) + uint32(j)
			keep[j] = !dv.Contains(off)
			if keep[j] && winners != nil {
				if w, ok := winners[ids.Value(j)]; ok && (w.src != i || w.off != off) {
					keep[j] = false
				}
			}
			if keep[j] {
				offs = append(offs, off)
			}
		}
		if len(offs) == 0 {
			return nil
		}
		kept := part
		if len(offs) < len(keep) {
			bld := array.NewBooleanBuilder(memory.DefaultAllocator)
			bld.AppendValues(keep, nil)
			mask := bld.NewBooleanArray()
			bld.Release()
			filtered, err := compute.FilterRecordBatch(ctx, part, mask, compute.DefaultFilterOptions())
			mask.Release()
			if err != nil {
				return fmt.Errorf("fragment %s: filter: %w", ff.key, err)
			}
			defer filtered.Release()
			kept = filtered
		}
		return c.place(ctx, s, kept, offs, shard, i)
	})
}

// place appends rec, kept rows of source src at offsets offs, to the output being
// assembled, writing it out each time it reaches the target row count.
func (c *compaction) place(ctx context.Context, s *arrow.Schema, rec arrow.RecordBatch, offs []uint32, shard string, src int) error {
	var done int64
	for done < rec.NumRows() {
		take := min(rec.NumRows()-done, c.target-c.rows)
		out := len(c.outputs)
		for j := int64(0); j < take; j++ {
			off, outOff := offs[done+j], uint32(c.rows+j)
			m := c.moved[src]
			if k := len(m) - 1; k >= 0 && m[k].out == out && m[k].src+m[k].n == off && m[k].outOff+m[k].n == outOff {
				m[k].n++
			} else {
				c.moved[src] = append(m, segment{src: off, n: 1, out: out, outOff: outOff})
			}
		}
		if k := len(c.runs) - 1; k >= 0 && c.runs[k].Shard == shard {
			c.runs[k].Rows += take
		} else {
			c.runs = append(c.runs, ShardRun{Shard: shard, Rows: take})
		}
		if err := c.addRows(s, rec.NewSlice(done, done+take)); err != nil {
			return err
		}
		done += take
		if c.rows == c.target {
			if err := c.flush(ctx, s); err != nil {
				return err
			}
		}
	}
	return nil
}

// addRows takes rec (and its reference) into the output being assembled. Pieces
// are copied into row groups of RowGroupRows rows as soon as there are enough of
// them: the Parquet writer makes a row group of each batch it is given, and a copy
// does not keep the source row groups the pieces are slices of.
func (c *compaction) addRows(s *arrow.Schema, rec arrow.RecordBatch) error {
	c.pieces = append(c.pieces, rec)
	c.piecesN += rec.NumRows()
	c.rows += rec.NumRows()
	for c.piecesN >= c.t.opts.RowGroupRows {
		if err := c.cutGroup(s, c.t.opts.RowGroupRows); err != nil {
			return err
		}
	}
	return nil
}

// cutGroup turns the first n rows of the pieces into one row group.
func (c *compaction) cutGroup(s *arrow.Schema, n int64) error {
	var use []arrow.RecordBatch
	var got int64
	rest := c.pieces[:0:0]
	for _, p := range c.pieces {
		switch {
		case got == n:
			rest = append(rest, p)
		case got+p.NumRows() <= n:
			use = append(use, p)
			got += p.NumRows()
		default:
			k := n - got
			use = append(use, p.NewSlice(0, k))
			rest = append(rest, p.NewSlice(k, p.NumRows()))
			got = n
			defer p.Release()
		}
	}
	group, err := concatBatches(s, use)
	for _, p := range use {
		p.Release()
	}
	c.pieces = rest
	c.piecesN -= n
	if err != nil {
		return err
	}
	c.groups = append(c.groups, group)
	return nil
}

// concatBatches copies recs into one batch of schema s.
func concatBatches(s *arrow.Schema, recs []arrow.RecordBatch) (arrow.RecordBatch, error) {
	var n int64
	for _, r := range recs {
		n += r.NumRows()
	}
	cols := make([]arrow.Array, s.NumFields())
	defer func() {
		for _, col := range cols {
			if col != nil {
				col.Release()
			}
		}
	}()
	parts := make([]arrow.Array, len(recs))
	for i := range cols {
		for j, r := range recs {
			parts[j] = r.Column(i)
		}
		col, err := array.Concatenate(parts, memory.DefaultAllocator)
		if err != nil {
			return nil, fmt.Errorf("concatenate column %q: %w", s.Field(i).Name, err)
		}
		cols[i] = col
	}
	return array.NewRecordBatch(s, cols, n), nil
}

// flush writes the output being assembled, if it has rows, as one fragment with its
// bloom filter, and primes the key-index cache with its ids (the next merge checks
// its rows against it).
func (c *compaction) flush(ctx context.Context, s *arrow.Schema) error {
	if c.rows == 0 {
		return nil
	}
	if c.piecesN > 0 {
		if err := c.cutGroup(s, c.piecesN); err != nil {
			return err
		}
	}
	k := &keyIndex{offsets: make(map[string]uint32, c.rows), seqs: make([]uint64, 0, c.rows)}
	f, bloomBytes, err := c.staged.writeFragment(ctx, s, c.groups, func(id string, seq uint64, off uint32) {
		k.offsets[strings.Clone(id)] = off
		k.seqs = append(k.seqs, seq)
	})
	if err != nil {
		return err
	}
	if len(c.runs) == 1 {
		f.Shard = c.runs[0].Shard
	} else {
		f.ShardRuns = c.runs
	}
	c.t.keys.Add(f.Path, k, k.size())
	c.outputs = append(c.outputs, *f)
	c.res.RowsWritten += f.Rows
	c.res.BytesWritten += f.Bytes + bloomBytes
	c.releasePending()
	return nil
}

func (c *compaction) releasePending() {
	for _, r := range c.groups {
		r.Release()
	}
	for _, r := range c.pieces {
		r.Release()
	}
	c.groups, c.pieces, c.piecesN, c.runs, c.rows = nil, nil, 0, nil, 0
}

// proposal is the newest version c is built on without the sources, with the
// outputs (and the deletions rebase translated onto them) where the first source was.
func (c *compaction) proposal() *Manifest {
	now := c.t.opts.Clock.Now().UTC()
	n := c.base.next(c.id, now)
	drop := make(map[string]bool, len(c.sources))
	for _, f := range c.sources {
		drop[f.Path] = true
	}
	outs := make([]Fragment, len(c.outputs))
	for i, f := range c.outputs {
		f.Deletions = c.outRef[i]
		outs[i] = f
	}
	frags := make([]Fragment, 0, len(n.Fragments)+len(outs))
	for _, f := range n.Fragments {
		if drop[f.Path] {
			frags = append(frags, outs...)
			outs = nil
			continue
		}
		frags = append(frags, f)
	}
	n.Fragments = append(frags, outs...) // outs is nil once placed
	n.LastCompaction = &CompactionInfo{Version: n.Version, At: now, Sources: len(c.sources), Outputs: len(c.outputs)}
	return n
}

// settle aborts when a source is gone from the newest version: another compaction
// rewrote its rows, and committing would have them twice.
func (c *compaction) settle(latest *Manifest) error {
	present := make(map[string]bool, len(latest.Fragments))
	for _, f := range latest.Fragments {
		present[f.Path] = true
	}
	for _, f := range c.sources {
		if !present[f.Path] {
			return fmt.Errorf("%w: source fragment %s is not in version %d (rewritten by another compaction)", ErrConflict, f.Path, latest.Version)
		}
	}
	return nil
}

// rebase moves the compaction onto latest, which settle found holding every
// source: the rows other commits deleted from the sources since the rewrite read
// them are deleted from the outputs they went to. The outputs' vectors are derived
// from scratch against the rewrite's reading each time, and written only when they
// changed since the previous attempt.
func (c *compaction) rebase(ctx context.Context, latest *Manifest) error {
	cur := make(map[string]Fragment, len(latest.Fragments))
	for _, f := range latest.Fragments {
		cur[f.Path] = f
	}
	now := make([]*roaring.Bitmap, len(c.sources))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(fragmentReads)
	for i, f := range c.sources {
		lf := cur[f.Path]
		if sameDeletions(lf.Deletions, f.Deletions) {
			continue
		}
		g.Go(func() (err error) {
			now[i], err = c.t.deletions(gctx, lf)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	outDel := make([]*roaring.Bitmap, len(c.outputs))
	for i, dv := range now {
		if dv == nil {
			continue
		}
		if lost := roaring.AndNot(c.srcDV[i], dv); !lost.IsEmpty() {
			return fmt.Errorf("%w: the deletion vector of source fragment %s in version %d no longer deletes %d rows the compaction dropped",
				ErrConflict, c.sources[i].Path, latest.Version, lost.GetCardinality())
		}
		segs := c.moved[i]
		roaring.AndNot(dv, c.srcDV[i]).Iterate(func(off uint32) bool {
			k := sort.Search(len(segs), func(k int) bool { return segs[k].src+segs[k].n > off })
			if k < len(segs) && segs[k].src <= off { // else a duplicate the rewrite dropped
				sg := segs[k]
				if outDel[sg.out] == nil {
					outDel[sg.out] = roaring.New()
				}
				outDel[sg.out].Add(sg.outOff + off - sg.src)
			}
			return true
		})
	}
	for o := range c.outputs {
		switch {
		case outDel[o] == nil:
			c.outDV[o], c.outRef[o] = nil, nil
		case c.outDV[o] != nil && c.outDV[o].Equals(outDel[o]):
			// written by an earlier attempt
		default:
			ref, err := c.staged.writeDV(ctx, outDel[o])
			if err != nil {
				return err
			}
			c.outDV[o], c.outRef[o] = outDel[o], &ref
		}
	}
	c.base = latest
	return nil
}

func sameDeletions(a, b *DeletionRef) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Path == b.Path
}

// Abort deletes the compaction's staged files.
func (c *compaction) Abort(ctx context.Context) { c.staged.deleteAll(ctx) }
