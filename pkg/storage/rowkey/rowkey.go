// Package rowkey is the identity of a row everywhere in Tidemark: its id (the
// primary key) and its hidden write sequence _seq, and the one rule that picks the
// live row of an id among many.
//
// Invariants:
//
//   - Every batch a store holds, in WAL entries, generations and base fragments,
//     has a non-null utf8 IDColumn and a non-null uint64 SeqColumn.
//   - Of the rows of one id, the one with the newest Version (highest _seq, then
//     the greater shard name) is the live one: last-write-wins means the same thing
//     in seals, merges, commits and reads, whatever order shards are merged in.
//     Within one shard _seq is unique per write; NewestPerID, which sees rows of one
//     shard only, breaks ties between rows of one write by position (the later row).
package rowkey

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

const (
	// IDColumn is the primary key: a non-null string column every table has.
	IDColumn = "id"
	// SeqColumn is the hidden write sequence (uint64, non-null). The row with the
	// highest _seq for an id is the live one.
	SeqColumn = "_seq"
)

// Columns returns rec's id and _seq columns, or an error saying which is missing or
// of the wrong type.
func Columns(rec arrow.RecordBatch) (*array.String, *array.Uint64, error) {
	s := rec.Schema()
	ic, sc := s.FieldIndices(IDColumn), s.FieldIndices(SeqColumn)
	if len(ic) != 1 || len(sc) != 1 {
		return nil, nil, fmt.Errorf("batch without exactly one %q and one %q column", IDColumn, SeqColumn)
	}
	ids, ok1 := rec.Column(ic[0]).(*array.String)
	seqs, ok2 := rec.Column(sc[0]).(*array.Uint64)
	if !ok1 || !ok2 {
		return nil, nil, fmt.Errorf("%q/%q columns of types %s/%s, want utf8/uint64", IDColumn, SeqColumn, rec.Column(ic[0]).DataType(), rec.Column(sc[0]).DataType())
	}
	return ids, seqs, nil
}
