package table

import (
	"context"
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

// testSchema has the two required columns, a payload, and a nested column so the
// schema round trip through the manifest and Parquet is exercised.
var testSchema = arrow.NewSchema([]arrow.Field{
	{Name: rowkey.IDColumn, Type: arrow.BinaryTypes.String},
	{Name: "value", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
	{Name: rowkey.SeqColumn, Type: arrow.PrimitiveTypes.Uint64},
}, nil)

type row struct {
	id    string
	seq   uint64
	value int64
}

func batch(rows ...row) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, testSchema)
	defer b.Release()
	for _, r := range rows {
		b.Field(0).(*array.StringBuilder).Append(r.id)
		b.Field(1).(*array.Int64Builder).Append(r.value)
		lb := b.Field(2).(*array.ListBuilder)
		lb.Append(true)
		lb.ValueBuilder().(*array.Int32Builder).AppendValues([]int32{int32(r.value), int32(r.seq)}, nil)
		b.Field(3).(*array.Uint64Builder).Append(r.seq)
	}
	return b.NewRecordBatch()
}

func memBucket(t testing.TB) *objstore.Bucket {
	t.Helper()
	b, err := objstore.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func createTable(t testing.TB, b *objstore.Bucket, opts ...Option) *Table {
	t.Helper()
	tb, err := Create(context.Background(), b, "rollout/t", testSchema, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// appendRows prepares against the newest version and commits.
func appendRows(ctx context.Context, tb *Table, a Append) (*Manifest, error) {
	base, err := tb.Refresh(ctx)
	if err != nil {
		return nil, err
	}
	x, err := tb.Prepare(ctx, base, a)
	if err != nil {
		return nil, err
	}
	return x.Commit(ctx)
}

func mustAppend(t testing.TB, tb *Table, rows ...row) *Manifest {
	t.Helper()
	rec := batch(rows...)
	defer rec.Release()
	m, err := appendRows(context.Background(), tb, Append{Records: []arrow.RecordBatch{rec}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// liveRows scans m and returns id -> row, failing on a duplicate id: the table
// invariant is at most one live row per id.
func liveRows(t testing.TB, tb *Table, m *Manifest) map[string]row {
	t.Helper()
	out := map[string]row{}
	err := tb.Scan(context.Background(), m, ScanOptions{Columns: []string{rowkey.IDColumn, rowkey.SeqColumn, "value"}}, func(rec arrow.RecordBatch, _ string) error {
		ids := rec.Column(0).(*array.String)
		seqs := rec.Column(1).(*array.Uint64)
		vals := rec.Column(2).(*array.Int64)
		for i := 0; i < ids.Len(); i++ {
			id := ids.Value(i)
			if _, dup := out[id]; dup {
				return fmt.Errorf("id %s is live twice", id)
			}
			out[id] = row{id: id, seq: seqs.Value(i), value: vals.Value(i)}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
