package client_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark-io/tidemark/pkg/client"
)

// AddArrow sends a stream as one add; a stream the store's schema refuses is
// an *Error naming the column.
func TestAddArrowAddsAStreamAndARefusalIsAnError(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, newWorker(t), client.WithToken(token))
	if _, err := c.CreateStore(ctx, client.Generic, client.StoreSpec{Name: "g", Schema: []byte(spec)}); err != nil {
		t.Fatal(err)
	}
	stream := func(fields []arrow.Field, build func(b *array.RecordBuilder)) *bytes.Buffer {
		s := arrow.NewSchema(fields, nil)
		b := array.NewRecordBuilder(memory.DefaultAllocator, s)
		defer b.Release()
		build(b)
		rec := b.NewRecordBatch()
		defer rec.Release()
		var buf bytes.Buffer
		w := ipc.NewWriter(&buf, ipc.WithSchema(s))
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return &buf
	}
	good := stream([]arrow.Field{{Name: "n", Type: arrow.PrimitiveTypes.Int64}, {Name: "id", Type: arrow.BinaryTypes.String}},
		func(b *array.RecordBuilder) {
			b.Field(0).(*array.Int64Builder).AppendValues([]int64{1, 2}, nil)
			b.Field(1).(*array.StringBuilder).AppendValues([]string{"a", "b"}, nil)
		})
	add, err := c.AddArrow(ctx, client.Generic, "g", good, client.AddOptions{Flush: true})
	if err != nil || add.Count != 2 || add.Seq == 0 {
		t.Fatalf("AddArrow = %+v, %v", add, err)
	}
	if p, err := c.ListRows(ctx, client.Generic, "g", client.ListOptions{ReadOptions: client.ReadOptions{After: add.Seq}}); err != nil || ids(t, p.Rows) != "a,b" {
		t.Fatalf("ListRows after the Arrow add = %+v, %v", p, err)
	}
	bad := stream([]arrow.Field{{Name: "id", Type: arrow.BinaryTypes.String}, {Name: "n", Type: arrow.BinaryTypes.String}},
		func(b *array.RecordBuilder) {
			b.Field(0).(*array.StringBuilder).Append("c")
			b.Field(1).(*array.StringBuilder).Append("3")
		})
	_, err = c.AddArrow(ctx, client.Generic, "g", bad, client.AddOptions{})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusBadRequest || !strings.Contains(ce.Message, `column "n"`) {
		t.Fatalf("AddArrow of a mismatched stream: %v, want a 400 naming the column", err)
	}
}
