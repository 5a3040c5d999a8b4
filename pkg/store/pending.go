package store

import (
	"github.com/tidemark-io/tidemark/pkg/coord/pending"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
)

// Pending is this worker's pending entries (package pending): for each store it
// holds open, the generations of its own shard above the base table's merged
// watermark (Store.OwnPending, no I/O). A store it does not hold open is left to
// the master's stats scan. It is the Source of the worker's pending.Publisher.
func (ss *Stores) Pending() []pending.Entry {
	resident, releases := ss.Resident()
	defer func() {
		for _, release := range releases {
			release()
		}
	}()
	var out []pending.Entry
	for _, s := range resident {
		gens := s.OwnPending()
		if len(gens) == 0 {
			continue
		}
		e := pending.Entry{Target: s.entry.Target(), Generations: len(gens), OldestSealedAt: gens[0].SealedAt}
		for _, g := range gens {
			e.Bytes += g.Bytes
			if g.SealedAt.Before(e.OldestSealedAt) {
				e.OldestSealedAt = g.SealedAt
			}
		}
		out = append(out, e)
	}
	return out
}

// OwnPending is this worker's generations of s above the merged watermark, from
// the store's current snapshot (no I/O).
func (s *Store) OwnPending() []wal.Generation {
	snap := s.Snapshot()
	sh := snap.WAL.Shards[s.Shard()]
	if sh == nil {
		return nil
	}
	return sh.Pending(snap.Base.Watermark(s.Shard()))
}
