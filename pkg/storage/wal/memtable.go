package wal

import (
	"github.com/apache/arrow-go/v18/arrow"
)

// memtable holds the rows of entries written or replayed since the last seal, in
// entry-position order. It is not safe for concurrent use; the Writer guards it.
type memtable struct {
	batches []memBatch
	rows    int64
	bytes   int64
}

type memBatch struct {
	pos   uint64 // the entry the rows are durable in
	rec   arrow.RecordBatch
	seqLo uint64 // the lowest _seq in rec
}

// add takes ownership of rec.
func (m *memtable) add(pos uint64, rec arrow.RecordBatch) {
	if rec.NumRows() == 0 {
		rec.Release()
		return
	}
	lo, _, _ := seqRange([]arrow.RecordBatch{rec})
	m.batches = append(m.batches, memBatch{pos: pos, rec: rec, seqLo: lo})
	m.rows += rec.NumRows()
	m.bytes += recordBytes(rec)
}

// snapshot returns new references to every batch at a position <= upTo.
func (m *memtable) snapshot(upTo uint64) []arrow.RecordBatch {
	var out []arrow.RecordBatch
	for _, b := range m.batches {
		if b.pos > upTo {
			break
		}
		b.rec.Retain()
		out = append(out, b.rec)
	}
	return out
}

// dropThrough releases every batch at a position <= pos: they are sealed.
func (m *memtable) dropThrough(pos uint64) {
	i := 0
	for i < len(m.batches) && m.batches[i].pos <= pos {
		b := m.batches[i]
		m.rows -= b.rec.NumRows()
		m.bytes -= recordBytes(b.rec)
		b.rec.Release()
		i++
	}
	m.batches = append(m.batches[:0:0], m.batches[i:]...)
}

func (m *memtable) release() { m.dropThrough(^uint64(0)) }

// seqLo is the lowest _seq of the unsealed rows, 0 when there are none. Entries
// adopted from a taken position may hold rows below later entries', so it is a
// minimum over every batch, not the first batch's.
func (m *memtable) seqLo() uint64 {
	var lo uint64
	for _, b := range m.batches {
		if lo == 0 || b.seqLo < lo {
			lo = b.seqLo
		}
	}
	return lo
}
