package table

import (
	"container/heap"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"golang.org/x/sync/errgroup"

	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

// Ordered reads: an Iter walks the live rows of one manifest in id order from any
// id on, merging the fragments as an LSM's iterator merges its runs. It costs what
// it passes over: a sorted fragment is walked through its key index a block at a
// time, and its rows' columns are read a row group at a time only when asked for;
// a fragment whose id range starts after the walk's position is not touched until
// the walk reaches its first id. Unsorted fragments (written before format 2) are
// walked through their in-memory key index until a compaction sorts them.

// indexReadAhead is how many key-index blocks a walk reads at once when it must
// read one: one request of a few tens of KiB instead of one per block. Blocks
// already cached are taken from the cache without a request, so a walk by pages
// (each page a new walk from the last page's id) pays a round trip only when it
// reaches a block no earlier page read ahead.
const indexReadAhead = 4

// Iter walks the live rows of a manifest in increasing id order. It is used by one
// goroutine; Close releases what it holds.
type Iter struct {
	t    *Table
	m    *Manifest
	h    byID[*fragCursor]
	same []*fragCursor // the cursors at the current id; same[0] holds the live row
}

// Iter returns an iterator over m's live rows with ids after `after` (every row
// when all is true). The first Next moves it to the first row.
func (t *Table) Iter(ctx context.Context, m *Manifest, after string, all bool) (*Iter, error) {
	it := &Iter{t: t, m: m}
	frontier := "" // the smallest last id of the fragments the walk meets
	for fi, f := range m.Fragments {
		if f.LiveRows() == 0 || (!all && f.IDMax <= after) {
			continue
		}
		c := &fragCursor{t: t, m: m, fi: fi, f: f, after: after, all: all}
		c.loads[0].group, c.loads[1].group = -1, -1
		c.id = max(f.IDMin, after) // a lower bound: the cursor opens when the walk reaches it
		if len(it.h) == 0 || f.IDMax < frontier {
			frontier = f.IDMax
		}
		it.h = append(it.h, c)
	}
	// The fragments the walk's first rows come from (those whose range starts before
	// any other's ends) are opened at once, fragmentReads at a time, instead of one
	// round trip after another as the walk reaches each; the rest open when reached.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(fragmentReads)
	open := make([]bool, len(it.h))
	for i, c := range it.h {
		if c.f.IDMin <= frontier {
			g.Go(func() (err error) {
				open[i], err = c.open(gctx)
				return err
			})
		}
	}
	if err := g.Wait(); err != nil {
		it.Close()
		return nil, err
	}
	live := it.h[:0]
	for i, c := range it.h {
		if c.opened && !open[i] {
			c.close() // opened, and nothing left to walk
			continue
		}
		live = append(live, c)
	}
	it.h = live
	heap.Init(&it.h)
	return it, nil
}

// Next moves to the next live row; false at the end.
func (it *Iter) Next(ctx context.Context) (bool, error) {
	if len(it.same) == 1 {
		// The common case: one cursor held the row. When its next id is below
		// every other cursor's (their ids, or an unopened one's lower bound), it
		// holds the next row alone and the heap is left as it is: a walk through
		// fragments that interleave takes the heap's path only when the source
		// changes.
		c := it.same[0]
		ok, err := c.next(ctx)
		if err != nil {
			return false, err
		}
		if ok && (len(it.h) == 0 || c.id < it.h[0].id) {
			return true, nil
		}
		it.same = it.same[:0]
		if ok {
			heap.Push(&it.h, c)
		} else {
			c.close()
		}
	}
	for _, c := range it.same {
		ok, err := c.next(ctx)
		if err != nil {
			return false, err
		}
		if ok {
			heap.Push(&it.h, c)
		} else {
			c.close()
		}
	}
	it.same = it.same[:0]
	for len(it.h) > 0 && !it.h[0].opened {
		if err := it.openTop(ctx); err != nil {
			return false, err
		}
	}
	if len(it.h) == 0 {
		return false, nil
	}
	// Every cursor at this id: a table holds one live row per id, but should two
	// fragments hold one, the newest version is the live row (on a tie the later
	// fragment's), as in a commit. A cursor whose lower bound is this id is opened
	// to see whether it holds it; one whose bound is past it is left unopened.
	id := it.h[0].id
	for len(it.h) > 0 && it.h[0].id == id {
		if !it.h[0].opened {
			if err := it.openTop(ctx); err != nil {
				return false, err
			}
			continue
		}
		it.same = append(it.same, heap.Pop(&it.h).(*fragCursor))
	}
	for i := 1; i < len(it.same); i++ {
		if !it.same[0].v.Newer(it.same[i].v) {
			it.same[0], it.same[i] = it.same[i], it.same[0]
		}
	}
	return true, nil
}

// openTop opens the cursor at the top of the heap, whose id was only a lower bound
// (its fragment's first id), and lets the heap place it again at its true id (or
// drops it when its fragment has no row left to walk).
func (it *Iter) openTop(ctx context.Context) error {
	c := it.h[0]
	ok, err := c.open(ctx)
	if err != nil {
		return err
	}
	if ok {
		heap.Fix(&it.h, 0)
	} else {
		heap.Pop(&it.h)
		c.close()
	}
	return nil
}

// Prefetch reads at once, fragmentReads at a time, the row groups (with cols, as
// Row would) holding the current rows of the fragments that the walk's next n
// rows come from, as far as their key-index blocks in memory tell; Row then finds
// them read. A page of rows from a few levels waits one round trip for its
// columns instead of one per fragment, one after another, as Row alone would.
// Rows deleted since a block was written count as rows here, so a fragment past
// the n-th live row may be read for nothing; one whose blocks in memory end within
// the n is read.
func (it *Iter) Prefetch(ctx context.Context, cols []string, n int) error {
	type peek struct {
		c    *fragCursor
		b, j int // the next entry to look at
		used bool
	}
	var ps []*peek
	add := func(c *fragCursor) {
		if c.opened && c.f.Sorted && len(c.blocks) > 0 {
			ps = append(ps, &peek{c: c, b: c.b, j: c.j})
		}
	}
	if len(it.same) > 0 {
		add(it.same[0])
	}
	for _, c := range it.h {
		add(c)
	}
	idAt := func(p *peek) (string, bool) {
		for p.b < len(p.c.blocks) && p.j >= len(p.c.blocks[p.b].ids) {
			p.b, p.j = p.b+1, 0
		}
		if p.b >= len(p.c.blocks) {
			return "", false
		}
		return p.c.blocks[p.b].ids[p.j], true
	}
	for range n {
		var next *peek
		var nextID string
		for _, p := range ps {
			if id, ok := idAt(p); ok && (next == nil || id < nextID) {
				next, nextID = p, id
			} else if !ok {
				p.used = true // its blocks in memory end within the n rows
			}
		}
		if next == nil {
			break
		}
		next.used = true
		next.j++
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(fragmentReads)
	for _, p := range ps {
		if p.used {
			g.Go(func() error {
				_, err := p.c.load(gctx, cols)
				return err
			})
		}
	}
	return g.Wait()
}

// ID is the current row's id.
func (it *Iter) ID() string { return it.same[0].id }

// Version is the current row's version.
func (it *Iter) Version() rowkey.Version { return it.same[0].v }

// Row returns the batch holding the current row and its index there, with the
// columns of m's schema that cols names (nil: every one), in schema order. The
// batch is valid until the next call of Next or Row; Retain what is kept longer
// (it keeps the row group alive).
func (it *Iter) Row(ctx context.Context, cols []string) (arrow.RecordBatch, int, error) {
	return it.same[0].row(ctx, cols)
}

// Match evaluates filter on the current row, filter reading the columns cols names:
// it is evaluated once per row group read, not per row.
func (it *Iter) Match(ctx context.Context, cols []string, filter func(arrow.RecordBatch) ([]bool, error)) (bool, error) {
	return it.same[0].match(ctx, cols, filter)
}

// Close releases what the iterator holds.
func (it *Iter) Close() {
	for _, c := range it.h {
		c.close()
	}
	for _, c := range it.same {
		c.close()
	}
	it.h, it.same = nil, nil
}

// fragCursor walks one fragment's live rows in id order.
type fragCursor struct {
	t     *Table
	m     *Manifest
	fi    int
	f     Fragment
	after string
	all   bool

	opened bool
	dv     *roaring.Bitmap
	// The current row.
	id  string
	off uint32
	v   rowkey.Version

	// Sorted fragments: the key index's top, the blocks read ahead and the
	// position in them.
	top    *indexTop
	blocks []*indexBlock
	nextB  int // next block to read
	b, j   int // current block in blocks, entry in it

	// Unsorted fragments: their live entries, sorted by id.
	legacy []legacyEntry
	k      int

	// The row groups read for row and match: two, so that a filtered walk reading
	// a group's filter columns for match and its other columns for row does not
	// read each again at every row. used is the slot read last.
	ff    *fragmentFile
	loads [2]groupLoad
	used  int
}

// groupLoad is one row group read with some columns.
type groupLoad struct {
	group  int // -1: nothing read
	cols   []string
	recs   []arrow.RecordBatch
	starts []int64
	masks  [][]bool
}

func (l *groupLoad) release() {
	for _, r := range l.recs {
		r.Release()
	}
	*l = groupLoad{group: -1}
}

type legacyEntry struct {
	id  string
	off uint32
	seq uint64
}

// open positions the cursor at its first live row after `after`; false if none.
func (c *fragCursor) open(ctx context.Context) (bool, error) {
	c.opened = true
	var err error
	if c.dv, err = c.t.deletions(ctx, c.f); err != nil {
		return false, err
	}
	if !c.f.Sorted {
		idx, err := c.t.keyIndex(ctx, c.m.ArrowSchema(), c.f)
		if err != nil {
			return false, err
		}
		for id, off := range idx.offsets {
			if (c.all || id > c.after) && !c.dv.Contains(off) {
				c.legacy = append(c.legacy, legacyEntry{id: id, off: off, seq: idx.seqs[off]})
			}
		}
		slices.SortFunc(c.legacy, func(a, b legacyEntry) int { return strings.Compare(a.id, b.id) })
		c.k = -1
		return c.next(ctx)
	}
	if c.top, err = c.t.indexTopOf(ctx, c.f); err != nil {
		return false, err
	}
	first := 0
	if !c.all {
		first = max(c.top.find(c.after), 0)
	}
	c.nextB = first
	if err := c.readBlocks(ctx); err != nil {
		return false, err
	}
	c.b, c.j = 0, -1
	if !c.all {
		if blk := c.blocks[0]; true {
			c.j = sort.SearchStrings(blk.ids, c.after) - 1
			if c.j+1 < len(blk.ids) && blk.ids[c.j+1] == c.after {
				c.j++
			}
		}
	}
	return c.next(ctx)
}

// readBlocks replaces the blocks read ahead with the next ones: those from the next
// that are cached, without a request, or when the next is not, the next
// indexReadAhead read at once (fetchBlocks reads only the missing ones).
func (c *fragCursor) readBlocks(ctx context.Context) error {
	last := min(c.nextB+indexReadAhead, len(c.top.blocks))
	cached := make([]*indexBlock, 0, last-c.nextB)
	for b := c.nextB; b < last; b++ {
		blk, ok := c.t.blocks.GetBlock(c.f.Index.Path, b)
		if !ok {
			break
		}
		cached = append(cached, blk)
	}
	if len(cached) > 0 {
		c.blocks, c.nextB = cached, c.nextB+len(cached)
		return nil
	}
	bs := make([]int, 0, last-c.nextB)
	for b := c.nextB; b < last; b++ {
		bs = append(bs, b)
	}
	blocks, err := c.t.indexBlocks(ctx, c.f, c.top, bs)
	if err != nil {
		return err
	}
	c.blocks, c.nextB = blocks, last
	return nil
}

// next moves to the next live row; false at the end of the fragment.
func (c *fragCursor) next(ctx context.Context) (bool, error) {
	if !c.f.Sorted {
		for c.k++; c.k < len(c.legacy); c.k++ {
			e := c.legacy[c.k]
			c.id, c.off, c.v = e.id, e.off, rowkey.Version{Seq: e.seq, Shard: c.f.ShardAt(e.off)}
			return true, nil
		}
		return false, nil
	}
	for {
		c.j++
		for c.b < len(c.blocks) && c.j >= len(c.blocks[c.b].ids) {
			c.b, c.j = c.b+1, 0
		}
		if c.b >= len(c.blocks) {
			if c.nextB >= len(c.top.blocks) {
				return false, nil
			}
			if err := c.readBlocks(ctx); err != nil {
				return false, err
			}
			c.b, c.j = 0, 0
		}
		blk := c.blocks[c.b]
		off := uint32(blk.row) + uint32(c.j)
		if c.dv.Contains(off) {
			continue
		}
		c.id, c.off = blk.ids[c.j], off
		c.v = rowkey.Version{Seq: blk.seqs[c.j], Shard: c.top.shards[blk.shards[c.j]]}
		return true, nil
	}
}

// load returns the read of the row group holding the current row with cols:
// one of the two kept, or a new one in place of the one used longer ago.
func (c *fragCursor) load(ctx context.Context, cols []string) (*groupLoad, error) {
	s := c.m.ArrowSchema()
	if c.ff == nil {
		var group *indexGroup // where the first group read lies, if the index says
		if c.top != nil {
			if g, _, ok := c.top.groupOf(int64(c.off)); ok {
				group = &c.top.groups[g]
			}
		}
		ff, err := c.t.openFragmentFor(ctx, s, c.f, group)
		if err != nil {
			return nil, err
		}
		c.ff = ff
	}
	for i := range c.loads {
		l := &c.loads[i]
		if l.group >= 0 && slices.Equal(cols, l.cols) &&
			int64(c.off) >= c.ff.groupStart(l.group) && int64(c.off) < c.ff.groupStart(l.group+1) {
			c.used = i
			return l, nil // the common case: the next row of a group read already
		}
	}
	g, _ := c.ff.rowGroupOf(int64(c.off))
	if g < 0 {
		return nil, fmt.Errorf("fragment %s: %w: row %d past the end", c.ff.key, ErrCorrupt, c.off)
	}
	c.used = 1 - c.used
	l := &c.loads[c.used]
	l.release()
	var read []string
	for _, fld := range s.Fields() {
		if cols == nil || slices.Contains(cols, fld.Name) {
			read = append(read, fld.Name)
		}
	}
	key := groupKeyOf(c.f.Path, g, read)
	if !c.t.cachedGroup(key, l) {
		err := c.ff.read(ctx, read, []int{g}, func(rec arrow.RecordBatch, start int64) error {
			rec.Retain()
			l.recs = append(l.recs, rec)
			l.starts = append(l.starts, start)
			return nil
		})
		if err != nil {
			l.release()
			return nil, err
		}
		c.t.cacheGroup(key, l)
	}
	l.group, l.cols = g, slices.Clone(cols)
	l.masks = make([][]bool, len(l.recs))
	return l, nil
}

// at returns the batch of l holding the current row, and the row's index there.
func (c *fragCursor) at(l *groupLoad) (int, int, error) {
	for i, st := range l.starts {
		if int64(c.off) >= st && int64(c.off) < st+l.recs[i].NumRows() {
			return i, int(int64(c.off) - st), nil
		}
	}
	return 0, 0, fmt.Errorf("fragment %s: %w: row %d not in its row group", c.t.key(c.f.Path), ErrCorrupt, c.off)
}

func (c *fragCursor) row(ctx context.Context, cols []string) (arrow.RecordBatch, int, error) {
	l, err := c.load(ctx, cols)
	if err != nil {
		return nil, 0, err
	}
	b, i, err := c.at(l)
	if err != nil {
		return nil, 0, err
	}
	return l.recs[b], i, nil
}

func (c *fragCursor) match(ctx context.Context, cols []string, filter func(arrow.RecordBatch) ([]bool, error)) (bool, error) {
	l, err := c.load(ctx, cols)
	if err != nil {
		return false, err
	}
	b, i, err := c.at(l)
	if err != nil {
		return false, err
	}
	if l.masks[b] == nil {
		if l.masks[b], err = filter(l.recs[b]); err != nil {
			return false, err
		}
	}
	return l.masks[b][i], nil
}

func (c *fragCursor) close() {
	for i := range c.loads {
		c.loads[i].release()
	}
	if c.ff != nil {
		_ = c.ff.Close()
		c.ff = nil
	}
	c.blocks, c.legacy = nil, nil
}

// byID is a heap of cursors ordered by their current id, then by position (the
// earlier fragment or source first): the k-way merges of walks and compactions.
type byID[C interface{ heapKey() (string, int) }] []C

func (h byID[C]) Len() int { return len(h) }
func (h byID[C]) Less(i, j int) bool {
	a, ap := h[i].heapKey()
	b, bp := h[j].heapKey()
	if a != b {
		return a < b
	}
	return ap < bp
}
func (h byID[C]) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *byID[C]) Push(x any)   { *h = append(*h, x.(C)) }
func (h *byID[C]) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// heapKey orders fragment cursors: current id (a lower bound for unopened ones),
// then fragment position.
func (c *fragCursor) heapKey() (string, int) { return c.id, c.fi }
