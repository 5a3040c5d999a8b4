package wal

import (
	"errors"
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestGenerationRoundTripsInChunks: a large seal is written as several record
// batches (no int32 offset overflow, no IPC body near reader limits) and reads back
// row for row, with the store schema and _seq last.
func TestGenerationRoundTripsInChunks(t *testing.T) {
	schema, err := storeSchema(internalSchema)
	if err != nil {
		t.Fatal(err)
	}
	const rows = genChunkRows + genChunkRows/2
	var recs []arrow.RecordBatch
	for start := 0; start < rows; start += 10_000 {
		n := min(10_000, rows-start)
		ids := array.NewStringBuilder(memory.DefaultAllocator)
		seqs := array.NewUint64Builder(memory.DefaultAllocator)
		for i := start; i < start+n; i++ {
			ids.Append(fmt.Sprintf("id-%07d", i))
			seqs.Append(uint64(i + 1))
		}
		cols := []arrow.Array{ids.NewArray(), seqs.NewArray()}
		recs = append(recs, array.NewRecordBatch(schema, cols, int64(n)))
		cols[0].Release()
		cols[1].Release()
		ids.Release()
		seqs.Release()
	}
	defer releaseAll(recs)
	data, err := encodeGeneration(schema, recs, "w1", 7)
	if err != nil {
		t.Fatal(err)
	}
	g, err := decodeGeneration("gen-key", data)
	if err != nil {
		t.Fatal(err)
	}
	if g.Rows != rows || len(g.Records) != 2 {
		t.Fatalf("decoded %d rows in %d batches, want %d in 2", g.Rows, len(g.Records), rows)
	}
	if !sameFields(g.Schema, schema) {
		t.Fatalf("schema %v, want %v", g.Schema, schema)
	}
	i := 0
	for _, rec := range g.Records {
		ids := rec.Column(0).(*array.String)
		seqs := rec.Column(1).(*array.Uint64)
		for j := range ids.Len() {
			if want := fmt.Sprintf("id-%07d", i); ids.Value(j) != want || seqs.Value(j) != uint64(i+1) {
				t.Fatalf("row %d: %s/%d, want %s/%d", i, ids.Value(j), seqs.Value(j), want, i+1)
			}
			i++
		}
	}
	for _, cut := range []int{0, 8, len(data) / 2, len(data) - 1} {
		if _, err := decodeGeneration("gen-key", data[:cut]); !errors.Is(err, ErrCorrupt) {
			t.Errorf("generation cut at %d bytes: %v, want ErrCorrupt", cut, err)
		}
	}
}
