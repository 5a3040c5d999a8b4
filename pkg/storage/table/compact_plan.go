package table

import (
	"cmp"
	"slices"
)

// Compaction planning: which fragments one compaction rewrites, and into which
// level. The policy is an LSM's leveling, in our words:
//
//   - Level 0 holds what merges write: sorted fragments whose id ranges overlap
//     (every merge's ids span the key space), and fragments written before format 2,
//     which are not sorted at all.
//   - Every level n >= 1 is one sorted run: its fragments' id ranges are disjoint,
//     so a point read probes at most one fragment per level, and a page reads one
//     fragment per level at a time.
//   - Level n holds at most LevelFanout^(n-1) fragments (1, 10, 100, ...). A
//     compaction moves rows one level down, into the fragments of the next level
//     their range overlaps, so each row is rewritten about LevelFanout times per
//     level, and a store of N rows has about log(N/TargetRows) levels.
//
// Plans are computed from a manifest alone (no I/O), so the master's scanner can
// tell whether a table needs one (Manifest.Levels) and a worker plans against the
// newest version when the task runs.

// Defaults of CompactOptions.
const (
	DefaultTargetRows   = 65536
	DefaultMaxSources   = 64
	DefaultDeletedRatio = 0.2
	// LevelFanout is how many times more fragments level n+1 holds than level n.
	LevelFanout = 10
	// MaxLevel bounds levels: 10^8 fragments of TargetRows rows is past any store.
	MaxLevel = 9
)

// CompactOptions tune a compaction; a zero field means its default.
type CompactOptions struct {
	TargetRows   int64   // rows per output fragment (TARGET_ROWS_PER_FRAGMENT), default 65536
	MaxSources   int     // at most this many source fragments per compaction (COMPACTION_MAX_SOURCE_FRAGMENTS), default 64
	DeletedRatio float64 // a fragment whose deleted/rows >= this is rewritten whatever its size, default 0.2
}

func (o CompactOptions) withDefaults() CompactOptions {
	if o.TargetRows <= 0 {
		o.TargetRows = DefaultTargetRows
	}
	if o.MaxSources <= 0 {
		o.MaxSources = DefaultMaxSources
	}
	if o.DeletedRatio <= 0 {
		o.DeletedRatio = DefaultDeletedRatio
	}
	return o
}

// CompactionPlan is one compaction: the fragments it rewrites, in manifest order,
// and the level its outputs go to.
type CompactionPlan struct {
	Sources []Fragment
	// Level is the level of the outputs. Sorting unsorted fragments (Sort) writes
	// level-0 outputs: sorted, but overlapping each other like merges' fragments.
	Level int
	// Sort says the sources are fragments written before format 2, rewritten
	// sorted a TargetRows chunk at a time (their rows do not come in id order, so
	// they cannot be merged as a stream).
	Sort bool
}

// Rows is the rows of the plan's sources, deleted ones included.
func (p *CompactionPlan) Rows() (rows, bytes int64) {
	if p == nil {
		return 0, 0
	}
	for _, f := range p.Sources {
		rows += f.Rows
		bytes += f.Bytes
	}
	return rows, bytes
}

// levelCapacity is how many fragments level n >= 1 holds before it spills.
func levelCapacity(n int) int {
	c := 1
	for i := 1; i < n; i++ {
		c *= LevelFanout
	}
	return c
}

// LevelStats says how far a manifest is from its compacted shape: what the master's
// compaction sweep decides on.
type LevelStats struct {
	// Level0 counts the fragments of level 0 with live rows: each may hold any
	// id, so a point read probes every one (through its bloom filter).
	Level0 int `json:"level0_fragments"`
	// Unsorted counts the fragments written before format 2 (in Level0 too).
	Unsorted int `json:"unsorted_fragments"`
	// Spilling counts the levels >= 1 holding more fragments than their capacity.
	Spilling int `json:"spilling_levels"`
	// Levels is the deepest level with fragments.
	Levels int `json:"levels"`
}

// Levels summarizes the manifest's levels without I/O.
func (m *Manifest) Levels() LevelStats {
	var s LevelStats
	count := map[int]int{}
	for _, f := range m.Fragments {
		if f.LiveRows() == 0 {
			continue
		}
		count[f.Level]++
		s.Levels = max(s.Levels, f.Level)
		if !f.Sorted {
			s.Unsorted++
		}
	}
	s.Level0 = count[0]
	for n, c := range count {
		if n >= 1 && c > levelCapacity(n) {
			s.Spilling++
		}
	}
	return s
}

// PlanCompaction returns the next compaction of m, or nil when there is none. In
// order of priority:
//
//  1. Fragments written before format 2 are sorted (Sort; up to MaxSources of them).
//  2. Level 0, when it has two or more fragments (or one over the deleted ratio),
//     moves into level 1: its fragments (oldest first) and the level-1 fragments
//     their ids overlap.
//  3. The shallowest level n >= 1 over its capacity moves one fragment into level
//     n+1: the one whose overlap with level n+1 is the smallest for its rows (the
//     least rewriting per row moved), with the level-(n+1) fragments it overlaps.
//  4. A fragment at or over DeletedRatio is rewritten within its level, and so are
//     two neighbours of one level that are both under half of TargetRows (the
//     small tail outputs compactions leave), so levels do not fill with remnants.
//
// Fragments with no live row are always taken along (they are dropped). A plan
// never holds more than MaxSources fragments.
func PlanCompaction(m *Manifest, o CompactOptions) *CompactionPlan {
	o = o.withDefaults()
	levels := map[int][]int{} // level -> positions in m.Fragments, live ones only
	var dead, unsorted []int
	for i, f := range m.Fragments {
		switch {
		case f.LiveRows() == 0:
			dead = append(dead, i)
		case !f.Sorted:
			unsorted = append(unsorted, i)
		default:
			levels[f.Level] = append(levels[f.Level], i)
		}
	}
	plan := func(level int, sort bool, picked ...[]int) *CompactionPlan {
		set := map[int]bool{}
		for _, ps := range picked {
			for _, p := range ps {
				set[p] = true
			}
		}
		for _, p := range dead {
			if len(set) < o.MaxSources {
				set[p] = true
			}
		}
		if len(set) == 0 {
			return nil
		}
		out := &CompactionPlan{Level: level, Sort: sort}
		for i, f := range m.Fragments {
			if set[i] {
				out.Sources = append(out.Sources, f)
			}
		}
		return out
	}
	if len(unsorted) > 0 {
		return plan(0, true, unsorted[:min(len(unsorted), o.MaxSources)])
	}
	over := func(f Fragment) bool {
		return f.Deletions != nil && f.Rows > 0 && float64(f.Deletions.Count)/float64(f.Rows) >= o.DeletedRatio
	}
	if l0 := levels[0]; len(l0) >= 2 || (len(l0) == 1 && over(m.Fragments[l0[0]])) {
		l0 = l0[:min(len(l0), o.MaxSources/2)] // oldest first: manifest order is commit order
		lo, hi := idRange(m, l0)
		return plan(1, false, l0, overlapping(m, levels[1], lo, hi))
	}
	for n := 1; n <= MaxLevel; n++ {
		if len(levels[n]) <= levelCapacity(n) {
			continue
		}
		best, bestOverlap := -1, []int(nil)
		var bestCost float64
		for _, p := range levels[n] {
			f := m.Fragments[p]
			ov := overlapping(m, levels[n+1], f.IDMin, f.IDMax)
			if 1+len(ov) > o.MaxSources {
				continue
			}
			var rows int64
			for _, q := range ov {
				rows += m.Fragments[q].LiveRows()
			}
			cost := float64(rows) / float64(f.LiveRows())
			if best < 0 || cost < bestCost {
				best, bestOverlap, bestCost = p, ov, cost
			}
		}
		if best >= 0 {
			return plan(min(n+1, MaxLevel), false, []int{best}, bestOverlap)
		}
	}
	for n := 1; n <= MaxLevel; n++ {
		ps := slices.Clone(levels[n])
		slices.SortFunc(ps, func(a, b int) int { return cmp.Compare(m.Fragments[a].IDMin, m.Fragments[b].IDMin) })
		for k, p := range ps {
			if over(m.Fragments[p]) {
				return plan(n, false, []int{p})
			}
			small := func(q int) bool { return m.Fragments[q].LiveRows() < o.TargetRows/2 }
			if k > 0 && small(p) && small(ps[k-1]) {
				return plan(n, false, []int{ps[k-1], p})
			}
		}
	}
	if len(dead) > 0 {
		return plan(0, false)
	}
	return nil
}

// idRange is the smallest range of ids holding every fragment at positions ps.
func idRange(m *Manifest, ps []int) (lo, hi string) {
	for k, p := range ps {
		f := m.Fragments[p]
		if k == 0 || f.IDMin < lo {
			lo = f.IDMin
		}
		if k == 0 || f.IDMax > hi {
			hi = f.IDMax
		}
	}
	return lo, hi
}

// overlapping returns the positions of ps whose fragments' id ranges meet [lo, hi].
func overlapping(m *Manifest, ps []int, lo, hi string) []int {
	var out []int
	for _, p := range ps {
		if f := m.Fragments[p]; f.IDMax >= lo && f.IDMin <= hi {
			out = append(out, p)
		}
	}
	return out
}
