package table

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"sort"
	"strings"
)

// A sorted fragment (Fragment.Sorted) has a key index beside it (Fragment.Index):
// every row's id, _seq and shard in row order, which is id order, cut into blocks of
// about indexBlockBytes, and a top index naming each block's first id. Only the top
// stays in memory for long (one entry per block, not per row); a lookup reads the
// one block whose range holds the id. Layout (FORMAT.md, "Key index"):
//
//	block* | top | trailer
//	block:   entry* | crc32c(entries) uint32 LE
//	entry:   uvarint shared | uvarint rest | rest bytes | uvarint seq | uvarint shard
//	top:     envelope "TMKT" of: uvarint rows | uvarint shards | (uvarint len, name)* |
//	         uvarint blocks | (uvarint len, first id, uvarint offset, uvarint bytes,
//	         uvarint entries)* | uvarint groups | (uvarint rows, uvarint offset,
//	         uvarint bytes)*
//	trailer: top offset uint64 LE | "TMKI"
//
// An entry's id shares its first `shared` bytes with the previous entry's id in the
// same block (the first entry of a block shares none, so a block decodes alone); its
// shard is an index into the top's shard names. Block i holds rows
// [sum of earlier blocks' entries, + its entries). The groups are the fragment's
// Parquet row groups, their rows and where their column chunks lie in the data
// file: a reader whose footer of the fragment is not cached fetches the footer and
// the row group it needs at once instead of one after the other.
const (
	indexMagic        = "TMKI"
	indexTopMagic     = "TMKT"
	indexTrailerBytes = 8 + 4
	// indexBlockBytes is the size a block is cut at: one block is one ranged read of
	// a few KiB, and the top holds one entry per block (about 1/300 of the rows for
	// ids of 16 bytes), small enough to cache for every fragment of a large store.
	indexBlockBytes = 8 << 10
	// maxIndexShards bounds the shard names of one index: a fragment mixes the shards
	// of its sources, a few dozen workers, never more than a merge's budget allows.
	maxIndexShards = 1 << 16
)

// indexBlockRef is the top's entry of one block.
type indexBlockRef struct {
	first   string // id of its first entry
	off, n  int64  // byte range in the index object
	row     int64  // row offset of its first entry
	entries int
}

// indexGroup is a row group of a sorted fragment: its rows and its bytes.
type indexGroup struct {
	rows   int64
	off, n int64
}

// indexTop is the decoded top of a key index: what a reader keeps per fragment.
type indexTop struct {
	rows   int64
	shards []string
	blocks []indexBlockRef
	groups []indexGroup
}

// groupOf returns the row group holding row off and its first row; ok false past
// the last.
func (t *indexTop) groupOf(off int64) (g int, first int64, ok bool) {
	for i, gr := range t.groups {
		if off < first+gr.rows {
			return i, first, true
		}
		first += gr.rows
	}
	return -1, first, false
}

// size estimates the memory the top holds, for the cache.
func (t *indexTop) size() int64 {
	n := int64(64 + 48*len(t.blocks) + 24*len(t.groups))
	for _, b := range t.blocks {
		n += int64(len(b.first))
	}
	for _, s := range t.shards {
		n += int64(len(s)) + 16
	}
	return n
}

// find returns the block whose range may hold id: the last block whose first id is
// at most id; -1 when id sorts before every row.
func (t *indexTop) find(id string) int {
	return sort.Search(len(t.blocks), func(i int) bool { return t.blocks[i].first > id }) - 1
}

// blockOf returns the block holding row offset off, -1 past the end.
func (t *indexTop) blockOf(off int64) int {
	b := sort.Search(len(t.blocks), func(i int) bool { return t.blocks[i].row > off }) - 1
	if b < 0 || off >= t.blocks[b].row+int64(t.blocks[b].entries) {
		return -1
	}
	return b
}

// indexBlock is one decoded block: parallel slices of its entries.
type indexBlock struct {
	row    int64 // row offset of ids[0]
	ids    []string
	seqs   []uint64
	shards []uint32
}

func (b *indexBlock) size() int64 {
	n := int64(64 + 16*len(b.ids) + 8*len(b.seqs) + 4*len(b.shards))
	for _, id := range b.ids {
		n += int64(len(id))
	}
	return n
}

// search returns the position of id in the block and whether it is there.
func (b *indexBlock) search(id string) (int, bool) {
	i := sort.SearchStrings(b.ids, id)
	return i, i < len(b.ids) && b.ids[i] == id
}

// indexWriter builds a key index from rows added in strictly increasing id order.
type indexWriter struct {
	out    bytes.Buffer
	block  []byte
	prev   string
	first  string
	n      int // entries in the current block
	rows   int64
	top    indexTop
	shards map[string]uint32
	tmp    [binary.MaxVarintLen64]byte
}

func newIndexWriter() *indexWriter { return &indexWriter{shards: map[string]uint32{}} }

// add appends the next row. Ids must strictly increase: a sorted fragment holds at
// most one row per id, and lookups binary-search.
func (w *indexWriter) add(id string, seq uint64, shard string) error {
	if w.rows > 0 && id <= w.prev {
		return fmt.Errorf("key index: id %q after %q: rows are not in strictly increasing id order", id, w.prev)
	}
	si, ok := w.shards[shard]
	if !ok {
		if len(w.top.shards) >= maxIndexShards {
			return fmt.Errorf("key index: more than %d shards", maxIndexShards)
		}
		si = uint32(len(w.top.shards))
		w.shards[shard] = si
		w.top.shards = append(w.top.shards, shard)
	}
	shared := 0
	if w.n > 0 {
		for shared < len(id) && shared < len(w.prev) && id[shared] == w.prev[shared] {
			shared++
		}
	} else {
		w.first = strings.Clone(id)
	}
	w.block = w.uvarint(w.block, uint64(shared))
	w.block = w.uvarint(w.block, uint64(len(id)-shared))
	w.block = append(w.block, id[shared:]...)
	w.block = w.uvarint(w.block, seq)
	w.block = w.uvarint(w.block, uint64(si))
	w.prev = strings.Clone(id)
	w.n++
	w.rows++
	if len(w.block) >= indexBlockBytes {
		w.cut()
	}
	return nil
}

func (w *indexWriter) uvarint(b []byte, v uint64) []byte {
	n := binary.PutUvarint(w.tmp[:], v)
	return append(b, w.tmp[:n]...)
}

// cut closes the current block.
func (w *indexWriter) cut() {
	if w.n == 0 {
		return
	}
	w.block = binary.LittleEndian.AppendUint32(w.block, crc32.Checksum(w.block, castagnoli))
	w.top.blocks = append(w.top.blocks, indexBlockRef{
		first: w.first, off: int64(w.out.Len()), n: int64(len(w.block)),
		row: w.rows - int64(w.n), entries: w.n,
	})
	w.out.Write(w.block)
	w.block, w.n = w.block[:0], 0
}

// finish returns the encoded index, the offset of its top, and the decoded top,
// with the fragment's row groups.
func (w *indexWriter) finish(groups []indexGroup) ([]byte, int64, *indexTop) {
	w.cut()
	w.top.rows = w.rows
	w.top.groups = groups
	topOff := int64(w.out.Len())
	w.out.Write(encodeIndexTop(&w.top))
	var trailer [indexTrailerBytes]byte
	binary.LittleEndian.PutUint64(trailer[:], uint64(topOff))
	copy(trailer[8:], indexMagic)
	w.out.Write(trailer[:])
	top := w.top
	return w.out.Bytes(), topOff, &top
}

func encodeIndexTop(t *indexTop) []byte {
	var p []byte
	p = binary.AppendUvarint(p, uint64(t.rows))
	p = binary.AppendUvarint(p, uint64(len(t.shards)))
	for _, s := range t.shards {
		p = binary.AppendUvarint(p, uint64(len(s)))
		p = append(p, s...)
	}
	p = binary.AppendUvarint(p, uint64(len(t.blocks)))
	for _, b := range t.blocks {
		p = binary.AppendUvarint(p, uint64(len(b.first)))
		p = append(p, b.first...)
		p = binary.AppendUvarint(p, uint64(b.off))
		p = binary.AppendUvarint(p, uint64(b.n))
		p = binary.AppendUvarint(p, uint64(b.entries))
	}
	p = binary.AppendUvarint(p, uint64(len(t.groups)))
	for _, g := range t.groups {
		p = binary.AppendUvarint(p, uint64(g.rows))
		p = binary.AppendUvarint(p, uint64(g.off))
		p = binary.AppendUvarint(p, uint64(g.n))
	}
	return seal(indexTopMagic, p)
}

// byteReader decodes uvarints and strings from a payload, remembering the first
// error so a decoder checks once at the end of a step.
type byteReader struct {
	p   []byte
	err error
}

func (r *byteReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.p)
	if n <= 0 {
		r.err = fmt.Errorf("truncated or overlong varint")
		return 0
	}
	r.p = r.p[n:]
	return v
}

// bytes returns the next n bytes (sharing the payload).
func (r *byteReader) bytes(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.p)) {
		r.err = fmt.Errorf("%d bytes wanted, %d left", n, len(r.p))
		return nil
	}
	b := r.p[:n]
	r.p = r.p[n:]
	return b
}

// decodeIndexTop decodes the top of the index at key, of size bytes, from data,
// which holds the object's bytes from the top's offset to its end (trailer
// included), and checks it against the fragment's row count.
func decodeIndexTop(key string, data []byte, topOff, size, rows int64) (*indexTop, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("key index %s: %w: %s", key, ErrCorrupt, fmt.Sprintf(format, args...))
	}
	if len(data) < indexTrailerBytes || string(data[len(data)-4:]) != indexMagic {
		return nil, bad("no trailer")
	}
	if off := int64(binary.LittleEndian.Uint64(data[len(data)-indexTrailerBytes:])); off != topOff {
		return nil, bad("top at %d, manifest says %d", off, topOff)
	}
	payload, err := unseal(key, indexTopMagic, data[:len(data)-indexTrailerBytes])
	if err != nil {
		return nil, err
	}
	r := &byteReader{p: payload}
	t := &indexTop{rows: int64(r.uvarint())}
	ns := r.uvarint()
	if r.err == nil && (ns > maxIndexShards || ns > uint64(len(r.p))) {
		return nil, bad("%d shards", ns)
	}
	for i := uint64(0); i < ns && r.err == nil; i++ {
		t.shards = append(t.shards, string(r.bytes(r.uvarint())))
	}
	nb := r.uvarint()
	if r.err == nil && nb > uint64(len(r.p)) { // every block entry takes bytes
		return nil, bad("%d blocks in %d bytes", nb, len(r.p))
	}
	var row, next int64
	for i := uint64(0); i < nb && r.err == nil; i++ {
		b := indexBlockRef{first: string(r.bytes(r.uvarint()))}
		b.off, b.n, b.entries = int64(r.uvarint()), int64(r.uvarint()), int(r.uvarint())
		if r.err != nil {
			break
		}
		switch {
		case b.off != next || b.n < 5 || b.off+b.n > topOff || b.entries < 1 || int64(b.entries) > b.n:
			return nil, bad("block %d at [%d,+%d) with %d entries", i, b.off, b.n, b.entries)
		case i > 0 && b.first <= t.blocks[i-1].first:
			return nil, bad("block %d starts at %q, not after block %d's %q", i, b.first, i-1, t.blocks[i-1].first)
		}
		b.row = row
		row += int64(b.entries)
		next = b.off + b.n
		t.blocks = append(t.blocks, b)
	}
	ng := r.uvarint()
	if r.err == nil && ng > uint64(len(r.p)) {
		return nil, bad("%d row groups in %d bytes", ng, len(r.p))
	}
	var grows, gend int64
	for i := uint64(0); i < ng && r.err == nil; i++ {
		g := indexGroup{rows: int64(r.uvarint()), off: int64(r.uvarint()), n: int64(r.uvarint())}
		if r.err == nil && (g.rows < 1 || g.off < gend || g.n < 1 || g.off > math.MaxInt64-g.n) {
			return nil, bad("row group %d of %d rows at [%d,+%d)", i, g.rows, g.off, g.n)
		}
		grows += g.rows
		gend = g.off + g.n
		t.groups = append(t.groups, g)
	}
	switch {
	case r.err != nil:
		return nil, bad("%v", r.err)
	case grows != t.rows:
		return nil, bad("row groups of %d rows, the top says %d", grows, t.rows)
	case len(r.p) != 0:
		return nil, bad("%d bytes after the top", len(r.p))
	case next != topOff:
		return nil, bad("blocks end at %d, top starts at %d", next, topOff)
	case t.rows != row || t.rows != rows:
		return nil, bad("%d rows in the top, %d in its blocks, the fragment has %d", t.rows, row, rows)
	case topOff+int64(len(data)) != size:
		return nil, bad("%d bytes, manifest says %d", topOff+int64(len(data)), size)
	}
	return t, nil
}

// decodeIndexBlock decodes block ref of the index at key from its bytes.
func decodeIndexBlock(key string, top *indexTop, ref indexBlockRef, data []byte) (*indexBlock, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("key index %s block at %d: %w: %s", key, ref.off, ErrCorrupt, fmt.Sprintf(format, args...))
	}
	if int64(len(data)) != ref.n {
		return nil, bad("%d bytes, top says %d", len(data), ref.n)
	}
	body := data[:len(data)-4]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(data[len(body):]) {
		return nil, bad("checksum mismatch")
	}
	b := &indexBlock{row: ref.row, ids: make([]string, 0, ref.entries), seqs: make([]uint64, 0, ref.entries),
		shards: make([]uint32, 0, ref.entries)}
	r := &byteReader{p: body}
	// The ids are built end to end in one buffer and become substrings of one
	// string: a lookup decodes a block of a few hundred ids for one of them, and
	// an allocation per id was most of its cost.
	buf := make([]byte, 0, 2*len(body))
	ends := make([]int, 0, ref.entries)
	var prev []byte
	for i := 0; i < ref.entries; i++ {
		shared := r.uvarint()
		rest := r.bytes(r.uvarint())
		seq, shard := r.uvarint(), r.uvarint()
		if r.err != nil {
			return nil, bad("entry %d: %v", i, r.err)
		}
		if shared > uint64(len(prev)) || (i == 0 && shared != 0) {
			return nil, bad("entry %d shares %d bytes of a %d-byte id", i, shared, len(prev))
		}
		if shard >= uint64(len(top.shards)) {
			return nil, bad("entry %d: shard %d of %d", i, shard, len(top.shards))
		}
		start := len(buf)
		buf = append(append(buf, prev[:shared]...), rest...)
		id := buf[start:]
		if i > 0 && bytes.Compare(id, prev) <= 0 {
			return nil, bad("entry %d: id %q not after %q", i, id, prev)
		}
		if i == 0 && string(id) != ref.first {
			return nil, bad("first id %q, top says %q", id, ref.first)
		}
		prev = id // stays valid when buf grows: the old array is never written again
		ends = append(ends, len(buf))
		b.seqs = append(b.seqs, seq)
		b.shards = append(b.shards, uint32(shard))
	}
	if len(r.p) != 0 {
		return nil, bad("%d bytes after %d entries", len(r.p), ref.entries)
	}
	all, start := string(buf), 0
	for _, end := range ends {
		b.ids = append(b.ids, all[start:end])
		start = end
	}
	return b, nil
}
