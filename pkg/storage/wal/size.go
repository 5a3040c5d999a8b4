package wal

import "github.com/apache/arrow-go/v18/arrow"

// recordBytes estimates the memory of rec: the sum of its buffers' lengths (a slice
// counts its whole buffers). It is what the append queue, the memtable and the
// group-commit threshold account with. (arrow/util.TotalRecordSize does the same but
// pulls protobuf reflection into every binary.)
func recordBytes(rec arrow.RecordBatch) int64 {
	var n int64
	for _, c := range rec.Columns() {
		n += dataBytes(c.Data())
	}
	return n
}

func dataBytes(d arrow.ArrayData) int64 {
	if d == nil {
		return 0
	}
	var n int64
	for _, b := range d.Buffers() {
		if b != nil {
			n += int64(b.Len())
		}
	}
	for _, c := range d.Children() {
		n += dataBytes(c)
	}
	if d.DataType().ID() == arrow.DICTIONARY {
		n += dataBytes(d.Dictionary())
	}
	return n
}
