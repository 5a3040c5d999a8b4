package httpapi

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// arrowBatcher turns the rows a read hands out into the record batches of an
// Arrow answer: the one piece of code between every read route and the stream.
//
// Rows never travel one by one: a row handed out by an id-ordered walk (AddRow:
// a batch and an index) extends the open run when it is the next row of the same
// batch, and a run is kept as a zero-copy slice of its batch. A closed run, or a
// batch handed out whole (AddBatch), is conformed to the answer's schema by
// column name (rows of pending generations come with every column, in the WAL's
// order and types: projected, and cast where a type differs); runs of at least
// arrowPassRows rows go out as they are, smaller ones are concatenated column by
// column into batches of up to arrowBatchRows rows and about arrowBatchBytes.
//
// Memory: the runs not yet sent (at most arrowBatchRows rows, about
// arrowBatchBytes besides the batches they slice, which the read holds anyway)
// and one output batch.
type arrowBatcher struct {
	ctx    context.Context
	schema *arrow.Schema
	// data is the leading part of schema the read's rows fill; the rest, extra
	// fills (nil when schema has no more fields).
	data  *arrow.Schema
	extra func(rows int) ([]arrow.Array, error)
	emit  func(arrow.RecordBatch) error

	// The open run: rows [from, to) of run (nil: none).
	run      arrow.RecordBatch
	from, to int
	// held are closed runs in data's schema, not yet sent.
	held      []arrow.RecordBatch
	heldRows  int
	heldBytes int64
	plans     []*conformPlan
}

// newArrowBatcher returns the batcher of an answer of schema whose first data
// fields the read fills, and the rest extra; each output batch goes to emit.
func newArrowBatcher(ctx context.Context, schema *arrow.Schema, data int, extra func(rows int) ([]arrow.Array, error), emit func(arrow.RecordBatch) error) *arrowBatcher {
	return &arrowBatcher{ctx: ctx, schema: schema, data: arrow.NewSchema(schema.Fields()[:data], nil), extra: extra, emit: emit}
}

// AddRow adds row i of rec, which is valid during the call only (the batcher
// retains what it keeps).
func (b *arrowBatcher) AddRow(rec arrow.RecordBatch, i int) error {
	if rec == b.run && i == b.to {
		b.to++
		if b.heldRows+b.to-b.from >= arrowBatchRows {
			return b.closeRun()
		}
		return nil
	}
	if err := b.closeRun(); err != nil {
		return err
	}
	rec.Retain()
	b.run, b.from, b.to = rec, i, i+1
	return nil
}

// AddBatch adds every row of rec, which is valid during the call only.
func (b *arrowBatcher) AddBatch(rec arrow.RecordBatch) error {
	if err := b.closeRun(); err != nil {
		return err
	}
	return b.add(rec)
}

// Finish sends what is held.
func (b *arrowBatcher) Finish() error {
	if err := b.closeRun(); err != nil {
		return err
	}
	return b.flush()
}

// Release releases what the batcher holds (after Finish, or when the read failed).
func (b *arrowBatcher) Release() {
	if b.run != nil {
		b.run.Release()
		b.run = nil
	}
	for _, h := range b.held {
		h.Release()
	}
	b.held, b.heldRows, b.heldBytes = nil, 0, 0
}

// closeRun adds the open run's rows.
func (b *arrowBatcher) closeRun() error {
	if b.run == nil {
		return nil
	}
	run, from, to := b.run, b.from, b.to
	b.run = nil
	defer run.Release()
	if from == 0 && to == int(run.NumRows()) {
		return b.add(run)
	}
	slice := run.NewSlice(int64(from), int64(to))
	defer slice.Release()
	return b.add(slice)
}

// add conforms rec and holds it, or sends it as it is when it is large.
func (b *arrowBatcher) add(rec arrow.RecordBatch) error {
	n := int(rec.NumRows())
	if n == 0 {
		return nil
	}
	out, err := b.conform(rec)
	if err != nil {
		return err
	}
	size := recordBytes(out)
	if n >= arrowPassRows || size >= arrowBatchBytes/4 {
		defer out.Release()
		if err := b.flush(); err != nil {
			return err
		}
		return b.send(out)
	}
	b.held = append(b.held, out)
	b.heldRows += n
	b.heldBytes += size
	if b.heldRows >= arrowBatchRows || b.heldBytes >= arrowBatchBytes {
		return b.flush()
	}
	return nil
}

// flush sends the held runs as one batch.
func (b *arrowBatcher) flush() error {
	if len(b.held) == 0 {
		return nil
	}
	defer b.Release()
	if len(b.held) == 1 {
		return b.send(b.held[0])
	}
	cols := make([]arrow.Array, b.data.NumFields())
	defer releaseArrays(cols)
	parts := make([]arrow.Array, len(b.held))
	for c := range cols {
		for i, h := range b.held {
			parts[i] = h.Column(c)
		}
		var err error
		if cols[c], err = array.Concatenate(parts, memory.DefaultAllocator); err != nil {
			return fmt.Errorf("arrow answer: column %q: %w", b.data.Field(c).Name, err)
		}
	}
	rec := array.NewRecordBatch(b.data, cols, int64(b.heldRows))
	defer rec.Release()
	return b.send(rec)
}

// send sends rec (of data's schema) with the extra columns, in the answer's
// schema.
func (b *arrowBatcher) send(rec arrow.RecordBatch) error {
	cols := make([]arrow.Array, 0, b.schema.NumFields())
	cols = append(cols, rec.Columns()...)
	if b.extra != nil {
		more, err := b.extra(int(rec.NumRows()))
		if err != nil {
			return err
		}
		defer releaseArrays(more)
		cols = append(cols, more...)
	}
	out := array.NewRecordBatch(b.schema, cols, rec.NumRows())
	defer out.Release()
	return b.emit(out)
}

// conformPlan says where each column of the answer's data schema is in a batch
// of one schema, and whether it must be cast.
type conformPlan struct {
	schema *arrow.Schema
	index  []int
	cast   []bool
}

// plan returns the conformPlan of batches of schema s.
func (b *arrowBatcher) plan(s *arrow.Schema) (*conformPlan, error) {
	for _, p := range b.plans {
		if p.schema == s {
			return p, nil
		}
	}
	for _, p := range b.plans {
		if p.schema.Equal(s) {
			q := *p
			q.schema = s
			b.plans = append(b.plans, &q)
			return &q, nil
		}
	}
	p := &conformPlan{schema: s, index: make([]int, b.data.NumFields()), cast: make([]bool, b.data.NumFields())}
	for i, f := range b.data.Fields() {
		idx := s.FieldIndices(f.Name)
		if len(idx) == 0 {
			return nil, fmt.Errorf("arrow answer: a batch of the read lacks column %q", f.Name)
		}
		p.index[i] = idx[0]
		p.cast[i] = !arrow.TypeEqual(s.Field(idx[0]).Type, f.Type)
	}
	if len(b.plans) == 16 { // schemas come from a handful of sources; keep it bounded anyway
		b.plans = b.plans[1:]
	}
	b.plans = append(b.plans, p)
	return p, nil
}

// conform returns rec's columns of the data schema, by name, in its order and
// types (a new reference).
func (b *arrowBatcher) conform(rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	p, err := b.plan(rec.Schema())
	if err != nil {
		return nil, err
	}
	cols := make([]arrow.Array, b.data.NumFields())
	defer releaseArrays(cols)
	for i, f := range b.data.Fields() {
		col := rec.Column(p.index[i])
		if !p.cast[i] {
			col.Retain()
			cols[i] = col
			continue
		}
		cast, err := compute.CastArray(b.ctx, col, compute.SafeCastOptions(f.Type))
		if err != nil {
			return nil, fmt.Errorf("arrow answer: column %q from %s to %s: %w", f.Name, col.DataType(), f.Type, err)
		}
		cols[i] = cast
	}
	return array.NewRecordBatch(b.data, cols, rec.NumRows()), nil
}

func releaseArrays(cols []arrow.Array) {
	for _, c := range cols {
		if c != nil {
			c.Release()
		}
	}
}

// recordBytes estimates the bytes of rec's rows: what they take in their
// buffers, counting a slice's own rows only, not the batch it slices.
func recordBytes(rec arrow.RecordBatch) int64 {
	var n int64
	for _, c := range rec.Columns() {
		d := c.Data()
		n += dataBytes(d, d.Offset(), d.Len())
	}
	return n
}

// dataBytes estimates the bytes of rows [off, off+n) of d.
func dataBytes(d arrow.ArrayData, off, n int) int64 {
	if n <= 0 {
		return 0
	}
	size := int64(n+7) / 8 // validity
	bufs := d.Buffers()
	switch t := d.DataType().(type) {
	case arrow.FixedWidthDataType:
		return size + int64(n)*int64(max(t.BitWidth()/8, 1))
	case *arrow.StringType, *arrow.BinaryType:
		if len(bufs) > 1 && bufs[1] != nil {
			offs := arrow.Int32Traits.CastFromBytes(bufs[1].Bytes())
			if off+n < len(offs) {
				return size + 4*int64(n) + int64(offs[off+n]-offs[off])
			}
		}
	case *arrow.LargeStringType, *arrow.LargeBinaryType:
		if len(bufs) > 1 && bufs[1] != nil {
			offs := arrow.Int64Traits.CastFromBytes(bufs[1].Bytes())
			if off+n < len(offs) {
				return size + 8*int64(n) + offs[off+n] - offs[off]
			}
		}
	case *arrow.ListType, *arrow.MapType:
		if len(bufs) > 1 && bufs[1] != nil && len(d.Children()) == 1 {
			offs := arrow.Int32Traits.CastFromBytes(bufs[1].Bytes())
			if off+n < len(offs) {
				c, from, to := d.Children()[0], int(offs[off]), int(offs[off+n])
				return size + 4*int64(n) + dataBytes(c, c.Offset()+from, to-from)
			}
		}
	case *arrow.LargeListType:
		if len(bufs) > 1 && bufs[1] != nil && len(d.Children()) == 1 {
			offs := arrow.Int64Traits.CastFromBytes(bufs[1].Bytes())
			if off+n < len(offs) {
				c, from, to := d.Children()[0], int(offs[off]), int(offs[off+n])
				return size + 8*int64(n) + dataBytes(c, c.Offset()+from, to-from)
			}
		}
	case *arrow.FixedSizeListType:
		if len(d.Children()) == 1 {
			c, k := d.Children()[0], int(t.Len())
			return size + dataBytes(c, c.Offset()+off*k, n*k)
		}
	case *arrow.StructType:
		for _, c := range d.Children() {
			size += dataBytes(c, c.Offset()+off, n)
		}
		return size
	}
	// Any other type: its buffers whole (an overestimate for a slice).
	for _, b := range bufs {
		if b != nil {
			size += int64(b.Len())
		}
	}
	return size
}
