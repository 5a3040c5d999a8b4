package wal

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark-io/tidemark/internal/ipcguard"
)

// Schema metadata keys of entries and generations (FORMAT.md, "WAL").
const (
	metaFormat     = "tidemark.wal.format_version"
	metaShard      = "tidemark.wal.shard"
	metaWriterID   = "tidemark.wal.writer_id"
	metaEpoch      = "tidemark.wal.writer_epoch"
	metaRows       = "tidemark.wal.rows"
	metaGapFrom    = "tidemark.wal.gap_from"
	metaGeneration = "tidemark.wal.generation"
)

// entry is a decoded entry object: who wrote it, and its rows (none for a fence).
type entry struct {
	writerID string
	epoch    uint64
	// gapFrom, on a fence entry, is the lowest position of the range the fence claimed
	// at once (see fence.go): positions in [gapFrom, this entry) may be missing if the
	// claiming writer died before filling them, and are filled by the next writer.
	gapFrom uint64
	recs    []arrow.RecordBatch // store schema, without the entry's metadata
	rows    int64
}

func (e *entry) release() {
	for _, r := range e.recs {
		r.Release()
	}
	e.recs = nil
}

// buildBatch concatenates appended batches (input schema) into one batch of the store
// schema with a fresh _seq per row from clk, so one entry holds one record batch
// whatever the number of appenders (per-batch IPC metadata would otherwise dominate
// small rows). his[i] is the highest _seq given to a row of recs[i] (0 for an empty
// batch): the causal token of that append.
func buildBatch(schema *arrow.Schema, recs []arrow.RecordBatch, clk *hlc) (rec arrow.RecordBatch, his []uint64, err error) {
	var rows int64
	for _, r := range recs {
		rows += r.NumRows()
	}
	ncols := schema.NumFields() - 1
	cols := make([]arrow.Array, 0, ncols+1)
	defer func() {
		for _, c := range cols {
			c.Release()
		}
	}()
	for i := range ncols {
		if len(recs) == 1 {
			c := recs[0].Column(i)
			c.Retain()
			cols = append(cols, c)
			continue
		}
		parts := make([]arrow.Array, len(recs))
		for j, r := range recs {
			parts[j] = r.Column(i)
		}
		c, err := array.Concatenate(parts, memory.DefaultAllocator)
		if err != nil {
			return nil, nil, fmt.Errorf("concatenate column %q: %w", schema.Field(i).Name, err)
		}
		cols = append(cols, c)
	}
	seqs := make([]uint64, 0, rows)
	his = make([]uint64, len(recs))
	for i, r := range recs {
		if n := int(r.NumRows()); n > 0 {
			first := clk.nextN(n)
			for k := range uint64(n) {
				seqs = append(seqs, first+k)
			}
			his[i] = first + uint64(n) - 1
		}
	}
	cols = append(cols, array.NewUint64Data(array.NewData(arrow.PrimitiveTypes.Uint64, int(rows),
		[]*memory.Buffer{nil, memory.NewBufferBytes(arrow.Uint64Traits.CastToBytes(seqs))}, nil, 0, 0)))
	return array.NewRecordBatch(schema, cols, rows), his, nil
}

// encodeEntry writes an entry as an Arrow IPC stream: the store schema with the
// writer's identity in its metadata, then rec (nil for a fence: schema only).
// gapFrom is 0 except on fence entries that claim a range (fence.go).
func encodeEntry(schema *arrow.Schema, rec arrow.RecordBatch, shard, writerID string, epoch, gapFrom uint64) ([]byte, error) {
	var rows int64
	if rec != nil {
		rows = rec.NumRows()
	}
	keys := []string{metaFormat, metaShard, metaWriterID, metaEpoch, metaRows}
	vals := []string{strconv.Itoa(FormatVersion), shard, writerID, strconv.FormatUint(epoch, 10), strconv.FormatInt(rows, 10)}
	if gapFrom > 0 {
		keys, vals = append(keys, metaGapFrom), append(vals, strconv.FormatUint(gapFrom, 10))
	}
	md := arrow.NewMetadata(keys, vals)
	s := arrow.NewSchema(schema.Fields(), &md)
	var buf bytes.Buffer
	if rec != nil {
		// The body is about the buffers' bytes (padded), with the schema and
		// metadata besides: one allocation instead of a doubling copy each time
		// the buffer fills.
		buf.Grow(int(recordBytes(rec)) + 8<<10)
	}
	w := ipc.NewWriter(&buf, ipc.WithSchema(s), ipc.WithAllocator(memory.DefaultAllocator))
	if rec != nil {
		r := array.NewRecordBatch(s, rec.Columns(), rec.NumRows())
		err := w.Write(r)
		r.Release()
		if err != nil {
			_ = w.Close()
			return nil, fmt.Errorf("encode entry: %w", err)
		}
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("encode entry: %w", err)
	}
	return buf.Bytes(), nil
}

// decodeEntry parses the entry stored at key. Its columns must be the store schema's;
// malformed input is an ErrCorrupt error naming key, never a panic.
func decodeEntry(key string, data []byte, schema *arrow.Schema) (e *entry, err error) {
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("wal entry %s: %w: %s", key, ErrCorrupt, fmt.Sprintf(format, args...))
	}
	e = &entry{}
	defer func() {
		if r := recover(); r != nil {
			e.release()
			e, err = nil, corrupt("malformed IPC stream: %v", r)
		}
	}()
	// ipcguard first: the IPC reader sizes allocations from the metadata, and an
	// out-of-memory is not a panic recover can catch.
	if err := ipcguard.CheckStream(data); err != nil {
		return nil, corrupt("%v", err)
	}
	r, err := ipc.NewReader(bytes.NewReader(data), ipc.WithAllocator(memory.DefaultAllocator),
		ipc.WithBodySizeLimit(int64(len(data))), ipc.WithMetadataSizeLimit(int64(len(data))))
	if err != nil {
		return nil, corrupt("%v", err)
	}
	defer r.Release()
	s := r.Schema()
	md := s.Metadata()
	if v, err := strconv.Atoi(metaValue(md, metaFormat)); err != nil || v < 1 {
		return nil, corrupt("no valid %s in the schema metadata", metaFormat)
	} else if v > FormatVersion {
		return nil, fmt.Errorf("wal entry %s: %w: format version %d, this build reads up to %d; upgrade Tidemark",
			key, ErrUnsupportedFormat, v, FormatVersion)
	}
	e.writerID = metaValue(md, metaWriterID)
	if e.writerID == "" {
		return nil, corrupt("no %s", metaWriterID)
	}
	if e.epoch, err = strconv.ParseUint(metaValue(md, metaEpoch), 10, 64); err != nil || e.epoch == 0 {
		return nil, corrupt("no valid %s", metaEpoch)
	}
	if v := metaValue(md, metaGapFrom); v != "" {
		if e.gapFrom, err = strconv.ParseUint(v, 10, 64); err != nil {
			return nil, corrupt("no valid %s", metaGapFrom)
		}
	}
	wantRows, err := strconv.ParseInt(metaValue(md, metaRows), 10, 64)
	if err != nil {
		return nil, corrupt("no valid %s", metaRows)
	}
	if !sameFields(s, schema) {
		return nil, corrupt("its columns %v differ from the shard's %v", s, schema)
	}
	for r.Next() {
		rec := r.RecordBatch()
		if err := validateColumns(rec); err != nil {
			e.release()
			return nil, corrupt("%v", err)
		}
		e.recs = append(e.recs, array.NewRecordBatch(schema, rec.Columns(), rec.NumRows()))
		e.rows += rec.NumRows()
	}
	if err := r.Err(); err != nil {
		e.release()
		return nil, corrupt("%v", err)
	}
	if e.rows != wantRows {
		e.release()
		return nil, corrupt("%d rows, the metadata says %d", e.rows, wantRows)
	}
	return e, nil
}

// validateColumns checks every value of rec's columns (offsets within their data,
// child lengths, ...). The IPC reader does not: a corrupt offset would decode fine
// and panic later wherever the value is read, e.g. replaying into the memtable. It
// may itself panic on some corruptions; its callers decode under a recover.
func validateColumns(rec arrow.RecordBatch) error {
	for i, c := range rec.Columns() {
		if err := array.ValidateFull(c); err != nil {
			return fmt.Errorf("column %q: %w", rec.Schema().Field(i).Name, err)
		}
	}
	return nil
}

// seqRange returns the smallest and largest _seq (the last column) of recs.
func seqRange(recs []arrow.RecordBatch) (lo, hi uint64, rows int64) {
	for _, r := range recs {
		seqs := r.Column(int(r.NumCols()) - 1).(*array.Uint64)
		for _, s := range seqs.Uint64Values() {
			if rows == 0 || s < lo {
				lo = s
			}
			hi = max(hi, s)
			rows++
		}
	}
	return lo, hi, rows
}

// metaValue returns the value of key in md, or "".
func metaValue(md arrow.Metadata, key string) string {
	v, _ := md.GetValue(key)
	return v
}
