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
