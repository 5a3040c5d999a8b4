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
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

// A generation file is an Arrow IPC file (random-access format, with a footer, so a
// reader can fetch one record batch and a truncated file fails to open). Its record
// batches are chunks of at most genChunkRows rows / genChunkBytes bytes: large
// enough that per-batch metadata is noise, small enough that no string column's
// int32 offsets overflow and no single IPC body approaches reader limits.
const (
	genChunkRows  = 1 << 16
	genChunkBytes = 64 << 20
)

// GenerationData is a decoded generation: immutable record batches of the store
// schema (including _seq), at most one row per id.
type GenerationData struct {
	Key     string
	Schema  *arrow.Schema
	Records []arrow.RecordBatch
	Rows    int64
	// Bytes is the size of the generation file; the decoded batches reference its
	// bytes without copying, so it is also their memory footprint.
	Bytes int64
}

// encodeGeneration writes deduplicated rows as generation n of shard.
func encodeGeneration(schema *arrow.Schema, recs []arrow.RecordBatch, shard string, n uint64) ([]byte, error) {
	md := arrow.NewMetadata(
		[]string{metaFormat, metaShard, metaGeneration},
		[]string{strconv.Itoa(FormatVersion), shard, strconv.FormatUint(n, 10)},
	)
	s := arrow.NewSchema(schema.Fields(), &md)
	var buf bytes.Buffer
	w, err := ipc.NewFileWriter(&buf, ipc.WithSchema(s), ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		return nil, fmt.Errorf("encode generation %d: %w", n, err)
	}
	write := func(group []arrow.RecordBatch) error {
		rec, err := concatBatches(s, group)
		if err != nil {
			return err
		}
		defer rec.Release()
		return w.Write(rec)
	}
	var (
		group       []arrow.RecordBatch
		rows, bytes int64
	)
	for _, r := range recs {
		size := recordBytes(r)
		if len(group) > 0 && (rows+r.NumRows() > genChunkRows || bytes+size > genChunkBytes) {
			if err := write(group); err != nil {
				_ = w.Close()
				return nil, fmt.Errorf("encode generation %d: %w", n, err)
			}
			group, rows, bytes = nil, 0, 0
		}
		group = append(group, r)
		rows += r.NumRows()
		bytes += size
	}
	if len(group) > 0 {
		if err := write(group); err != nil {
			_ = w.Close()
			return nil, fmt.Errorf("encode generation %d: %w", n, err)
		}
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("encode generation %d: %w", n, err)
	}
	return buf.Bytes(), nil
}

// concatBatches concatenates batches with the columns of s into one batch of s.
func concatBatches(s *arrow.Schema, recs []arrow.RecordBatch) (arrow.RecordBatch, error) {
	if len(recs) == 1 {
		return array.NewRecordBatch(s, recs[0].Columns(), recs[0].NumRows()), nil
	}
	var rows int64
	for _, r := range recs {
		rows += r.NumRows()
	}
	cols := make([]arrow.Array, 0, s.NumFields())
	defer func() {
		for _, c := range cols {
			c.Release()
		}
	}()
	parts := make([]arrow.Array, len(recs))
	for i := range s.NumFields() {
		for j, r := range recs {
			parts[j] = r.Column(i)
		}
		c, err := array.Concatenate(parts, memory.DefaultAllocator)
		if err != nil {
			return nil, fmt.Errorf("concatenate column %q: %w", s.Field(i).Name, err)
		}
		cols = append(cols, c)
	}
	return array.NewRecordBatch(s, cols, rows), nil
}

// decodeGeneration parses the generation file stored at key. The batches reference
// data (no copy). Malformed input is an ErrCorrupt error naming key, never a panic.
func decodeGeneration(key string, data []byte) (g *GenerationData, err error) {
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("wal generation %s: %w: %s", key, ErrCorrupt, fmt.Sprintf(format, args...))
	}
	g = &GenerationData{Key: key, Bytes: int64(len(data))}
	defer func() {
		if r := recover(); r != nil {
			g, err = nil, corrupt("malformed IPC file: %v", r)
		}
	}()
	// ipcguard first: the IPC reader sizes allocations from the metadata, and an
	// out-of-memory is not a panic recover can catch.
	if err := ipcguard.CheckFile(data); err != nil {
		return nil, corrupt("%v", err)
	}
	f, err := ipc.NewMappedFileReader(data, ipc.WithAllocator(memory.DefaultAllocator),
		ipc.WithBodySizeLimit(int64(len(data))), ipc.WithMetadataSizeLimit(int64(len(data))))
	if err != nil {
		return nil, corrupt("%v", err)
	}
	defer f.Close()
	s := f.Schema()
	if v, err := strconv.Atoi(metaValue(s.Metadata(), metaFormat)); err != nil || v < 1 {
		return nil, corrupt("no valid %s in the schema metadata", metaFormat)
	} else if v > FormatVersion {
		return nil, fmt.Errorf("wal generation %s: %w: format version %d, this build reads up to %d; upgrade Tidemark",
			key, ErrUnsupportedFormat, v, FormatVersion)
	}
	if err := checkGenerationSchema(s); err != nil {
		return nil, corrupt("%v", err)
	}
	g.Schema = s
	for i := range f.NumRecords() {
		rec, err := f.RecordBatchAt(i)
		if err != nil {
			return nil, corrupt("record batch %d: %v", i, err)
		}
		if err := validateColumns(rec); err != nil {
			rec.Release()
			return nil, corrupt("record batch %d: %v", i, err)
		}
		g.Records = append(g.Records, rec)
		g.Rows += rec.NumRows()
	}
	return g, nil
}

// checkGenerationSchema verifies the columns readers depend on: a non-null utf8 id
// and a non-null uint64 _seq as the last column.
func checkGenerationSchema(s *arrow.Schema) error {
	idx := s.FieldIndices(rowkey.IDColumn)
	if len(idx) != 1 || s.Field(idx[0]).Type.ID() != arrow.STRING || s.Field(idx[0]).Nullable {
		return fmt.Errorf("schema needs one non-null utf8 %q column", rowkey.IDColumn)
	}
	n := s.NumFields()
	if n == 0 || s.Field(n-1).Name != rowkey.SeqColumn || s.Field(n-1).Type.ID() != arrow.UINT64 || s.Field(n-1).Nullable {
		return fmt.Errorf("schema needs a non-null uint64 %q as its last column", rowkey.SeqColumn)
	}
	return nil
}
