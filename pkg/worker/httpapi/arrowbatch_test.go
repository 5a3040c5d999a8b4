package httpapi

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// batcherOut is what an arrowBatcher sent: its batches, retained.
type batcherOut struct {
	t    *testing.T
	recs []arrow.RecordBatch
}

func (o *batcherOut) emit(rec arrow.RecordBatch) error {
	rec.Retain()
	o.recs = append(o.recs, rec)
	return nil
}

// rows renders every row sent as "id:v:seq[:extra]".
func (o *batcherOut) rows() []string {
	var out []string
	for _, rec := range o.recs {
		for i := range int(rec.NumRows()) {
			var cells []string
			for c := range int(rec.NumCols()) {
				cells = append(cells, rec.Column(c).ValueStr(i))
			}
			out = append(out, strings.Join(cells, ":"))
		}
	}
	return out
}

func (o *batcherOut) release() {
	for _, r := range o.recs {
		r.Release()
	}
}

// sourceBatch is a batch as a pending generation holds it: the answer's columns
// in another order, v as int32 where the answer has int64, and a column the
// answer leaves out. Row i has id "<prefix>i", v i and _seq 100+i.
func sourceBatch(t *testing.T, prefix string, n int) arrow.RecordBatch {
	t.Helper()
	sch := arrow.NewSchema([]arrow.Field{
		{Name: "_seq", Type: arrow.PrimitiveTypes.Uint64},
		{Name: "blob", Type: arrow.BinaryTypes.Binary, Nullable: true},
		{Name: "v", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: "id", Type: arrow.BinaryTypes.String},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sch)
	defer b.Release()
	for i := range n {
		b.Field(0).(*array.Uint64Builder).Append(uint64(100 + i))
		b.Field(1).(*array.BinaryBuilder).Append([]byte("x"))
		b.Field(2).(*array.Int32Builder).Append(int32(i))
		b.Field(3).(*array.StringBuilder).Append(fmt.Sprintf("%s%d", prefix, i))
	}
	return b.NewRecordBatch()
}

var batcherSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.BinaryTypes.String},
	{Name: "v", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "_seq", Type: arrow.PrimitiveTypes.Uint64},
}, nil)

// Rows from an id-ordered walk alternate between batches of other shapes: the
// answer holds them in order, projected and cast by name, and a run of rows of
// one batch is sent as a slice of it, not row by row.
func TestArrowBatcherConformsRunsOfRowsByName(t *testing.T) {
	a, b := sourceBatch(t, "a", 10), sourceBatch(t, "b", 10)
	defer a.Release()
	defer b.Release()
	out := &batcherOut{t: t}
	defer out.release()
	bt := newArrowBatcher(context.Background(), batcherSchema, 3, nil, out.emit)
	defer bt.Release()
	steps := []struct {
		rec arrow.RecordBatch
		i   int
	}{{a, 0}, {a, 1}, {a, 2}, {b, 3}, {a, 3}, {a, 5}, {b, 4}, {b, 5}, {b, 6}}
	var want []string
	for _, s := range steps {
		if err := bt.AddRow(s.rec, s.i); err != nil {
			t.Fatal(err)
		}
		want = append(want, fmt.Sprintf("%s:%d:%d", map[arrow.RecordBatch]string{a: "a", b: "b"}[s.rec]+fmt.Sprint(s.i), s.i, 100+s.i))
	}
	if err := bt.Finish(); err != nil {
		t.Fatal(err)
	}
	if got := out.rows(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("rows %v, want %v", got, want)
	}
	if len(out.recs) != 1 || !out.recs[0].Schema().Equal(batcherSchema) {
		t.Fatalf("%d batches of %v: want one of the answer's schema", len(out.recs), out.recs[0].Schema())
	}
	// A batch of the read past arrowPassRows goes out as it is, after what is held.
	big := sourceBatch(t, "c", arrowPassRows)
	defer big.Release()
	out2 := &batcherOut{t: t}
	defer out2.release()
	bt2 := newArrowBatcher(context.Background(), batcherSchema, 3, nil, out2.emit)
	defer bt2.Release()
	if err := bt2.AddRow(a, 9); err != nil {
		t.Fatal(err)
	}
	if err := bt2.AddBatch(big); err != nil {
		t.Fatal(err)
	}
	if err := bt2.AddRow(b, 0); err != nil {
		t.Fatal(err)
	}
	if err := bt2.Finish(); err != nil {
		t.Fatal(err)
	}
	if len(out2.recs) != 3 || out2.recs[0].NumRows() != 1 || out2.recs[1].NumRows() != arrowPassRows || out2.recs[2].NumRows() != 1 {
		t.Fatalf("batches of %v rows, want 1, %d, 1", batchRows(out2.recs), arrowPassRows)
	}
	if rows := out2.rows(); rows[0] != "a9:9:109" || rows[1] != "c0:0:100" || rows[len(rows)-1] != "b0:0:100" {
		t.Fatalf("rows out of order: %v ... %v", rows[:2], rows[len(rows)-1])
	}
}

func batchRows(recs []arrow.RecordBatch) []int64 {
	var out []int64
	for _, r := range recs {
		out = append(out, r.NumRows())
	}
	return out
}

// The answer's batches are bounded in rows and, gathering small batches, in
// bytes; the extra columns (a change's _cursor) follow their rows.
func TestArrowBatcherBoundsItsBatches(t *testing.T) {
	n := arrowBatchRows + arrowBatchRows/2
	big := sourceBatch(t, "r", n)
	defer big.Release()
	out := &batcherOut{t: t}
	defer out.release()
	extraSchema := arrow.NewSchema(append(batcherSchema.Fields(), arrow.Field{Name: "_cursor", Type: arrow.BinaryTypes.String}), nil)
	filled := 0
	extra := func(rows int) ([]arrow.Array, error) {
		bld := array.NewStringBuilder(memory.DefaultAllocator)
		defer bld.Release()
		for i := range rows {
			bld.Append(fmt.Sprintf("c%d", filled+i))
		}
		filled += rows
		return []arrow.Array{bld.NewArray()}, nil
	}
	bt := newArrowBatcher(context.Background(), extraSchema, 3, extra, out.emit)
	defer bt.Release()
	for i := range n {
		if err := bt.AddRow(big, i); err != nil {
			t.Fatal(err)
		}
	}
	if err := bt.Finish(); err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	for _, r := range out.recs {
		if r.NumRows() > arrowBatchRows {
			t.Errorf("a batch of %d rows", r.NumRows())
		}
		total += r.NumRows()
	}
	rows := out.rows()
	if total != int64(n) || rows[n-1] != fmt.Sprintf("r%d:%d:%d:c%d", n-1, n-1, 100+n-1, n-1) {
		t.Fatalf("%d rows, last %q", total, rows[n-1])
	}

	// One-row batches of 1 MiB each: gathered up to about arrowBatchBytes.
	sch := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.BinaryTypes.String}, {Name: "_seq", Type: arrow.PrimitiveTypes.Uint64}}, nil)
	out2 := &batcherOut{t: t}
	defer out2.release()
	bt2 := newArrowBatcher(context.Background(), sch, 2, nil, out2.emit)
	defer bt2.Release()
	payload := strings.Repeat("x", 1<<20)
	for i := range 40 {
		b := array.NewRecordBuilder(memory.DefaultAllocator, sch)
		b.Field(0).(*array.StringBuilder).Append(payload)
		b.Field(1).(*array.Uint64Builder).Append(uint64(i))
		rec := b.NewRecordBatch()
		b.Release()
		if err := bt2.AddRow(rec, 0); err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	if err := bt2.Finish(); err != nil {
		t.Fatal(err)
	}
	if len(out2.recs) < 40<<20/arrowBatchBytes {
		t.Fatalf("40 MiB of rows in %d batches: not bounded by %d bytes", len(out2.recs), arrowBatchBytes)
	}
	for _, r := range out2.recs {
		if got := recordBytes(r); got > arrowBatchBytes+2<<20 {
			t.Errorf("a batch of %d bytes", got)
		}
	}
}

// A slice's size is its own rows', not its batch's.
func TestArrowRecordBytesCountsASlicesRows(t *testing.T) {
	rec := sourceBatch(t, "id-", 1000)
	defer rec.Release()
	whole := recordBytes(rec)
	one := rec.NewSlice(500, 501)
	defer one.Release()
	if got := recordBytes(one); got <= 0 || got*100 > whole {
		t.Fatalf("one row of %d bytes, the batch %d", got, whole)
	}
}

// Rows of two batches that interleave row by row (consecutive ids from two
// fragments of a leveled store) are gathered per batch and put back in the
// read's order, values and nulls intact, for every kind of column a store has.
func TestArrowBatcherGathersInterleavedRowsOfEveryType(t *testing.T) {
	sch := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.BinaryTypes.String},
		{Name: "b", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
		{Name: "ts", Type: arrow.FixedWidthTypes.Timestamp_us, Nullable: true},
		{Name: "l", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64), Nullable: true},
		{Name: "v", Type: arrow.FixedSizeListOf(2, arrow.PrimitiveTypes.Float32), Nullable: true},
		{Name: "s", Type: arrow.StructOf(arrow.Field{Name: "x", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
			arrow.Field{Name: "y", Type: arrow.BinaryTypes.String, Nullable: true}), Nullable: true},
		{Name: "bin", Type: arrow.BinaryTypes.Binary, Nullable: true},
		{Name: "_seq", Type: arrow.PrimitiveTypes.Uint64},
	}, nil)
	batch := func(prefix string) arrow.RecordBatch {
		var rows []string
		for i := range 6 {
			if i%3 == 2 {
				rows = append(rows, fmt.Sprintf(`{"id":"%s%d","_seq":%d}`, prefix, i, i))
				continue
			}
			rows = append(rows, fmt.Sprintf(`{"id":"%s%d","b":%v,"ts":"2026-01-0%dT00:00:00Z","l":[%d,%d],"v":[%d.5,1],"s":{"x":%d,"y":"y%d"},"bin":"YWJj","_seq":%d}`,
				prefix, i, i%2 == 0, i+1, i, i*2, i, i, i, i))
		}
		rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, sch, strings.NewReader("["+strings.Join(rows, ",")+"]"))
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	a, b := batch("a"), batch("b")
	defer a.Release()
	defer b.Release()
	out := &batcherOut{t: t}
	defer out.release()
	bt := newArrowBatcher(context.Background(), sch, sch.NumFields(), nil, out.emit)
	defer bt.Release()
	render := func(rec arrow.RecordBatch, i int) string {
		var cells []string
		for c := range int(rec.NumCols()) {
			cells = append(cells, rec.Column(c).ValueStr(i))
		}
		return strings.Join(cells, ":")
	}
	var want []string
	for _, s := range []struct {
		rec arrow.RecordBatch
		i   int
	}{{a, 0}, {b, 0}, {a, 1}, {a, 2}, {b, 1}, {b, 2}, {a, 4}, {b, 3}, {a, 5}, {b, 5}} {
		if err := bt.AddRow(s.rec, s.i); err != nil {
			t.Fatal(err)
		}
		want = append(want, render(s.rec, s.i))
	}
	if err := bt.Finish(); err != nil {
		t.Fatal(err)
	}
	if len(out.recs) != 1 {
		t.Fatalf("%d batches, want 1", len(out.recs))
	}
	if got := out.rows(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("rows\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A column compute cannot take (an interval) is gathered by slices instead.
func TestArrowTakeArrayFallsBackToSlices(t *testing.T) {
	bld := array.NewMonthDayNanoIntervalBuilder(memory.DefaultAllocator)
	defer bld.Release()
	for i := range 5 {
		bld.Append(arrow.MonthDayNanoInterval{Months: int32(i), Days: int32(i), Nanoseconds: int64(i)})
	}
	col := bld.NewArray()
	defer col.Release()
	out, err := takeArray(context.Background(), col, []int32{4, 1, 2, 0})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Release()
	var got []string
	for i := range out.Len() {
		got = append(got, out.ValueStr(i))
	}
	want := []string{col.ValueStr(4), col.ValueStr(1), col.ValueStr(2), col.ValueStr(0)}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("took %v, want %v", got, want)
	}
}
