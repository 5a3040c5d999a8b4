package table

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

// unsortedWrites makes a handle write fragments as format 1 did.
func unsortedWrites() Option { return func(o *Options) { o.unsortedWrites = true } }

// checkGetMany checks that one GetMany of ids (distinct, in random order) answers
// each id as the model has it, in the order asked.
func checkGetMany(t testing.TB, tb *Table, m *Manifest, md *model, ids []string) {
	t.Helper()
	var got []string
	err := tb.GetMany(context.Background(), m, ids, nil, func(i int, rec arrow.RecordBatch, v rowkey.Version) error {
		id := rec.Column(0).(*array.String).Value(0)
		if id != ids[i] {
			return fmt.Errorf("row %d is %s, asked for %s", i, id, ids[i])
		}
		if r := md.rows[id]; rec.Column(1).(*array.Int64).Value(0) != r.value || v != md.ver[id] {
			return fmt.Errorf("%s: value %d at %+v, want %d at %+v", id, rec.Column(1).(*array.Int64).Value(0), v, r.value, md.ver[id])
		}
		got = append(got, id)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, id := range ids {
		if _, ok := md.rows[id]; ok {
			want = append(want, id)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("GetMany answered %v, want %v", got, want)
	}
}

// A table written before format 2 (unsorted fragments, no key indexes) and then by
// this build (sorted ones), with merges of several shards that overwrite each
// other's ids with newer and older writes, answers every read as the model of its
// commits says, before and after each compaction; compactions sort the old
// fragments first, then move rows down into levels of disjoint fragments, until
// nothing is left to do.
func TestUnsortedAndSortedFragmentsReadTheSameThroughCompactions(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(11, 12))
	b := memBucket(t)
	old := createTable(t, b, unsortedWrites(), rowGroups(16))
	md := newModel()
	commit := md.randomMerges(t, rng)
	for range 6 {
		commit(old, 20)
	}
	m := old.Latest()
	for _, f := range m.Fragments {
		if f.Sorted || f.Index != nil {
			t.Fatalf("old handle wrote a sorted fragment %s", f.Path)
		}
	}
	tb, err := Open(ctx, b, "rollout/t", rowGroups(16), WithCacheBytes(1<<16))
	if err != nil {
		t.Fatal(err)
	}
	for range 6 {
		m = commit(tb, 20)
	}
	check := func(what string, m *Manifest) {
		t.Helper()
		md.check(t, tb, m)
		ids := make([]string, 0, 100)
		for _, i := range rng.Perm(100) {
			ids = append(ids, fmt.Sprintf("id-%02d", i))
		}
		checkGetMany(t, tb, m, md, ids[:1+rng.IntN(len(ids))])
		fresh, err := Open(ctx, b, "rollout/t", WithCacheBytes(0))
		if err != nil {
			t.Fatal(err)
		}
		md.check(t, fresh, m)
	}
	check("before compaction", m)
	sorted := false
	for i := 0; ; i++ {
		if i == 40 {
			t.Fatalf("still compacting after %d compactions: levels %+v", i, tb.Latest().Levels())
		}
		before := tb.Latest()
		res, err := tb.Compact(ctx, CompactOptions{TargetRows: 25, MaxSources: 8, Level0Trigger: 2})
		if err != nil {
			t.Fatal(err)
		}
		if res == (CompactResult{}) {
			t.Logf("%d compactions; levels %+v, %d fragments", i, tb.Latest().Levels(), len(tb.Latest().Fragments))
			break
		}
		after := tb.Latest()
		check(fmt.Sprintf("after compaction %d (%+v)", i, res), after)
		checkSortedOutputs(t, tb, before, after)
		if lv := after.Levels(); lv.Unsorted == 0 {
			sorted = true
		} else if sorted {
			t.Fatalf("unsorted fragments came back: %+v", lv)
		}
		// A merge between compactions lands on the levels like any other.
		if i%3 == 2 {
			check("after a merge", commit(tb, 10))
		}
	}
	lv := tb.Latest().Levels()
	if !sorted || lv.Unsorted != 0 || lv.Spilling != 0 || lv.Level0 > 1 {
		t.Fatalf("levels at the end %+v", lv)
	}
}

// randomMerges returns a func that merges n random overwrites (overwrite) from one
// of three shards into tb, records them in md and returns the version.
func (md *model) randomMerges(t testing.TB, rng *rand.Rand) func(tb *Table, n int) *Manifest {
	gens := map[string]uint64{}
	return func(tb *Table, n int) *Manifest {
		t.Helper()
		shard := fmt.Sprint("w", rng.IntN(3))
		gens[shard]++
		rows := overwrite(rng, shard, n, 90, 40)
		md.landed(shard, rows)
		return appendShard(t, tb, shard, gens[shard], rows...)
	}
}

// levelSim applies compaction plans to a manifest alone, with rows spread evenly
// over ids: what the planner makes of a stream of merges, without the I/O.
type levelSim struct {
	t       testing.TB
	m       *Manifest
	o       CompactOptions
	next    int
	written int64 // rows rewritten by compactions
	merged  int64 // rows merges added
	plans   int
	// Merges of mergeRows rows land while compactions rewrite: one for every
	// mergeRows*speed rows rewritten (compactions rewrite speed times as many rows
	// a second as merges add), as beside a real compact task.
	mergeRows int64
	speed     int64
	owed      int64 // rows rewritten since the last merge that landed meanwhile
}

// id is the i-th of 2^32 ids in byte order.
func simID(x uint64) string { return fmt.Sprintf("%08x", x) }

func (s *levelSim) frag(level int, lo, hi uint64, rows int64) Fragment {
	s.next++
	return Fragment{Path: fmt.Sprint("f", s.next), Rows: rows, Level: level, IDMin: simID(lo), IDMax: simID(hi), Sorted: true}
}

// merge adds a level-0 fragment of rows rows over the whole key space.
func (s *levelSim) merge(rows int64) {
	s.m.Fragments = append(s.m.Fragments, s.frag(0, 0, 1<<32-1, rows))
	s.merged += rows
}

// compact runs plans as a compact task does (at most 32), checking each.
func (s *levelSim) compact() int {
	for n := range 32 {
		p := PlanCompaction(s.m, s.o)
		if p == nil {
			return n
		}
		s.apply(p)
	}
	return 32
}

// meanwhile lands the merges of the time w rows took to rewrite.
func (s *levelSim) meanwhile(w int64) {
	if s.speed == 0 {
		return
	}
	for s.owed += w; s.owed >= s.mergeRows*s.speed; s.owed -= s.mergeRows * s.speed {
		s.merge(s.mergeRows)
	}
}

func (s *levelSim) apply(p *CompactionPlan) {
	s.t.Helper()
	s.plans++
	in := map[string]bool{}
	var rows int64
	lo, hi := uint64(1<<32-1), uint64(0)
	for _, f := range p.Sources {
		in[f.Path] = true
		rows += f.LiveRows()
		var a, b uint64
		fmt.Sscanf(f.IDMin, "%x", &a)
		fmt.Sscanf(f.IDMax, "%x", &b)
		lo, hi = min(lo, a), max(hi, b)
	}
	if !p.Move && len(p.Sources) > s.o.MaxSources {
		s.t.Fatalf("plan of %d sources, over MaxSources %d", len(p.Sources), s.o.MaxSources)
	}
	var keep []Fragment
	for _, f := range s.m.Fragments {
		switch {
		case !in[f.Path]:
			keep = append(keep, f)
		case p.Move:
			f.Level++
			keep = append(keep, f)
		}
	}
	if !p.Move && rows > 0 {
		s.written += rows
		defer s.meanwhile(rows)
		k := (rows + s.o.TargetRows - 1) / s.o.TargetRows
		span := (hi - lo + 1) / uint64(k)
		for i := range uint64(k) {
			a, b := lo+i*span, lo+(i+1)*span-1
			if i == uint64(k)-1 {
				b = hi
			}
			keep = append(keep, s.frag(p.Level, a, b, rows/k))
		}
	}
	s.m.Fragments = keep
	if a, b, ok := overlapInLevels(keep); ok {
		s.t.Fatalf("after plan %d: level %d: %s overlaps %s", s.plans, a.Level, a.Path, b.Path)
	}
}

// A compaction costs what it moves, not what the store holds: a store fed merges
// (and compacted as the master has it: when level 0 reaches MIN_FRAGMENTS or a
// level is past its target) rewrites each merged row about LevelFanout times per
// level at most, whether it holds a hundred thousand rows or ten million. The
// leveling before this one (levels of 1, 10, 100 fragments, level 0 first
// whenever two fragments were there) rewrote the whole store for every move of
// level 0: 25 and more rewrites per row at 300,000 rows, growing with the store.
// Every level stays one sorted run at every step, and every rewrite within
// MaxSources (levelSim.apply).
func TestLevelsRewriteWhatTheyMoveAtEverySize(t *testing.T) {
	for _, c := range []struct {
		rows, merge, speed int64
	}{
		{300_000, 2_000, 16},     // the skew benchmark's hot store: 2.3M rows rewritten in 140 s, 1,000 merged a second
		{3_000_000, 20_000, 16},  // a store of millions
		{10_000_000, 250_000, 0}, // the scale benchmark's build: compactions after it
	} {
		s := &levelSim{t: t, m: &Manifest{}, o: CompactOptions{}.withDefaults(), mergeRows: c.merge, speed: c.speed}
		maxL0 := 0
		for s.merged < c.rows {
			s.merge(c.merge)
			if lv := s.m.Levels(); lv.Level0 >= 8 || lv.Spilling > 0 {
				s.compact()
			}
			maxL0 = max(maxL0, s.m.Levels().Level0)
		}
		levels := map[int]int{}
		for _, f := range s.m.Fragments {
			levels[f.Level]++
		}
		amp := float64(s.written) / float64(s.merged)
		t.Logf("%d rows in merges of %d, compactions %dx as fast: %d plans, %.1f rewrites per row, level 0 at most %d fragments, fragments by level %v",
			c.rows, c.merge, c.speed, s.plans, amp, maxL0, levels)
		nonEmpty := 0
		for l, n := range levels {
			if l > 0 && n > 0 {
				nonEmpty++
			}
		}
		if bound := float64(LevelFanout*nonEmpty + 2); amp > bound {
			t.Errorf("%d rows: %.1f rewrites per merged row, over %v (LevelFanout per level, and level 0's move)", c.rows, amp, bound)
		}
		if maxL0 > 8+32 {
			t.Errorf("%d rows: level 0 reached %d fragments", c.rows, maxL0)
		}
	}
}
