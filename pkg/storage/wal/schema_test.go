package wal_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
)

// buildWith builds a one-row batch of schema s, filling each column with a non-null
// value of its type unless nulls names it.
func buildWith(t *testing.T, s *arrow.Schema, nulls ...string) arrow.RecordBatch {
	t.Helper()
	b := array.NewRecordBuilder(memory.DefaultAllocator, s)
	defer b.Release()
	for i, f := range s.Fields() {
		fb := b.Field(i)
		isNull := false
		for _, n := range nulls {
			isNull = isNull || n == f.Name
		}
		if isNull {
			fb.AppendNull()
			continue
		}
		switch fb := fb.(type) {
		case *array.StringBuilder:
			fb.Append("x")
		case *array.Int64Builder:
			fb.Append(1)
		case *array.Int32Builder:
			fb.Append(1)
		case *array.Uint64Builder:
			fb.Append(1)
		case *array.ListBuilder:
			fb.Append(true)
			fb.ValueBuilder().AppendEmptyValue()
		default:
			t.Fatalf("buildWith: no value for %T", fb)
		}
	}
	return b.NewRecordBatch()
}

func withFields(fields ...arrow.Field) *arrow.Schema { return arrow.NewSchema(fields, nil) }

// TestBadBatchesAreRejectedBeforeAnythingIsWritten: a batch that does not fit the
// shard's schema must fail with an error naming the column (the worker turns it into
// a 400) and must not reach storage: a bad row in an entry would fail every replay
// and seal after it.
func TestBadBatchesAreRejectedBeforeAnythingIsWritten(t *testing.T) {
	id := arrow.Field{Name: "id", Type: arrow.BinaryTypes.String}
	value := arrow.Field{Name: "value", Type: arrow.PrimitiveTypes.Int64, Nullable: true}
	tokens := arrow.Field{Name: "tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true}
	note := arrow.Field{Name: "note", Type: arrow.BinaryTypes.String, Nullable: true}
	cases := []struct {
		name   string
		schema *arrow.Schema
		nulls  []string
		column string
	}{
		{"wrong type", withFields(id, arrow.Field{Name: "value", Type: arrow.BinaryTypes.String, Nullable: true}, tokens, note), nil, "value"},
		{"wrong list item type", withFields(id, value, arrow.Field{Name: "tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64), Nullable: true}, note), nil, "tokens"},
		{"missing column", withFields(id, value, tokens), nil, "note"},
		{"extra column", withFields(id, value, tokens, note, arrow.Field{Name: "surprise", Type: arrow.PrimitiveTypes.Int32}), nil, "surprise"},
		{"columns out of order", withFields(id, tokens, value, note), nil, "tokens"},
		{"null in a non-null column", withFields(arrow.Field{Name: "id", Type: arrow.BinaryTypes.String, Nullable: true}, value, tokens, note), []string{"id"}, "id"},
		{"the hidden _seq column", withFields(id, value, tokens, note, arrow.Field{Name: "_seq", Type: arrow.PrimitiveTypes.Uint64}), nil, "_seq"},
	}
	ctx := context.Background()
	raw := objstoretest.Mem(t)
	f := objstore.NewFaults(nil)
	b := objstore.WithFaults(raw, f)
	w := openWriter(t, b, testShard)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := buildWith(t, c.schema, c.nulls...)
			defer rec.Release()
			before := f.TotalRequests()
			err := w.Append(ctx, rec)
			if !errors.Is(err, wal.ErrSchema) {
				t.Fatalf("append: %v, want ErrSchema", err)
			}
			if !strings.Contains(err.Error(), `"`+c.column+`"`) {
				t.Errorf("error %q does not name column %q", err, c.column)
			}
			if n := f.TotalRequests() - before; n != 0 {
				t.Errorf("a rejected batch made %d object-store requests", n)
			}
		})
	}
	// A nullable declaration of a non-null column is fine when the data has no null.
	lax := buildWith(t, withFields(arrow.Field{Name: "id", Type: arrow.BinaryTypes.String, Nullable: true}, value, tokens, note))
	defer lax.Release()
	if err := w.Append(ctx, lax); err != nil {
		t.Fatalf("append without nulls under a nullable declaration: %v", err)
	}
	if g := mustSeal(t, w); g.Rows != 1 {
		t.Fatalf("sealed %d rows, want only the good one", g.Rows)
	}
}

func TestInputSchemaIsChecked(t *testing.T) {
	b := objstoretest.Mem(t)
	for name, s := range map[string]*arrow.Schema{
		"no id":        withFields(arrow.Field{Name: "value", Type: arrow.PrimitiveTypes.Int64}),
		"nullable id":  withFields(arrow.Field{Name: "id", Type: arrow.BinaryTypes.String, Nullable: true}),
		"int id":       withFields(arrow.Field{Name: "id", Type: arrow.PrimitiveTypes.Int64}),
		"has _seq":     withFields(arrow.Field{Name: "id", Type: arrow.BinaryTypes.String}, arrow.Field{Name: "_seq", Type: arrow.PrimitiveTypes.Uint64}),
		"duplicate id": withFields(arrow.Field{Name: "id", Type: arrow.BinaryTypes.String}, arrow.Field{Name: "id", Type: arrow.BinaryTypes.String}),
	} {
		if _, err := wal.OpenWriter(context.Background(), b, testDir, testShard, s); !errors.Is(err, wal.ErrSchema) {
			t.Errorf("%s: %v, want ErrSchema", name, err)
		}
	}
	if _, err := wal.OpenWriter(context.Background(), b, testDir, "../escape", inputSchema); err == nil {
		t.Error("a shard name with a path element was accepted")
	}
	if objs, _ := b.List(context.Background(), ""); len(objs) != 0 {
		t.Errorf("rejected opens wrote %d objects", len(objs))
	}
}
