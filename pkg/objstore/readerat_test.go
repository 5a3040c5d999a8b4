package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/iotest"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/tidemark-io/tidemark/pkg/objstore"
	"github.com/tidemark-io/tidemark/pkg/objstore/objstoretest"
)

// Parquet readers take a parquet.ReaderAtSeeker; fragments are read through ReaderAt.
var _ parquet.ReaderAtSeeker = (*objstore.ReaderAt)(nil)

func TestReaderAtOnEveryDriver(t *testing.T) {
	objstoretest.ForEachDriver(t, func(t *testing.T, open func(testing.TB) *objstore.Bucket) {
		t.Parallel()
		ctx := context.Background()
		b := open(t)
		content := make([]byte, 100_000)
		rng := rand.New(rand.NewPCG(7, 7))
		for i := range content {
			content[i] = byte(rng.Uint32())
		}
		const key = "data/fragment.parquet"
		if err := b.Put(ctx, key, content); err != nil {
			t.Fatal(err)
		}
		r, err := b.ReaderAt(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if r.Size() != int64(len(content)) || r.Key() != key {
			t.Fatalf("Size, Key = %d, %q; want %d, %q", r.Size(), r.Key(), len(content), key)
		}

		t.Run("io.ReaderAt contract at the end", func(t *testing.T) {
			p := make([]byte, 10)
			n, err := r.ReadAt(p, int64(len(content))-4)
			if n != 4 || err != io.EOF || !bytes.Equal(p[:4], content[len(content)-4:]) {
				t.Errorf("short read at the end = %d, %v; want 4, io.EOF", n, err)
			}
			n, err = r.ReadAt(p, int64(len(content))-10)
			if n != 10 || err != nil {
				t.Errorf("read ending exactly at the end = %d, %v; want 10, nil", n, err)
			}
			if n, err := r.ReadAt(p, int64(len(content))); n != 0 || err != io.EOF {
				t.Errorf("read at size = %d, %v; want 0, io.EOF", n, err)
			}
			if n, err := r.ReadAt(p, 1<<40); n != 0 || err != io.EOF {
				t.Errorf("read past the end = %d, %v; want 0, io.EOF", n, err)
			}
			if _, err := r.ReadAt(p, -1); err == nil {
				t.Error("read at a negative offset succeeded")
			}
		})

		t.Run("iotest.TestReader", func(t *testing.T) {
			// Checks Read, ReadAt and Seek against the content. It reads in tiny
			// pieces, one request each, so it gets a small object.
			small := content[:300]
			if err := b.Put(ctx, "data/small", small); err != nil {
				t.Fatal(err)
			}
			fresh, err := b.ReaderAt(ctx, "data/small")
			if err != nil {
				t.Fatal(err)
			}
			if err := iotest.TestReader(fresh, small); err != nil {
				t.Error(err)
			}
		})

		t.Run("concurrent ReadAt", func(t *testing.T) {
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(g), 1))
					for range 25 {
						off := rng.IntN(len(content))
						p := make([]byte, rng.IntN(4096)+1)
						n, err := r.ReadAt(p, int64(off))
						want := content[off:min(off+len(p), len(content))]
						if n != len(want) || !bytes.Equal(p[:n], want) || (err != nil && err != io.EOF) {
							t.Errorf("ReadAt(%d bytes at %d) = %d, %v", len(p), off, n, err)
							return
						}
					}
				})
			}
			wg.Wait()
		})

		t.Run("parquet round trip", func(t *testing.T) {
			testParquetThroughReaderAt(t, b)
		})
	})
}

// testParquetThroughReaderAt writes a small Parquet file and reads it back with
// arrow-go's file reader over ReaderAt, the way table fragments are read.
func testParquetThroughReaderAt(t *testing.T, b *objstore.Bucket) {
	ctx := context.Background()
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.BinaryTypes.String},
		{Name: "n", Type: arrow.PrimitiveTypes.Int64},
	}, nil)
	bld := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer bld.Release()
	const rows = 1000
	for i := range rows {
		bld.Field(0).(*array.StringBuilder).Append(fmt.Sprintf("id-%04d", i))
		bld.Field(1).(*array.Int64Builder).Append(int64(i * i))
	}
	rec := bld.NewRecordBatch()
	defer rec.Release()
	tbl := array.NewTableFromRecords(schema, []arrow.RecordBatch{rec})
	defer tbl.Release()
	var buf bytes.Buffer
	if err := pqarrow.WriteTable(tbl, &buf, 256, parquet.NewWriterProperties(), pqarrow.DefaultWriterProps()); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(ctx, "data/t.parquet", buf.Bytes()); err != nil {
		t.Fatal(err)
	}

	r, err := b.ReaderAt(ctx, "data/t.parquet")
	if err != nil {
		t.Fatal(err)
	}
	pf, err := file.NewParquetReader(r)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	got, err := fr.ReadTable(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Release()
	if got.NumRows() != rows || got.NumCols() != 2 {
		t.Fatalf("read back %d rows x %d columns, want %d x 2", got.NumRows(), got.NumCols(), rows)
	}
	for i := range 2 {
		// Compare values only: the reader adds PARQUET:field_id metadata to fields.
		if !array.ChunkedEqual(tbl.Column(i).Data(), got.Column(i).Data()) {
			t.Errorf("column %s differs after the round trip", schema.Field(i).Name)
		}
	}
}

func TestReaderAtUsesTheContextItWasOpenedWith(t *testing.T) {
	b := objstoretest.Mem(t)
	if err := b.Put(context.Background(), "k", []byte("abc")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := objstore.NewFaults(nil)
	r, err := objstore.WithFaults(b, f).ReaderAt(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	// memblob ignores a cancelled context; the fault wrapper's latency wait does not.
	f.SetLatency(1<<40, 0)
	_, err = r.ReadAt(make([]byte, 1), 0)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("ReadAt after the open context was cancelled = %v, want context.Canceled", err)
	}
}

// TestReaderAtReportsAnObjectThatShrank: an object replaced by a shorter one after
// open must not read as a clean io.EOF, which a decoder would take for "file ends here".
func TestReaderAtReportsAnObjectThatShrank(t *testing.T) {
	ctx := context.Background()
	for _, b := range []*objstore.Bucket{objstoretest.Mem(t), objstoretest.File(t)} {
		if err := b.Put(ctx, "k", []byte("0123456789")); err != nil {
			t.Fatal(err)
		}
		r, err := b.ReaderAt(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Put(ctx, "k", []byte("0123")); err != nil {
			t.Fatal(err)
		}
		_, err = r.ReadAt(make([]byte, 8), 0)
		if !errors.Is(err, io.ErrUnexpectedEOF) || err == io.EOF {
			t.Errorf("%s: ReadAt of a shrunk object = %v, want io.ErrUnexpectedEOF", b, err)
		}
	}
}
