package table

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"golang.org/x/sync/errgroup"
)

// A point lookup wants one id of a key-index block of a few hundred: it keeps the
// block as its checked bytes (rawBlock) and walks the entries in place up to the
// id, instead of decoding every entry into strings, which was most of a lookup's
// CPU once its requests were in flight together. Pages and conflict checks that
// walk whole blocks keep the decoded form (indexBlock); the two share the blocks'
// quarter of the table cache, under kinds of their own.

// rawBlock is one key-index block's entries, their checksum verified.
type rawBlock struct {
	row     int64 // row offset of its first entry
	entries int
	body    []byte // entries, without the checksum
}

func (b *rawBlock) size() int64 { return 48 + int64(len(b.body)) }

// find returns the position of id in the block and its _seq and shard number;
// found false when the block does not hold it. It decodes entries only up to id.
func (b *rawBlock) find(key string, nshards int, id []byte) (j int, seq uint64, shard uint32, found bool, err error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("key index %s block of row %d: %w: %s", key, b.row, ErrCorrupt, fmt.Sprintf(format, args...))
	}
	var cur [128]byte
	prev := cur[:0]
	p := b.body
	for j = 0; j < b.entries; j++ {
		shared, n := binary.Uvarint(p)
		if n <= 0 {
			return 0, 0, 0, false, bad("entry %d: truncated varint", j)
		}
		p = p[n:]
		rest, n := binary.Uvarint(p)
		if n <= 0 || rest > uint64(len(p)-n) {
			return 0, 0, 0, false, bad("entry %d: truncated id", j)
		}
		p = p[n:]
		if shared > uint64(len(prev)) {
			return 0, 0, 0, false, bad("entry %d shares %d bytes of a %d-byte id", j, shared, len(prev))
		}
		prev = append(prev[:shared], p[:rest]...)
		p = p[rest:]
		s, n := binary.Uvarint(p)
		if n <= 0 {
			return 0, 0, 0, false, bad("entry %d: truncated varint", j)
		}
		p = p[n:]
		sh, n := binary.Uvarint(p)
		if n <= 0 || sh >= uint64(nshards) {
			return 0, 0, 0, false, bad("entry %d: shard %d of %d", j, sh, nshards)
		}
		p = p[n:]
		switch c := bytes.Compare(prev, id); {
		case c == 0:
			return j, s, uint32(sh), true, nil
		case c > 0: // ids increase: id is not in the block
			return j, 0, 0, false, nil
		}
	}
	return b.entries, 0, 0, false, nil
}

// rawBlocks returns blocks bs (ascending, distinct) of f's key index as checked
// bytes, from the cache or by ranged reads: runs of adjacent missing blocks in one
// read each, all at once within ctx's budget of requests.
func (t *Table) rawBlocks(ctx context.Context, f Fragment, top *indexTop, bs []int) ([]*rawBlock, error) {
	out := make([]*rawBlock, len(bs))
	var runs [][2]int // [first, last] positions in bs of runs of adjacent missing blocks
	for i, b := range bs {
		if b < 0 || b >= len(top.blocks) {
			return nil, fmt.Errorf("key index %s: no block %d of %d", t.key(f.Index.Path), b, len(top.blocks))
		}
		if blk, ok := t.raws.GetBlock(f.Index.Path, b); ok {
			out[i] = blk
			continue
		}
		if k := len(runs) - 1; k >= 0 && runs[k][1] == i-1 && bs[i-1] == b-1 {
			runs[k][1] = i
		} else {
			runs = append(runs, [2]int{i, i})
		}
	}
	key := t.key(f.Index.Path)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(requestsInFlight)
	for _, r := range runs {
		g.Go(func() error {
			first, last := top.blocks[bs[r[0]]], top.blocks[bs[r[1]]]
			data, err := t.getRange(gctx, key, first.off, last.off+last.n-first.off)
			if err != nil {
				return fmt.Errorf("key index: %w", err)
			}
			for i := r[0]; i <= r[1]; i++ {
				ref := top.blocks[bs[i]]
				lo := ref.off - first.off
				if lo+ref.n > int64(len(data)) {
					return fmt.Errorf("key index %s: %w: object ends before byte %d", key, ErrCorrupt, ref.off+ref.n)
				}
				blk, err := checkRawBlock(key, ref, data[lo:lo+ref.n])
				if err != nil {
					return err
				}
				t.raws.AddBlock(f.Index.Path, bs[i], blk, blk.size())
				out[i] = blk
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// checkRawBlock verifies block ref's bytes (its length and checksum) and keeps
// its entries.
func checkRawBlock(key string, ref indexBlockRef, data []byte) (*rawBlock, error) {
	if int64(len(data)) != ref.n {
		return nil, fmt.Errorf("key index %s block at %d: %w: %d bytes, top says %d", key, ref.off, ErrCorrupt, len(data), ref.n)
	}
	body := data[:len(data)-4]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(data[len(body):]) {
		return nil, fmt.Errorf("key index %s block at %d: %w: checksum mismatch", key, ref.off, ErrCorrupt)
	}
	return &rawBlock{row: ref.row, entries: ref.entries, body: body}, nil
}
