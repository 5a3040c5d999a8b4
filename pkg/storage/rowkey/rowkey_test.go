package rowkey

import (
	"context"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

var testSchema = arrow.NewSchema([]arrow.Field{
	{Name: IDColumn, Type: arrow.BinaryTypes.String},
	{Name: "v", Type: arrow.PrimitiveTypes.Int64},
	{Name: SeqColumn, Type: arrow.PrimitiveTypes.Uint64},
}, nil)

// batch builds rows of (id, v, _seq) triples.
func batch(t *testing.T, rows ...any) arrow.RecordBatch {
	t.Helper()
	b := array.NewRecordBuilder(memory.DefaultAllocator, testSchema)
	defer b.Release()
	for i := 0; i < len(rows); i += 3 {
		b.Field(0).(*array.StringBuilder).Append(rows[i].(string))
		b.Field(1).(*array.Int64Builder).Append(int64(rows[i+1].(int)))
		b.Field(2).(*array.Uint64Builder).Append(uint64(rows[i+2].(int)))
	}
	rec := b.NewRecordBatch()
	t.Cleanup(rec.Release)
	return rec
}

// The one last-write-wins rule: the highest _seq of an id wins across batches, a
// tie goes to the later row, and the survivors keep their input order.
func TestNewestPerIDKeepsTheHighestSeqOfEveryID(t *testing.T) {
	in := []arrow.RecordBatch{
		batch(t, "a", 1, 10, "b", 1, 5, "c", 1, 7),
		batch(t, "a", 2, 9, "b", 2, 6, "c", 2, 7),
	}
	out, err := NewestPerID(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	var order []string
	for _, r := range out {
		ids, vs := r.Column(0).(*array.String), r.Column(1).(*array.Int64)
		for i := 0; i < ids.Len(); i++ {
			got[ids.Value(i)] = vs.Value(i)
			order = append(order, ids.Value(i))
		}
		r.Release()
	}
	if len(got) != 3 || got["a"] != 1 || got["b"] != 2 || got["c"] != 2 {
		t.Fatalf("kept %v, want a=1 (seq 10), b=2 (seq 6), c=2 (tie: the later row)", got)
	}
	if len(order) != 3 || order[0] != "a" || order[1] != "b" || order[2] != "c" {
		t.Fatalf("order %v, want input order a b c", order)
	}
}

func TestColumnsNamesWhatIsMissing(t *testing.T) {
	noSeq := arrow.NewSchema([]arrow.Field{{Name: IDColumn, Type: arrow.BinaryTypes.String}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, noSeq)
	defer b.Release()
	rec := b.NewRecordBatch()
	defer rec.Release()
	if _, _, err := Columns(rec); err == nil {
		t.Fatal("a batch without _seq was accepted")
	}
	if _, _, err := Columns(batch(t, "a", 1, 1)); err != nil {
		t.Fatal(err)
	}
}

// Versions are ordered by _seq, then by shard; "" (a base row committed before
// fragments recorded their shard) loses every tie.
func TestVersionOrdersBySeqThenShard(t *testing.T) {
	cases := []struct {
		a, b  Version
		newer bool
	}{
		{Version{2, "a"}, Version{1, "z"}, true},
		{Version{1, "z"}, Version{2, "a"}, false},
		{Version{1, "w2"}, Version{1, "w1"}, true},
		{Version{1, "w1"}, Version{1, "w2"}, false},
		{Version{1, "w1"}, Version{1, ""}, true},
		{Version{1, "w1"}, Version{1, "w1"}, false},
	}
	for _, c := range cases {
		if got := c.a.Newer(c.b); got != c.newer {
			t.Errorf("%+v.Newer(%+v) = %v, want %v", c.a, c.b, got, c.newer)
		}
	}
}
