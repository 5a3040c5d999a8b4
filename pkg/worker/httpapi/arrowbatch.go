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
// Rows never travel one by one. A row handed out by an id-ordered walk (AddRow: a
// batch and an index) is noted as a position, extending the open run when it is
// the next row of the same batch; a batch handed out whole (AddBatch) is one run.
// In a leveled store consecutive ids come from different fragments, so runs are
// a row or two long: at a flush the held rows are gathered column by column, not
// run by run. Each source batch gives one piece, a zero-copy slice when its rows
// are one run, else its rows taken at once (compute.Take); the pieces, conformed
// to the answer's schema by column name (rows of pending generations come with
// every column, in the WAL's order and types: projected, and cast where a type
// differs), are concatenated, and one more take puts the rows back in the read's
// order when the pieces interleave. A run of at least arrowPassRows rows goes
// out alone as a slice of its batch; the rest into batches of up to
// arrowBatchRows rows and about arrowBatchBytes.
//
// Memory: the positions of the rows not yet sent (at most arrowBatchRows rows,
// about arrowBatchBytes), the batches they lie in (retained, as slices of them
// would; the read holds most of them anyway), and one output batch.
type arrowBatcher struct {
	ctx    context.Context
	schema *arrow.Schema
	// data is the leading part of schema the read's rows fill; the rest, extra
	// fills (nil when schema has no more fields).
	data  *arrow.Schema
	extra func(rows int) ([]arrow.Array, error)
	emit  func(arrow.RecordBatch) error

	// sources are the batches the held rows lie in, retained, and which by batch.
	sources []heldSource
	which   map[arrow.RecordBatch]int
	// runs are the held rows in the read's order, the last one open.
	runs      []heldRun
	heldRows  int
	heldBytes int64 // of the held rows, estimated
	plans     []*conformPlan
}

// heldSource is a batch some held rows lie in.
type heldSource struct {
	rec  arrow.RecordBatch
	plan *conformPlan
	// rowBytes is its rows' mean size in the answer's columns.
	rowBytes int64
}

// heldRun is rows [from, to) of source src.
type heldRun struct{ src, from, to int }

// newArrowBatcher returns the batcher of an answer of schema whose first data
// fields the read fills, and the rest extra; each output batch goes to emit.
func newArrowBatcher(ctx context.Context, schema *arrow.Schema, data int, extra func(rows int) ([]arrow.Array, error), emit func(arrow.RecordBatch) error) *arrowBatcher {
	return &arrowBatcher{ctx: ctx, schema: schema, data: arrow.NewSchema(schema.Fields()[:data], nil), extra: extra, emit: emit}
}

// AddRow adds row i of rec, which is valid during the call only (the batcher
// retains what it keeps).
func (b *arrowBatcher) AddRow(rec arrow.RecordBatch, i int) error {
	if n := len(b.runs); n > 0 {
		if r := &b.runs[n-1]; i == r.to && b.sources[r.src].rec == rec {
			r.to++
			b.heldRows++
			b.heldBytes += b.sources[r.src].rowBytes
			return b.flushIfFull()
		}
	}
	src, err := b.source(rec)
	if err != nil {
		return err
	}
	b.runs = append(b.runs, heldRun{src: src, from: i, to: i + 1})
	b.heldRows++
	b.heldBytes += b.sources[src].rowBytes
	return b.flushIfFull()
}

// AddBatch adds every row of rec, which is valid during the call only.
func (b *arrowBatcher) AddBatch(rec arrow.RecordBatch) error {
	n := int(rec.NumRows())
	if n == 0 {
		return nil
	}
	if n >= arrowPassRows || recordBytes(rec) >= arrowBatchBytes/4 {
		// Large: out as it is, after what is held.
		if err := b.flush(); err != nil {
			return err
		}
		p, err := b.plan(rec.Schema())
		if err != nil {
			return err
		}
		out, err := b.conform(rec, p)
		if err != nil {
			return err
		}
		defer out.Release()
		return b.send(out)
	}
	src, err := b.source(rec)
	if err != nil {
		return err
	}
	b.runs = append(b.runs, heldRun{src: src, from: 0, to: n})
	b.heldRows += n
	b.heldBytes += int64(n) * b.sources[src].rowBytes
	return b.flushIfFull()
}

// Finish sends what is held.
func (b *arrowBatcher) Finish() error { return b.flush() }

// Release releases what the batcher holds (after Finish, or when the read failed).
func (b *arrowBatcher) Release() {
	for _, s := range b.sources {
		s.rec.Release()
	}
	clear(b.sources)
	b.sources, b.runs = b.sources[:0], b.runs[:0]
	clear(b.which)
	b.heldRows, b.heldBytes = 0, 0
}

// source returns the index of rec among the sources, retaining it when new.
func (b *arrowBatcher) source(rec arrow.RecordBatch) (int, error) {
	if n := len(b.runs); n > 0 && b.sources[b.runs[n-1].src].rec == rec {
		return b.runs[n-1].src, nil
	}
	if i, ok := b.which[rec]; ok {
		return i, nil
	}
	p, err := b.plan(rec.Schema())
	if err != nil {
		return 0, err
	}
	var size int64
	for _, c := range p.index {
		d := rec.Column(c).Data()
		size += dataBytes(d, d.Offset(), d.Len())
	}
	rec.Retain()
	if b.which == nil {
		b.which = map[arrow.RecordBatch]int{}
	}
	i := len(b.sources)
	b.which[rec] = i
	b.sources = append(b.sources, heldSource{rec: rec, plan: p, rowBytes: size / max(rec.NumRows(), 1)})
	return i, nil
}

func (b *arrowBatcher) flushIfFull() error {
	if b.heldRows >= arrowBatchRows || b.heldBytes >= arrowBatchBytes {
		return b.flush()
	}
	return nil
}

// flush sends the held rows: each run of arrowPassRows rows or more alone, the
// rows between them gathered into one batch.
func (b *arrowBatcher) flush() error {
	if len(b.runs) == 0 {
		return nil
	}
	defer b.Release()
	from := 0
	for i, r := range b.runs {
		if r.to-r.from >= arrowPassRows {
			if err := b.sendRuns(b.runs[from:i]); err != nil {
				return err
			}
			if err := b.sendRuns(b.runs[i : i+1]); err != nil {
				return err
			}
			from = i + 1
		}
	}
	return b.sendRuns(b.runs[from:])
}

// gatherPiece is the rows of one source in a gathered batch.
type gatherPiece struct {
	src        int
	runs, rows int
	first      int     // index of its first run
	take       []int32 // its rows, when not one run
}

// sendRuns sends runs' rows as one batch, in their order.
func (b *arrowBatcher) sendRuns(runs []heldRun) error {
	if len(runs) == 0 {
		return nil
	}
	if len(runs) == 1 {
		r := runs[0]
		s := b.sources[r.src]
		out, err := b.conformRows(s.rec, s.plan, r.from, r.to)
		if err != nil {
			return err
		}
		defer out.Release()
		return b.send(out)
	}
	// The pieces, one per source in the order first met, and where each run's
	// first row lands in its piece.
	slot := make([]int, len(b.sources))
	for i := range slot {
		slot[i] = -1
	}
	var pieces []gatherPiece
	at := make([]int, len(runs))
	for i, r := range runs {
		k := slot[r.src]
		if k < 0 {
			k = len(pieces)
			slot[r.src] = k
			pieces = append(pieces, gatherPiece{src: r.src, first: i})
		}
		p := &pieces[k]
		at[i] = p.rows
		p.rows += r.to - r.from
		p.runs++
	}
	for _, r := range runs {
		p := &pieces[slot[r.src]]
		if p.runs == 1 {
			continue
		}
		if p.take == nil {
			p.take = make([]int32, 0, p.rows)
		}
		for j := r.from; j < r.to; j++ {
			p.take = append(p.take, int32(j))
		}
	}
	recs := make([]arrow.RecordBatch, len(pieces))
	defer func() {
		for _, r := range recs {
			if r != nil {
				r.Release()
			}
		}
	}()
	total := 0
	for k, p := range pieces {
		s := b.sources[p.src]
		var err error
		if p.take == nil {
			r := runs[p.first]
			recs[k], err = b.conformRows(s.rec, s.plan, r.from, r.to)
		} else {
			recs[k], err = b.takeRows(s.rec, s.plan, p.take)
		}
		if err != nil {
			return err
		}
		total += p.rows
	}
	// The read's order: identity when the pieces do not interleave.
	start := make([]int, len(pieces))
	for k := 1; k < len(pieces); k++ {
		start[k] = start[k-1] + pieces[k-1].rows
	}
	var order []int32
	next := 0
	for i, r := range runs {
		pos := start[slot[r.src]] + at[i]
		if order == nil && pos != next {
			order = make([]int32, next, total)
			for j := range order {
				order[j] = int32(j)
			}
		}
		if order != nil {
			for j := range r.to - r.from {
				order = append(order, int32(pos+j))
			}
		}
		next += r.to - r.from
	}
	cols := make([]arrow.Array, b.data.NumFields())
	defer releaseArrays(cols)
	parts := make([]arrow.Array, len(recs))
	for c := range cols {
		for k, r := range recs {
			parts[k] = r.Column(c)
		}
		var err error
		if len(parts) == 1 {
			cols[c] = parts[0]
			cols[c].Retain()
		} else if cols[c], err = array.Concatenate(parts, memory.DefaultAllocator); err != nil {
			return fmt.Errorf("arrow answer: column %q: %w", b.data.Field(c).Name, err)
		}
		if order != nil {
			taken, err := takeArray(b.ctx, cols[c], order)
			if err != nil {
				return fmt.Errorf("arrow answer: column %q: %w", b.data.Field(c).Name, err)
			}
			cols[c].Release()
			cols[c] = taken
		}
	}
	rec := array.NewRecordBatch(b.data, cols, int64(total))
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
// types (a new reference); p is the plan of rec's schema.
func (b *arrowBatcher) conform(rec arrow.RecordBatch, p *conformPlan) (arrow.RecordBatch, error) {
	return b.conformRows(rec, p, 0, int(rec.NumRows()))
}

// conformRows is conform of rows [from, to) of rec, zero-copy where no cast is
// needed.
func (b *arrowBatcher) conformRows(rec arrow.RecordBatch, p *conformPlan, from, to int) (arrow.RecordBatch, error) {
	whole := from == 0 && to == int(rec.NumRows())
	return b.conformed(rec, p, to-from, func(col arrow.Array) (arrow.Array, error) {
		if whole {
			col.Retain()
			return col, nil
		}
		return array.NewSlice(col, int64(from), int64(to)), nil
	})
}

// takeRows is conform of the rows of rec at idx, in that order (a copy).
func (b *arrowBatcher) takeRows(rec arrow.RecordBatch, p *conformPlan, idx []int32) (arrow.RecordBatch, error) {
	return b.conformed(rec, p, len(idx), func(col arrow.Array) (arrow.Array, error) {
		return takeArray(b.ctx, col, idx)
	})
}

// conformed returns the batch of the data schema, of n rows, whose columns are
// rows(rec's column) by name, cast where p says.
func (b *arrowBatcher) conformed(rec arrow.RecordBatch, p *conformPlan, n int, rows func(arrow.Array) (arrow.Array, error)) (arrow.RecordBatch, error) {
	cols := make([]arrow.Array, b.data.NumFields())
	defer releaseArrays(cols)
	for i, f := range b.data.Fields() {
		col, err := rows(rec.Column(p.index[i]))
		if err != nil {
			return nil, fmt.Errorf("arrow answer: column %q: %w", f.Name, err)
		}
		cols[i] = col
		if !p.cast[i] {
			continue
		}
		cast, err := compute.CastArray(b.ctx, col, compute.SafeCastOptions(f.Type))
		if err != nil {
			return nil, fmt.Errorf("arrow answer: column %q from %s to %s: %w", f.Name, col.DataType(), f.Type, err)
		}
		col.Release()
		cols[i] = cast
	}
	return array.NewRecordBatch(b.data, cols, int64(n)), nil
}

// takeArray returns the values of col at idx (valid indices), in that order: one
// vectorized take, or for a type compute cannot take (a sparse union, an
// interval), the runs of consecutive indices sliced and concatenated.
func takeArray(ctx context.Context, col arrow.Array, idx []int32) (arrow.Array, error) {
	ia := array.NewInt32Data(array.NewData(arrow.PrimitiveTypes.Int32, len(idx),
		[]*memory.Buffer{nil, memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(idx))}, nil, 0, 0))
	defer ia.Release()
	if out, err := compute.TakeArrayOpts(ctx, col, ia, compute.TakeOptions{BoundsCheck: false}); err == nil {
		return out, nil
	}
	var parts []arrow.Array
	defer func() { releaseArrays(parts) }()
	for i := 0; i < len(idx); {
		j := i + 1
		for j < len(idx) && idx[j] == idx[j-1]+1 {
			j++
		}
		parts = append(parts, array.NewSlice(col, int64(idx[i]), int64(idx[j-1])+1))
		i = j
	}
	return array.Concatenate(parts, memory.DefaultAllocator)
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
