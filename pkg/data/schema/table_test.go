package schema

import (
	"bytes"
	"context"
	"sort"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
	"github.com/tidemark-io/tidemark/pkg/storage/table"
)

// withSeq appends the _seq column as the WAL does.
func withSeq(t *testing.T, rec arrow.RecordBatch) arrow.RecordBatch {
	t.Helper()
	fields := append(rec.Schema().Fields(), arrow.Field{Name: rowkey.SeqColumn, Type: arrow.PrimitiveTypes.Uint64})
	sb := array.NewUint64Builder(memPool)
	defer sb.Release()
	for i := int64(0); i < rec.NumRows(); i++ {
		sb.Append(uint64(i + 1))
	}
	seq := sb.NewArray()
	defer seq.Release()
	out := array.NewRecordBatch(arrow.NewSchema(fields, nil), append(rec.Columns(), seq), rec.NumRows())
	t.Cleanup(out.Release)
	return out
}

// TestDecodedRowsAreRowsTheTableAccepts: the package invariant, end to end. Rows
// decoded for either kind, with the WAL's _seq appended, go through an Arrow IPC
// entry (the WAL's format) and a committed Parquet fragment (the base table's), and
// come back out of a scan encoding to the same JSON.
func TestDecodedRowsAreRowsTheTableAccepts(t *testing.T) {
	ctx := context.Background()
	bucket, err := objstore.Open(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer bucket.Close()

	for _, tc := range []struct {
		kind string
		rec  arrow.RecordBatch
	}{
		{"rollout", decodeRollouts(t, fullRollout, `{"id":"bare"}`)},
		{"generic", decodeRows(t, mustSpec(t, everyTypeSpec), fullGenericRow, nullGenericRow)},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			want := encodeAll(t, tc.rec)
			rec := withSeq(t, tc.rec)

			var buf bytes.Buffer
			w := ipc.NewWriter(&buf, ipc.WithSchema(rec.Schema()))
			if err := w.Write(rec); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			r, err := ipc.NewReader(&buf)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Release()
			if !r.Next() {
				t.Fatalf("IPC read: %v", r.Err())
			}
			if got := encodeAll(t, r.RecordBatch()); !equalStrings(got, want) {
				t.Fatalf("IPC round trip\n got %s\nwant %s", got, want)
			}

			tb, err := table.Create(ctx, bucket, tc.kind+"/t", rec.Schema())
			if err != nil {
				t.Fatal(err)
			}
			x, err := tb.Prepare(ctx, tb.Latest(), table.Append{Records: []arrow.RecordBatch{rec}})
			if err != nil {
				t.Fatal(err)
			}
			m, err := x.Commit(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			err = tb.Scan(ctx, m, table.ScanOptions{}, func(b arrow.RecordBatch, _ string) error {
				got = append(got, encodeAll(t, b)...)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			// A fragment's row order is the table's business; compare as sets.
			sort.Strings(got)
			sort.Strings(want)
			if !equalStrings(got, want) {
				t.Fatalf("table round trip\n got %s\nwant %s", got, want)
			}
		})
	}
}

func TestIDColumnIsTheTablesKey(t *testing.T) {
	if IDColumn != rowkey.IDColumn {
		t.Fatalf("IDColumn %q, rowkey.IDColumn %q", IDColumn, rowkey.IDColumn)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
