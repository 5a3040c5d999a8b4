package table

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/testutil/testlog"
)

// damagedTable builds six fragments and damages four of them:
//
//	0: a, b      its deletion vector (a is replaced by fragment 3) corrupted
//	1: c         data file deleted
//	2: d, e      data file truncated
//	3: a         intact
//	4: f         bloom filter deleted
//	5: g         footer zeroed (same size)
func damagedTable(t *testing.T, b *objstore.Bucket) (*Table, *Manifest) {
	t.Helper()
	ctx := context.Background()
	tb := createTable(t, b)
	mustAppend(t, tb, row{"a", 1, 1}, row{"b", 1, 1})
	mustAppend(t, tb, row{"c", 1, 1})
	mustAppend(t, tb, row{"d", 1, 1}, row{"e", 1, 1})
	mustAppend(t, tb, row{"a", 2, 2})
	mustAppend(t, tb, row{"f", 1, 1})
	m := mustAppend(t, tb, row{"g", 1, 1})
	damage := func(rel string, fn func([]byte) []byte) {
		t.Helper()
		data, err := b.Get(ctx, tb.key(rel))
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Put(ctx, tb.key(rel), fn(data)); err != nil {
			t.Fatal(err)
		}
	}
	damage(m.Fragments[0].Deletions.Path, func(d []byte) []byte { d[len(d)-1] ^= 1; return d })
	if err := b.Delete(ctx, tb.key(m.Fragments[1].Path)); err != nil {
		t.Fatal(err)
	}
	damage(m.Fragments[2].Path, func(d []byte) []byte { return d[:len(d)/2] })
	if err := b.Delete(ctx, tb.key(m.Fragments[4].Bloom)); err != nil {
		t.Fatal(err)
	}
	damage(m.Fragments[5].Path, func(d []byte) []byte { clear(d[len(d)-64:]); return d })
	return tb, m
}

func problemsOf(rep VerifyReport) map[string]string {
	out := map[string]string{}
	for _, p := range rep.Problems {
		out[p.Path] = p.Problem
	}
	return out
}

func TestVerifyFindsMissingTruncatedAndCorruptObjects(t *testing.T) {
	ctx := context.Background()
	b := memBucket(t)
	_, m := damagedTable(t, b)
	fr := m.Fragments
	tb, err := Open(ctx, b, "rollout/t")
	if err != nil {
		t.Fatal(err)
	}

	rep, err := tb.Verify(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	got := problemsOf(rep)
	want := map[string]string{
		fr[1].Path:  "missing",
		fr[2].Path:  "size",
		fr[4].Bloom: "missing",
	}
	if rep.Version != m.Version || rep.Objects != 6*3+1 || len(got) != len(want) {
		t.Fatalf("report %+v; want version %d, 19 objects, problems %v", rep, m.Version, want)
	}
	for p, w := range want {
		if !strings.HasPrefix(got[p], w) {
			t.Fatalf("%s: %q, want %q (report %+v)", p, got[p], w, rep)
		}
	}
	if p := slices.IndexFunc(rep.Problems, func(p VerifyProblem) bool { return p.Path == fr[2].Path }); rep.Problems[p].Fragment != fr[2].Path ||
		rep.Problems[p].Problem != "size "+itoa(fr[2].Bytes/2)+", manifest says "+itoa(fr[2].Bytes) {
		t.Fatalf("truncation reported as %+v", rep.Problems[p])
	}

	rep, err = tb.Verify(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	got = problemsOf(rep)
	want[fr[0].Deletions.Path] = "corrupt: "
	want[fr[5].Path] = "corrupt: "
	if len(got) != len(want) {
		t.Fatalf("with checksums: %+v, want problems %v", rep, want)
	}
	for p, w := range want {
		if !strings.HasPrefix(got[p], w) {
			t.Fatalf("with checksums: %s: %q, want %q", p, got[p], w)
		}
	}
	if p := rep.Problems[slices.IndexFunc(rep.Problems, func(p VerifyProblem) bool { return p.Path == fr[0].Deletions.Path })]; p.Fragment != fr[0].Path {
		t.Fatalf("deletion vector problem names fragment %s, want %s", p.Fragment, fr[0].Path)
	}
}

// A store that fails a request is not a broken object: Verify returns the error.
func TestVerifyFailsWhenTheStoreFails(t *testing.T) {
	ctx := context.Background()
	clean := memBucket(t)
	createTable(t, clean)
	faults := objstore.NewFaults(nil)
	tb, err := Open(ctx, objstore.WithFaults(clean, faults), "rollout/t")
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, tb, row{"a", 1, 1})
	faults.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpStat}, KeyContains: "/data/"})
	if rep, err := tb.Verify(ctx, false); !errors.Is(err, objstore.ErrInjected) {
		t.Fatalf("verify with failing requests: %+v, %v; want the error", rep, err)
	}
}

func TestDropMissingDropsOnlyBrokenFragmentsAndRebuildsBlooms(t *testing.T) {
	ctx := context.Background()
	b := memBucket(t)
	_, m := damagedTable(t, b)
	fr := m.Fragments
	var logs testlog.Buffer
	tb, err := Open(ctx, b, "rollout/t", WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	// A report without checksums names fragments 1, 2 and 4 only: 0 and 5 (whose
	// damage only checksums see) stay, whatever DropMissing's own check finds.
	rep, err := tb.Verify(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	n, dropped, rows, err := tb.DropMissing(ctx, rep)
	if err != nil {
		t.Fatal(err)
	}
	if dropped != 2 || rows != 3 || n.Version != m.Version+1 {
		t.Fatalf("dropped %d fragments, %d rows, version %d; want 2, 3, %d", dropped, rows, n.Version, m.Version+1)
	}
	var paths []string
	for _, f := range n.Fragments {
		paths = append(paths, f.Path)
	}
	if want := []string{fr[0].Path, fr[3].Path, fr[4].Path, fr[5].Path}; !slices.Equal(paths, want) {
		t.Fatalf("fragments %v, want %v", paths, want)
	}
	for _, f := range []Fragment{fr[1], fr[2]} {
		if !strings.Contains(logs.String(), "path="+f.Path+" rows="+itoa(f.LiveRows())) {
			t.Fatalf("no log of dropping %s with its rows:\n%s", f.Path, logs.String())
		}
	}
	if ok, err := b.Exists(ctx, tb.key(fr[4].Bloom)); err != nil || !ok {
		t.Fatalf("bloom filter of fragment 4 not rebuilt: %v %v", ok, err)
	}

	// With checksums, the corrupt deletion vector and footer drop their fragments.
	rep, err = tb.Verify(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) != 2 {
		t.Fatalf("report %+v, want the deletion vector of 0 and the footer of 5", rep)
	}
	n, dropped, rows, err = tb.DropMissing(ctx, rep)
	if err != nil {
		t.Fatal(err)
	}
	if dropped != 2 || rows != 2 || len(n.Fragments) != 2 { // b of fragment 0 (a is deleted) and g
		t.Fatalf("dropped %d fragments, %d rows, %d left; want 2, 2, 2", dropped, rows, len(n.Fragments))
	}
	if rep, err := tb.Verify(ctx, true); err != nil || len(rep.Problems) != 0 {
		t.Fatalf("after the repairs: %+v, %v", rep, err)
	}
	fresh, err := Open(ctx, b, "rollout/t")
	if err != nil {
		t.Fatal(err)
	}
	got := liveRows(t, fresh, fresh.Latest())
	if len(got) != 2 || got["a"].value != 2 || got["f"].value != 1 {
		t.Fatalf("rows after the drops %v, want a (fragment 3) and f (fragment 4)", got)
	}
	if rec, _, err := fresh.Get(ctx, fresh.Latest(), "f"); err != nil || rec == nil {
		t.Fatalf("get through the rebuilt bloom filter: %v, %v", rec, err)
	} else {
		rec.Release()
	}
	// The table takes commits again.
	if m := mustAppend(t, fresh, row{"c", 5, 5}); len(liveRows(t, fresh, m)) != 3 {
		t.Fatal("commit after the drops")
	}

	// Nothing left to drop: no new version.
	before := fresh.Latest().Version
	n, dropped, _, err = tb.DropMissing(ctx, rep)
	if err != nil || dropped != 0 || n.Version != before {
		t.Fatalf("DropMissing with nothing broken: version %d, dropped %d, %v", n.Version, dropped, err)
	}
}

// A report is only a list of candidates: a file restored since is not dropped.
func TestDropMissingChecksAgain(t *testing.T) {
	ctx := context.Background()
	b := memBucket(t)
	tb := createTable(t, b, WithLogger(slog.New(slog.DiscardHandler)))
	m := mustAppend(t, tb, row{"a", 1, 1})
	key := tb.key(m.Fragments[0].Path)
	data, err := b.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	rep, err := tb.Verify(ctx, false)
	if err != nil || len(rep.Problems) != 1 {
		t.Fatalf("report %+v, %v", rep, err)
	}
	if err := b.Put(ctx, key, data); err != nil { // restored from a backup
		t.Fatal(err)
	}
	n, dropped, _, err := tb.DropMissing(ctx, rep)
	if err != nil || dropped != 0 || n.Version != m.Version {
		t.Fatalf("DropMissing after the restore: version %d, dropped %d, %v", n.Version, dropped, err)
	}
}

// DropMissing commits with put-if-absent: a commit that lands first makes it retry on
// the newest version, keeping that commit's rows.
func TestDropMissingRetriesOnConflict(t *testing.T) {
	ctx := context.Background()
	clean := memBucket(t)
	tb := createTable(t, clean)
	mustAppend(t, tb, row{"a", 1, 1})
	m := mustAppend(t, tb, row{"b", 1, 1})
	if err := clean.Delete(ctx, tb.key(m.Fragments[0].Path)); err != nil {
		t.Fatal(err)
	}
	faults := objstore.NewFaults(nil)
	dropper, err := Open(ctx, objstore.WithFaults(clean, faults), "rollout/t", WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := dropper.Verify(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	hook := faults.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpPutIfAbsent}, KeyContains: "/" + versionsDir + "/", Times: 1,
		Before: func(context.Context, objstore.Op, string) {
			rec := batch(row{"c", 1, 1})
			defer rec.Release()
			if _, err := appendRows(ctx, tb, Append{Records: []arrow.RecordBatch{rec}}); err != nil {
				t.Error(err)
			}
		}})
	n, dropped, rows, err := dropper.DropMissing(ctx, rep)
	if err != nil {
		t.Fatal(err)
	}
	if hook.Fired() != 1 || n.Version != m.Version+2 || dropped != 1 || rows != 1 {
		t.Fatalf("version %d, dropped %d (%d rows), hook fired %d; want version %d after a conflict", n.Version, dropped, rows, hook.Fired(), m.Version+2)
	}
	got := liveRows(t, tb, n)
	if len(got) != 2 || got["b"].value != 1 || got["c"].value != 1 {
		t.Fatalf("rows %v, want b and c", got)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// Verify checks a sorted fragment's key index against its rows, and a repair
// rebuilds a missing, corrupt or wrong index from the fragment instead of dropping
// it: every row reads as before, and the table verifies clean.
func TestVerifyChecksKeyIndexesAndRepairRebuildsThem(t *testing.T) {
	ctx := context.Background()
	b := memBucket(t)
	tb := createTable(t, b, rowGroups(3))
	var rows [4][]row
	for f := range rows {
		for i := range 40 {
			rows[f] = append(rows[f], row{strconv.Itoa(f) + "-" + strconv.Itoa(100+i), uint64(f + 1), int64(i)})
		}
		appendShard(t, tb, "s"+strconv.Itoa(f), 1, rows[f]...)
	}
	m := tb.Latest()
	fr := m.Fragments
	want := liveRows(t, tb, m)
	damage := func(rel string, fn func([]byte) []byte) {
		t.Helper()
		data, err := b.Get(ctx, tb.key(rel))
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Put(ctx, tb.key(rel), fn(data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Delete(ctx, tb.key(fr[0].Index.Path)); err != nil {
		t.Fatal(err)
	}
	damage(fr[1].Index.Path, func(d []byte) []byte { d[3] ^= 1; return d }) // inside the first block
	// Fragment 3's index holds fragment 2's ids: a valid index of other rows.
	damage(fr[2].Index.Path, func([]byte) []byte {
		data, err := b.Get(ctx, tb.key(fr[3].Index.Path))
		if err != nil {
			t.Fatal(err)
		}
		return data
	})
	fresh, err := Open(ctx, b, "rollout/t")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := fresh.Verify(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	got := problemsOf(rep)
	for _, f := range fr[:3] {
		if got[f.Index.Path] == "" {
			t.Fatalf("verify did not find the damaged index of %s: %+v", f.Path, rep.Problems)
		}
	}
	if len(got) != 3 {
		t.Fatalf("problems %+v, want the three damaged indexes", rep.Problems)
	}
	n, dropped, _, err := fresh.DropMissing(ctx, rep)
	if err != nil || dropped != 0 || len(n.Fragments) != 4 {
		t.Fatalf("repair: %d dropped, %d fragments, %v; want every fragment kept", dropped, len(n.Fragments), err)
	}
	for i, f := range n.Fragments[:3] {
		if f.Index.Path == fr[i].Index.Path {
			t.Fatalf("fragment %s kept its damaged index", f.Path)
		}
	}
	if rep, err := fresh.Verify(ctx, true); err != nil || len(rep.Problems) != 0 {
		t.Fatalf("after the repair: %+v, %v", rep, err)
	}
	reopened, err := Open(ctx, b, "rollout/t", WithCacheBytes(0))
	if err != nil {
		t.Fatal(err)
	}
	got2 := liveRows(t, reopened, reopened.Latest())
	for id, r := range want {
		rec, v, err := reopened.Get(ctx, reopened.Latest(), id)
		if err != nil || rec == nil || got2[id] != r || v.Seq != r.seq {
			t.Fatalf("get %s after the repair: %v %+v %v, want %+v", id, rec, v, err, r)
		}
		rec.Release()
	}
}
