package table

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/bits-and-blooms/bloom/v3"
	"github.com/google/uuid"

	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

// ErrConflict means a compaction lost to another rewrite of its sources: a source
// fragment is gone from the newest version (another compaction took it). Nothing
// was committed and the staged files were deleted; planning again starts afresh.
var ErrConflict = errors.New("compaction conflict")

// dedupFPRate is the false-positive rate of the filter that looks for an id live in
// two unsorted sources: a false positive only costs reading the id columns of the
// sources the suspect id may be in once more.
const dedupFPRate = 1e-7

// CompactResult says what a compaction did.
type CompactResult struct {
	Version      uint64 // the committed version (0 when nothing to do)
	Level        int    // the level of the outputs
	Sources      int    // fragments rewritten
	Outputs      int    // fragments written
	Moved        int    // of Sources, fragments moved down a level as they are (written 0 rows)
	RowsWritten  int64  // live rows carried over
	RowsDropped  int64  // deleted rows materialized away
	BytesRead    int64  // bytes of the source fragments
	BytesWritten int64  // bytes of the output fragments (+ bloom filters and key indexes)
}

// Compact refreshes the table, plans against the newest version (PlanCompaction),
// rewrites the planned sources and commits. Nothing to do: a zero CompactResult
// and nil error.
//
// Why the result is the same table:
//
//   - Outputs hold exactly the sources' live rows (deletion vectors materialized),
//     each row with its _seq and, through the outputs' key indexes, its shard: every
//     row keeps its rowkey.Version, so every later tie between shards resolves as it
//     would have without the compaction. Sources hold at most one live row per id (a
//     table invariant); should two appear, the newest Version is kept, so outputs
//     hold at most one row per id as every fragment must.
//   - Outputs are sorted by id and cut at TargetRows rows. Merged sorted sources
//     come out as one sorted run over the sources' id range, so outputs of one level
//     never overlap: the plan takes every fragment of the output level that the
//     moved rows' range meets.
//   - The commit is the newest version minus the sources plus the outputs, written
//     with put-if-absent, and the outputs are written before it: a crash leaves only
//     unreferenced files.
//   - On a lost race the newest version decides. Sources all present with their
//     deletion vectors unchanged: other commits only added fragments or touched other
//     fragments, which are kept, so committing on top is right. A source whose vector
//     grew (a merge deleted rows of it: newer rows arrived): each newly deleted row
//     is found by its id in the outputs, and deleted there if the output row is that
//     same row (same version) (rebase). A source gone (another compaction rewrote
//     it) or whose vector lost a row: committing would duplicate or resurrect rows,
//     so the compaction aborts with ErrConflict.
//   - A merge that read a version with the sources and commits after the compaction
//     finds them gone: its rebase drops its deletions aimed at them and resolves its
//     rows against the outputs, which are new paths it has not checked.
//
// Memory: merged sources are read one row group each at a time; unsorted sources
// are rewritten a TargetRows chunk at a time. Peak memory is one output fragment's
// rows (at most TargetRows, decoded) and its encoded bytes, a row group per source
// being merged, and the sources' deletion vectors; sorting an unsorted source adds
// an id filter of about 4 bytes per live row of the plan (duplicates).
func (t *Table) Compact(ctx context.Context, o CompactOptions) (CompactResult, error) {
	o = o.withDefaults()
	base, err := t.Refresh(ctx)
	if err != nil {
		return CompactResult{}, fmt.Errorf("compact %s: %w", t.dir, err)
	}
	p := PlanCompaction(base, o)
	if p == nil {
		return CompactResult{}, nil
	}
	if p.Move {
		return t.commitMove(ctx, base, p)
	}
	c := &compaction{
		t: t, id: "compact-" + uuid.NewString(), base: base, plan: p,
		target: o.TargetRows, staged: staged{t: t},
	}
	c.out.yield = c.yielder(o.Yield)
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

// yielder is the outputBuilder's call after each row group: o.Yield with the
// time worked since the previous call (or the start), nil without a Yield.
func (c *compaction) yielder(yield func(context.Context, time.Duration) error) func(context.Context) error {
	if yield == nil {
		return nil
	}
	clk := c.t.opts.Clock
	last := clk.Now()
	return func(ctx context.Context) error {
		err := yield(ctx, clk.Since(last))
		last = clk.Now()
		return err
	}
}

// commitMove commits a move plan: no file is read or written.
func (t *Table) commitMove(ctx context.Context, base *Manifest, p *CompactionPlan) (CompactResult, error) {
	c := &move{t: t, id: "compact-" + uuid.NewString(), base: base, plan: p}
	if err := movedDisjoint(c.proposal()); err != nil {
		return CompactResult{}, fmt.Errorf("compact %s: plan: %w", t.dir, err) // a planner bug, not a race
	}
	m, err := t.commitOptimistic(ctx, c.id, c)
	if err != nil {
		return CompactResult{}, fmt.Errorf("compact %s: %w", t.dir, err)
	}
	return CompactResult{Version: m.Version, Level: p.Level, Sources: len(p.Sources), Moved: len(p.Sources)}, nil
}

// compaction is one rewrite of source fragments into output fragments.
type compaction struct {
	t      *Table
	id     string
	base   *Manifest // the version the commit is built on
	plan   *CompactionPlan
	target int64
	staged staged

	srcDV   []*roaring.Bitmap // the sources' vectors the rewrite materialized
	outputs []Fragment
	// outDV and outRef are the outputs' deletion vectors: rows other commits
	// deleted from the sources after the rewrite read them (rebase).
	outDV  []*roaring.Bitmap
	outRef []*DeletionRef
	res    CompactResult

	out outputBuilder // the output being assembled
}

// write reads the sources' live rows and writes them as sorted outputs of at most
// target rows.
func (c *compaction) write(ctx context.Context) error {
	defer c.out.release()
	s := c.base.ArrowSchema()
	c.out.s, c.out.groupRows = s, c.t.opts.RowGroupRows
	sources := c.plan.Sources
	var rows int64
	for _, f := range sources {
		rows += f.Rows
		c.res.BytesRead += f.Bytes
	}
	// The sources' vectors, a read per object for those one commit packed
	// together, fragmentReads requests at a time.
	var err error
	if c.srcDV, err = c.t.deletionsOf(withRequestBudget(ctx, fragmentReads), sources); err != nil {
		return err
	}
	c.res.Sources, c.res.Level = len(sources), c.plan.Level
	if c.plan.Sort {
		err = c.sortSources(ctx, s)
	} else {
		err = c.mergeSources(ctx, s)
	}
	if err != nil {
		return err
	}
	if err := c.flush(ctx); err != nil {
		return err
	}
	c.outDV = make([]*roaring.Bitmap, len(c.outputs))
	c.outRef = make([]*DeletionRef, len(c.outputs))
	c.res.Outputs = len(c.outputs)
	c.res.RowsDropped = rows - c.res.RowsWritten
	return nil
}

// sourceCursor walks the live rows of one sorted source in id order, a row group at
// a time.
type sourceCursor struct {
	c   *compaction
	src int // position in the plan's sources
	ff  *fragmentFile

	group  int                 // next row group to read
	recs   []arrow.RecordBatch // the current row group's batches, all columns
	starts []int64             // offset of each batch's first row
	vers   []rowkey.Version    // versions of the current row group's rows
	first  int64               // offset of the row group's first row
	b, row int                 // current batch and row in it
	id     string              // id of the current row
	idCol  int                 // position of the id column
}

// open opens the cursor's fragment and moves it to its first live row; false when
// the source has none.
func (cu *sourceCursor) open(ctx context.Context, s *arrow.Schema) (bool, error) {
	ff, err := cu.c.t.openFragment(ctx, s, cu.c.plan.Sources[cu.src])
	if err != nil {
		return false, err
	}
	cu.ff, cu.b, cu.row = ff, 0, -1
	cu.idCol = s.FieldIndices(rowkey.IDColumn)[0]
	return cu.next(ctx, s)
}

// next moves to the next live row; false at the end.
func (cu *sourceCursor) next(ctx context.Context, s *arrow.Schema) (bool, error) {
	dv := cu.c.srcDV[cu.src]
	for {
		cu.row++
		for cu.b < len(cu.recs) && cu.row >= int(cu.recs[cu.b].NumRows()) {
			cu.b, cu.row = cu.b+1, 0
		}
		if cu.b >= len(cu.recs) {
			ok, err := cu.load(ctx, s)
			if err != nil || !ok {
				return false, err
			}
			cu.b, cu.row = 0, 0
		}
		if !dv.Contains(uint32(cu.offset())) {
			cu.id = cu.recs[cu.b].Column(cu.idCol).(*array.String).Value(cu.row)
			return true, nil
		}
	}
}

func (cu *sourceCursor) offset() int64 { return cu.starts[cu.b] + int64(cu.row) }

func (cu *sourceCursor) version() rowkey.Version { return cu.vers[cu.offset()-cu.first] }

// load reads the next row group that holds a live row, with the versions of its
// rows; false past the last.
func (cu *sourceCursor) load(ctx context.Context, s *arrow.Schema) (bool, error) {
	cu.release()
	f, dv := cu.c.plan.Sources[cu.src], cu.c.srcDV[cu.src]
	md := cu.ff.pf.MetaData()
	for cu.group < md.NumRowGroups() {
		g := cu.group
		cu.group++
		first := cu.ff.groupStart(g)
		n := md.RowGroup(g).NumRows()
		if liveIn(dv, first, first+n) == 0 {
			continue
		}
		err := cu.ff.read(ctx, columnNames(s), []int{g}, func(rec arrow.RecordBatch, off int64) error {
			rec.Retain()
			cu.recs = append(cu.recs, rec)
			cu.starts = append(cu.starts, off)
			return nil
		})
		if err != nil {
			return false, err
		}
		if cu.vers, err = cu.c.t.versionsSorted(ctx, f, first, first+n); err != nil {
			return false, err
		}
		cu.first = first
		return true, nil
	}
	return false, nil
}

func (cu *sourceCursor) release() {
	for _, r := range cu.recs {
		r.Release()
	}
	cu.recs, cu.starts, cu.vers = nil, nil, nil
}

func (cu *sourceCursor) close() {
	cu.release()
	if cu.ff != nil {
		_ = cu.ff.Close()
	}
}

// heapKey orders source cursors by current id, then by source position.
func (cu *sourceCursor) heapKey() (string, int) { return cu.id, cu.src }

// mergeSources merges the sorted sources' live rows in id order into outputs (an
// LSM's merge): of the rows of one id, the newest version is kept; on a tie the
// later source's, as a commit's incoming copy replaces the existing one.
func (c *compaction) mergeSources(ctx context.Context, s *arrow.Schema) error {
	var h byID[*sourceCursor]
	defer func() {
		for _, cu := range h {
			cu.close()
		}
	}()
	for i, f := range c.plan.Sources {
		if f.LiveRows() == 0 {
			continue
		}
		if !f.Sorted {
			return fmt.Errorf("fragment %s: merged as sorted, but it is not", c.t.key(f.Path))
		}
		cu := &sourceCursor{c: c, src: i}
		ok, err := cu.open(ctx, s)
		if err != nil {
			cu.close()
			return err
		}
		if !ok {
			cu.close()
			continue
		}
		h = append(h, cu)
	}
	heap.Init(&h)
	var same []*sourceCursor
	for len(h) > 0 {
		same = append(same[:0], heap.Pop(&h).(*sourceCursor))
		for len(h) > 0 && h[0].id == same[0].id {
			same = append(same, heap.Pop(&h).(*sourceCursor))
		}
		best := same[0]
		for _, cu := range same[1:] {
			if !best.version().Newer(cu.version()) {
				best = cu
			}
		}
		if err := c.out.add(ctx, best.recs[best.b], best.row, best.version()); err != nil {
			return err
		}
		if c.out.rows == c.target {
			if err := c.flush(ctx); err != nil {
				return err
			}
		}
		for _, cu := range same {
			ok, err := cu.next(ctx, s)
			if err != nil {
				cu.close()
				return err
			}
			if ok {
				heap.Push(&h, cu)
			} else {
				cu.close()
			}
		}
	}
	return nil
}

// sortSources rewrites unsorted sources: their live rows (of each duplicated id, the
// newest only) are read in storage order a TargetRows chunk at a time, and each
// chunk is sorted and written as one level-0 output.
func (c *compaction) sortSources(ctx context.Context, s *arrow.Schema) error {
	var live int64
	for _, f := range c.plan.Sources {
		live += f.LiveRows()
	}
	winners, err := c.duplicates(ctx, s, live)
	if err != nil {
		return err
	}
	cols := columnNames(s)
	idCol := s.FieldIndices(rowkey.IDColumn)[0]
	var chunk []arrow.RecordBatch
	var shards []string
	var n int64
	release := func() {
		for _, r := range chunk {
			r.Release()
		}
		chunk, shards, n = nil, nil, 0
	}
	defer release()
	writeChunk := func() error {
		if n == 0 {
			return nil
		}
		sorted, perm, err := sortByIDWith(ctx, s, chunk, c.t.opts.RowGroupRows)
		if err != nil {
			return err
		}
		for _, r := range sorted {
			rs := make([]string, r.NumRows())
			for i := range rs {
				rs[i] = shards[perm[0]]
				perm = perm[1:]
			}
			c.out.groups = append(c.out.groups, r) // takes the reference
			c.out.shards = append(c.out.shards, rs)
			c.out.rows += r.NumRows()
		}
		release()
		return c.flush(ctx)
	}
	for i, f := range c.plan.Sources {
		dv := c.srcDV[i]
		if f.LiveRows() == 0 {
			continue
		}
		ff, err := c.t.openFragment(ctx, s, f)
		if err != nil {
			return err
		}
		err = ff.read(ctx, cols, nil, func(rec arrow.RecordBatch, offset int64) error {
			ids := rec.Column(idCol).(*array.String)
			var take []int64
			for j := 0; j < ids.Len(); j++ {
				off := uint32(offset) + uint32(j)
				if dv.Contains(off) {
					continue
				}
				if w, ok := winners[ids.Value(j)]; ok && (w.src != i || w.off != off) {
					continue
				}
				take = append(take, int64(j))
			}
			for len(take) > 0 {
				k := min(int64(len(take)), c.target-n)
				part, err := takeRows(ctx, rec, take[:k])
				if err != nil {
					return err
				}
				for _, j := range take[:k] {
					shards = append(shards, f.ShardAt(uint32(offset)+uint32(j)))
				}
				chunk = append(chunk, part)
				n += k
				take = take[k:]
				if n == c.target {
					if err := writeChunk(); err != nil {
						return err
					}
				}
			}
			return nil
		})
		_ = ff.Close()
		if err != nil {
			return err
		}
	}
	return writeChunk()
}

// rowLoc is a row of a source.
type rowLoc struct {
	src int
	off uint32
	v   rowkey.Version
}

// duplicates finds ids live in more than one unsorted source, which a table never
// has (at most one live row per id), without holding every id: a filter of the ids
// seen flags suspects, and only if there are any are the id columns of the sources
// that may hold them read again to find each suspect's newest row. It returns nil
// when there is no suspect, else the winning row of every suspect id.
func (c *compaction) duplicates(ctx context.Context, s *arrow.Schema, live int64) (map[string]rowLoc, error) {
	if live == 0 {
		return nil, nil
	}
	seen := bloom.NewWithEstimates(uint(live), dedupFPRate)
	suspects := map[string]bool{}
	for i := range c.plan.Sources {
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
	for i, f := range c.plan.Sources {
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

// eachLiveID calls fn with the id, _seq and offset of every live row of unsorted
// source i, from its cached key index or by reading its id and _seq columns a row
// group at a time (not cached: the source is about to be replaced).
func (c *compaction) eachLiveID(ctx context.Context, s *arrow.Schema, i int, fn func(id string, seq uint64, off uint32)) error {
	f, dv := c.plan.Sources[i], c.srcDV[i]
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

// flush writes the output being assembled, if it has rows, as one sorted fragment
// of the plan's level.
func (c *compaction) flush(ctx context.Context) error {
	if err := c.out.cut(ctx); err != nil {
		return err
	}
	if c.out.rows == 0 {
		return nil
	}
	shards := c.out.shards
	f, sidecars, err := c.staged.writeFragment(ctx, c.out.s, c.out.groups, func(r, i int) string { return shards[r][i] }, nil)
	if err != nil {
		return err
	}
	f.Level = c.plan.Level
	c.outputs = append(c.outputs, *f)
	c.res.RowsWritten += f.Rows
	c.res.BytesWritten += f.Bytes + sidecars
	c.out.release()
	return nil
}

// outputBuilder assembles one output fragment from rows picked in id order: picks
// are copied out of their source batches a row group at a time, so the output
// holds its own rows, not the sources' row groups.
type outputBuilder struct {
	s         *arrow.Schema
	groupRows int64

	groups []arrow.RecordBatch // row groups built
	shards [][]string          // each row's shard, by group
	rows   int64               // rows in groups and picks

	picks      []pick
	pickShards []string
	held       []arrow.RecordBatch // source batches the picks reference (retained)

	yield func(context.Context) error // after each row group (CompactOptions.Yield), if set
}

type pick struct {
	rec arrow.RecordBatch
	row int
}

// add picks row of rec (of version v) as the output's next row.
func (o *outputBuilder) add(ctx context.Context, rec arrow.RecordBatch, row int, v rowkey.Version) error {
	if !slices.Contains(o.held, rec) { // a handful: one or two batches per source
		rec.Retain()
		o.held = append(o.held, rec)
	}
	o.picks = append(o.picks, pick{rec: rec, row: row})
	o.pickShards = append(o.pickShards, v.Shard)
	o.rows++
	if int64(len(o.picks)) >= o.groupRows {
		if err := o.cut(ctx); err != nil {
			return err
		}
		if o.yield != nil {
			return o.yield(ctx)
		}
	}
	return nil
}

// cut turns the picks into one row group: each source batch's picked rows are taken
// at once, and the parts put back in pick order.
func (o *outputBuilder) cut(ctx context.Context) error {
	if len(o.picks) == 0 {
		return nil
	}
	var parts []arrow.RecordBatch
	defer func() {
		for _, p := range parts {
			p.Release()
		}
	}()
	where := make([]int64, len(o.picks)) // position of each pick in the parts, concatenated
	var base int64
	for _, src := range o.held {
		var idx []int64
		for k, p := range o.picks {
			if p.rec == src {
				where[k] = base + int64(len(idx))
				idx = append(idx, int64(p.row))
			}
		}
		if len(idx) == 0 {
			continue
		}
		part, err := takeRows(ctx, src, idx)
		if err != nil {
			return err
		}
		parts = append(parts, part)
		base += int64(len(idx))
	}
	// One source: its rows were taken in pick order already.
	var group arrow.RecordBatch
	if len(parts) == 1 {
		group = parts[0]
		group.Retain()
	} else {
		all, err := concatBatches(o.s, parts)
		if err != nil {
			return err
		}
		group, err = takeRows(ctx, all, where)
		all.Release()
		if err != nil {
			return err
		}
	}
	o.groups = append(o.groups, group)
	o.shards = append(o.shards, o.pickShards)
	o.picks, o.pickShards = nil, nil
	for _, r := range o.held {
		r.Release()
	}
	o.held = nil
	return nil
}

func (o *outputBuilder) release() {
	for _, r := range o.groups {
		r.Release()
	}
	for _, r := range o.held {
		r.Release()
	}
	o.groups, o.shards, o.rows, o.picks, o.pickShards, o.held = nil, nil, 0, nil, nil, nil
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

// proposal is the newest version c is built on without the sources, with the
// outputs (and the deletions rebase translated onto them) where the first source was.
func (c *compaction) proposal() *Manifest {
	now := c.t.opts.Clock.Now().UTC()
	n := c.base.next(c.id, now)
	drop := make(map[string]bool, len(c.plan.Sources))
	for _, f := range c.plan.Sources {
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
	n.LastCompaction = &CompactionInfo{Version: n.Version, At: now, Sources: len(c.plan.Sources), Outputs: len(c.outputs)}
	return n
}

// settle aborts when a source is gone from the newest version: another compaction
// rewrote its rows, and committing would have them twice.
func (c *compaction) settle(latest *Manifest) error {
	present := make(map[string]bool, len(latest.Fragments))
	for _, f := range latest.Fragments {
		present[f.Path] = true
	}
	for _, f := range c.plan.Sources {
		if !present[f.Path] {
			return fmt.Errorf("%w: source fragment %s is not in version %d (rewritten by another compaction)", ErrConflict, f.Path, latest.Version)
		}
	}
	return nil
}

// rebase moves the compaction onto latest, which settle found holding every
// source: the rows other commits deleted from the sources since the rewrite read
// them are deleted from the outputs: each is found by its id in the outputs, and
// deleted there if the output row is the same row (same version; a duplicate the
// rewrite dropped is not). The outputs' vectors are derived from scratch against
// the rewrite's reading each time, and written only when they changed since the
// previous attempt.
func (c *compaction) rebase(ctx context.Context, latest *Manifest) error {
	cur := make(map[string]Fragment, len(latest.Fragments))
	for _, f := range latest.Fragments {
		cur[f.Path] = f
	}
	s := c.base.ArrowSchema()
	type gone struct {
		id string
		v  rowkey.Version
	}
	var deleted []gone
	for i, f := range c.plan.Sources {
		lf := cur[f.Path]
		if sameDeletions(lf.Deletions, f.Deletions) {
			continue
		}
		dv, err := c.t.deletions(ctx, lf)
		if err != nil {
			return err
		}
		if lost := roaring.AndNot(c.srcDV[i], dv); !lost.IsEmpty() {
			return fmt.Errorf("%w: the deletion vector of source fragment %s in version %d no longer deletes %d rows the compaction dropped",
				ErrConflict, f.Path, latest.Version, lost.GetCardinality())
		}
		offs := roaring.AndNot(dv, c.srcDV[i]).ToArray()
		ids, vs, err := c.t.rowKeys(ctx, s, f, offs)
		if err != nil {
			return err
		}
		for k := range ids {
			deleted = append(deleted, gone{ids[k], vs[k]})
		}
	}
	outDel := make([]*roaring.Bitmap, len(c.outputs))
	for o, out := range c.outputs {
		var ids []string
		var want []rowkey.Version
		for _, d := range deleted {
			if d.id >= out.IDMin && d.id <= out.IDMax {
				ids = append(ids, d.id)
				want = append(want, d.v)
			}
		}
		if len(ids) == 0 {
			continue
		}
		byID := map[string][]rowkey.Version{}
		for k, id := range ids {
			byID[id] = append(byID[id], want[k])
		}
		ids = slices.Compact(slices.Sorted(maps.Keys(byID)))
		hits, err := c.t.lookupSorted(ctx, out, ids)
		if err != nil {
			return err
		}
		for k, h := range hits {
			if h.found && slices.Contains(byID[ids[k]], h.v) {
				if outDel[o] == nil {
					outDel[o] = roaring.New()
				}
				outDel[o].Add(h.off)
			}
		}
	}
	var changed []int // outputs whose vector is new, written as one object
	for o := range c.outputs {
		switch {
		case outDel[o] == nil:
			c.outDV[o], c.outRef[o] = nil, nil
		case c.outDV[o] != nil && c.outDV[o].Equals(outDel[o]):
			// written by an earlier attempt
		default:
			changed = append(changed, o)
		}
	}
	bms := make([]*roaring.Bitmap, len(changed))
	for k, o := range changed {
		bms[k] = outDel[o]
	}
	refs, err := c.staged.writeDVs(ctx, bms)
	if err != nil {
		return err
	}
	for k, o := range changed {
		c.outDV[o], c.outRef[o] = outDel[o], &refs[k]
	}
	c.base = latest
	return nil
}

// sameDeletions reports whether a and b are the same vector: the same object,
// and the same part of it.
func sameDeletions(a, b *DeletionRef) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// Abort deletes the compaction's staged files.
func (c *compaction) Abort(ctx context.Context) { c.staged.deleteAll(ctx) }
