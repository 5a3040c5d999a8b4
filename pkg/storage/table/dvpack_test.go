package table

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

// spreadFragments is how many fragments spreadTable writes, with spreadRows ids
// each, in disjoint ranges: a commit overwriting ids of every range deletes from
// every fragment, as a merge of random ids into a large store does.
const spreadFragments, spreadRows = 6, 50

func spreadID(frag, i int) string { return fmt.Sprintf("k%d-%03d", frag, i) }

// spreadTable writes spreadFragments fragments and returns the table and what it
// reads: id -> value (every row has value 1).
func spreadTable(t *testing.T, b *objstore.Bucket) (*Table, map[string]int64) {
	t.Helper()
	tb := createTable(t, b)
	want := map[string]int64{}
	for k := range spreadFragments {
		var rows []row
		for i := range spreadRows {
			rows = append(rows, row{spreadID(k, i), 1, 1})
			want[spreadID(k, i)] = 1
		}
		mustAppend(t, tb, rows...)
	}
	return tb, want
}

// overwriteSpread commits value v (at _seq v) for the ids i of every fragment in frags
// with i % every == 0, and records them in want.
func overwriteSpread(t *testing.T, tb *Table, want map[string]int64, frags []int, every int, v int64) *Manifest {
	t.Helper()
	var rows []row
	for _, k := range frags {
		for i := 0; i < spreadRows; i += every {
			rows = append(rows, row{spreadID(k, i), uint64(v), v})
			want[spreadID(k, i)] = v
		}
	}
	return mustAppend(t, tb, rows...)
}

// vectorObjects lists the objects under dir's _deletions/.
func vectorObjects(t *testing.T, b *objstore.Bucket, dir string) []string {
	t.Helper()
	objs, err := b.List(context.Background(), dir+"/"+deletesDir+"/")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		out = append(out, strings.TrimPrefix(o.Key, dir+"/"))
	}
	return out
}

// checkReads reads m through a new handle on b (nothing cached: every vector
// comes from storage) by scan, batch get, point gets and an ordered walk, and
// fails unless each returns exactly want: the deleted rows skipped, each live
// row once.
func checkReads(t *testing.T, b *objstore.Bucket, dir string, v uint64, want map[string]int64) {
	t.Helper()
	ctx := context.Background()
	tb, err := Open(ctx, b, dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := tb.Load(ctx, v)
	if err != nil {
		t.Fatal(err)
	}
	scanned := map[string]int64{}
	for id, r := range liveRows(t, tb, m) {
		scanned[id] = r.value
	}
	if !maps.Equal(scanned, want) {
		t.Fatalf("scan of version %d reads %v, want %v", v, scanned, want)
	}

	ids := slices.Sorted(maps.Keys(want))
	got := map[string]int64{}
	err = tb.GetMany(ctx, m, ids, nil, func(i int, rec arrow.RecordBatch, _ rowkey.Version) error {
		got[ids[i]] = rec.Column(1).(*array.Int64).Value(0)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, want) {
		t.Fatalf("batch get of version %d reads %v, want %v", v, got, want)
	}
	for _, id := range []string{ids[0], ids[len(ids)/2], ids[len(ids)-1]} {
		rec, _, err := tb.Get(ctx, m, id)
		if err != nil {
			t.Fatal(err)
		}
		if rec == nil || rec.Column(1).(*array.Int64).Value(0) != want[id] {
			t.Fatalf("get %s of version %d: %v, want value %d", id, v, rec, want[id])
		}
		rec.Release()
	}

	it, err := tb.Iter(ctx, m, "", true)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var walked []string
	for {
		ok, err := it.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		rec, i, err := it.Row(ctx, []string{"value"})
		if err != nil {
			t.Fatal(err)
		}
		if got := rec.Column(0).(*array.Int64).Value(i); got != want[it.ID()] {
			t.Fatalf("walk of version %d: %s reads %d, want %d", v, it.ID(), got, want[it.ID()])
		}
		walked = append(walked, it.ID())
	}
	if !slices.Equal(walked, ids) {
		t.Fatalf("walk of version %d: %d ids %v, want each of %d once in order", v, len(walked), walked, len(ids))
	}
}

// A commit that deletes rows of many fragments writes their vectors into one
// object (one write, not one per fragment), each at its own offset, and every
// read skips exactly the deleted rows.
func TestCommitDeletingFromManyFragmentsWritesOneVectorObject(t *testing.T) {
	for _, d := range []objstoretest.Driver{{Name: "mem", Open: objstoretest.Mem}, {Name: "file", Open: objstoretest.File}} {
		t.Run(d.Name, func(t *testing.T) {
			b := d.Open(t)
			tb, want := spreadTable(t, b)
			if objs := vectorObjects(t, b, "rollout/t"); len(objs) != 0 {
				t.Fatalf("disjoint fragments have vectors %v", objs)
			}
			all := []int{0, 1, 2, 3, 4, 5}
			m := overwriteSpread(t, tb, want, all, 7, 2)
			objs := vectorObjects(t, b, "rollout/t")
			if len(objs) != 1 {
				t.Fatalf("a commit deleting from %d fragments wrote vector objects %v, want one", spreadFragments, objs)
			}
			offsets := map[int64]bool{}
			for _, f := range m.Fragments[:spreadFragments] {
				dv := f.Deletions
				if dv == nil || dv.Path != objs[0] || !dv.packed() || offsets[dv.Offset] || dv.Count != (spreadRows+6)/7 {
					t.Fatalf("fragment %s: deletions %+v, want %d rows at an offset of its own in %s", f.Path, dv, (spreadRows+6)/7, objs[0])
				}
				offsets[dv.Offset] = true
			}
			if m.FormatVersion != FormatVersion {
				t.Fatalf("format version %d, want %d", m.FormatVersion, FormatVersion)
			}
			checkReads(t, b, "rollout/t", m.Version, want)
		})
	}
}

// A fragment whose vector lives in a shared object gets more deletions: the next
// commit writes the union (the earlier deletions stay deleted) into its own
// object, and the other fragments keep pointing into the first one.
func TestLaterCommitOnAPackedVectorWritesTheUnion(t *testing.T) {
	b := memBucket(t)
	tb, want := spreadTable(t, b)
	first := overwriteSpread(t, tb, want, []int{0, 1, 2, 3, 4, 5}, 7, 2)
	afterFirst := maps.Clone(want)
	second := overwriteSpread(t, tb, want, []int{2}, 5, 3) // i = 0 and 35 were the first's too
	shared := first.Fragments[0].Deletions.Path
	for i, f := range second.Fragments[:spreadFragments] {
		dv := f.Deletions
		if i != 2 {
			if *dv != *first.Fragments[i].Deletions {
				t.Fatalf("fragment %d: deletions %+v, want those of the first commit %+v", i, dv, first.Fragments[i].Deletions)
			}
			continue
		}
		union := 0
		for j := range spreadRows {
			if j%7 == 0 || j%5 == 0 {
				union++
			}
		}
		if dv.Path == shared || dv.Count != int64(union) {
			t.Fatalf("fragment 2: deletions %+v, want the union of %d rows in a new object", dv, union)
		}
	}
	// The second commit also deletes i = 0 and 35 from the first commit's
	// fragment: that vector goes into the same object as fragment 2's.
	if dv, dv2 := second.Fragments[spreadFragments].Deletions, second.Fragments[2].Deletions; dv == nil || dv.Path != dv2.Path || dv.Count != 2 {
		t.Fatalf("the first commit's fragment: deletions %+v, want 2 rows in %s", dv, dv2.Path)
	}
	if objs := vectorObjects(t, b, "rollout/t"); len(objs) != 2 {
		t.Fatalf("vector objects %v, want one per commit", objs)
	}
	checkReads(t, b, "rollout/t", first.Version, afterFirst)
	checkReads(t, b, "rollout/t", second.Version, want)
}

// A shared vector object is kept while any retained version points into it, and
// collected once none does.
func TestCleanupKeepsASharedVectorObjectWhileAVersionNamesIt(t *testing.T) {
	for _, d := range []objstoretest.Driver{{Name: "mem", Open: objstoretest.Mem}, {Name: "file", Open: objstoretest.File}} {
		t.Run(d.Name, func(t *testing.T) {
			b := d.Open(t)
			tb, want := spreadTable(t, b)
			first := overwriteSpread(t, tb, want, []int{0, 1, 2, 3, 4, 5}, 7, 2)
			shared := first.Fragments[0].Deletions.Path
			// Each later commit moves one more fragment's vector out of the shared
			// object; the last moves the sixth.
			var last *Manifest
			for k := range spreadFragments {
				last = overwriteSpread(t, tb, want, []int{k}, 3, int64(10+k))
				time.Sleep(3 * time.Millisecond) // distinct modification times
			}
			// Retention by count alone (a clock hours ahead: every file is past the
			// safety window, no version within the age window): keeping versions
			// from first.Version+1 on down to last.Version-1 on, some kept version
			// points into the shared object.
			later := time.Now().Add(2 * time.Hour)
			for keep := last.Version - first.Version; keep >= 2; keep-- {
				c := cleaner(t, b, "rollout/t", later)
				mustCleanup(t, c, Retention{KeepVersions: int(keep), KeepAge: time.Nanosecond, SafetyWindow: time.Nanosecond})
				kept := versionRange(last.Version-keep+1, last.Version)
				if got := mustVersions(t, c); !slices.Equal(got, kept) {
					t.Fatalf("versions %v kept, want %v", got, kept)
				}
				if !slices.Contains(vectorObjects(t, b, "rollout/t"), shared) {
					t.Fatalf("versions %v kept, one pointing into %s: it was deleted", kept, shared)
				}
			}
			c := cleaner(t, b, "rollout/t", later)
			mustCleanup(t, c, Retention{KeepVersions: 1, KeepAge: time.Nanosecond, SafetyWindow: time.Nanosecond})
			if slices.Contains(vectorObjects(t, b, "rollout/t"), shared) {
				t.Fatalf("only version %d is kept, which names nothing in %s: it was kept", last.Version, shared)
			}
			checkReads(t, b, "rollout/t", last.Version, want)
		})
	}
}

// Verify checks each vector of a shared object on its own: one damaged vector is
// a problem of its fragment (naming the shared object), not of the others there,
// and a truncated object one of every fragment whose vector it cut.
func TestVerifyChecksEachPackedVector(t *testing.T) {
	ctx := context.Background()
	b := memBucket(t)
	tb, want := spreadTable(t, b)
	m := overwriteSpread(t, tb, want, []int{0, 1, 2, 3, 4, 5}, 7, 2)
	shared := m.Fragments[0].Deletions.Path
	key := tb.key(shared)
	good, err := b.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	fragsByProblem := func(checksums bool) map[string]string {
		t.Helper()
		rep, err := tb.Verify(ctx, checksums)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, p := range rep.Problems {
			if p.Path != shared {
				t.Fatalf("problem %+v, want only the shared vector object's", p)
			}
			out[p.Fragment] = p.Problem
		}
		return out
	}
	if got := fragsByProblem(true); len(got) != 0 {
		t.Fatalf("an intact table has problems %v", got)
	}

	// One bit of fragment 3's vector payload.
	bad := slices.Clone(good)
	d3 := m.Fragments[3].Deletions
	bad[d3.Offset+d3.Bytes-1] ^= 1
	if err := b.Put(ctx, key, bad); err != nil {
		t.Fatal(err)
	}
	if got := fragsByProblem(false); len(got) != 0 {
		t.Fatalf("without checksums (sizes only) a flipped bit shows as %v", got)
	}
	got := fragsByProblem(true)
	if len(got) != 1 || !strings.HasPrefix(got[m.Fragments[3].Path], "corrupt: ") || !strings.Contains(got[m.Fragments[3].Path], "checksum") {
		t.Fatalf("problems %v, want fragment 3's vector corrupt (checksum) alone", got)
	}

	// Cut the object in fragment 4's vector: 4 and 5 point past its end.
	d4 := m.Fragments[4].Deletions
	if err := b.Put(ctx, key, good[:d4.Offset+d4.Bytes/2]); err != nil {
		t.Fatal(err)
	}
	for _, checksums := range []bool{false, true} {
		got := fragsByProblem(checksums)
		if len(got) != 2 || got[m.Fragments[4].Path] == "" || got[m.Fragments[5].Path] == "" {
			t.Fatalf("checksums %v: problems %v, want fragments 4 and 5 (their vectors cut off)", checksums, got)
		}
	}

	// A reader of fragment 3's vector gets ErrCorrupt naming the object, never a
	// wrong set of rows.
	if err := b.Put(ctx, key, bad); err != nil {
		t.Fatal(err)
	}
	fresh, err := Open(ctx, b, "rollout/t")
	if err != nil {
		t.Fatal(err)
	}
	_, err = scanRows(ctx, fresh, m)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), key) {
		t.Fatalf("scan over a corrupt packed vector: %v, want ErrCorrupt naming %s", err, key)
	}
}

// A table written by format 2 (testdata/format2: whole-object vectors) reads the
// same, verifies clean, and takes a commit, which packs its new vectors while the
// untouched fragments keep their whole objects.
func TestFormat2TableReadsTheSame(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("testdata/format2")); err != nil {
		t.Fatal(err)
	}
	b, err := objstore.Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	const table = "generic/old"
	id := func(i int) string { return fmt.Sprintf("id-%03d", i) }
	want := map[string]int64{}
	for i := range 200 {
		switch {
		case i%5 == 0:
			want[id(i)] = 3
		case i%3 == 0:
			want[id(i)] = 2
		default:
			want[id(i)] = 1
		}
	}
	tb, err := Open(ctx, b, table)
	if err != nil {
		t.Fatal(err)
	}
	old := tb.Latest()
	if old.FormatVersion != 2 || old.Version != 4 || old.Fragments[0].Deletions == nil || old.Fragments[0].Deletions.packed() {
		t.Fatalf("fixture: format %d version %d, first fragment's deletions %+v; want format 2, version 4, a whole-object vector",
			old.FormatVersion, old.Version, old.Fragments[0].Deletions)
	}
	checkReads(t, b, table, old.Version, want)
	rep, err := tb.Verify(ctx, true)
	if err != nil || len(rep.Problems) != 0 {
		t.Fatalf("verify of the format-2 table: %+v, %v", rep, err)
	}

	// Ids of the first fragment alone (live there): its vector grows, the
	// second fragment's stays the whole object it was.
	before := maps.Clone(want)
	var rows []row
	for i := 0; i < 200; i += 7 {
		if want[id(i)] == 1 {
			rows = append(rows, row{id(i), 4000 + uint64(i), 4})
			want[id(i)] = 4
		}
	}
	rec := batch(rows...)
	defer rec.Release()
	m, err := appendRows(ctx, tb, Append{Records: []arrow.RecordBatch{rec}, Shard: "w1", Generation: 4})
	if err != nil {
		t.Fatal(err)
	}
	d0, d1 := m.Fragments[0].Deletions, m.Fragments[1].Deletions
	if m.FormatVersion != FormatVersion || !d0.packed() || d0.Count != old.Fragments[0].Deletions.Count+int64(len(rows)) || *d1 != *old.Fragments[1].Deletions {
		t.Fatalf("commit on the format-2 table: format %d, deletions %+v and %+v; want format %d, the first fragment's union packed, the second's unchanged",
			m.FormatVersion, d0, d1, FormatVersion)
	}
	checkReads(t, b, table, old.Version, before)
	checkReads(t, b, table, m.Version, want)
	if rep, err := tb.Verify(ctx, true); err != nil || len(rep.Problems) != 0 {
		t.Fatalf("verify after the commit: %+v, %v", rep, err)
	}
}

// A manifest holding packed vectors says format 3, which a reader built for
// format 2 refuses (it would read a packed object whole as one vector); and a
// manifest that says 2 while holding one is corrupt.
func TestPackedVectorsNeedFormat3(t *testing.T) {
	ctx := context.Background()
	b := memBucket(t)
	tb, want := spreadTable(t, b)
	m := overwriteSpread(t, tb, want, []int{0, 1}, 7, 2)
	key := tb.versionKey(m.Version)
	data, err := b.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	_, err = decodeManifestUpTo(key, data, 2)
	if !errors.Is(err, ErrUnsupportedFormat) || !strings.Contains(err.Error(), "format version 3") || !strings.Contains(err.Error(), "upgrade") {
		t.Fatalf("a format-2 reader got %v, want ErrUnsupportedFormat naming format version 3", err)
	}
	if _, err := decodeManifest(key, data); err != nil {
		t.Fatalf("this build refuses its own manifest: %v", err)
	}
	said2 := strings.Replace(string(data), `"format_version":3`, `"format_version":2`, 1)
	if said2 == string(data) {
		t.Fatalf("manifest %s does not say format_version 3", data)
	}
	if _, err := decodeManifest(key, []byte(said2)); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "format-2 manifest") {
		t.Fatalf("a format-2 manifest with a packed vector: %v, want ErrCorrupt", err)
	}
}

// A commit by a handle that has none of the vectors cached reads the vectors one
// commit packed together in one request, not one per fragment, and writes its
// own in one.
func TestCommitReadsAndWritesPackedVectorsInOneRequestEach(t *testing.T) {
	ctx := context.Background()
	b := memBucket(t)
	tb, want := spreadTable(t, b)
	all := []int{0, 1, 2, 3, 4, 5}
	overwriteSpread(t, tb, want, all, 7, 2)

	var mu sync.Mutex
	reads, writes := 0, 0
	faults := &objstore.Faults{}
	faults.AddRule(objstore.Rule{KeyContains: "/" + deletesDir + "/", Before: func(_ context.Context, op objstore.Op, _ string) {
		mu.Lock()
		defer mu.Unlock()
		switch op {
		case objstore.OpGet, objstore.OpGetRange:
			reads++
		case objstore.OpPut, objstore.OpPutIfAbsent:
			writes++
		}
	}})
	cold, err := Open(ctx, objstore.WithFaults(b, faults), "rollout/t")
	if err != nil {
		t.Fatal(err)
	}
	// Rows of every fragment other than the first commit's: every fragment's
	// vector is read to tell a live row from a deleted one.
	m := overwriteSpread(t, cold, want, all, 3, 3)
	if reads != 1 || writes != 1 {
		t.Fatalf("a commit over %d fragments with vectors in one object made %d reads and %d writes of vectors, want 1 and 1", spreadFragments, reads, writes)
	}
	checkReads(t, b, "rollout/t", m.Version, want)
}
