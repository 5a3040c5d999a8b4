package table

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

// rowGroups sets Options.RowGroupRows: small groups put shard-run boundaries and
// output boundaries inside row groups.
func rowGroups(n int64) Option { return func(o *Options) { o.RowGroupRows = n } }

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// runtimeYield gives other goroutines' requests time to land.
func runtimeYield() { time.Sleep(200 * time.Microsecond) }

func appendShard(t testing.TB, tb *Table, shard string, gen uint64, rows ...row) *Manifest {
	t.Helper()
	rec := batch(rows...)
	defer rec.Release()
	m, err := appendRows(context.Background(), tb, Append{Records: []arrow.RecordBatch{rec}, Shard: shard, Generation: gen})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// readState is what a reader sees of every id: the row (Scan), the shard Scan
// names for it, and what Get returns (value and version).
type readState struct {
	r       row
	shard   string
	getVal  int64
	version rowkey.Version
}

func readAll(t testing.TB, tb *Table, m *Manifest) map[string]readState {
	t.Helper()
	ctx := context.Background()
	rows := liveRows(t, tb, m)
	shards := map[string]string{}
	err := tb.Scan(ctx, m, ScanOptions{Columns: []string{rowkey.IDColumn}}, func(rec arrow.RecordBatch, shard string) error {
		ids := rec.Column(0).(*array.String)
		for i := 0; i < ids.Len(); i++ {
			shards[ids.Value(i)] = shard
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]readState{}
	for id, r := range rows {
		rec, v, err := tb.Get(ctx, m, id)
		if err != nil || rec == nil {
			t.Fatalf("get %s: %v %v", id, rec, err)
		}
		out[id] = readState{r: r, shard: shards[id], getVal: rec.Column(1).(*array.Int64).Value(0), version: v}
		rec.Release()
		if v.Seq != r.seq {
			t.Fatalf("get %s: seq %d, scan says %d", id, v.Seq, r.seq)
		}
	}
	return out
}

func sameState(t testing.TB, what string, got, want map[string]readState) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d live ids, want %d", what, len(got), len(want))
	}
	for id, w := range want {
		if g, ok := got[id]; !ok || g != w {
			t.Fatalf("%s: id %s reads %+v, want %+v", what, id, got[id], w)
		}
	}
}

// unreferenced lists the objects under data/ and _deletions/ that no manifest
// version references.
func unreferenced(t testing.TB, b *objstore.Bucket, tb *Table) []string {
	t.Helper()
	ctx := context.Background()
	latest, err := tb.Refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	refs := map[string]bool{}
	for v := uint64(1); v <= latest.Version; v++ {
		m, err := tb.Load(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m.Fragments {
			refs[tb.key(f.Path)], refs[tb.key(f.Bloom)] = true, true
			if f.Index != nil {
				refs[tb.key(f.Index.Path)] = true
			}
			if f.Deletions != nil {
				refs[tb.key(f.Deletions.Path)] = true
			}
		}
	}
	var out []string
	for _, dir := range []string{dataDir, deletesDir} {
		objs, err := b.List(ctx, tb.key(dir)+"/")
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if !refs[o.Key] {
				out = append(out, o.Key)
			}
		}
	}
	return out
}

func fragmentPaths(m *Manifest) map[string]bool {
	out := map[string]bool{}
	for _, f := range m.Fragments {
		out[f.Path] = true
	}
	return out
}

// checkSortedOutputs checks the outputs of a compaction: every fragment it wrote is
// sorted with a key index whose ids strictly increase and match the fragment's
// range, and the fragments of each level >= 1 have disjoint id ranges.
func checkSortedOutputs(t testing.TB, tb *Table, before, after *Manifest) {
	t.Helper()
	ctx := context.Background()
	old := fragmentPaths(before)
	for _, f := range after.Fragments {
		if old[f.Path] {
			continue
		}
		if !f.Sorted || f.Index == nil || len(f.ShardRuns) > 0 {
			t.Fatalf("output %s: sorted %v, index %v, shard runs %+v", f.Path, f.Sorted, f.Index, f.ShardRuns)
		}
		top, err := tb.indexTopOf(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		vs, err := tb.versionsSorted(ctx, f, 0, f.Rows)
		if err != nil || int64(len(vs)) != f.Rows {
			t.Fatalf("output %s: %d versions of %d rows: %v", f.Path, len(vs), f.Rows, err)
		}
		if top.blocks[0].first != f.IDMin {
			t.Fatalf("output %s: index starts at %q, id_min %q", f.Path, top.blocks[0].first, f.IDMin)
		}
	}
	if a, b, ok := overlapInLevels(after.Fragments); ok {
		t.Fatalf("level %d: %s [%s,%s] overlaps %s [%s,%s]", a.Level, a.Path, a.IDMin, a.IDMax, b.Path, b.IDMin, b.IDMax)
	}
}

// withShardRuns returns a copy of m whose first fragment is one written before
// format 2 that mixes shards in runs (an old compaction's output).
func withShardRuns(m *Manifest, runs ...ShardRun) *Manifest {
	c := *m
	c.Fragments = slices.Clone(m.Fragments)
	fr := &c.Fragments[0]
	fr.Sorted, fr.Index, fr.Level, fr.SeqMin, fr.Shard, fr.MixedShards = false, nil, 0, 0, "", false
	fr.ShardRuns = slices.Clone(runs)
	if m.LastCompaction != nil {
		lc := *m.LastCompaction
		c.LastCompaction = &lc
	}
	return &c
}

// Many small fragments with overwrites compact into a few; every id reads the same
// (row, shard, Get's value and version) before and after; deleted rows are gone.
func TestCompactionRewritesSmallFragmentsReadingTheSame(t *testing.T) {
	ctx := context.Background()
	b := memBucket(t)
	tb := createTable(t, b, rowGroups(4))
	rng := rand.New(rand.NewPCG(1, 2))
	gens := map[string]uint64{}
	for step := 1; step <= 14; step++ {
		shard := []string{"w1", "w2", "w3", ""}[step%4]
		var rows []row
		for _, i := range rng.Perm(40)[:10] {
			rows = append(rows, row{fmt.Sprintf("id-%02d", i), uint64(step), int64(step*100 + i)})
		}
		if shard == "" {
			mustAppend(t, tb, rows...)
		} else {
			gens[shard]++
			appendShard(t, tb, shard, gens[shard], rows...)
		}
	}
	before := tb.Latest()
	want := readAll(t, tb, before)
	bs := before.Stats()
	if bs.DeletedRows == 0 {
		t.Fatal("the test table has no deleted row")
	}
	res, err := tb.Compact(ctx, CompactOptions{Level0Trigger: 2, TargetRows: 32})
	if err != nil {
		t.Fatal(err)
	}
	after := tb.Latest()
	as := after.Stats()
	wantRes := CompactResult{Version: after.Version, Level: MaxLevel, Sources: bs.Fragments, Outputs: as.Fragments,
		RowsWritten: bs.Rows, RowsDropped: bs.DeletedRows, BytesRead: bs.Bytes, BytesWritten: res.BytesWritten}
	if res != wantRes || res.BytesWritten <= 0 {
		t.Fatalf("result %+v, want %+v", res, wantRes)
	}
	if as.Rows != bs.Rows || as.DeletedRows != 0 || as.Fragments != int((bs.Rows+31)/32) || after.Version != before.Version+1 {
		t.Fatalf("stats before %+v, after %+v", bs, as)
	}
	if lc := after.LastCompaction; lc == nil || lc.Version != after.Version || lc.Sources != res.Sources || lc.Outputs != res.Outputs || lc.At.IsZero() {
		t.Fatalf("last compaction %+v", lc)
	}
	checkSortedOutputs(t, tb, before, after)
	for _, f := range after.Fragments {
		if f.Rows > 32 {
			t.Fatalf("output %s has %d rows, over the target", f.Path, f.Rows)
		}
	}
	sameState(t, "after compaction", readAll(t, tb, after), want)
	fresh, err := Open(ctx, b, "rollout/t", WithCacheBytes(0)) // from storage alone
	if err != nil {
		t.Fatal(err)
	}
	sameState(t, "fresh handle", readAll(t, fresh, fresh.Latest()), want)

	// The outputs went to the bottom level of an empty table; what the levels do
	// next (nothing, or a small tail merged) leaves every id reading the same at
	// each step.
	for i := 0; ; i++ {
		res, err := tb.Compact(ctx, CompactOptions{Level0Trigger: 2, TargetRows: 32})
		if err != nil {
			t.Fatal(err)
		}
		if res == (CompactResult{}) {
			break
		}
		if i == 3 {
			t.Fatalf("compaction %d still has work: %+v (levels %+v)", i+2, res, tb.Latest().Levels())
		}
		sameState(t, fmt.Sprint("after compaction ", i+2), readAll(t, tb, tb.Latest()), want)
		checkSortedOutputs(t, tb, after, tb.Latest())
	}
	after = tb.Latest()
	// Other commits carry the record of the last compaction forward.
	m := appendShard(t, tb, "w1", gens["w1"]+1, row{"id-00", 99, 9900})
	if m.LastCompaction == nil || *m.LastCompaction != *after.LastCompaction {
		t.Fatalf("last compaction after a merge: %+v, want %+v", m.LastCompaction, after.LastCompaction)
	}
	again, err := tb.Load(ctx, m.Version)
	if err != nil || again.LastCompaction == nil || !again.LastCompaction.At.Equal(after.LastCompaction.At) {
		t.Fatalf("last compaction read back: %+v %v", again, err)
	}
}

func TestPlanCompaction(t *testing.T) {
	// frag is a sorted fragment of level n holding ids [lo, hi].
	frag := func(name string, level int, lo, hi string, rows, deleted int64) Fragment {
		f := Fragment{Path: name, Rows: rows, Level: level, IDMin: lo, IDMax: hi, Sorted: true,
			Index: &IndexRef{Path: name + ".idx", Bytes: 100, Top: 10}}
		if deleted > 0 {
			f.Deletions = &DeletionRef{Path: name + ".dv", Count: deleted}
		}
		return f
	}
	unsorted := func(name string, rows int64) Fragment {
		return Fragment{Path: name, Rows: rows, IDMin: "a", IDMax: "z"}
	}
	// run is n fragments of level l and rows rows each, over ids pfx0 .. pfx(n-1)~.
	run := func(pfx string, l, n int, rows int64) []Fragment {
		var fs []Fragment
		for i := range n {
			fs = append(fs, frag(fmt.Sprintf("%s%d", pfx, i), l, fmt.Sprintf("%s%d", pfx, i), fmt.Sprintf("%s%d~", pfx, i), rows, 0))
		}
		return fs
	}
	l0 := func(n int) []Fragment {
		var fs []Fragment
		for i := range n {
			fs = append(fs, frag(fmt.Sprint("x", i), 0, "a", "z", 10, 0))
		}
		return fs
	}
	names := func(p *CompactionPlan) string {
		if p == nil {
			return ""
		}
		var s []string
		for _, f := range p.Sources {
			s = append(s, f.Path)
		}
		kind := ""
		switch {
		case p.Sort:
			kind = " sort"
		case p.Move:
			kind = " move"
		}
		return fmt.Sprintf("%s->L%d%s", strings.Join(s, ","), p.Level, kind)
	}
	// The bottom (level 9) of three 100-row fragments: level 8 targets 30 rows,
	// at most one fragment's, so it is the base level.
	bottom := run("l9-", 9, 3, 100)
	o := CompactOptions{TargetRows: 100, MaxSources: 8, Level0Trigger: 2}
	for _, c := range []struct {
		name  string
		frags []Fragment
		want  string
	}{
		{"empty", nil, ""},
		{"one level-0 fragment: under the trigger", l0(1), ""},
		{"unsorted fragments are sorted first", append(l0(2), unsorted("u", 5)), "u->L0 sort"},
		{"levels numbered from the top shift down, one level a commit",
			[]Fragment{frag("l1a", 1, "a", "f", 100, 0), frag("l2a", 2, "a", "c", 100, 0), frag("l2b", 2, "d", "z", 100, 0), frag("x", 0, "a", "z", 10, 0)},
			"l1a,l2a,l2b->L3 move"},
		{"level 0 of an empty table goes to the bottom", l0(2), "x0,x1->L9"},
		{"level 0 moves into the base level, with all of it",
			slices.Concat(bottom, []Fragment{frag("l8a", 8, "b", "k", 20, 0)}, l0(2)), "l8a,x0,x1->L8"},
		{"a level-0 fragment over the deleted ratio", slices.Concat(bottom, []Fragment{frag("x", 0, "a", "z", 10, 2)}), "x->L8"},
		{"within its target a level stays", slices.Concat(bottom, []Fragment{frag("l8a", 8, "b", "k", 20, 0)}), ""},
		{"a level past its target moves its fragment costing the least per row moved, with what it meets",
			slices.Concat(bottom, []Fragment{frag("l8a", 8, "l9-0", "l9-1", 50, 0), frag("l8b", 8, "l9-2", "l9-2~", 10, 0)} /* 200/50 rows against 100/10 */, l0(1)),
			"l9-0,l9-1,l8a->L9"},
		{"the score decides between level 0 and a level: level 8 is the further past",
			slices.Concat(bottom, []Fragment{frag("l8a", 8, "l9-0", "l9-1", 90, 0)}, l0(4)),
			"l9-0,l9-1,l8a->L9"},
		{"... and level 0 on a tie", slices.Concat(bottom, []Fragment{frag("l8a", 8, "l9-0", "l9-1", 60, 0)}, l0(4)), "l8a,x0,x1,x2,x3->L8"},
		{"fragments meeting nothing below move down as they are",
			slices.Concat(bottom, []Fragment{frag("l8a", 8, "b", "c", 20, 0), frag("l8b", 8, "l9-0~~", "l9-1", 20, 0), frag("l8c", 8, "m", "n", 20, 0)}),
			"l8a,l8c->L9 move"},
		{"rows above the base level go down at once", slices.Concat(bottom, []Fragment{frag("l7a", 7, "b", "c", 1, 0), frag("l8a", 8, "d", "z", 20, 0)}, l0(3)),
			"l7a->L8 move"},
		{"a fragment over the deleted ratio is rewritten in place",
			[]Fragment{frag("l9a", 9, "a", "c", 100, 19), frag("l9b", 9, "d", "e", 100, 20)}, "l9b->L9"},
		{"two small neighbours of a level merge", []Fragment{frag("l9a", 9, "a", "c", 40, 0), frag("l9b", 9, "d", "e", 100, 0), frag("l9c", 9, "f", "g", 10, 0), frag("l9d", 9, "h", "i", 30, 0)},
			"l9c,l9d->L9"},
		{"fragments with nothing live go along", []Fragment{frag("l9a", 9, "a", "c", 100, 100), frag("l9b", 9, "d", "e", 100, 0)}, "l9a->L0"},
	} {
		m := &Manifest{Fragments: c.frags}
		if got := names(PlanCompaction(m, o)); got != c.want {
			t.Errorf("%s: plan %q, want %q", c.name, got, c.want)
		}
	}
	// The trigger: three level-0 fragments wait for a fourth by default.
	if got := names(PlanCompaction(&Manifest{Fragments: l0(3)}, CompactOptions{})); got != "" {
		t.Errorf("three level-0 fragments under the default trigger: plan %q", got)
	}
	if got := names(PlanCompaction(&Manifest{Fragments: l0(4)}, CompactOptions{})); got != "x0,x1,x2,x3->L9" {
		t.Errorf("four level-0 fragments under the default trigger: plan %q", got)
	}
	// MaxSources bounds a plan. A level-8 fragment meeting more level-9 fragments
	// than that is not moved, though it would cost the least per row...
	wide := slices.Concat(run("c", 9, 9, 100), []Fragment{frag("l8a", 8, "a", "c0", 10, 0), frag("l8b", 8, "c", "z", 110, 0)})
	if got := names(PlanCompaction(&Manifest{Fragments: wide}, o)); got != "c0,l8a->L9" {
		t.Errorf("capped spill: plan %q", got)
	}
	// ... and level 0 waits while its base level holds too many fragments to
	// take it: the base level, past its target, spills first.
	crowded := slices.Concat(run("c", 9, 10, 100), l0(6))
	for i := range 5 {
		crowded = append(crowded, frag(fmt.Sprint("b", i), 8, fmt.Sprint("c", i), fmt.Sprint("c", i, "~"), 30, 0))
	}
	if got := names(PlanCompaction(&Manifest{Fragments: crowded}, o)); got != "c0,b0->L9" {
		t.Errorf("level 0 against a crowded base level: plan %q", got)
	}
}

// Rows of two shards with equal _seq: after a compaction mixes them in one fragment,
// each keeps its shard, so a later write of the same _seq from a third shard wins or
// loses exactly as it would have without the compaction.
func TestCompactionKeepsEachRowsShardForTies(t *testing.T) {
	ctx := context.Background()
	build := func(compact bool) (*Table, *Manifest) {
		tb := createTable(t, memBucket(t), rowGroups(2))
		appendShard(t, tb, "a", 1, row{"x", 5, 1}, row{"y", 5, 1}, row{"z", 7, 1})
		appendShard(t, tb, "b", 1, row{"x", 5, 2}, row{"y", 5, 2}, row{"w", 3, 2})
		mustAppend(t, tb, row{"v", 9, 0}, row{"u", 4, 0}) // no shard
		if compact {
			before := tb.Latest()
			if _, err := tb.Compact(ctx, CompactOptions{Level0Trigger: 2}); err != nil {
				t.Fatal(err)
			}
			after := tb.Latest()
			if len(after.Fragments) != 1 {
				t.Fatalf("%d fragments after compaction, want 1", len(after.Fragments))
			}
			f := after.Fragments[0]
			// Sorted by id, u v w x y z: each row's shard is in the key index.
			vs, err := tb.versionsSorted(ctx, f, 0, f.Rows)
			if err != nil {
				t.Fatal(err)
			}
			var shards []string
			for _, v := range vs {
				shards = append(shards, v.Shard)
			}
			if f.Shard != "" || !f.MixedShards || fmt.Sprint(shards) != fmt.Sprint([]string{"", "", "b", "b", "b", "a"}) {
				t.Fatalf("output shard %q, row shards %q", f.Shard, shards)
			}
			checkSortedOutputs(t, tb, before, after)
		}
		// Third shards with the same _seq: "c" sorts after "b" and wins x; "ab"
		// sorts before "b" and loses y; "" loses to everyone.
		appendShard(t, tb, "c", 1, row{"x", 5, 3})
		appendShard(t, tb, "ab", 1, row{"y", 5, 4})
		m := mustAppend(t, tb, row{"z", 7, 5}, row{"u", 4, 5})
		return tb, m
	}
	plain, pm := build(false)
	compacted, cm := build(true)
	want := readAll(t, plain, pm)
	expect := map[string]readState{
		"x": {row{"x", 5, 3}, "c", 3, rowkey.Version{Seq: 5, Shard: "c"}},
		"y": {row{"y", 5, 2}, "b", 2, rowkey.Version{Seq: 5, Shard: "b"}},
		"z": {row{"z", 7, 1}, "a", 1, rowkey.Version{Seq: 7, Shard: "a"}},
		"w": {row{"w", 3, 2}, "b", 2, rowkey.Version{Seq: 3, Shard: "b"}},
		"v": {row{"v", 9, 0}, "", 0, rowkey.Version{Seq: 9}},
		"u": {row{"u", 4, 5}, "", 5, rowkey.Version{Seq: 4}}, // same write, no shard: the later copy
	}
	sameState(t, "without compaction", want, expect)
	sameState(t, "with compaction", readAll(t, compacted, cm), expect)
	// Scan cuts batches at run boundaries, for a subset of columns and ids too.
	got := map[string]string{}
	err := compacted.Scan(ctx, cm, ScanOptions{Columns: []string{"value"}, IDs: []string{"y", "z", "w", "v"}}, func(rec arrow.RecordBatch, shard string) error {
		vals := rec.Column(0).(*array.Int64)
		for i := 0; i < vals.Len(); i++ {
			got[fmt.Sprint(vals.Value(i))] += shard + ";"
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"0": ";", "1": "a;", "2": "b;b;"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("scan of values by shard: %v, want %v", got, want)
	}
}

// model is the newest row per id of every commit that landed.
type model struct {
	mu   sync.Mutex
	rows map[string]row
	ver  map[string]rowkey.Version
}

func newModel() *model { return &model{rows: map[string]row{}, ver: map[string]rowkey.Version{}} }

func (m *model) landed(shard string, rows []row) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range rows {
		v := rowkey.Version{Seq: r.seq, Shard: shard}
		if old, ok := m.ver[r.id]; !ok || !old.Newer(v) {
			m.rows[r.id], m.ver[r.id] = r, v
		}
	}
}

func (m *model) check(t testing.TB, tb *Table, mf *Manifest) {
	t.Helper()
	got := readAll(t, tb, mf)
	if len(got) != len(m.rows) {
		t.Fatalf("version %d: %d live ids, want %d", mf.Version, len(got), len(m.rows))
	}
	for id, r := range m.rows {
		g := got[id]
		if g.r != r || g.getVal != r.value || g.version != m.ver[id] || g.shard != m.ver[id].Shard {
			t.Fatalf("version %d: id %s reads %+v, want %+v at %+v", mf.Version, id, g, r, m.ver[id])
		}
	}
}

// overwrite makes n rows of random ids in [0, ids) with random _seq in [1, seqs]:
// some newer, some older than the rows they meet. The value is derived from the
// version, so two copies of one write are equal.
func overwrite(rng *rand.Rand, shard string, n, ids, seqs int) []row {
	var rows []row
	for _, i := range rng.Perm(ids)[:n] {
		seq := uint64(1 + rng.IntN(seqs))
		rows = append(rows, row{fmt.Sprintf("id-%02d", i), seq, int64(seq)*1000 + int64(shard[len(shard)-1])})
	}
	return rows
}

// A merge prepared before a compaction commits after it: its rebase finds its
// target rows in the outputs, deletes them there (or its own older rows), and the
// table reads right. Then a merge commits while a compaction is between writing its
// outputs and committing: the compaction rebases, moving the new deletions onto its
// outputs.
func TestCompactionInterleavedWithMerges(t *testing.T) {
	ctx := context.Background()
	clean := memBucket(t)
	faults := objstore.NewFaults(rand.NewPCG(3, 4))
	createTable(t, clean)
	merger, err := Open(ctx, clean, "rollout/t", rowGroups(3))
	if err != nil {
		t.Fatal(err)
	}
	compactor, err := Open(ctx, objstore.WithFaults(clean, faults), "rollout/t", rowGroups(3))
	if err != nil {
		t.Fatal(err)
	}
	md := newModel()
	gen := uint64(0)
	merge := func(shard string, rows ...row) {
		t.Helper()
		gen++
		appendShard(t, merger, shard, gen, rows...)
		md.landed(shard, rows)
	}
	for i := 0; i < 6; i++ {
		var rows []row
		for j := 0; j < 5; j++ {
			rows = append(rows, row{fmt.Sprintf("id-%02d", i*5+j), 10, int64(i*5 + j)})
		}
		merge([]string{"a", "b"}[i%2], rows...)
	}
	merge("a", row{"id-00", 11, 100}) // a deletion vector on a source

	// Prepared before the compaction, committed after it.
	incoming := []row{{"id-01", 20, 201}, {"id-06", 5, 206}, {"id-07", 10, 207}, {"new", 1, 1}}
	rec := batch(incoming...)
	defer rec.Release()
	gen++
	x, err := merger.Prepare(ctx, merger.Latest(), Append{Records: []arrow.RecordBatch{rec}, Shard: "b", Generation: gen})
	if err != nil {
		t.Fatal(err)
	}
	res, err := compactor.Compact(ctx, CompactOptions{Level0Trigger: 2})
	if err != nil || res.Sources != 7 || res.Outputs != 1 {
		t.Fatalf("compaction: %+v %v", res, err)
	}
	m, err := x.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	md.landed("b", incoming)
	md.check(t, merger, m)

	// A merge lands between the compaction's outputs and its manifest write, twice
	// (the second time on top of the first rebase), deleting rows of the sources.
	for i := 0; i < 4; i++ {
		merge("c", row{fmt.Sprintf("more-%d", i), 1, 1}, row{fmt.Sprintf("more-%d", i+10), 1, 1})
	}
	landedDuring := [][]row{{{"more-0", 2, 2}, {"id-01", 20, 301}}, {{"more-1", 2, 2}, {"more-0", 3, 3}}}
	rule := faults.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpPutIfAbsent}, KeyContains: "/" + versionsDir + "/", Times: len(landedDuring),
		Before: func(context.Context, objstore.Op, string) {
			merge("d", landedDuring[0]...)
			landedDuring = landedDuring[1:]
		}})
	before, err := compactor.Refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err = compactor.Compact(ctx, CompactOptions{Level0Trigger: 2})
	if err != nil {
		t.Fatal(err)
	}
	if rule.Fired() != 2 {
		t.Fatalf("the interleaving rule fired %d times", rule.Fired())
	}
	after, err := merger.Refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Version != after.Version || after.Version != before.Version+3 {
		t.Fatalf("compaction committed version %d, latest %d, was %d", res.Version, after.Version, before.Version)
	}
	md.check(t, merger, after)
	translated := false
	for _, f := range after.Fragments {
		if !fragmentPaths(before)[f.Path] && f.Deletions != nil {
			translated = true
		}
	}
	if !translated {
		t.Fatal("no output of the rebased compaction has a deletion vector")
	}
}

// Merges from two handles commit overwrites (newer and older rows, ties of _seq
// across shards) while a third handle compacts, some merges prepared before a
// compaction and committed after it: no row is lost or resurrected and the newest
// version of every id wins.
func TestCompactionRacingMergesLosesNothing(t *testing.T) {
	iterations := 6
	if testing.Short() {
		iterations = 3
	}
	for it := 0; it < iterations; it++ {
		t.Run(fmt.Sprint(it), func(t *testing.T) {
			ctx := context.Background()
			b := memBucket(t)
			createTable(t, b)
			md := newModel()
			faults := objstore.NewFaults(rand.NewPCG(1, 1)) // counts the compactor's requests
			open := func(b *objstore.Bucket) *Table {
				tb, err := Open(ctx, b, "rollout/t", rowGroups(int64(3+3*(it%4))))
				if err != nil {
					t.Fatal(err)
				}
				return tb
			}
			var wg, merges sync.WaitGroup
			var overCompaction atomic.Int64 // merges prepared before a compaction and committed after
			mergesDone := make(chan struct{})
			for w, shard := range []string{"m1", "m2"} {
				merges.Add(1)
				go func() {
					defer merges.Done()
					tb := open(b)
					rng := rand.New(rand.NewPCG(uint64(it), uint64(w)))
					for gen := uint64(1); gen <= 8; gen++ {
						rows := overwrite(rng, shard, 1+rng.IntN(6), 20, 30)
						rec := batch(rows...)
						base := tb.Latest()
						x, err := tb.Prepare(ctx, base, Append{Records: []arrow.RecordBatch{rec}, Shard: shard, Generation: gen})
						rec.Release()
						if err != nil {
							t.Error(err)
							return
						}
						for range rng.IntN(4) {
							runtimeYield() // let a compaction land between Prepare and Commit
						}
						m, err := x.Commit(ctx)
						if err != nil {
							t.Error(err)
							return
						}
						if lc := m.LastCompaction; lc != nil && lc.Version > base.Version {
							overCompaction.Add(1)
						}
						md.landed(shard, rows)
					}
				}()
			}
			go func() {
				merges.Wait()
				close(mergesDone)
			}()
			wg.Add(1)
			compactions := 0
			go func() {
				defer wg.Done()
				tb := open(objstore.WithFaults(b, faults))
				rng := rand.New(rand.NewPCG(uint64(it), 99))
				for done := false; !done; {
					select {
					case <-mergesDone:
						done = true // one more, after the last merge
					default:
					}
					res, err := tb.Compact(ctx, CompactOptions{TargetRows: int64(6 + rng.IntN(30)), MaxSources: 2 + rng.IntN(6), DeletedRatio: 0.1, Level0Trigger: 1 + rng.IntN(4)})
					if err != nil {
						t.Error(err)
						return
					}
					if res.Version != 0 {
						compactions++
					}
					runtimeYield()
				}
			}()
			wg.Wait()
			if t.Failed() {
				return
			}
			check := open(b)
			md.check(t, check, check.Latest())
			t.Logf("%d compactions (%d lost races, rebased), %d merges prepared before a compaction and committed after, %d fragments at the end",
				compactions, faults.Requests(objstore.OpPutIfAbsent)-int64(compactions), overCompaction.Load(), len(check.Latest().Fragments))
		})
	}
}

// Two compactions of the same fragments from two handles: one commits, the other
// fails with ErrConflict and deletes what it staged; the table reads right.
func TestConcurrentCompactionsOneWins(t *testing.T) {
	ctx := context.Background()
	clean := memBucket(t)
	createTable(t, clean)
	md := newModel()
	setup, err := Open(ctx, clean, "rollout/t")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for gen := uint64(1); gen <= 8; gen++ {
		rows := overwrite(rng, "w", 6, 20, 40)
		appendShard(t, setup, "w", gen, rows...)
		md.landed("w", rows)
	}
	// Both write their outputs, then both try to commit.
	var ready sync.WaitGroup
	ready.Add(2)
	handle := func(seed uint64) *Table {
		f := objstore.NewFaults(rand.NewPCG(seed, seed))
		f.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpPutIfAbsent}, KeyContains: "/" + versionsDir + "/", Times: 1,
			Before: func(context.Context, objstore.Op, string) { ready.Done(); ready.Wait() }})
		tb, err := Open(ctx, objstore.WithFaults(clean, f), "rollout/t")
		if err != nil {
			t.Fatal(err)
		}
		return tb
	}
	h1, h2 := handle(1), handle(2)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, h := range []*Table{h1, h2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = h.Compact(ctx, CompactOptions{Level0Trigger: 2})
		}()
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Fatalf("compaction errors %v and %v, want exactly one failure", errs[0], errs[1])
	}
	for _, err := range errs {
		if err != nil && !errors.Is(err, ErrConflict) {
			t.Fatalf("losing compaction: %v, want ErrConflict", err)
		}
	}
	latest, err := setup.Refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if latest.Version != 10 || len(latest.Fragments) != 1 {
		t.Fatalf("version %d with %d fragments, want one compaction at version 10", latest.Version, len(latest.Fragments))
	}
	md.check(t, setup, latest)
	if left := unreferenced(t, clean, setup); len(left) != 0 {
		t.Fatalf("the losing compaction left %v", left)
	}

	// Unsynchronized, many times: each compaction commits or conflicts, and the
	// table stays right.
	for round := 0; round < 10; round++ {
		for i := 0; i < 3; i++ {
			rows := overwrite(rng, "v", 4, 20, 60)
			appendShard(t, setup, "v", uint64(round*3+i+1), rows...)
			md.landed("v", rows)
		}
		var wg sync.WaitGroup
		for _, h := range []*Table{setup, h2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := h.Compact(ctx, CompactOptions{MaxSources: 2 + round%3, Level0Trigger: 1 + round%4}); err != nil && !errors.Is(err, ErrConflict) {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		m, err := setup.Refresh(ctx)
		if err != nil {
			t.Fatal(err)
		}
		md.check(t, setup, m)
	}
	if left := unreferenced(t, clean, setup); len(left) != 0 {
		t.Fatalf("losing compactions left %v", left)
	}
}

// A compaction that fails or is cancelled before its manifest write deletes what it
// staged and leaves the table at its version; one that crashed (its outputs
// written, nothing else) left only unreferenced files.
func TestInterruptedCompactionLeavesTheTable(t *testing.T) {
	ctx := context.Background()
	clean := memBucket(t)
	createTable(t, clean)
	tb, err := Open(ctx, clean, "rollout/t")
	if err != nil {
		t.Fatal(err)
	}
	md := newModel()
	for gen := uint64(1); gen <= 4; gen++ {
		rows := []row{{fmt.Sprint("a", gen), gen, 1}, {fmt.Sprint("b", gen), gen, 2}, {"hot", gen, int64(gen)}}
		appendShard(t, tb, "w", gen, rows...)
		md.landed("w", rows)
	}
	before := tb.Latest()
	faults := objstore.NewFaults(rand.NewPCG(8, 9))
	h, err := Open(ctx, objstore.WithFaults(clean, faults), "rollout/t", WithLogger(discardLogger()))
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Cancelled while writing its output's bloom filter.
	faults.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpPut}, KeyContains: ".bloom", Times: 1,
		Before: func(context.Context, objstore.Op, string) { cancel() }})
	if _, err := h.Compact(cctx, CompactOptions{Level0Trigger: 2}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled compaction: %v, want context.Canceled", err)
	}
	// A write of its output failing.
	faults.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpPut}, KeyContains: ".parquet", Times: 1})
	if _, err := h.Compact(ctx, CompactOptions{Level0Trigger: 2}); !errors.Is(err, objstore.ErrInjected) {
		t.Fatalf("compaction with a failing put: %v, want the injected error", err)
	}
	m, err := tb.Refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.Version != before.Version {
		t.Fatalf("version %d after failed compactions, want %d", m.Version, before.Version)
	}
	if left := unreferenced(t, clean, tb); len(left) != 0 {
		t.Fatalf("failed compactions left %v", left)
	}
	// A crash after the outputs are written: only unreferenced files.
	c := &compaction{t: h, id: "crashed", base: m, plan: PlanCompaction(m, CompactOptions{Level0Trigger: 2}), target: DefaultTargetRows, staged: staged{t: h}}
	if err := c.write(ctx); err != nil {
		t.Fatal(err)
	}
	if left := unreferenced(t, clean, tb); len(left) != 3 { // a fragment, its bloom filter and key index
		t.Fatalf("a crashed compaction left %v, want its output, bloom filter and key index", left)
	}
	fresh, err := Open(ctx, clean, "rollout/t", WithCacheBytes(0))
	if err != nil {
		t.Fatal(err)
	}
	if fresh.Latest().Version != before.Version {
		t.Fatalf("version %d, want %d", fresh.Latest().Version, before.Version)
	}
	md.check(t, fresh, fresh.Latest())
	// And a compaction after all that works.
	if res, err := tb.Compact(ctx, CompactOptions{Level0Trigger: 2}); err != nil || res.Sources != 4 {
		t.Fatalf("compaction: %+v %v", res, err)
	}
	md.check(t, fresh, tb.Latest())
}

// A manifest whose shard runs do not describe the fragment's rows is corrupt.
func TestManifestRefusesBadShardRuns(t *testing.T) {
	ctx := context.Background()
	b := memBucket(t)
	tb := createTable(t, b)
	appendShard(t, tb, "a", 1, row{"x", 1, 1}, row{"y", 1, 1})
	appendShard(t, tb, "b", 1, row{"z", 1, 1})
	if _, err := tb.Compact(ctx, CompactOptions{Level0Trigger: 2}); err != nil {
		t.Fatal(err)
	}
	good := withShardRuns(tb.Latest(), ShardRun{"a", 2}, ShardRun{"b", 1})
	if len(good.Fragments) != 1 {
		t.Fatalf("fragments %+v, want one", good.Fragments)
	}
	for name, edit := range map[string]func(m *Manifest){
		"runs short of rows": func(m *Manifest) { m.Fragments[0].ShardRuns[0].Rows = 1 },
		"runs past rows":     func(m *Manifest) { m.Fragments[0].ShardRuns[1].Rows = 2 },
		"zero-row run":       func(m *Manifest) { m.Fragments[0].ShardRuns = append(m.Fragments[0].ShardRuns, ShardRun{"c", 0}) },
		"negative run":       func(m *Manifest) { m.Fragments[0].ShardRuns[0].Rows, m.Fragments[0].ShardRuns[1].Rows = -1, 4 },
		"overflowing runs": func(m *Manifest) {
			m.Fragments[0].ShardRuns[0].Rows, m.Fragments[0].ShardRuns[1].Rows = math.MaxInt64, math.MaxInt64
		},
		"shard and runs": func(m *Manifest) { m.Fragments[0].Shard = "a" },
		"runs in a sorted fragment": func(m *Manifest) {
			m.Fragments[0].Sorted, m.Fragments[0].Index = true, &IndexRef{Path: "data/x.idx", Bytes: 100, Top: 10}
		},
		"sorted without an index": func(m *Manifest) { m.Fragments[0].ShardRuns, m.Fragments[0].Sorted = nil, true },
		"index of an unsorted fragment": func(m *Manifest) {
			m.Fragments[0].ShardRuns, m.Fragments[0].Index = nil, &IndexRef{Path: "data/x.idx", Bytes: 100, Top: 10}
		},
		"index top past its end": func(m *Manifest) {
			m.Fragments[0].ShardRuns, m.Fragments[0].Sorted = nil, true
			m.Fragments[0].Index = &IndexRef{Path: "data/x.idx", Bytes: 100, Top: 95}
		},
		"unsorted below level 0": func(m *Manifest) { m.Fragments[0].Level = 1 },
		"level past the deepest": func(m *Manifest) {
			m.Fragments[0].ShardRuns, m.Fragments[0].Sorted = nil, true
			m.Fragments[0].Index, m.Fragments[0].Level = &IndexRef{Path: "data/x.idx", Bytes: 100, Top: 10}, MaxLevel+1
		},
		"compaction ahead":    func(m *Manifest) { m.LastCompaction.Version = m.Version + 1 },
		"negative compaction": func(m *Manifest) { m.LastCompaction.Sources = -1 },
	} {
		t.Run(name, func(t *testing.T) {
			m := *good
			m.Fragments = slices.Clone(good.Fragments)
			m.Fragments[0].ShardRuns = slices.Clone(good.Fragments[0].ShardRuns)
			lc := *good.LastCompaction
			m.LastCompaction = &lc
			edit(&m)
			data, err := encodeManifest(&m)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := decodeManifest(fuzzKey, data); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decode: %v, want ErrCorrupt", err)
			}
		})
	}
	// And the good one round-trips.
	data, err := encodeManifest(good)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(data, &raw); err != nil || raw["last_compaction"] == nil || !strings.Contains(string(data), `"shard_runs"`) {
		t.Fatalf("encoded manifest lacks its compaction fields: %v\n%s", err, data)
	}
	if m, err := decodeManifest(fuzzKey, data); err != nil || !slices.Equal(m.Fragments[0].ShardRuns, good.Fragments[0].ShardRuns) {
		t.Fatalf("round trip: %+v %v", m, err)
	}
}

// Should a table hold an id live twice (it never should), a compaction keeps the
// newest version, so its output still has at most one row per id. The sources are
// read both through cached key indexes and from storage.
func TestCompactionKeepsTheNewestOfDuplicateIDs(t *testing.T) {
	for _, cached := range []bool{true, false} {
		t.Run(fmt.Sprint("cached=", cached), func(t *testing.T) {
			ctx := context.Background()
			b := memBucket(t)
			tb := createTable(t, b, rowGroups(2))
			appendShard(t, tb, "b", 1, row{"x", 5, 1}, row{"y", 9, 1}, row{"z", 3, 1}, row{"only1", 1, 1})
			// Another table's fragment, copied in and listed without resolving its rows.
			other, err := Create(ctx, b, "rollout/u", testSchema)
			if err != nil {
				t.Fatal(err)
			}
			om := appendShard(t, other, "a", 1, row{"x", 5, 2}, row{"y", 10, 2}, row{"z", 3, 2}, row{"only2", 1, 2})
			f := om.Fragments[0]
			for _, rel := range []string{f.Path, f.Bloom, f.Index.Path} {
				data, err := b.Get(ctx, other.key(rel))
				if err != nil {
					t.Fatal(err)
				}
				if err := b.Put(ctx, tb.key(rel), data); err != nil {
					t.Fatal(err)
				}
			}
			bad := tb.Latest().next("test", time.Now())
			bad.Fragments = append(bad.Fragments, f)
			if err := tb.createVersion(ctx, bad); err != nil {
				t.Fatal(err)
			}
			h := tb
			if !cached {
				if h, err = Open(ctx, b, "rollout/t", WithCacheBytes(0), rowGroups(2)); err != nil {
					t.Fatal(err)
				}
			}
			res, err := h.Compact(ctx, CompactOptions{Level0Trigger: 2})
			if err != nil {
				t.Fatal(err)
			}
			if res.RowsWritten != 5 || res.RowsDropped != 3 {
				t.Fatalf("result %+v, want 5 rows written and 3 dropped", res)
			}
			// x: equal _seq, shard b wins; y: seq 10 (a) wins; z: b wins.
			md := newModel()
			md.landed("b", []row{{"x", 5, 1}, {"y", 9, 1}, {"z", 3, 1}, {"only1", 1, 1}})
			md.landed("a", []row{{"x", 5, 2}, {"y", 10, 2}, {"z", 3, 2}, {"only2", 1, 2}})
			fresh, err := Open(ctx, b, "rollout/t", WithCacheBytes(0))
			if err != nil {
				t.Fatal(err)
			}
			md.check(t, fresh, fresh.Latest())
		})
	}
}

// A fragment whose rows are all deleted is rewritten into nothing: the compaction
// drops it from the table and writes no output.
func TestCompactionDropsAFragmentWithNothingLive(t *testing.T) {
	ctx := context.Background()
	tb := createTable(t, memBucket(t))
	mustAppend(t, tb, row{"a", 1, 1}, row{"b", 1, 1})
	m := mustAppend(t, tb, row{"a", 2, 2}, row{"b", 2, 2}, row{"c", 2, 2})
	res, err := tb.Compact(ctx, CompactOptions{Level0Trigger: 2, TargetRows: 2})
	if err != nil {
		t.Fatal(err)
	}
	if want := (CompactResult{Version: m.Version + 1, Sources: 1, RowsDropped: 2, BytesRead: m.Fragments[0].Bytes}); res != want {
		t.Fatalf("result %+v, want %+v", res, want)
	}
	after := tb.Latest()
	if len(after.Fragments) != 1 || after.Fragments[0].Path != m.Fragments[1].Path || after.LastCompaction.Outputs != 0 {
		t.Fatalf("fragments %+v, last compaction %+v", after.Fragments, after.LastCompaction)
	}
	md := newModel()
	md.landed("", []row{{"a", 2, 2}, {"b", 2, 2}, {"c", 2, 2}})
	md.check(t, tb, after)
}
