package table

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"golang.org/x/sync/errgroup"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

// Reading the key index of a sorted fragment: its top from the cache or in one
// ranged read, then only the blocks a lookup needs, adjacent ones in one read. What
// a lookup holds is the blocks it reads, never the fragment's ids.

// indexTopOf returns the top of sorted fragment f's key index.
func (t *Table) indexTopOf(ctx context.Context, f Fragment) (*indexTop, error) {
	if f.Index == nil {
		return nil, fmt.Errorf("fragment %s: %w: sorted without a key index", t.key(f.Path), ErrCorrupt)
	}
	if top, ok := t.tops.Get(f.Index.Path); ok {
		return top, nil
	}
	key := t.key(f.Index.Path)
	from := f.Index.Top
	if smallIndex(f) {
		from = 0
	}
	data, err := t.getRange(ctx, key, from, f.Index.Bytes-from)
	if err != nil {
		return nil, fmt.Errorf("key index: %w", err)
	}
	if int64(len(data)) < f.Index.Top-from {
		return nil, fmt.Errorf("key index %s: %w: object ends before its top at byte %d", key, ErrCorrupt, f.Index.Top)
	}
	top, err := decodeIndexTop(key, data[f.Index.Top-from:], f.Index.Top, f.Index.Bytes, f.Rows)
	if err != nil {
		return nil, err
	}
	if from == 0 {
		// The blocks came with the top: keep them for the lookups that follow. A
		// block that fails its check is not kept, so that only a lookup that needs
		// it reads it again and fails, as when blocks are read one by one.
		for b, ref := range top.blocks {
			if blk, err := checkRawBlock(key, ref, data[ref.off:ref.off+ref.n]); err == nil {
				t.raws.AddBlock(f.Index.Path, b, blk, blk.size())
			}
		}
	}
	t.tops.Add(f.Index.Path, top, top.size())
	return top, nil
}

// smallIndex reports whether f's whole key index is at most blockGap bytes: a
// lookup that reads its top reads its blocks with it, and one that has the top
// reads the blocks it needs in one request (fetchBlocks reads through the gaps),
// so the index answers any lookup exactly for at most one request, which is what
// its bloom filter would cost before its false positives. A merge's fragment of
// a few thousand rows is one, as are the level-0 fragments every later commit's
// conflict check meets.
func smallIndex(f Fragment) bool { return f.Index != nil && f.Index.Bytes <= blockGap }

// indexBlocks returns blocks bs (ascending, distinct) of f's key index, decoded,
// from the cache or by ranged reads (fetchBlocks).
func (t *Table) indexBlocks(ctx context.Context, f Fragment, top *indexTop, bs []int) ([]*indexBlock, error) {
	return fetchBlocks(ctx, t, f, top, bs, t.blocks, func(key string, ref indexBlockRef, data []byte) (*indexBlock, int64, error) {
		blk, err := decodeIndexBlock(key, top, ref, data)
		if err != nil {
			return nil, 0, err
		}
		return blk, blk.size(), nil
	})
}

// blockGap is the most bytes between two key-index blocks a lookup needs that
// fetchBlocks reads through rather than reading the two apart: a request costs
// what tens of KiB of transfer do, on an object store (a round trip) and on a
// local disk (an open, a read and a close against a copy of a few microseconds),
// and a merge of random ids into a fragment wants a few blocks of its index a few
// blocks apart.
const blockGap = 64 << 10

// localRuns is the most runs of one key index fetchBlocks reads in one call on
// a Local bucket, one after another.
const localRuns = 8

// fetchBlocks returns blocks bs (ascending, distinct) of f's key index in the form
// decode makes of a block's bytes (with its size for the cache), from cache or by
// ranged reads: blocks missing from the cache that lie within blockGap of each
// other come in one read (the bytes between are read and dropped), all at once
// within ctx's budget of requests (requestsInFlight at most without one).
func fetchBlocks[B any](ctx context.Context, t *Table, f Fragment, top *indexTop, bs []int, cache objectView[B],
	decode func(key string, ref indexBlockRef, data []byte) (B, int64, error)) ([]B, error) {
	out := make([]B, len(bs))
	var missing []int // positions in bs of the blocks to read
	for i, b := range bs {
		if b < 0 || b >= len(top.blocks) {
			return nil, fmt.Errorf("key index %s: no block %d of %d", t.key(f.Index.Path), b, len(top.blocks))
		}
		if blk, ok := cache.GetBlock(f.Index.Path, b); ok {
			out[i] = blk
			continue
		}
		missing = append(missing, i)
	}
	runs := readRuns(len(missing), func(k int) byteRange {
		ref := top.blocks[bs[missing[k]]]
		return byteRange{ref.off, ref.n}
	}, blockGap)
	key := t.key(f.Index.Path)
	use := func(r readRun, data []byte) error {
		for _, i := range missing[r.first:r.end] {
			ref := top.blocks[bs[i]]
			lo := ref.off - r.span.off
			if lo+ref.n > int64(len(data)) {
				return fmt.Errorf("key index %s: %w: object ends before byte %d", key, ErrCorrupt, ref.off+ref.n)
			}
			blk, size, err := decode(key, ref, data[lo:lo+ref.n])
			if err != nil {
				return err
			}
			cache.AddBlock(f.Index.Path, bs[i], blk, size)
			out[i] = blk
		}
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(requestsInFlight)
	if len(runs) > 1 && t.bucket.Local() {
		// Files of this machine: one open for up to localRuns runs, where each
		// request is most of a run's cost (BENCHMARKS.md, stores of millions of
		// rows); more go in several calls at once, so that a disk that has to
		// seek still has reads in flight together.
		for lo := 0; lo < len(runs); lo += localRuns {
			part := runs[lo:min(lo+localRuns, len(runs))]
			g.Go(func() error {
				rs := make([]objstore.ByteRange, len(part))
				for k, r := range part {
					rs[k] = objstore.ByteRange{Off: r.span.off, N: r.span.n}
				}
				data, err := t.getRanges(gctx, key, rs)
				if err != nil {
					return fmt.Errorf("key index: %w", err)
				}
				for k, r := range part {
					if err := use(r, data[k]); err != nil {
						return err
					}
				}
				return nil
			})
		}
	} else {
		for _, r := range runs {
			g.Go(func() error {
				data, err := t.getRange(gctx, key, r.span.off, r.span.n)
				if err != nil {
					return fmt.Errorf("key index: %w", err)
				}
				return use(r, data)
			})
		}
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// indexHit is an id found in a fragment's key index.
type indexHit struct {
	found bool
	off   uint32
	v     rowkey.Version
}

// lookupSorted finds ids (ascending, distinct) in sorted fragment f, reading the
// blocks they fall in, and returns a hit per id.
func (t *Table) lookupSorted(ctx context.Context, f Fragment, ids []string) ([]indexHit, error) {
	top, err := t.indexTopOf(ctx, f)
	if err != nil {
		return nil, err
	}
	of := make([]int, len(ids)) // block of each id, -1 for none
	var bs []int
	for i, id := range ids {
		of[i] = top.find(id)
		if b := of[i]; b >= 0 && (len(bs) == 0 || bs[len(bs)-1] != b) {
			bs = append(bs, b)
		}
	}
	blocks, err := t.rawBlocks(ctx, f, top, bs)
	if err != nil {
		return nil, err
	}
	key := t.key(f.Index.Path)
	hits := make([]indexHit, len(ids))
	var c blockCursor
	k := -1 // position in bs of the block c walks
	for i, id := range ids {
		if of[i] < 0 {
			continue
		}
		if k < 0 || bs[k] != of[i] { // ids ascend, and so do their blocks
			k++
			c.reset(blocks[k])
		}
		blk := blocks[k]
		j, seq, shard, ok, err := c.find(key, len(top.shards), []byte(id))
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		hits[i] = indexHit{found: true, off: uint32(blk.row) + uint32(j),
			v: rowkey.Version{Seq: seq, Shard: top.shards[shard]}}
	}
	return hits, nil
}

// versionsSorted returns the version of every row of sorted fragment f in
// [lo, hi), reading the blocks that hold them.
func (t *Table) versionsSorted(ctx context.Context, f Fragment, lo, hi int64) ([]rowkey.Version, error) {
	top, err := t.indexTopOf(ctx, f)
	if err != nil {
		return nil, err
	}
	first, last := top.blockOf(lo), top.blockOf(hi-1)
	if first < 0 || last < 0 {
		return nil, fmt.Errorf("key index %s: %w: rows [%d,%d) of %d", t.key(f.Index.Path), ErrCorrupt, lo, hi, top.rows)
	}
	bs := make([]int, 0, last-first+1)
	for b := first; b <= last; b++ {
		bs = append(bs, b)
	}
	blocks, err := t.indexBlocks(ctx, f, top, bs)
	if err != nil {
		return nil, err
	}
	out := make([]rowkey.Version, 0, hi-lo)
	for _, blk := range blocks {
		for j := range blk.ids {
			if off := blk.row + int64(j); off >= lo && off < hi {
				out = append(out, rowkey.Version{Seq: blk.seqs[j], Shard: top.shards[blk.shards[j]]})
			}
		}
	}
	if int64(len(out)) != hi-lo {
		return nil, fmt.Errorf("key index %s: %w: %d versions for rows [%d,%d)", t.key(f.Index.Path), ErrCorrupt, len(out), lo, hi)
	}
	return out, nil
}

// rowKeys returns the id and version of the rows of f at offs (ascending): from the
// key index of a sorted fragment, from the id and _seq columns of the row groups
// that hold them otherwise.
func (t *Table) rowKeys(ctx context.Context, s *arrow.Schema, f Fragment, offs []uint32) ([]string, []rowkey.Version, error) {
	if len(offs) == 0 {
		return nil, nil, nil
	}
	ids := make([]string, len(offs))
	vs := make([]rowkey.Version, len(offs))
	if f.Sorted {
		top, err := t.indexTopOf(ctx, f)
		if err != nil {
			return nil, nil, err
		}
		var bs []int
		for _, o := range offs {
			b := top.blockOf(int64(o))
			if b < 0 {
				return nil, nil, fmt.Errorf("key index %s: %w: no row %d", t.key(f.Index.Path), ErrCorrupt, o)
			}
			if len(bs) == 0 || bs[len(bs)-1] != b {
				bs = append(bs, b)
			}
		}
		blocks, err := t.indexBlocks(ctx, f, top, bs)
		if err != nil {
			return nil, nil, err
		}
		for k, o := range offs {
			blk := blocks[slices.Index(bs, top.blockOf(int64(o)))]
			j := int(int64(o) - blk.row)
			ids[k], vs[k] = blk.ids[j], rowkey.Version{Seq: blk.seqs[j], Shard: top.shards[blk.shards[j]]}
		}
		return ids, vs, nil
	}
	ff, err := t.openFragment(ctx, s, f)
	if err != nil {
		return nil, nil, err
	}
	defer ff.Close()
	var groups []int
	for _, o := range offs {
		g, _ := ff.rowGroupOf(int64(o))
		if g < 0 {
			return nil, nil, fmt.Errorf("fragment %s: %w: no row %d", ff.key, ErrCorrupt, o)
		}
		if len(groups) == 0 || groups[len(groups)-1] != g {
			groups = append(groups, g)
		}
	}
	found := 0
	for _, g := range groups {
		err := ff.read(ctx, []string{rowkey.IDColumn, rowkey.SeqColumn}, []int{g}, func(rec arrow.RecordBatch, start int64) error {
			rids, seqs, err := rowkey.Columns(rec)
			if err != nil {
				return fmt.Errorf("fragment %s: %w: %v", ff.key, ErrCorrupt, err)
			}
			for k, o := range offs {
				if i := int64(o) - start; i >= 0 && i < rec.NumRows() {
					ids[k] = strings.Clone(rids.Value(int(i)))
					vs[k] = rowkey.Version{Seq: seqs.Value(int(i)), Shard: f.ShardAt(o)}
					found++
				}
			}
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
	}
	if found != len(offs) {
		return nil, nil, fmt.Errorf("fragment %s: %w: %d of %d rows found", ff.key, ErrCorrupt, found, len(offs))
	}
	return ids, vs, nil
}
