package table

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/RoaringBitmap/roaring/v2"
	"golang.org/x/sync/errgroup"
)

// Reading deletion vectors: one ranged read per vector a fragment points at
// (deletion.go), or for a set of fragments (a commit's conflict check), one read
// per run of vectors packed close together in one object. Vectors are cached by
// their object and offset.

// dvGap is the most bytes between two packed vectors that deletionsOf reads
// through rather than reading the two apart: a vector is tens of bytes to a few
// KiB, so reading a gap this size costs less than a request.
const dvGap = 64 << 10

// deletions returns a fragment's deletion vector (empty when it has none), cached.
// Callers must not modify the result.
func (t *Table) deletions(ctx context.Context, f Fragment) (*roaring.Bitmap, error) {
	d := f.Deletions
	if d == nil {
		return roaring.New(), nil
	}
	if bm, ok := t.dvs.GetBlock(d.Path, int(d.Offset)); ok {
		return bm, nil
	}
	key := t.key(d.Path)
	var data []byte
	var err error
	if d.packed() {
		data, err = t.getRange(ctx, key, d.Offset, d.Bytes)
	} else {
		data, err = t.get(ctx, key)
	}
	if err != nil {
		return nil, fmt.Errorf("deletion vector: %w", err)
	}
	bm, err := decodeDeletionRef(key, *d, data, f.Rows)
	if err != nil {
		return nil, err
	}
	t.dvs.AddBlock(d.Path, int(d.Offset), bm, int64(len(data)))
	return bm, nil
}

// deletionsOf returns the deletion vectors of fs, in fs's order (empty for a
// fragment with none), cached. What is not cached is read at once, within ctx's
// budget of requests: the vectors of one object that lie within dvGap of each
// other in one ranged read, a whole-object vector in one read of its own.
// Callers must not modify the results.
func (t *Table) deletionsOf(ctx context.Context, fs []Fragment) ([]*roaring.Bitmap, error) {
	out := make([]*roaring.Bitmap, len(fs))
	byPath := map[string][]int{} // packed vectors to read, by object: positions in fs
	var paths []string
	var whole []int
	for i, f := range fs {
		d := f.Deletions
		switch {
		case d == nil:
			out[i] = roaring.New()
			continue
		case !d.packed():
			whole = append(whole, i)
			continue
		}
		if bm, ok := t.dvs.GetBlock(d.Path, int(d.Offset)); ok {
			out[i] = bm
			continue
		}
		if byPath[d.Path] == nil {
			paths = append(paths, d.Path)
		}
		byPath[d.Path] = append(byPath[d.Path], i)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(requestsInFlight)
	for _, i := range whole {
		g.Go(func() (err error) {
			out[i], err = t.deletions(gctx, fs[i])
			return err
		})
	}
	for _, p := range paths {
		pos := byPath[p]
		slices.SortFunc(pos, func(a, b int) int { return cmp.Compare(fs[a].Deletions.Offset, fs[b].Deletions.Offset) })
		runs := readRuns(len(pos), func(k int) byteRange {
			d := fs[pos[k]].Deletions
			return byteRange{d.Offset, d.Bytes}
		}, dvGap)
		for _, r := range runs {
			g.Go(func() error { return t.readDeletionRun(gctx, fs, pos[r.first:r.end], r.span, out) })
		}
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// readDeletionRun reads the vectors of fs at positions run (of one object, by
// offset, all within span) in one ranged read of span into out, and caches them.
func (t *Table) readDeletionRun(ctx context.Context, fs []Fragment, run []int, span byteRange, out []*roaring.Bitmap) error {
	key := t.key(fs[run[0]].Deletions.Path)
	data, err := t.getRange(ctx, key, span.off, span.n)
	if err != nil {
		return fmt.Errorf("deletion vector: %w", err)
	}
	for _, i := range run {
		d := fs[i].Deletions
		lo := d.Offset - span.off
		if lo+d.Bytes > int64(len(data)) {
			return fmt.Errorf("%s [%d,+%d): %w: object ends before byte %d", key, d.Offset, d.Bytes, ErrCorrupt, span.off+int64(len(data)))
		}
		bm, err := decodeDeletionRef(key, *d, data[lo:lo+d.Bytes], fs[i].Rows)
		if err != nil {
			return err
		}
		t.dvs.AddBlock(d.Path, int(d.Offset), bm, d.Bytes)
		out[i] = bm
	}
	return nil
}
