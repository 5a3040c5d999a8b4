package table

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
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
	var c blockCursor
	c.reset(b)
	return c.find(key, nshards, id)
}

// blockCursor looks up ascending ids in one block, walking its entries once for
// all of them: a merge's conflict check probes a small fragment's few blocks with
// hundreds of ids, and a walk from the block's start per id cost a half-block's
// entries each.
type blockCursor struct {
	b    *rawBlock
	p    []byte // the entries not yet decoded
	j    int    // entries decoded
	prev []byte // the id of entry j-1
	seq  uint64 // and its _seq and shard
	sh   uint64
	buf  [128]byte
}

func (c *blockCursor) reset(b *rawBlock) {
	*c = blockCursor{b: b, p: b.body}
	c.prev = c.buf[:0]
}

// find is rawBlock.find from where the cursor is: id must be greater than every
// id looked up through it before.
func (c *blockCursor) find(key string, nshards int, id []byte) (j int, seq uint64, shard uint32, found bool, err error) {
	b := c.b
	bad := func(format string, args ...any) error {
		return fmt.Errorf("key index %s block of row %d: %w: %s", key, b.row, ErrCorrupt, fmt.Sprintf(format, args...))
	}
	// The entry the last lookup stopped at may be this id, or past it.
	if c.j > 0 {
		switch cmp := bytes.Compare(c.prev, id); {
		case cmp == 0:
			return c.j - 1, c.seq, uint32(c.sh), true, nil
		case cmp > 0:
			return c.j - 1, 0, 0, false, nil
		}
	}
	for ; c.j < b.entries; c.j++ {
		p := c.p
		shared, n := binary.Uvarint(p)
		if n <= 0 {
			return 0, 0, 0, false, bad("entry %d: truncated varint", c.j)
		}
		p = p[n:]
		rest, n := binary.Uvarint(p)
		if n <= 0 || rest > uint64(len(p)-n) {
			return 0, 0, 0, false, bad("entry %d: truncated id", c.j)
		}
		p = p[n:]
		if shared > uint64(len(c.prev)) {
			return 0, 0, 0, false, bad("entry %d shares %d bytes of a %d-byte id", c.j, shared, len(c.prev))
		}
		c.prev = append(c.prev[:shared], p[:rest]...)
		p = p[rest:]
		s, n := binary.Uvarint(p)
		if n <= 0 {
			return 0, 0, 0, false, bad("entry %d: truncated varint", c.j)
		}
		p = p[n:]
		sh, n := binary.Uvarint(p)
		if n <= 0 || sh >= uint64(nshards) {
			return 0, 0, 0, false, bad("entry %d: shard %d of %d", c.j, sh, nshards)
		}
		c.p, c.seq, c.sh = p[n:], s, sh
		switch cmp := bytes.Compare(c.prev, id); {
		case cmp == 0:
			c.j++
			return c.j - 1, s, uint32(sh), true, nil
		case cmp > 0: // ids increase: id is not in the block
			c.j++
			return c.j - 1, 0, 0, false, nil
		}
	}
	return b.entries, 0, 0, false, nil
}

// rawBlocks returns blocks bs (ascending, distinct) of f's key index as checked
// bytes, from the cache or by ranged reads (fetchBlocks).
func (t *Table) rawBlocks(ctx context.Context, f Fragment, top *indexTop, bs []int) ([]*rawBlock, error) {
	return fetchBlocks(ctx, t, f, top, bs, t.raws, func(key string, ref indexBlockRef, data []byte) (*rawBlock, int64, error) {
		blk, err := checkRawBlock(key, ref, data)
		if err != nil {
			return nil, 0, err
		}
		return blk, blk.size(), nil
	})
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
