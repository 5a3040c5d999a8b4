package export_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/schema"

	"github.com/tidemark-io/tidemark/pkg/data/exportfmt"
	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/export"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// run opens the scan of spec and writes it to dst as task.
func run(ctx context.Context, t testing.TB, st *store.Store, dst *objstore.Bucket, spec export.Spec, opts export.Options) (export.Manifest, error) {
	t.Helper()
	sc, err := export.Open(ctx, st, spec)
	if err != nil {
		t.Fatal(err)
	}
	opts.Spec = spec
	return export.Write(ctx, sc, target, dst, opts)
}

// TestAnExportHoldsEachLiveRowOnceInItsNewestVersion is the export's promise to a
// trainer: the files hold exactly what a read of the store answers, overwritten
// versions (hidden by deletion vectors in the fragments a naive read of data/
// would count) never, pending rows included, the counts of the manifest those of
// the files; and the files carry the types exactly, to Arrow readers and to
// readers of plain Parquet (DuckDB reads _seq as UBIGINT from its logical type).
func TestAnExportHoldsEachLiveRowOnceInItsNewestVersion(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	history(t, st)
	want := listed(t, st.List)
	dst := objstoretest.File(t)
	var progress []export.Progress
	m, err := run(ctx, t, st, dst, export.Spec{Destination: "file:///unused"}, export.Options{
		TaskID: "task-1", FeedCursor: "c-42", MaxFileBytes: 2 << 10,
		Progress: func(p export.Progress) { progress = append(progress, p) },
		Now:      func() time.Time { return time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC) },
	})
	if err != nil {
		t.Fatal(err)
	}
	got := readExport(t, dst, m)
	if !maps.Equal(got.values, want) {
		t.Fatalf("export holds %d rows, the store lists %d:\n%v\n%v", len(got.values), len(want), got.values, want)
	}
	checkCounts(t, m, got)
	if len(m.Files) < 3 {
		t.Fatalf("%d files under a cut of 2 KiB; want several", len(m.Files))
	}
	for _, f := range m.Files {
		if !strings.HasPrefix(f.Path, "part-") || !strings.HasSuffix(f.Path, ".parquet") {
			t.Fatalf("file name %q", f.Path)
		}
	}
	if m.Format != exportfmt.Format || m.Target != "generic:g" || m.Store != "g" || m.Kind != "generic" || m.TaskID != "task-1" ||
		m.FeedCursor != "c-42" || m.Pinned || m.Version == 0 || !m.CreatedAt.Equal(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("manifest %+v", m)
	}
	names := []string{"id", "v", "at", "tag", "emb", "payload", "_seq"}
	for i, c := range m.Schema {
		if c.Name != names[i] {
			t.Fatalf("schema %+v, want the columns %v", m.Schema, names)
		}
	}
	// The stored manifest is the one returned, and it parses.
	data, err := dst.Get(ctx, exportfmt.ManifestName)
	if err != nil {
		t.Fatal(err)
	}
	if back, err := exportfmt.ParseManifest(data); err != nil || back.Rows != m.Rows || len(back.Files) != len(m.Files) {
		t.Fatalf("stored manifest: %+v, %v", back, err)
	}
	// Nothing else is left: the files and the manifest.
	wantKeys := []string{exportfmt.ManifestName}
	for _, f := range m.Files {
		wantKeys = append(wantKeys, f.Path)
	}
	slices.Sort(wantKeys)
	if keys := keysOf(t, dst); !slices.Equal(keys, wantKeys) {
		t.Fatalf("destination holds %v, want %v", keys, wantKeys)
	}
	last := progress[len(progress)-1]
	if last.Rows != m.Rows || last.Files != int64(len(m.Files)) || last.Bytes != m.Bytes || last.Estimate < m.Rows {
		t.Fatalf("last progress %+v, manifest rows %d files %d bytes %d", last, m.Rows, len(m.Files), m.Bytes)
	}

	// Types: the Arrow schema comes back exactly from every file.
	sc, err := st.OpenScan(ctx, store.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range got.schemas {
		want := sc.Schema()
		for j, f := range s.Fields() {
			w := want.Field(j)
			if f.Name != w.Name || f.Nullable != w.Nullable || !sameType(f.Type, w.Type) {
				t.Fatalf("file %d reads back as %s, want %s", i, s, want)
			}
		}
	}
	// And the Parquet types a reader without the Arrow schema goes by.
	raw, err := dst.Get(ctx, m.Files[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	pf, err := file.NewParquetReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	ps := pf.MetaData().Schema
	seq := ps.Column(ps.ColumnIndexByName("_seq"))
	if seq.PhysicalType() != parquet.Types.Int64 || !seq.LogicalType().Equals(schema.NewIntLogicalType(64, false)) {
		t.Fatalf("_seq is %s %s, want INT64 with an unsigned 64-bit logical type", seq.PhysicalType(), seq.LogicalType())
	}
	at := ps.Column(ps.ColumnIndexByName("at"))
	if at.PhysicalType() != parquet.Types.Int64 || !at.LogicalType().Equals(schema.NewTimestampLogicalType(true, schema.TimeUnitMicros)) {
		t.Fatalf("at is %s %s, want an INT64 UTC timestamp in µs", at.PhysicalType(), at.LogicalType())
	}
	if pf.MetaData().RowGroups[0].Columns[0].MetaData.Statistics == nil {
		t.Fatal("no column statistics")
	}
	kv := pf.MetaData().KeyValueMetadata()
	if kv.FindValue("tidemark.store") == nil || *kv.FindValue("tidemark.store") != "generic:g" || kv.FindValue("ARROW:schema") == nil {
		t.Fatalf("key-value metadata %v", kv)
	}
}

// TestAnExportAtAVersionEqualsTheReadAtThatVersion: a pinned export is the store
// as of the version, merged rows only, whatever was merged or added since.
func TestAnExportAtAVersionEqualsTheReadAtThatVersion(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	versions := history(t, st)
	for _, v := range versions {
		view, err := st.At(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		want := listed(t, view.List)
		dst := objstoretest.File(t)
		m, err := run(ctx, t, st, dst, export.Spec{Destination: "file:///unused", Version: v}, export.Options{TaskID: "t"})
		if err != nil {
			t.Fatal(err)
		}
		got := readExport(t, dst, m)
		if !maps.Equal(got.values, want) || m.Version != v || !m.Pinned {
			t.Fatalf("version %d: export (version %d) %v\nread %v", v, m.Version, got.values, want)
		}
		checkCounts(t, m, got)
	}
}

// TestAnExportKeepsItsColumnsAndFilter checks that the columns and the filter
// select what they say (id and _seq always), and that a filter's own column is
// not exported unless asked for.
func TestAnExportKeepsItsColumnsAndFilter(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	history(t, st)
	all := listed(t, st.List)
	dst := objstoretest.File(t)
	m, err := run(ctx, t, st, dst, export.Spec{Destination: "file:///unused", Columns: []string{"v"}, Filter: "tag = 'odd' AND v >= 3"},
		export.Options{TaskID: "t"})
	if err != nil {
		t.Fatal(err)
	}
	got := readExport(t, dst, m)
	want := map[string]int64{}
	for id, v := range all {
		var n int
		if _, err := fmt.Sscanf(id, "r%d", &n); err != nil {
			t.Fatal(err)
		}
		if n%2 == 1 && v >= 3 {
			want[id] = v
		}
	}
	if len(want) == 0 || !maps.Equal(got.values, want) {
		t.Fatalf("filtered export %v, want %v", got.values, want)
	}
	for _, s := range got.schemas {
		if names := fieldNames(s); !slices.Equal(names, []string{"id", "v", "_seq"}) {
			t.Fatalf("columns %v", names)
		}
	}
	if !slices.Equal(m.Columns, []string{"v"}) || m.Filter != "tag = 'odd' AND v >= 3" {
		t.Fatalf("manifest columns %v filter %q", m.Columns, m.Filter)
	}

	// A filter that keeps nothing still writes one file, with the schema.
	dst = objstoretest.File(t)
	m, err = run(ctx, t, st, dst, export.Spec{Destination: "file:///unused", Filter: "v > 1000"}, export.Options{TaskID: "t"})
	if err != nil {
		t.Fatal(err)
	}
	got = readExport(t, dst, m)
	if m.Rows != 0 || len(m.Files) != 1 || len(got.values) != 0 || len(got.schemas[0].Fields()) != 7 {
		t.Fatalf("empty export: %+v", m)
	}
}

// TestOpenRefusesWhatTheStoreCannotExport: a column the store lacks, a filter
// that does not compile and a version it does not hold are the caller's
// mistakes (Invalid: a 400, a task not retried), each named.
func TestOpenRefusesWhatTheStoreCannotExport(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	history(t, st)
	for _, c := range []struct {
		spec export.Spec
		says string
	}{
		{export.Spec{Destination: "file:///x", Columns: []string{"nope"}}, `"nope"`},
		{export.Spec{Destination: "file:///x", Columns: []string{"_seq"}}, `reserved`},
		{export.Spec{Destination: "file:///x", Filter: "nope = 1"}, `nope`},
		{export.Spec{Destination: "file:///x", Filter: "v = 'text'"}, `v`},
		{export.Spec{Destination: "file:///x", Version: 99}, `version 99`},
		{export.Spec{Destination: "mem://"}, `mem://`},
	} {
		_, err := export.Open(ctx, st, c.spec)
		if err == nil || errclass.Of(err) != errclass.Invalid || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%+v: %v (class %s), want an Invalid error saying %s", c.spec, err, errclass.Of(err), c.says)
		}
	}
}

// TestARetryAfterACancelledAttemptLeavesOneExport guards the task's retry after a
// cancel (or a worker that died mid-export): the first attempt leaves no
// manifest, so no reader takes its files for an export, and the retry commits
// one whose files are the only ones left.
func TestARetryAfterACancelledAttemptLeavesOneExport(t *testing.T) {
	st := openStore(t)
	history(t, st)
	want := listed(t, st.List)
	dst := objstoretest.File(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	files := int64(0)
	_, err := run(ctx, t, st, dst, export.Spec{Destination: "file:///unused"}, export.Options{
		TaskID: "task-1", MaxFileBytes: 2 << 10,
		Progress: func(p export.Progress) {
			if files = p.Files; p.Files >= 3 {
				cancel()
			}
		},
	})
	if !errors.Is(err, context.Canceled) || files < 3 {
		t.Fatalf("cancelled attempt: %v after %d files", err, files)
	}
	if ok, err := dst.Exists(context.Background(), exportfmt.ManifestName); err != nil || ok {
		t.Fatalf("a manifest after a cancelled attempt (%v, %v)", ok, err)
	}

	m, err := run(context.Background(), t, st, dst, export.Spec{Destination: "file:///unused"}, export.Options{TaskID: "task-1", MaxFileBytes: 2 << 10})
	if err != nil {
		t.Fatal(err)
	}
	got := readExport(t, dst, m)
	if !maps.Equal(got.values, want) {
		t.Fatalf("retry exported %v, want %v", got.values, want)
	}
	checkCounts(t, m, got)
	if keys := keysOf(t, dst); len(keys) != len(m.Files)+1 {
		t.Fatalf("destination holds %v besides the %d files and the manifest", keys, len(m.Files))
	}
}

// TestARetryAfterTheCommitReturnsTheExportUnchanged: a task retried after its
// export committed (the worker died before it could report) finds its manifest
// and writes nothing.
func TestARetryAfterTheCommitReturnsTheExportUnchanged(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	history(t, st)
	dst := objstoretest.File(t)
	first, err := run(ctx, t, st, dst, export.Spec{Destination: "file:///unused"}, export.Options{TaskID: "task-1"})
	if err != nil {
		t.Fatal(err)
	}
	put(t, st, 1000, 1010, 9) // the store moved on
	f := objstore.NewFaults(rand.NewPCG(1, 2))
	again, err := run(ctx, t, st, objstore.WithFaults(dst, f), export.Spec{Destination: "file:///unused"}, export.Options{TaskID: "task-1"})
	if err != nil {
		t.Fatal(err)
	}
	if !again.CreatedAt.Equal(first.CreatedAt) || again.Rows != first.Rows || !slices.Equal(again.Files, first.Files) {
		t.Fatalf("retry answered %+v, the commit was %+v", again, first)
	}
	if n := f.Requests(objstore.OpPut) + f.Requests(objstore.OpPutIfAbsent); n != 0 {
		t.Fatalf("the retry wrote %d objects", n)
	}
}

// TestADestinationOfAnotherExportIsRefused: an export never writes beside
// another export (committed or in progress) or beside files it did not write.
func TestADestinationOfAnotherExportIsRefused(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	history(t, st)
	spec := export.Spec{Destination: "file:///unused"}

	committed := objstoretest.File(t)
	if _, err := run(ctx, t, st, committed, spec, export.Options{TaskID: "task-1"}); err != nil {
		t.Fatal(err)
	}
	before := keysOf(t, committed)

	// Task 2's attempt cancelled after its first file: uncommitted files of
	// another task.
	uncommitted := objstoretest.File(t)
	cctx, cancel := context.WithCancel(ctx)
	_, err := run(cctx, t, st, uncommitted, spec, export.Options{TaskID: "task-2", MaxFileBytes: 2 << 10,
		Progress: func(p export.Progress) {
			if p.Files >= 2 {
				cancel()
			}
		}})
	cancel()
	if !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	// What a cancelled attempt leaves is its own to clean: simulate a worker that
	// died instead by writing a marker and a file as it would have.
	if err := uncommitted.Put(ctx, "_export.json", []byte(`{"format":"tidemark-export/1","task_id":"task-2","attempt":"0badf00d"}`)); err != nil {
		t.Fatal(err)
	}
	if err := uncommitted.Put(ctx, "part-00000-0badf00d.parquet", []byte("PAR1")); err != nil {
		t.Fatal(err)
	}

	foreign := objstoretest.File(t)
	if err := foreign.Put(ctx, "notes.txt", []byte("mine")); err != nil {
		t.Fatal(err)
	}
	stranger := objstoretest.File(t)
	if err := stranger.Put(ctx, exportfmt.ManifestName, []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}

	for name, dst := range map[string]*objstore.Bucket{"committed": committed, "uncommitted": uncommitted, "foreign": foreign, "stranger": stranger} {
		_, err := run(ctx, t, st, dst, spec, export.Options{TaskID: "task-3"})
		if !errors.Is(err, export.ErrDestinationInUse) || errclass.Of(err) != errclass.Invalid {
			t.Errorf("%s destination: %v, want ErrDestinationInUse", name, err)
		}
	}
	if after := keysOf(t, committed); !slices.Equal(after, before) {
		t.Fatalf("a refused export changed the destination: %v, was %v", after, before)
	}
	// The uncommitted export's own task takes its destination over.
	if _, err := run(ctx, t, st, uncommitted, spec, export.Options{TaskID: "task-2"}); err != nil {
		t.Fatalf("task 2's retry: %v", err)
	}
}

// TestAZombieAttemptAndItsRetryCommitOneExport is the interleaving the attempt
// rules exist for: a worker the master gave up on still exports while the retry
// runs and commits. The zombie, finishing last, must not replace or damage the
// committed export: it returns the committed manifest and deletes its own files.
func TestAZombieAttemptAndItsRetryCommitOneExport(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	versions := history(t, st)
	spec := export.Spec{Destination: "file:///unused", Version: versions[1]}
	view, err := st.At(ctx, versions[1])
	if err != nil {
		t.Fatal(err)
	}
	want := listed(t, view.List)
	dst := objstoretest.File(t)

	paused, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	type result struct {
		m   export.Manifest
		err error
	}
	zombie := make(chan result, 1)
	go func() {
		sc, err := export.Open(ctx, st, spec)
		if err != nil {
			zombie <- result{err: err}
			return
		}
		m, err := export.Write(ctx, sc, target, dst, export.Options{TaskID: "task-1", Spec: spec, MaxFileBytes: 2 << 10,
			Progress: func(p export.Progress) {
				if p.Files >= 2 {
					once.Do(func() { close(paused); <-resume })
				}
			}})
		zombie <- result{m, err}
	}()
	select {
	case <-paused:
	case z := <-zombie:
		t.Fatalf("the zombie ended before its second file: %+v, %v", z.m, z.err)
	}
	retry, err := run(ctx, t, st, dst, spec, export.Options{TaskID: "task-1", MaxFileBytes: 2 << 10})
	if err != nil {
		t.Fatal(err)
	}
	close(resume)
	z := <-zombie
	if z.err != nil {
		t.Fatalf("zombie: %v", z.err)
	}
	if !slices.Equal(z.m.Files, retry.Files) || !z.m.CreatedAt.Equal(retry.CreatedAt) {
		t.Fatalf("the zombie answered %+v, the retry committed %+v", z.m, retry)
	}
	got := readExport(t, dst, retry)
	if !maps.Equal(got.values, want) {
		t.Fatalf("export %v, want %v", got.values, want)
	}
	checkCounts(t, retry, got)
	if keys := keysOf(t, dst); len(keys) != len(retry.Files)+1 {
		t.Fatalf("destination holds %v, want the %d files of the commit and its manifest", keys, len(retry.Files))
	}
}

func fieldNames(s *arrow.Schema) []string {
	out := make([]string, s.NumFields())
	for i, f := range s.Fields() {
		out[i] = f.Name
	}
	return out
}

// sameType compares Arrow types but for the names of list elements, which the
// stored schema spells as Parquet does ("element", not "item").
func sameType(a, b arrow.DataType) bool {
	la, aok := a.(arrow.ListLikeType)
	lb, bok := b.(arrow.ListLikeType)
	if aok && bok {
		fa, faok := a.(*arrow.FixedSizeListType)
		fb, fbok := b.(*arrow.FixedSizeListType)
		return a.ID() == b.ID() && faok == fbok && (!faok || fa.Len() == fb.Len()) &&
			la.ElemField().Nullable == lb.ElemField().Nullable && sameType(la.Elem(), lb.Elem())
	}
	return arrow.TypeEqual(a, b)
}

// TestAnExportWritesToEveryStore: a destination is any bucket the workers can
// write, so the streamed files, the put-if-absent commit and the clean-up run
// on every driver production uses.
func TestAnExportWritesToEveryStore(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	history(t, st)
	want := listed(t, st.List)
	objstoretest.ForEachDriver(t, func(t *testing.T, open func(t testing.TB) *objstore.Bucket) {
		dst := open(t)
		cctx, cancel := context.WithCancel(ctx)
		_, err := run(cctx, t, st, dst, export.Spec{Destination: "file:///unused"}, export.Options{TaskID: "task-1", MaxFileBytes: 2 << 10,
			Progress: func(p export.Progress) {
				if p.Files >= 2 {
					cancel()
				}
			}})
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled attempt: %v", err)
		}
		m, err := run(ctx, t, st, dst, export.Spec{Destination: "file:///unused"}, export.Options{TaskID: "task-1", MaxFileBytes: 2 << 10})
		if err != nil {
			t.Fatal(err)
		}
		got := readExport(t, dst, m)
		if !maps.Equal(got.values, want) {
			t.Fatalf("export %v, want %v", got.values, want)
		}
		checkCounts(t, m, got)
		if keys := keysOf(t, dst); len(keys) != len(m.Files)+1 {
			t.Fatalf("destination holds %v, want the %d files and the manifest", keys, len(m.Files))
		}
	})
}
