package table

import (
	"context"
	"fmt"
)

// move is a compaction that rewrites nothing (CompactionPlan.Move): its sources go
// one level down as they are. Only the manifest changes, and the moved fragments
// stay referenced by the same paths, so cleanup keeps their files.
//
// Why it is the same table: the rows, their files, deletion vectors and key
// indexes are untouched; levels only shape later rewrites (a read probes every
// fragment whose range meets its id, whatever the level). What must hold is that
// each level >= 1 stays one sorted run, which the plan checked against its base
// and settle checks again against every newer version it commits on.
type move struct {
	t    *Table
	id   string
	base *Manifest
	plan *CompactionPlan
}

// proposal is the base with every source one level down.
func (c *move) proposal() *Manifest {
	now := c.t.opts.Clock.Now().UTC()
	n := c.base.next(c.id, now)
	down := make(map[string]bool, len(c.plan.Sources))
	for _, f := range c.plan.Sources {
		down[f.Path] = true
	}
	for i, f := range n.Fragments {
		if down[f.Path] {
			n.Fragments[i].Level = f.Level + 1
		}
	}
	n.LastCompaction = &CompactionInfo{Version: n.Version, At: now, Sources: len(c.plan.Sources)}
	return n
}

// settle aborts when latest no longer has every source at its planned level, or
// when moving them there would make a level overlap itself: another compaction
// changed the levels meanwhile (merges only add level-0 fragments and deletions).
func (c *move) settle(latest *Manifest) error {
	at := make(map[string]int, len(latest.Fragments))
	for _, f := range latest.Fragments {
		at[f.Path] = f.Level
	}
	for _, f := range c.plan.Sources {
		if l, ok := at[f.Path]; !ok || l != f.Level {
			return fmt.Errorf("%w: source fragment %s of a move is not at level %d in version %d", ErrConflict, f.Path, f.Level, latest.Version)
		}
	}
	c2 := *c
	c2.base = latest
	return movedDisjoint(c2.proposal())
}

// movedDisjoint checks that every level >= 1 of m, the version a move proposes,
// is one sorted run.
func movedDisjoint(m *Manifest) error {
	if a, b, ok := overlapInLevels(m.Fragments); ok {
		return fmt.Errorf("%w: a move would leave %s and %s meeting at level %d in version %d", ErrConflict, a.Path, b.Path, a.Level, m.Version)
	}
	return nil
}

// rebase takes latest as the base: the sources' deletion vectors are whatever
// latest has, since the files are the same.
func (c *move) rebase(_ context.Context, latest *Manifest) error {
	c.base = latest
	return nil
}

// Abort has nothing to delete: a move stages no file.
func (c *move) Abort(context.Context) {}
