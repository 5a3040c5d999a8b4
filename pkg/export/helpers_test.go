package export_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/export"
	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// testSpec is the schema of the test store: a column of each kind an export
// must carry across exactly (a timestamp, a vector, a blob).
const testSpec = `{"columns":[
	["id",{"type":"string"}],
	["v",{"type":"int64","nullable":true}],
	["at",{"type":"timestamp","nullable":true}],
	["tag",{"type":"string","nullable":true}],
	["emb",{"type":"vector","dim":2,"nullable":true}],
	["payload",{"type":"binary","blob":true,"nullable":true}]]}`

var target = registry.Target{Kind: registry.KindGeneric, Name: "g"}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// openStore creates generic store "g" of testSpec on a file:// bucket and opens
// it as worker shard w1.
func openStore(t testing.TB) *store.Store {
	t.Helper()
	ctx := context.Background()
	b := objstoretest.File(t)
	ss := store.NewStores(store.Config{Bucket: b, Shard: "w1", Logger: quiet(), SnapshotTTL: -1,
		WALOptions: []wal.Option{wal.WithLogger(quiet())}}, 0)
	t.Cleanup(func() { _ = ss.Close(context.Background()) })
	spec, err := schema.ParseSpec([]byte(testSpec))
	if err != nil {
		t.Fatal(err)
	}
	canon, err := spec.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ss.Create(ctx, registry.Entry{Kind: registry.KindGeneric, Name: "g", Schema: canon}); err != nil {
		t.Fatal(err)
	}
	st, rel, err := ss.Open(ctx, registry.KindGeneric, "g")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rel)
	return st
}

// put appends ids first..last-1 (named r%04d) with value v, and seals them.
func put(t testing.TB, st *store.Store, first, last int, v int64) {
	t.Helper()
	spec, err := schema.ParseSpec([]byte(testSpec))
	if err != nil {
		t.Fatal(err)
	}
	for lo := first; lo < last; lo += 5000 {
		var raw []json.RawMessage
		for i := lo; i < min(lo+5000, last); i++ {
			tag := "even"
			if i%2 == 1 {
				tag = "odd"
			}
			at := time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Second).Format(time.RFC3339)
			raw = append(raw, json.RawMessage(fmt.Sprintf(
				`{"id":"r%04d","v":%d,"at":%q,"tag":%q,"emb":[%d,%d],"payload":"cGF5bG9hZA=="}`, i, v, at, tag, i, v)))
		}
		rec, err := spec.Codec().Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		err = st.Append(context.Background(), rec)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Seal(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// mergeAll merges every pending generation and returns the store's new version.
func mergeAll(t testing.TB, st *store.Store) uint64 {
	t.Helper()
	res, err := merge.New(merge.Config{Logger: quiet()}).Merge(context.Background(), st, true)
	if err != nil {
		t.Fatal(err)
	}
	return res.Version
}

// history builds the store the tests export: 300 rows merged, 100 of them
// overwritten and merged, 100 overwritten again with 50 new ones and merged (so
// fragments carry deletion vectors), then 20 overwrites and 20 new rows left
// pending. It returns the versions of the three merges.
func history(t testing.TB, st *store.Store) []uint64 {
	t.Helper()
	put(t, st, 0, 300, 1)
	v1 := mergeAll(t, st)
	put(t, st, 0, 100, 2)
	v2 := mergeAll(t, st)
	put(t, st, 50, 150, 3)
	put(t, st, 300, 350, 3)
	v3 := mergeAll(t, st)
	put(t, st, 0, 20, 4)
	put(t, st, 350, 370, 4)
	return []uint64{v1, v2, v3}
}

// listed is what a list of the store (or a view) answers: id -> v.
func listed(t testing.TB, list func(context.Context, store.ListOptions) ([]arrow.RecordBatch, error)) map[string]int64 {
	t.Helper()
	recs, err := list(context.Background(), store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, r := range recs {
		ids := r.Column(r.Schema().FieldIndices("id")[0]).(*array.String)
		vs := r.Column(r.Schema().FieldIndices("v")[0]).(*array.Int64)
		for i := 0; i < ids.Len(); i++ {
			out[ids.Value(i)] = vs.Value(i)
		}
		r.Release()
	}
	return out
}

// exported is what an export's files hold, read back with arrow-go's Parquet
// reader as any reader would, file by file as the manifest lists them.
type exported struct {
	values  map[string]int64 // id -> v (-1 when the export has no v)
	rows    []int64          // per file
	schemas []*arrow.Schema
	seqs    map[string]uint64
}

// readExport reads every file m lists from dst; an id found twice fails t.
func readExport(t testing.TB, dst *objstore.Bucket, m export.Manifest) exported {
	t.Helper()
	ctx := context.Background()
	out := exported{values: map[string]int64{}, seqs: map[string]uint64{}}
	for _, f := range m.Files {
		data, err := dst.Get(ctx, f.Path)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(data)) != f.Bytes {
			t.Fatalf("%s: %d bytes, the manifest says %d", f.Path, len(data), f.Bytes)
		}
		pf, err := file.NewParquetReader(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: %v", f.Path, err)
		}
		fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 1000}, memory.DefaultAllocator)
		if err != nil {
			t.Fatal(err)
		}
		rr, err := fr.GetRecordReader(ctx, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		var rows int64
		for rr.Next() {
			rec := rr.RecordBatch()
			ids := rec.Column(rec.Schema().FieldIndices("id")[0]).(*array.String)
			seqs := rec.Column(rec.Schema().FieldIndices("_seq")[0]).(*array.Uint64)
			var vs *array.Int64
			if i := rec.Schema().FieldIndices("v"); len(i) == 1 {
				vs = rec.Column(i[0]).(*array.Int64)
			}
			for i := 0; i < ids.Len(); i++ {
				id := ids.Value(i)
				if _, dup := out.values[id]; dup {
					t.Fatalf("id %s exported twice", id)
				}
				out.values[id] = -1
				if vs != nil {
					out.values[id] = vs.Value(i)
				}
				out.seqs[id] = seqs.Value(i)
			}
			rows += rec.NumRows()
		}
		if err := rr.Err(); err != nil {
			t.Fatal(err)
		}
		out.schemas = append(out.schemas, rr.Schema())
		rr.Release()
		_ = pf.Close()
		out.rows = append(out.rows, rows)
	}
	return out
}

// checkCounts fails t unless the files hold the rows the manifest says.
func checkCounts(t testing.TB, m export.Manifest, got exported) {
	t.Helper()
	var total int64
	for i, f := range m.Files {
		if got.rows[i] != f.Rows {
			t.Fatalf("%s holds %d rows, the manifest says %d", f.Path, got.rows[i], f.Rows)
		}
		total += f.Rows
	}
	if total != m.Rows || int64(len(got.values)) != m.Rows {
		t.Fatalf("manifest rows %d, files %d, distinct ids %d", m.Rows, total, len(got.values))
	}
}

// keysOf lists dst's keys.
func keysOf(t testing.TB, dst *objstore.Bucket) []string {
	t.Helper()
	objs, err := dst.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		out = append(out, o.Key)
	}
	return out
}
