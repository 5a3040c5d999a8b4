package table

import (
	"cmp"
	"context"
	"math"
	"slices"
	"time"
)

// Compaction planning: which fragments one compaction rewrites (or moves), and into
// which level. The policy is an LSM's leveling with levels sized by rows from the
// bottom up (RocksDB's dynamic level sizes), in our words:
//
//   - Level 0 holds what merges write: sorted fragments whose id ranges overlap
//     (every merge's ids span the key space), and fragments written before format 2,
//     which are not sorted at all.
//   - Every level n >= 1 is one sorted run: its fragments' id ranges are disjoint,
//     so a point read probes at most one fragment per level, and a page reads one
//     fragment per level at a time. Which level holds a row says nothing about its
//     age: a table holds one live row per id, so levels only shape the rewrites.
//   - The bottom is level MaxLevel, and it holds what it holds. Each level above it
//     targets LevelFanout times fewer rows than the one below; the base level, where
//     level 0 goes, is the deepest whose target is at most one fragment's rows,
//     and levels above it are empty. So a move of level 0 rewrites at
//     most about one fragment beside what it moves, a move out of level n rewrites
//     about LevelFanout rows of level n+1 per row moved (its target is LevelFanout
//     times n's), and a store of N rows is rewritten about LevelFanout times per
//     level, log(N/TargetRows) levels: what a move costs depends on what it moves,
//     not on the store's size.
//   - A level's fragments are at least one fragment of rows each, so the work goes
//     where it is worth most: level 0 when it holds Level0Trigger fragments, a level
//     n when its rows pass its target, whichever is the further past (the score,
//     RocksDB's). Without scores, a stream of merges would keep level 0 at two
//     fragments and refill the base level for ever: each move rewriting a base
//     level grown to the whole store.
//   - A fragment whose range meets nothing of the next level moves down without
//     being rewritten (a move: only the manifest changes). So do all the levels of a
//     table whose deepest level is above the bottom (written by the planner before
//     this one, whose levels were numbered from the top), one level per commit.
//
// Plans are computed from a manifest alone (no I/O), so the master's scanner can
// tell whether a table needs one (Manifest.Levels) and a worker plans against the
// newest version when the task runs.

// Defaults of CompactOptions.
const (
	DefaultTargetRows    = 65536
	DefaultMaxSources    = 64
	DefaultDeletedRatio  = 0.2
	DefaultLevel0Trigger = 4
	// LevelFanout is how many times more rows level n+1 targets than level n.
	LevelFanout = 10
	// MaxLevel is the bottom level: with LevelFanout 10 and 65,536-row fragments,
	// 10^8 fragments' rows fit above it.
	MaxLevel = 9
)

// CompactOptions tune a compaction; a zero field means its default.
type CompactOptions struct {
	TargetRows   int64   // rows per output fragment (TARGET_ROWS_PER_FRAGMENT), default 65536
	MaxSources   int     // at most this many source fragments per compaction, default 64 (no setting since issue 43)
	DeletedRatio float64 // a fragment whose deleted/rows >= this is rewritten whatever its size, default 0.2
	// Level0Trigger is how many level-0 fragments make level 0 due for a move
	// (score 1), default 4: fewer would rewrite the base level for every merge or
	// two. A bulk load that wants level 0 empty sets 1.
	Level0Trigger int
	// Yield, if set, is called after each output row group a rewrite writes,
	// with the time the rewrite worked since the last call: it may wait, to
	// leave the machine to foreground work, and an error ends the compaction
	// (nothing is committed).
	Yield func(ctx context.Context, worked time.Duration) error
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
	if o.Level0Trigger <= 0 {
		o.Level0Trigger = DefaultLevel0Trigger
	}
	return o
}

// CompactionPlan is one compaction: the fragments it rewrites, in manifest order,
// and the level its outputs go to.
type CompactionPlan struct {
	Sources []Fragment
	// Level is the level of the outputs. Sorting unsorted fragments (Sort) writes
	// level-0 outputs: sorted, but overlapping each other like merges' fragments.
	// Of a move, the deepest level a source moves to.
	Level int
	// Sort says the sources are fragments written before format 2, rewritten
	// sorted a TargetRows chunk at a time (their rows do not come in id order, so
	// they cannot be merged as a stream).
	Sort bool
	// Move says the sources are not rewritten: each goes one level down as it is,
	// which only the manifest records. Its sources meet nothing of the levels they
	// go to (and a shift moves every level at once).
	Move bool
}

// Rows is the rows of the plan's sources, deleted ones included; a move reads and
// writes none.
func (p *CompactionPlan) Rows() (rows, bytes int64) {
	if p == nil || p.Move {
		return 0, 0
	}
	for _, f := range p.Sources {
		rows += f.Rows
		bytes += f.Bytes
	}
	return rows, bytes
}

// shape is a manifest's live sorted fragments by level, with each level's target.
type shape struct {
	m      *Manifest
	frags  [MaxLevel + 1][]int // positions in m.Fragments, per level
	rows   [MaxLevel + 1]int64 // live rows per level
	target [MaxLevel + 1]float64
	// base is where level 0 goes: the deepest level whose target is at most one
	// fragment's rows (level 1 when even its target is more). One fragment is the
	// largest of the levels >= 1, as compactions cut them (TargetRows when they
	// were written), so the master, which plans nothing, reckons the same levels
	// from the manifest alone as the worker does.
	base int
	// deepest is the deepest level >= 1 holding rows (0 when none does).
	deepest        int
	dead, unsorted []int
}

func shapeOf(m *Manifest) *shape {
	s := &shape{m: m}
	var fragRows int64 // the largest fragment of a level >= 1: one fragment as compactions cut them
	for i, f := range m.Fragments {
		switch {
		case f.LiveRows() == 0:
			s.dead = append(s.dead, i)
		case !f.Sorted:
			s.unsorted = append(s.unsorted, i)
		default:
			s.frags[f.Level] = append(s.frags[f.Level], i)
			s.rows[f.Level] += f.LiveRows()
			if f.Level > 0 {
				s.deepest = max(s.deepest, f.Level)
				fragRows = max(fragRows, f.Rows)
			}
		}
	}
	s.base = MaxLevel
	t := float64(s.rows[MaxLevel])
	s.target[MaxLevel] = t
	for n := MaxLevel - 1; n >= 1; n-- {
		t /= LevelFanout
		s.target[n] = t
		if s.target[s.base] > float64(fragRows) {
			s.base = n
		}
	}
	return s
}

// shifting says the levels must move down before anything else: the deepest is
// above the bottom (a table levelled from the top, by the planner before this
// one), so the targets, reckoned from the bottom, would be none.
func (s *shape) shifting() bool { return s.deepest > 0 && s.deepest < MaxLevel }

// score says how far level n (1 <= n < MaxLevel) is past its target: at 1 or more
// it is due to spill. A level above the base holds nothing by design: any rows
// there (the base moved down, the store having shrunk) are due at once.
func (s *shape) score(n int) float64 {
	switch {
	case s.rows[n] == 0:
		return 0
	case n < s.base:
		return math.Inf(1)
	}
	return float64(s.rows[n]) / max(s.target[n], 1)
}

// LevelStats says how far a manifest is from its compacted shape: what the master's
// compaction sweep decides on.
type LevelStats struct {
	// Level0 counts the fragments of level 0 with live rows: each may hold any
	// id, so a point read probes every one (through its bloom filter).
	Level0 int `json:"level0_fragments"`
	// Unsorted counts the fragments written before format 2 (in Level0 too).
	Unsorted int `json:"unsorted_fragments"`
	// Spilling counts the levels >= 1 past their target in rows (and the whole
	// table as one when its levels must shift down).
	Spilling int `json:"spilling_levels"`
	// Levels is the deepest level with fragments.
	Levels int `json:"levels"`
}

// Levels summarizes the manifest's levels without I/O.
func (m *Manifest) Levels() LevelStats {
	s := shapeOf(m)
	st := LevelStats{Level0: len(s.frags[0]) + len(s.unsorted), Unsorted: len(s.unsorted), Levels: s.deepest}
	if s.shifting() {
		st.Spilling = 1
		return st
	}
	for n := 1; n < MaxLevel; n++ {
		if s.score(n) >= 1 {
			st.Spilling++
		}
	}
	return st
}

// PlanCompaction returns the next compaction of m, or nil when there is none. In
// order of priority:
//
//  1. Fragments written before format 2 are sorted (Sort; up to MaxSources of them).
//  2. A table whose deepest level is above the bottom moves every level down one
//     (Move: a shift).
//  3. Of level 0 and the levels past their targets, the one with the highest
//     score (level 0: its fragments over Level0Trigger, or 1 when one is over the
//     deleted ratio; level n: its rows over its target), level 0 first on a tie:
//     - Level 0 moves its fragments (oldest first, at most MaxSources/2) into the
//     base level, with every fragment there (level 0's ranges meet them all).
//     When that would pass MaxSources, the next score goes first (the base level
//     is then far past its target, and spilling it makes room).
//     - Level n moves into level n+1: every fragment of n whose range meets
//     nothing there (Move), or else the one whose overlap with n+1 is the
//     smallest for its rows (the least rewriting per row moved), with the level
//     n+1 fragments it meets.
//  4. A fragment at or over DeletedRatio is rewritten within its level, and so are
//     two neighbours of one level that are both under half of TargetRows (the
//     small tail outputs compactions leave), so levels do not fill with remnants.
//
// Fragments with no live row are taken along by every rewrite (they are dropped),
// and alone when nothing else is due. A rewrite never holds more than MaxSources
// fragments; a move holds what it moves (it reads nothing).
func PlanCompaction(m *Manifest, o CompactOptions) *CompactionPlan {
	o = o.withDefaults()
	s := shapeOf(m)
	rewrite := func(level int, sort bool, picked ...[]int) *CompactionPlan {
		set := map[int]bool{}
		for _, ps := range picked {
			for _, p := range ps {
				set[p] = true
			}
		}
		for _, p := range s.dead {
			if len(set) < o.MaxSources {
				set[p] = true
			}
		}
		if len(set) == 0 {
			return nil
		}
		return &CompactionPlan{Level: level, Sort: sort, Sources: s.pick(set)}
	}
	if len(s.unsorted) > 0 {
		return rewrite(0, true, s.unsorted[:min(len(s.unsorted), o.MaxSources)])
	}
	if s.shifting() {
		set := map[int]bool{}
		for n := 1; n <= s.deepest; n++ {
			for _, p := range s.frags[n] {
				set[p] = true
			}
		}
		return &CompactionPlan{Level: s.deepest + 1, Move: true, Sources: s.pick(set)}
	}
	over := func(f Fragment) bool {
		return f.Deletions != nil && f.Rows > 0 && float64(f.Deletions.Count)/float64(f.Rows) >= o.DeletedRatio
	}
	// Level 0's score, and the levels' in order of theirs (level 0 first on a tie).
	l0 := s.frags[0]
	scores := map[int]float64{0: float64(len(l0)) / float64(o.Level0Trigger)}
	if len(l0) == 1 && over(m.Fragments[l0[0]]) {
		scores[0] = max(scores[0], 1)
	}
	order := []int{0}
	for n := 1; n < MaxLevel; n++ {
		if sc := s.score(n); sc >= 1 {
			scores[n] = sc
			order = append(order, n)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(scores[b], scores[a]) })
	for _, n := range order {
		if scores[n] < 1 {
			break
		}
		if n == 0 {
			if p := s.moveLevel0(o, rewrite); p != nil {
				return p
			}
			continue
		}
		if p := s.spill(n, o, rewrite); p != nil {
			return p
		}
	}
	for n := 1; n <= MaxLevel; n++ {
		ps := slices.Clone(s.frags[n])
		slices.SortFunc(ps, func(a, b int) int { return cmp.Compare(m.Fragments[a].IDMin, m.Fragments[b].IDMin) })
		for k, p := range ps {
			if over(m.Fragments[p]) {
				return rewrite(n, false, []int{p})
			}
			small := func(q int) bool { return m.Fragments[q].LiveRows() < o.TargetRows/2 }
			if k > 0 && small(p) && small(ps[k-1]) {
				return rewrite(n, false, []int{ps[k-1], p})
			}
		}
	}
	if len(s.dead) > 0 {
		return rewrite(0, false)
	}
	return nil
}

// pick returns the fragments at the positions in set, in manifest order.
func (s *shape) pick(set map[int]bool) []Fragment {
	var out []Fragment
	for i, f := range s.m.Fragments {
		if set[i] {
			out = append(out, f)
		}
	}
	return out
}

// moveLevel0 plans level 0's move into the base level (PlanCompaction, 3), or nil
// when the base level holds too many fragments to take it within MaxSources.
func (s *shape) moveLevel0(o CompactOptions, rewrite func(int, bool, ...[]int) *CompactionPlan) *CompactionPlan {
	l0 := s.frags[0][:min(len(s.frags[0]), o.MaxSources/2)] // oldest first: manifest order is commit order
	if len(l0)+len(s.frags[s.base]) > o.MaxSources {
		return nil
	}
	return rewrite(s.base, false, l0, s.frags[s.base])
}

// spill plans level n's move into level n+1 (PlanCompaction, 3), or nil when every
// fragment of n meets more of n+1 than MaxSources allows.
func (s *shape) spill(n int, o CompactOptions, rewrite func(int, bool, ...[]int) *CompactionPlan) *CompactionPlan {
	m := s.m
	var free []int // fragments of n that meet nothing of n+1
	best, bestOverlap := -1, []int(nil)
	var bestCost float64
	for _, p := range s.frags[n] {
		f := m.Fragments[p]
		ov := overlapping(m, s.frags[n+1], f.IDMin, f.IDMax)
		if len(ov) == 0 {
			free = append(free, p)
			continue
		}
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
	if len(free) > 0 {
		set := map[int]bool{}
		for _, p := range free {
			set[p] = true
		}
		return &CompactionPlan{Level: n + 1, Move: true, Sources: s.pick(set)}
	}
	if best < 0 {
		return nil
	}
	return rewrite(n+1, false, []int{best}, bestOverlap)
}

// overlapInLevels returns two fragments of one level >= 1 of fs whose id ranges
// meet, if there are any: each level must be one sorted run. Fragments with no
// live row are left out, as the planner leaves them (no read finds a row in one,
// and the next rewrite drops it).
func overlapInLevels(fs []Fragment) (a, b Fragment, found bool) {
	byLevel := map[int][]Fragment{}
	for _, f := range fs {
		if f.Level > 0 && f.LiveRows() > 0 {
			byLevel[f.Level] = append(byLevel[f.Level], f)
		}
	}
	for _, l := range byLevel {
		slices.SortFunc(l, func(a, b Fragment) int { return cmp.Compare(a.IDMin, b.IDMin) })
		for i := 1; i < len(l); i++ {
			if l[i].IDMin <= l[i-1].IDMax {
				return l[i-1], l[i], true
			}
		}
	}
	return a, b, false
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
