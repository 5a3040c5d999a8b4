package ipcguard

import (
	"bytes"
	"errors"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// nestedSchema has every construct the checks walk: schema and field metadata,
// nested children, a timestamp with a zone, a union.
var nestedSchema = func() *arrow.Schema {
	fmd := arrow.NewMetadata([]string{"k"}, []string{"v"})
	smd := arrow.NewMetadata([]string{"tidemark.wal.format_version", "x"}, []string{"1", "y"})
	return arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.BinaryTypes.String, Metadata: fmd},
		{Name: "tokens", Type: arrow.ListOf(arrow.StructOf(
			arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
			arrow.Field{Name: "b", Type: arrow.LargeListOf(arrow.BinaryTypes.LargeString), Nullable: true},
		)), Nullable: true},
		{Name: "at", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
		{Name: "u", Type: arrow.DenseUnionOf([]arrow.Field{{Name: "i", Type: arrow.PrimitiveTypes.Int64, Nullable: true}}, []arrow.UnionTypeCode{3}), Nullable: true},
		{Name: "_seq", Type: arrow.PrimitiveTypes.Uint64},
	}, &smd)
}()

func nestedBatch(t testing.TB, n int) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, nestedSchema)
	defer b.Release()
	for i := range n {
		b.Field(0).(*array.StringBuilder).Append("id")
		lb := b.Field(1).(*array.ListBuilder)
		lb.Append(true)
		sb := lb.ValueBuilder().(*array.StructBuilder)
		sb.Append(true)
		sb.FieldBuilder(0).(*array.Int32Builder).Append(int32(i))
		ll := sb.FieldBuilder(1).(*array.LargeListBuilder)
		ll.Append(true)
		ll.ValueBuilder().(*array.LargeStringBuilder).Append("a long enough string value to be out of line")
		b.Field(2).(*array.TimestampBuilder).Append(arrow.Timestamp(i))
		ub := b.Field(3).(*array.DenseUnionBuilder)
		ub.Append(3)
		ub.Child(0).(*array.Int64Builder).Append(int64(i))
		b.Field(4).(*array.Uint64Builder).Append(uint64(i))
	}
	return b.NewRecordBatch()
}

func stream(t testing.TB, batches int) []byte {
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(nestedSchema))
	for range batches {
		rec := nestedBatch(t, 3)
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func file(t testing.TB, batches int) []byte {
	var buf bytes.Buffer
	w, err := ipc.NewFileWriter(&buf, ipc.WithSchema(nestedSchema))
	if err != nil {
		t.Fatal(err)
	}
	for range batches {
		rec := nestedBatch(t, 3)
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestWrittenStreamsAndFilesPass: what arrow-go writes (schema only, one batch,
// several batches) passes, so the guard never refuses data Tidemark wrote.
func TestWrittenStreamsAndFilesPass(t *testing.T) {
	for _, n := range []int{0, 1, 3} {
		if err := CheckStream(stream(t, n)); err != nil {
			t.Errorf("stream of %d batches: %v", n, err)
		}
		if err := CheckFile(file(t, n)); err != nil {
			t.Errorf("file of %d batches: %v", n, err)
		}
	}
}

// decodeStream decodes data the way the WAL does, under a recover: what the guard
// passes must not crash the process (an out-of-memory or stack overflow would end
// the test binary, not fail the test).
func decodeStream(data []byte) {
	defer func() { _ = recover() }()
	r, err := ipc.NewReader(bytes.NewReader(data), ipc.WithMetadataSizeLimit(int64(len(data))), ipc.WithBodySizeLimit(int64(len(data))))
	if err != nil {
		return
	}
	defer r.Release()
	for r.Next() {
	}
}

func decodeFile(data []byte) {
	defer func() { _ = recover() }()
	f, err := ipc.NewMappedFileReader(data, ipc.WithMetadataSizeLimit(int64(len(data))), ipc.WithBodySizeLimit(int64(len(data))))
	if err != nil {
		return
	}
	defer f.Close()
	for i := range f.NumRecords() {
		if rec, err := f.RecordBatchAt(i); err == nil {
			rec.Release()
		}
	}
}

// TestFlippedBytesAreRefusedOrDecodeBounded flips every byte of a stream and a file
// three ways. A flip in a vector length made arrow-go allocate 62 GB and the worker
// die replaying a WAL entry; now each flip is refused, or decodes to an error or a
// recovered panic.
func TestFlippedBytesAreRefusedOrDecodeBounded(t *testing.T) {
	for name, c := range map[string]struct {
		data   []byte
		check  func([]byte) error
		decode func([]byte)
	}{
		"stream": {stream(t, 1), CheckStream, decodeStream},
		"file":   {file(t, 1), CheckFile, decodeFile},
	} {
		refused := 0
		for i := range c.data {
			for _, x := range []byte{0xff, 0x80, 0x01} {
				d := bytes.Clone(c.data)
				d[i] ^= x
				if err := c.check(d); err != nil {
					if !errors.Is(err, ErrMalformed) {
						t.Fatalf("%s: error %v is not ErrMalformed", name, err)
					}
					refused++
					continue
				}
				c.decode(d)
			}
		}
		t.Logf("%s: %d of %d flips refused", name, refused, 3*len(c.data))
	}
}

// FuzzCheck tries every input as an IPC stream and as an IPC file: each check never
// panics (it recovers its own) and fails only with ErrMalformed; what it passes
// decodes without crashing the process.
func FuzzCheck(f *testing.F) {
	f.Add(stream(f, 0))
	f.Add(stream(f, 1))
	f.Add(file(f, 0))
	f.Add(file(f, 2))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	f.Add([]byte("ARROW1\x00\x00\x00\x00\x00\x00ARROW1"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, c := range []struct {
			check  func([]byte) error
			decode func([]byte)
		}{{CheckStream, decodeStream}, {CheckFile, decodeFile}} {
			if err := c.check(data); err != nil {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("error %v is not ErrMalformed", err)
				}
				continue
			}
			c.decode(data)
		}
	})
}

// View columns are refused: Tidemark writes none, and arrow-go reads a view
// column's variadic buffer count past the end of the record batch's vector (a
// fuzzed entry made it size a slice by whatever followed, out of memory).
func TestViewColumnsAreRefused(t *testing.T) {
	s := arrow.NewSchema([]arrow.Field{{Name: "v", Type: arrow.BinaryTypes.StringView, Nullable: true}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, s)
	defer b.Release()
	b.Field(0).(*array.StringViewBuilder).Append("a string view longer than twelve bytes")
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
	if err := CheckStream(buf.Bytes()); !errors.Is(err, ErrMalformed) || !errors.Is(err, ErrViewType) {
		t.Fatalf("CheckStream of a view column: %v, want ErrMalformed and ErrViewType", err)
	}
}
