package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/tidemark-io/tidemark/pkg/client"
	"github.com/tidemark-io/tidemark/pkg/data/exportfmt"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// TestExportWritesTheLiveRowsAsParquet: a generic store is written, partly
// overwritten and merged twice (deletion vectors hide the overwritten versions),
// and written once more without a merge; an export through a worker's POST
// .../export runs as a master task (followed with `master admin get`), and its
// files, read back with arrow-go's Parquet reader, hold exactly the live rows,
// each at its newest value: never an overwritten version, never a pending row
// missed. Production failure (issue 44): a tool reading a store's data/*.parquet
// counted every overwritten row that the deletion vectors hide.
func TestExportWritesTheLiveRowsAsParquet(t *testing.T) {
	t.Parallel()
	c := newCluster(t, nil, nil)
	m := c.startMaster("m1", nil)
	w := c.startWorker("w1")
	dc := c.dataClient(w.url())
	ctx := context.Background()
	const name = "exported"
	if _, err := dc.CreateStore(ctx, client.Generic, client.StoreSpec{Name: name,
		Schema: json.RawMessage(`{"columns":[["id",{"type":"string"}],["score",{"type":"int64"}]]}`)}); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	add := func(from, to int, score int64) {
		t.Helper()
		var rows []map[string]any
		for i := from; i < to; i++ {
			id := fmt.Sprintf("row-%03d", i)
			rows = append(rows, map[string]any{"id": id, "score": score})
			want[id] = score
		}
		if _, err := dc.AddRows(ctx, client.Generic, name, rows, client.AddOptions{Flush: true}); err != nil {
			t.Fatal(err)
		}
	}
	merge := func() {
		t.Helper()
		if tk := c.awaitTaskEnd(c.requeueMerge(m, "generic:"+name), time.Minute); tk.State != "done" {
			t.Fatalf("merge: %+v", tk)
		}
	}
	add(0, 200, 1)
	merge()
	add(50, 100, 2) // overwrites: the base rows of these ids are deleted by the next merge
	merge()
	add(190, 230, 3) // overwrites and new ids, pending

	dir := filepath.Join(t.TempDir(), "export")
	task, existing, err := dc.Export(ctx, client.Generic, name, client.ExportRequest{Destination: "file://" + dir})
	if err != nil || existing {
		t.Fatalf("export: %+v, %v", task, err)
	}
	var got struct {
		Task struct {
			State    string `json:"state"`
			Error    string `json:"error"`
			Exported struct {
				Manifest   string `json:"manifest"`
				Rows       count  `json:"rows"`
				FeedCursor string `json:"feed_cursor"`
			} `json:"exported"`
		} `json:"task"`
	}
	testwait.ForEvery(t, 2*time.Minute, poll, "the export task to finish", func() (bool, string) {
		if err := json.Unmarshal(c.admin(m, "get", task.ID), &got); err != nil {
			t.Fatal(err)
		}
		return got.Task.State == "done" || got.Task.State == "failed", got.Task.State
	})
	if got.Task.State != "done" || int(got.Task.Exported.Rows) != len(want) || got.Task.Exported.FeedCursor == "" ||
		got.Task.Exported.Manifest != "file://"+filepath.Join(dir, exportfmt.ManifestName) {
		t.Fatalf("export task: %+v; want done with %d rows, a feed cursor and the manifest's URL", got.Task, len(want))
	}

	raw, err := os.ReadFile(filepath.Join(dir, exportfmt.ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	man, err := exportfmt.ParseManifest(raw)
	if err != nil {
		t.Fatal(err)
	}
	read := map[string]int64{}
	for _, f := range man.Files {
		rows := readParquet(t, filepath.Join(dir, filepath.FromSlash(f.Path)), read)
		if rows != f.Rows {
			t.Errorf("%s: %d rows, the manifest says %d", f.Path, rows, f.Rows)
		}
	}
	if len(read) != len(want) || man.Rows != int64(len(want)) {
		t.Errorf("files hold %d ids, the manifest %d rows; want %d", len(read), man.Rows, len(want))
	}
	for id, score := range want {
		if read[id] != score {
			t.Errorf("%s: exported score %d, want %d (its newest)", id, read[id], score)
		}
	}
}

// readParquet reads one exported file with arrow-go into scores (id -> score),
// failing on an id met twice, and returns its rows.
func readParquet(t *testing.T, path string, scores map[string]int64) int64 {
	t.Helper()
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 1024}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	tr := array.NewTableReader(tbl, 1024)
	defer tr.Release()
	for tr.Next() {
		rec := tr.RecordBatch()
		ids, ok1 := rec.Column(int(rec.Schema().FieldIndices("id")[0])).(*array.String)
		vals, ok2 := rec.Column(int(rec.Schema().FieldIndices("score")[0])).(*array.Int64)
		if !ok1 || !ok2 {
			t.Fatalf("%s: schema %s", path, rec.Schema())
		}
		for i := range ids.Len() {
			if _, dup := scores[ids.Value(i)]; dup {
				t.Errorf("%s: id %s exported twice", path, ids.Value(i))
			}
			scores[ids.Value(i)] = vals.Value(i)
		}
	}
	return tbl.NumRows()
}
