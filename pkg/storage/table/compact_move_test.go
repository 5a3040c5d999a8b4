package table

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// relevel commits a version of tb whose fragments of levels >= 1 sit where level
// says: a table as another planner left it (the one before levels were reckoned
// from the bottom numbered them from the top).
func relevel(t *testing.T, tb *Table, level func(f Fragment) int) *Manifest {
	t.Helper()
	m := tb.Latest().next("relevel", time.Now())
	for i, f := range m.Fragments {
		if f.Level > 0 {
			m.Fragments[i].Level = level(f)
		}
	}
	if err := tb.createVersion(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	got, err := tb.Refresh(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// A table levelled from the top (levels 1 and 2, as the planner before this one
// left them) shifts down to the bottom by moves: no row is read or written, each
// move is one commit, every id reads the same after each, merges landing between
// them (with deletions of the moved fragments' rows) are kept, and a cleanup that
// may delete anything unreferenced keeps every moved fragment's files.
func TestMovesShiftATableLevelledFromTheTop(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 6))
	b := memBucket(t)
	tb := createTable(t, b, rowGroups(4))
	md := newModel()
	merges := md.randomMerges(t, rng)
	commit := func(n int) *Manifest { return merges(tb, n) }
	for range 8 {
		commit(30)
	}
	if _, err := tb.Compact(ctx, CompactOptions{TargetRows: 20, Level0Trigger: 1}); err != nil {
		t.Fatal(err)
	}
	// The first output at level 1, the others at level 2: two sorted runs.
	first := ""
	m := relevel(t, tb, func(f Fragment) int {
		if first == "" || f.Path == first {
			first = f.Path
			return 1
		}
		return 2
	})
	if lv := m.Levels(); lv.Levels != 2 || lv.Spilling != 1 {
		t.Fatalf("levels from the top %+v, want 2 levels, spilling", lv)
	}
	md.check(t, tb, m)
	for step := 0; ; step++ {
		if step == MaxLevel {
			t.Fatalf("still moving after %d compactions: %+v", step, tb.Latest().Levels())
		}
		before := tb.Latest()
		res, err := tb.Compact(ctx, CompactOptions{TargetRows: 20})
		if err != nil {
			t.Fatal(err)
		}
		if res.Moved == 0 {
			if lv := tb.Latest().Levels(); lv.Levels != MaxLevel {
				t.Fatalf("moves stopped at %+v (last result %+v)", lv, res)
			}
			break
		}
		if res.RowsWritten != 0 || res.Outputs != 0 || res.BytesRead != 0 || res.Sources != res.Moved {
			t.Fatalf("a move wrote: %+v", res)
		}
		after := tb.Latest()
		if fragmentPathsSorted(before) != fragmentPathsSorted(after) {
			t.Fatalf("a move changed the fragments: %v -> %v", fragmentPathsSorted(before), fragmentPathsSorted(after))
		}
		checkSortedOutputs(t, tb, before, after)
		md.check(t, tb, after)
		md.check(t, tb, commit(10)) // deletes rows of moved fragments
	}
	// Cleanup with nothing kept but the newest version keeps what it references.
	c := cleaner(t, b, "rollout/t", time.Now().Add(2*time.Hour))
	if _, err := c.Cleanup(ctx, Retention{KeepVersions: 1, KeepAge: time.Nanosecond, SafetyWindow: time.Nanosecond}); err != nil {
		t.Fatal(err)
	}
	fresh, err := Open(ctx, b, "rollout/t", WithCacheBytes(0))
	if err != nil {
		t.Fatal(err)
	}
	md.check(t, fresh, fresh.Latest())
}

// A move planned on one version commits on a newer one: a merge that deleted rows
// of the moved fragments meanwhile is kept (the move carries the newest deletion
// vectors), and a compaction that rewrote a moved fragment meanwhile, or put a
// fragment where the move would overlap it, makes the move fail with ErrConflict,
// committing nothing.
func TestAMoveRebasesOntoMergesAndLosesToRewrites(t *testing.T) {
	ctx := context.Background()
	b := memBucket(t)
	tb := createTable(t, b, rowGroups(4))
	md := newModel()
	var rows []row
	for i := range 60 {
		rows = append(rows, row{fmt.Sprintf("id-%02d", i), 1, int64(i)})
	}
	md.landed("a", rows)
	appendShard(t, tb, "a", 1, rows...)
	if _, err := tb.Compact(ctx, CompactOptions{TargetRows: 20, Level0Trigger: 1}); err != nil {
		t.Fatal(err)
	}
	base := relevel(t, tb, func(Fragment) int { return MaxLevel - 1 })
	p := PlanCompaction(base, CompactOptions{})
	if p == nil || !p.Move {
		t.Fatalf("plan %+v, want a move", p)
	}
	// A merge lands after the plan: it deletes rows of the fragments moved.
	newer := []row{{"id-03", 2, 300}, {"id-33", 2, 3300}, {"id-59", 2, 5900}}
	md.landed("b", newer)
	appendShard(t, tb, "b", 1, newer...)
	res, err := tb.commitMove(ctx, base, p)
	if err != nil {
		t.Fatal(err)
	}
	after := tb.Latest()
	if res.Version != after.Version || after.Levels().Levels != MaxLevel {
		t.Fatalf("move %+v, levels %+v", res, after.Levels())
	}
	md.check(t, tb, after)

	// Two moves planned on one version: the second finds its sources moved.
	stale := relevel(t, tb, func(Fragment) int { return MaxLevel - 1 })
	p = PlanCompaction(stale, CompactOptions{})
	if _, err := tb.commitMove(ctx, stale, p); err != nil {
		t.Fatal(err)
	}
	conflicts := func(what string, base *Manifest, p *CompactionPlan) {
		t.Helper()
		v := tb.Latest().Version
		if _, err := tb.commitMove(ctx, base, p); !errors.Is(err, ErrConflict) {
			t.Fatalf("%s: %v, want ErrConflict", what, err)
		}
		if tb.Latest().Version != v {
			t.Fatalf("%s: a failed move committed version %d", what, tb.Latest().Version)
		}
		md.check(t, tb, tb.Latest())
	}
	conflicts("a move of moved fragments", stale, p)

	// A move whose destination gained a fragment its sources meet (here a merge's
	// fragment put at the bottom by hand: another compaction's output).
	stale = relevel(t, tb, func(Fragment) int { return MaxLevel - 1 })
	p = PlanCompaction(stale, CompactOptions{})
	more := []row{{"id-10", 3, 1000}, {"id-50", 3, 5000}}
	md.landed("c", more)
	merged := appendShard(t, tb, "c", 1, more...).Fragments
	added := merged[len(merged)-1].Path
	m := tb.Latest().next("by hand", time.Now())
	for i, f := range m.Fragments {
		if f.Path == added {
			m.Fragments[i].Level = MaxLevel
		}
	}
	if err := tb.createVersion(ctx, m); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	conflicts("a move onto a fragment it meets", stale, p)
}

// fragmentPathsSorted is the fragments' paths, sorted, as one string.
func fragmentPathsSorted(m *Manifest) string {
	var out []string
	for p := range fragmentPaths(m) {
		out = append(out, p)
	}
	slices.Sort(out)
	return fmt.Sprint(out)
}

// A rewrite calls Yield after each output row group with the time it worked
// since the last call, and a Yield error ends it with nothing committed.
func TestACompactionYieldsAfterEachRowGroup(t *testing.T) {
	ctx := context.Background()
	tb := createTable(t, memBucket(t), rowGroups(4))
	for g := range 6 {
		var rows []row
		for i := range 10 {
			rows = append(rows, row{fmt.Sprintf("id-%d-%d", g, i), 1, int64(i)})
		}
		appendShard(t, tb, "a", uint64(g+1), rows...)
	}
	var calls []time.Duration
	o := CompactOptions{Level0Trigger: 2, Yield: func(_ context.Context, worked time.Duration) error {
		calls = append(calls, worked)
		return nil
	}}
	res, err := tb.Compact(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if want := int(res.RowsWritten / 4); len(calls) != want {
		t.Fatalf("%d yields for %d rows in row groups of 4, want %d", len(calls), res.RowsWritten, want)
	}
	for _, d := range calls {
		if d <= 0 {
			t.Fatalf("yields %v: a row group took no time", calls)
		}
	}
	for g := range 6 {
		appendShard(t, tb, "a", uint64(7+g), row{fmt.Sprintf("new-%d", g), 2, 0})
	}
	v := tb.Latest().Version
	stop := errors.New("stop")
	o.Yield = func(context.Context, time.Duration) error { return stop }
	if _, err := tb.Compact(ctx, o); !errors.Is(err, stop) {
		t.Fatalf("a compaction whose Yield failed: %v", err)
	}
	if tb.Latest().Version != v {
		t.Fatalf("a compaction whose Yield failed committed version %d", tb.Latest().Version)
	}
}

// A fragment with no live row (every row deleted by later merges) is dropped by
// the next rewrite and never read: the planner moves a fragment onto its range,
// and the move's check agrees, so the move is not refused for ever.
func TestAMoveOverADeadFragmentIsAllowed(t *testing.T) {
	frags := []Fragment{
		{Path: "l9a", Rows: 100, Level: 9, IDMin: "m", IDMax: "z", Sorted: true},
		{Path: "l9dead", Rows: 100, Level: 9, IDMin: "a", IDMax: "z", Sorted: true, Deletions: &DeletionRef{Path: "dv", Count: 100}},
		{Path: "l8a", Rows: 20, Level: 8, IDMin: "b", IDMax: "c", Sorted: true},
	}
	m := &Manifest{Fragments: frags}
	p := PlanCompaction(m, CompactOptions{})
	if p == nil || !p.Move || len(p.Sources) != 1 || p.Sources[0].Path != "l8a" {
		t.Fatalf("plan %+v, want l8a moved", p)
	}
	moved := slices.Clone(frags)
	moved[2].Level = 9
	if a, b, ok := overlapInLevels(moved); ok {
		t.Fatalf("the move's check refuses it: %s meets %s", a.Path, b.Path)
	}
}
