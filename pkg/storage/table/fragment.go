package table

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

// encodeParquet writes recs (all of schema s) as one Parquet file: zstd, row groups
// of rowGroupRows rows, the id column plain (no dictionary), the Arrow schema stored so nested and fixed-size types read
// back exactly. It also returns where each row group lies in the file, which a
// sorted fragment's key index records.
func encodeParquet(s *arrow.Schema, recs []arrow.RecordBatch, rowGroupRows int64) ([]byte, []indexGroup, error) {
	var buf bytes.Buffer
	props := parquet.NewWriterProperties(
		parquet.WithCompression(compress.Codecs.Zstd),
		parquet.WithMaxRowGroupLength(rowGroupRows),
		parquet.WithStats(true),
		// A fragment's ids are distinct, so their dictionary would be as large as
		// the column, and a point read would decode it whole before its one row.
		parquet.WithDictionaryFor(rowkey.IDColumn, false),
	)
	w, err := pqarrow.NewFileWriter(s, &buf, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		return nil, nil, fmt.Errorf("parquet writer: %w", err)
	}
	for _, r := range recs {
		if r.NumRows() == 0 {
			continue
		}
		// WriteBuffered fills a row group up to rowGroupRows across records; Write
		// would cut one per record, and a merge of 32 generations of 25 rows would
		// then cost every later key-index read 32 requests instead of one.
		if err := w.WriteBuffered(r); err != nil {
			_ = w.Close()
			return nil, nil, fmt.Errorf("parquet write: %w", err)
		}
	}
	if err := w.Close(); err != nil {
		return nil, nil, fmt.Errorf("parquet close: %w", err)
	}
	md, err := w.FileMetadata()
	if err != nil {
		return nil, nil, fmt.Errorf("parquet metadata: %w", err)
	}
	groups, err := groupsOf(md)
	if err != nil {
		return nil, nil, err
	}
	return buf.Bytes(), groups, nil
}

// groupsOf returns each row group's rows and the range of its column chunks.
func groupsOf(md *metadata.FileMetaData) ([]indexGroup, error) {
	groups := make([]indexGroup, md.NumRowGroups())
	for g := range groups {
		rg := md.RowGroup(g)
		lo, hi := int64(-1), int64(0)
		for c := 0; c < rg.NumColumns(); c++ {
			cc, err := rg.ColumnChunk(c)
			if err != nil {
				return nil, fmt.Errorf("parquet metadata: row group %d column %d: %w", g, c, err)
			}
			start := chunkStart(cc.DataPageOffset(), cc.HasDictionaryPage(), cc.DictionaryPageOffset())
			if lo < 0 || start < lo {
				lo = start
			}
			hi = max(hi, start+cc.TotalCompressedSize())
		}
		groups[g] = indexGroup{rows: rg.NumRows(), off: lo, n: hi - lo}
	}
	return groups, nil
}

// chunkStart is where a column chunk's bytes begin: its dictionary page when it has
// one before its data pages, as the decoder reads it.
func chunkStart(dataOff int64, hasDict bool, dictOff int64) int64 {
	if hasDict && dictOff > 0 && dataOff > dictOff {
		return dictOff
	}
	return dataOff
}

// fragmentFile is an open Parquet fragment. Readers of untrusted bytes can panic
// inside arrow-go; every call through it converts a panic into ErrCorrupt naming the
// object, because a corrupt fragment must fail a read, not the process.
type fragmentFile struct {
	ra     *fragmentReader
	key    string
	schema *arrow.Schema // the table's schema; batches are returned with its types
	pf     *file.Reader
	fr     *pqarrow.FileReader
	starts []int64 // groupStarts, once computed
}

// openFragment opens f for reading. With its footer cached it makes no request;
// otherwise it reads the footer with one ranged request at the end of the object.
func (t *Table) openFragment(ctx context.Context, s *arrow.Schema, f Fragment) (*fragmentFile, error) {
	return t.openFragmentFor(ctx, s, f, nil)
}

// openFragmentFor is openFragment for a reader that will read the bytes of group
// (when not nil) next: when the footer is not cached, they are read at once with it
// (two requests in one round trip), and kept for that read.
func (t *Table) openFragmentFor(ctx context.Context, s *arrow.Schema, f Fragment, group *indexGroup) (ff *fragmentFile, err error) {
	key := t.key(f.Path)
	ra := newFragmentReader(ctx, t, key, f.Bytes)
	defer recoverCorrupt(key, &err)
	var ropts []file.ReadOption
	md, cached := t.footers.Get(f.Path)
	if cached {
		ropts = append(ropts, file.WithMetadata(md)) // skips the footer reads
	} else {
		if f.Bytes <= 0 {
			return nil, fmt.Errorf("fragment %s: %w: manifest says %d bytes", key, ErrCorrupt, f.Bytes)
		}
		n := min(f.Bytes, footerRead)
		ranges := []byteRange{{f.Bytes - n, n}}
		if group != nil && n < f.Bytes {
			ranges = append(ranges, byteRange{group.off, group.n})
		}
		if err := ra.prefetch(ctx, ranges); err != nil {
			return nil, err
		}
		// A fragment that fits in that read stays in memory while it is open:
		// small fragments cost one request, not two.
		switch {
		case n >= f.Bytes:
			ra.whole = true
		case group != nil:
			defer ra.keep(byteRange{group.off, group.n})
		default:
			defer ra.drop()
		}
	}
	pf, err := file.NewParquetReader(io.NewSectionReader(ra, 0, f.Bytes), ropts...)
	if err != nil {
		return nil, ra.classify(err)
	}
	if !cached {
		// Footers are immutable; the in-memory form is a few times the encoded size.
		t.footers.Add(f.Path, pf.MetaData(), 4*int64(pf.MetaData().Size()))
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: t.opts.RowGroupRows}, memory.DefaultAllocator)
	if err != nil {
		_ = pf.Close()
		return nil, ra.classify(err)
	}
	if pf.NumRows() != f.Rows {
		_ = pf.Close()
		return nil, fmt.Errorf("fragment %s: %w: %d rows, manifest says %d", key, ErrCorrupt, pf.NumRows(), f.Rows)
	}
	return &fragmentFile{ra: ra, key: key, schema: s, pf: pf, fr: fr}, nil
}

func (ff *fragmentFile) Close() error { return ff.pf.Close() }

// recoverCorrupt turns a panic in a decoder into an ErrCorrupt error for key.
func recoverCorrupt(key string, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("fragment %s: %w: decoder panicked: %v", key, ErrCorrupt, r)
	}
}

// leaves returns the Parquet leaf column indices of the named top-level columns, in
// the order given.
func (ff *fragmentFile) leaves(names []string) ([]int, error) {
	var out []int
	for _, n := range names {
		found := false
		for i := range ff.fr.Manifest.Fields {
			sf := &ff.fr.Manifest.Fields[i]
			if sf.Field.Name == n {
				out = appendLeaves(out, sf)
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("fragment %s: %w: no column %q", ff.key, ErrCorrupt, n)
		}
	}
	return out, nil
}

func appendLeaves(out []int, sf *pqarrow.SchemaField) []int {
	if sf.IsLeaf() {
		return append(out, sf.ColIndex)
	}
	for i := range sf.Children {
		out = appendLeaves(out, &sf.Children[i])
	}
	return out
}

// read streams the named columns of the given row groups (nil = all) to fn, each
// batch with the row offset of its first row within the fragment. Each row group's
// column chunks are fetched together (coalesced where they are close, the rest at
// most chunkReads at once) before it is decoded, instead of one request after
// another per chunk.
func (ff *fragmentFile) read(ctx context.Context, columns []string, rowGroups []int, fn func(rec arrow.RecordBatch, offset int64) error) (err error) {
	defer recoverCorrupt(ff.key, &err)
	leaves, err := ff.leaves(columns)
	if err != nil {
		return err
	}
	md := ff.pf.MetaData()
	if rowGroups == nil {
		rowGroups = make([]int, md.NumRowGroups())
		for g := range rowGroups {
			rowGroups[g] = g
		}
	}
	var offset int64
	if len(rowGroups) > 0 {
		for g := 0; g < rowGroups[0]; g++ {
			offset += md.RowGroup(g).NumRows()
		}
		for i := 1; i < len(rowGroups); i++ {
			if rowGroups[i] != rowGroups[i-1]+1 {
				return fmt.Errorf("fragment %s: row groups must be contiguous", ff.key)
			}
		}
	}
	fields := make([]arrow.Field, len(columns))
	for i, c := range columns {
		fields[i] = ff.schema.Field(ff.schema.FieldIndices(c)[0])
	}
	want := arrow.NewSchema(fields, nil)
	for _, g := range rowGroups {
		if g < 0 || g >= md.NumRowGroups() {
			return fmt.Errorf("fragment %s: %w: no row group %d", ff.key, ErrCorrupt, g)
		}
		n, err := ff.readGroup(ctx, want, leaves, g, offset, fn)
		if err != nil {
			return err
		}
		offset += n
	}
	return nil
}

// readGroup reads one row group (see read) and returns its row count.
func (ff *fragmentFile) readGroup(ctx context.Context, want *arrow.Schema, leaves []int, g int, offset int64, fn func(rec arrow.RecordBatch, offset int64) error) (int64, error) {
	ranges, err := ff.chunkRanges(g, leaves)
	if err != nil {
		return 0, err
	}
	if err := ff.ra.prefetch(ctx, ranges); err != nil {
		return 0, err
	}
	defer ff.ra.drop()
	rr, err := ff.fr.GetRecordReader(ctx, leaves, []int{g})
	if err != nil {
		return 0, ff.ra.classify(err)
	}
	defer rr.Release()
	start := offset
	for rr.Next() {
		rec, err := retypeRecord(want, rr.RecordBatch())
		if err != nil {
			return 0, fmt.Errorf("fragment %s: %w: %v", ff.key, ErrCorrupt, err)
		}
		err = fn(rec, offset)
		rec.Release()
		if err != nil {
			return 0, err
		}
		offset += rec.NumRows()
	}
	if err := rr.Err(); err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, ff.ra.classify(err)
	}
	return offset - start, nil
}

// readRowsAt returns the rows at offs (ascending offsets within row group g) of
// the named columns as one batch, in the order of offs. It fetches the group's
// column chunks as readGroup does but decodes only from the first row wanted to
// the last: the decoder skips to the first (SeekToRow: the values before it are
// discarded, not built into arrays) and builds one batch of that span. A point
// read of one row of a 2,048-row group then costs the pages' decompression, not
// the group's arrays, which were most of a batch get's time.
func (ff *fragmentFile) readRowsAt(ctx context.Context, columns []string, g int, offs []int64) (_ arrow.RecordBatch, err error) {
	defer recoverCorrupt(ff.key, &err)
	md := ff.pf.MetaData()
	if g < 0 || g >= md.NumRowGroups() {
		return nil, fmt.Errorf("fragment %s: %w: no row group %d", ff.key, ErrCorrupt, g)
	}
	first, last := offs[0], offs[len(offs)-1]
	if first < 0 || last >= md.RowGroup(g).NumRows() {
		return nil, fmt.Errorf("fragment %s: %w: rows [%d,%d] of row group %d of %d rows", ff.key, ErrCorrupt, first, last, g, md.RowGroup(g).NumRows())
	}
	leaves, err := ff.leaves(columns)
	if err != nil {
		return nil, err
	}
	fields := make([]arrow.Field, len(columns))
	for i, c := range columns {
		fields[i] = ff.schema.Field(ff.schema.FieldIndices(c)[0])
	}
	ranges, err := ff.chunkRanges(g, leaves)
	if err != nil {
		return nil, err
	}
	if err := ff.ra.prefetch(ctx, ranges); err != nil {
		return nil, err
	}
	defer ff.ra.drop()
	ff.fr.Props.BatchSize = last - first + 1 // this open file's reader, no one else's
	rr, err := ff.fr.GetRecordReader(ctx, leaves, []int{g})
	if err != nil {
		return nil, ff.ra.classify(err)
	}
	defer rr.Release()
	if first > 0 {
		if err := rr.SeekToRow(first); err != nil {
			return nil, ff.ra.classify(err)
		}
	}
	if !rr.Next() {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err := rr.Err(); err != nil {
			return nil, ff.ra.classify(err)
		}
		return nil, fmt.Errorf("fragment %s: %w: row group %d ends before row %d", ff.key, ErrCorrupt, g, first)
	}
	rec, err := retypeRecord(arrow.NewSchema(fields, nil), rr.RecordBatch())
	if err != nil {
		return nil, fmt.Errorf("fragment %s: %w: %v", ff.key, ErrCorrupt, err)
	}
	if rec.NumRows() != last-first+1 {
		rec.Release()
		return nil, fmt.Errorf("fragment %s: %w: %d rows from row %d of row group %d, want %d", ff.key, ErrCorrupt, rec.NumRows(), first, g, last-first+1)
	}
	if int64(len(offs)) == rec.NumRows() { // every row of the span
		return rec, nil
	}
	defer rec.Release()
	take := make([]int64, len(offs))
	for i, o := range offs {
		take[i] = o - first
	}
	rows, err := takeRows(ctx, rec, take)
	if err != nil {
		return nil, fmt.Errorf("fragment %s: %w", ff.key, err)
	}
	return rows, nil
}

// chunkRanges returns the byte ranges of the given leaf columns' chunks in row group
// g, computed as the decoder computes them (the dictionary page first when there is
// one).
func (ff *fragmentFile) chunkRanges(g int, leaves []int) ([]byteRange, error) {
	rg := ff.pf.MetaData().RowGroup(g)
	out := make([]byteRange, 0, len(leaves))
	for _, l := range leaves {
		cc, err := rg.ColumnChunk(l)
		if err != nil {
			return nil, fmt.Errorf("fragment %s: %w: row group %d column %d: %v", ff.key, ErrCorrupt, g, l, err)
		}
		start := chunkStart(cc.DataPageOffset(), cc.HasDictionaryPage(), cc.DictionaryPageOffset())
		n := cc.TotalCompressedSize()
		if start < 0 || n < 0 || start+n > ff.ra.size {
			return nil, fmt.Errorf("fragment %s: %w: row group %d column %d at [%d,+%d) in %d bytes", ff.key, ErrCorrupt, g, l, start, n, ff.ra.size)
		}
		out = append(out, byteRange{start, n})
	}
	return out, nil
}

// groupStarts returns the offset of each row group's first row, and past them the
// fragment's row count: computed once per open file, so a walk that asks for the
// group of every row it passes does not add up the groups each time.
func (ff *fragmentFile) groupStarts() []int64 {
	if ff.starts == nil {
		md := ff.pf.MetaData()
		ff.starts = make([]int64, md.NumRowGroups()+1)
		for g := 0; g < md.NumRowGroups(); g++ {
			ff.starts[g+1] = ff.starts[g] + md.RowGroup(g).NumRows()
		}
	}
	return ff.starts
}

// groupStart returns the offset of row group g's first row.
func (ff *fragmentFile) groupStart(g int) int64 { return ff.groupStarts()[g] }

// columnNames is the names of s's columns, in its order.
func columnNames(s *arrow.Schema) []string {
	out := make([]string, s.NumFields())
	for i, f := range s.Fields() {
		out[i] = f.Name
	}
	return out
}

// rowGroupOf returns the row group holding row offset and that group's first row
// (-1 past the last row).
func (ff *fragmentFile) rowGroupOf(offset int64) (group int, first int64) {
	starts := ff.groupStarts()
	g := sort.Search(len(starts)-1, func(g int) bool { return starts[g+1] > offset })
	if offset < 0 || g >= len(starts)-1 {
		return -1, starts[len(starts)-1]
	}
	return g, starts[g]
}

// keyIndex maps each id in a fragment to its row offset and _seq. Fragments never
// hold two rows for one id (Prepare deduplicates), so the map is exact.
type keyIndex struct {
	offsets map[string]uint32
	seqs    []uint64
}

func (k *keyIndex) size() int64 {
	n := int64(len(k.seqs)) * 8
	for id := range k.offsets {
		n += int64(len(id)) + 56 // string header, value, and map bucket overhead
	}
	return n
}

// keyIndex returns the fragment's id index, from the cache or by reading its id and
// _seq columns.
func (t *Table) keyIndex(ctx context.Context, s *arrow.Schema, f Fragment) (*keyIndex, error) {
	if k, ok := t.keys.Get(f.Path); ok {
		return k, nil
	}
	ff, err := t.openFragment(ctx, s, f)
	if err != nil {
		return nil, err
	}
	defer ff.Close()
	k := &keyIndex{offsets: make(map[string]uint32, f.Rows), seqs: make([]uint64, 0, f.Rows)}
	err = ff.read(ctx, []string{rowkey.IDColumn, rowkey.SeqColumn}, nil, func(rec arrow.RecordBatch, _ int64) error {
		ids, ok1 := rec.Column(0).(*array.String)
		seqs, ok2 := rec.Column(1).(*array.Uint64)
		if !ok1 || !ok2 {
			return fmt.Errorf("fragment %s: %w: id/_seq columns have types %s/%s", ff.key, ErrCorrupt, rec.Column(0).DataType(), rec.Column(1).DataType())
		}
		for i := 0; i < ids.Len(); i++ {
			k.offsets[strings.Clone(ids.Value(i))] = uint32(len(k.seqs))
			k.seqs = append(k.seqs, seqs.Value(i))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if int64(len(k.seqs)) != f.Rows || int64(len(k.offsets)) != f.Rows {
		return nil, fmt.Errorf("fragment %s: %w: %d rows with %d distinct ids, manifest says %d rows",
			ff.key, ErrCorrupt, len(k.seqs), len(k.offsets), f.Rows)
	}
	t.keys.Add(f.Path, k, k.size())
	return k, nil
}

// retypeRecord returns rec with the table's field names, types and metadata.
// Parquet renames list elements ("item" becomes "element") and adds field-id
// metadata; the buffers are identical, so only the type tree is replaced.
func retypeRecord(want *arrow.Schema, rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	if int(rec.NumCols()) != want.NumFields() {
		return nil, fmt.Errorf("read %d columns, want %d", rec.NumCols(), want.NumFields())
	}
	cols := make([]arrow.Array, rec.NumCols())
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	for i, c := range rec.Columns() {
		d, err := retypeData(c.Data(), want.Field(i).Type)
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", want.Field(i).Name, err)
		}
		cols[i] = array.MakeFromData(d)
		d.Release()
	}
	return array.NewRecordBatch(want, cols, rec.NumRows()), nil
}

func retypeData(d arrow.ArrayData, t arrow.DataType) (arrow.ArrayData, error) {
	if d.DataType().ID() != t.ID() {
		return nil, fmt.Errorf("stored type %s, table type %s", d.DataType(), t)
	}
	var children []arrow.ArrayData
	if nt, ok := t.(arrow.NestedType); ok {
		fields := nt.Fields()
		if len(fields) != len(d.Children()) {
			return nil, fmt.Errorf("stored type %s has %d children, table type %s has %d", d.DataType(), len(d.Children()), t, len(fields))
		}
		for i, ch := range d.Children() {
			c, err := retypeData(ch, fields[i].Type)
			if err != nil {
				for _, done := range children {
					done.Release()
				}
				return nil, err
			}
			children = append(children, c)
		}
		defer func() {
			for _, c := range children {
				c.Release()
			}
		}()
	}
	return array.NewData(t, d.Len(), d.Buffers(), children, d.NullN(), d.Offset()), nil
}
