package merge

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"golang.org/x/sync/errgroup"

	"github.com/tidemark-io/tidemark/pkg/storage/table"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// StoreGenerationReads bounds the generation objects a merge of a whole store
// reads at once: it reads every shard's, so more than one shard's merge does
// (GenerationReads), and still a fraction of what a bucket serves at once.
const StoreGenerationReads = 4 * GenerationReads

// StoreResult says what a merge of a whole store did.
type StoreResult struct {
	Result
	// Merged maps every shard whose watermark the merge advanced to the generation
	// it is merged up to. Their workers drain them (DrainMerged); until then reads
	// skip those generations by the watermark.
	Merged map[string]uint64
	// Level0 counts the base table's level-0 fragments after the merge's last
	// commit (0 when it committed nothing): the master compacts on it.
	Level0 int
}

// MergeStore merges the pending generations of every shard of s, this worker's
// and the other workers', into the base table: each pass is one fragment and one
// commit for all of them (table.Append.Parts), instead of a commit per shard, one
// after another. That makes a store's merge cycle one commit long whatever its
// number of workers, which is what keeps the pending generations (every read's
// fan-out) low at many workers (issue 31).
//
// It reads the other shards' manifests and generations and never writes them: it
// claims no writer epoch of theirs, so an owner appending and sealing meanwhile is
// not disturbed. Their generations at or below the new watermarks stay in their
// manifests until their workers drain them (DrainMerged, which the master's
// fan-out calls once the merge has committed); a drain always follows the commit
// that covers it, the order reads rely on (pkg/store). This worker's own
// shard is drained here.
//
// Racing a shard's own merge (its worker's sweeper, an HTTP merge) is safe both
// ways: a shard the newest version covers is left out before staging, and one
// covered meanwhile holds the same writes, which the commit's rebase replaces or
// drops (table.Txn.settle). What was sealed after the merge began waits for the
// next: against a steady stream of seals "until nothing is pending" might not end.
func (m *Merger) MergeStore(ctx context.Context, s *store.Store, wait bool) (StoreResult, error) {
	res := StoreResult{Merged: map[string]uint64{}}
	if err := m.acquireSlot(ctx, wait); err != nil {
		return res, err
	}
	defer m.releaseSlot()
	var (
		snap *wal.Snapshot
		base *table.Manifest
	)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		snap, err = wal.LoadSnapshot(gctx, s.Bucket(), s.Entry().URI)
		return err
	})
	g.Go(func() (err error) {
		base, err = s.Table().Refresh(gctx)
		return err
	})
	if err := g.Wait(); err != nil {
		return res, fmt.Errorf("merge store %s: %w", s.Target(), err)
	}
	s.ObserveBase(base)
	log := m.cfg.Logger.With("store", s.Entry().Name, "kind", s.Entry().Kind)
	for {
		pending := map[string][]wal.Generation{}
		for name, sm := range snap.Shards {
			if gens := sm.Pending(base.Watermark(name)); len(gens) > 0 && sm.Retired == nil {
				pending[name] = gens
			}
		}
		if len(pending) == 0 {
			break
		}
		next, err := m.storePass(ctx, s, base, m.chooseAcross(pending), wait, &res)
		if err != nil {
			return res, err
		}
		base = next
	}
	if own := snap.Shards[s.Shard()]; own != nil && len(own.Generations) > 0 && own.Retired == nil {
		n, err := m.DrainMerged(ctx, s, base, 0)
		res.Reclaimed += n
		if err != nil {
			return res, err
		}
	}
	if res.Generations > 0 {
		log.Info("merged the store's WAL generations", "shards", len(res.Merged), "generations", res.Generations,
			"rows", res.Rows, "passes", res.Passes, "version", res.Version)
	}
	return res, nil
}

// storePass merges pick (by shard, each a prefix of the shard's pending
// generations) in one commit and returns the base it leaves.
func (m *Merger) storePass(ctx context.Context, s *store.Store, base *table.Manifest, pick map[string][]wal.Generation, wait bool, res *StoreResult) (*table.Manifest, error) {
	var all []wal.Generation
	for _, gens := range pick {
		all = append(all, gens...)
	}
	release, err := m.charge(ctx, all, wait)
	if err != nil {
		return nil, err
	}
	defer release()
	res.Passes++

	shards := slices.Sorted(maps.Keys(pick))
	recs := make([][][]arrow.RecordBatch, len(shards)) // by shard, then generation
	err = m.timed(PhaseRead, func() error {
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(StoreGenerationReads)
		for i, shard := range shards {
			recs[i] = make([][]arrow.RecordBatch, len(pick[shard]))
			for k, gen := range pick[shard] {
				g.Go(func() error {
					data, err := m.reads.Read(gctx, s.Bucket(), wal.GenerationKey(s.Entry().URI, gen))
					if err != nil {
						return err
					}
					recs[i][k] = data.Records
					return nil
				})
			}
		}
		return g.Wait()
	})
	if err != nil {
		return nil, fmt.Errorf("merge store %s: %w", s.Target(), err)
	}
	parts := make([]table.Part, len(shards))
	for i, shard := range shards {
		gens := pick[shard]
		parts[i] = table.Part{Shard: shard, Generation: gens[len(gens)-1].Generation}
		for _, r := range recs[i] {
			parts[i].Records = append(parts[i].Records, r...)
		}
	}
	var txn *table.Txn
	err = m.timed(PhaseAppend, func() (err error) {
		txn, err = s.Table().Prepare(ctx, base, table.Append{Parts: parts})
		return err
	})
	if errors.Is(err, table.ErrAlreadyCommitted) {
		// Their workers merged them meanwhile: take the newest version and go on.
		return m.refreshBase(ctx, s)
	}
	if err != nil {
		return nil, fmt.Errorf("merge store %s: %w", s.Target(), err)
	}
	var committed *table.Manifest
	err = m.timed(PhaseCommit, func() (err error) {
		committed, err = s.Commit(ctx, txn)
		return err
	})
	if errors.Is(err, table.ErrAlreadyCommitted) {
		return m.refreshBase(ctx, s)
	}
	if err != nil {
		return nil, fmt.Errorf("merge store %s: %w", s.Target(), err)
	}
	for _, p := range parts {
		res.Merged[p.Shard] = max(res.Merged[p.Shard], p.Generation)
		res.Generations += len(pick[p.Shard])
	}
	for _, g := range all {
		res.Rows += g.Rows
	}
	res.Version, res.Level0 = committed.Version, committed.Levels().Level0
	return committed, nil
}

func (m *Merger) refreshBase(ctx context.Context, s *store.Store) (*table.Manifest, error) {
	base, err := s.Table().Refresh(ctx)
	if err != nil {
		return nil, fmt.Errorf("merge store %s: %w", s.Target(), err)
	}
	s.ObserveBase(base)
	return base, nil
}

// chooseAcross takes the oldest pending generations of every shard within the
// caps and what the memory budget pays for, at least one: a k-way merge by seal
// time over the shards, so a pass takes each shard's oldest first and a shard's
// generations only as a prefix (the watermark covers every generation up to it).
func (m *Merger) chooseAcross(pending map[string][]wal.Generation) map[string][]wal.Generation {
	maxBytes := m.cfg.BudgetBytes / PassCostFactor
	if m.cfg.MaxBytes > 0 {
		maxBytes = min(maxBytes, m.cfg.MaxBytes)
	}
	shards := slices.Sorted(maps.Keys(pending))
	taken := map[string]int{}
	var bytes int64
	for n := 0; ; n++ {
		best := ""
		for _, sh := range shards {
			if k := taken[sh]; k < len(pending[sh]) &&
				(best == "" || pending[sh][k].SealedAt.Before(pending[best][taken[best]].SealedAt)) {
				best = sh
			}
		}
		if best == "" {
			break
		}
		g := pending[best][taken[best]]
		if n > 0 && (m.cfg.MaxGenerations > 0 && n >= m.cfg.MaxGenerations || bytes+g.Bytes > maxBytes) {
			break
		}
		bytes += g.Bytes
		taken[best]++
	}
	out := make(map[string][]wal.Generation, len(taken))
	for sh, k := range taken {
		out[sh] = pending[sh][:k]
	}
	return out
}

// DrainMerged drains this worker's shard of s up to the watermark of base, or,
// when base is nil, of version known (the one the merge created) or one newer
// (the newest, when known is 0). It returns the generations drained. The
// base is put into the store's snapshot before the drained shard manifest is, so
// no read of this worker pairs the drained shard with a base that lacks its rows.
// A worker without a shard in the store drains nothing; its writer is opened if it
// was not (a drain is a writer's edit of its manifest, under its epoch).
func (m *Merger) DrainMerged(ctx context.Context, s *store.Store, base *table.Manifest, known uint64) (int, error) {
	if base == nil {
		// The worker whose commit created known (the two-phase fan-out's drain
		// after a commit that left it) holds that version already: any version
		// from known on has the watermark to drain to, the newest is not needed.
		if cur := s.Table().Latest(); known != 0 && cur != nil && cur.Version >= known {
			base = cur
		} else {
			var err error
			if base, err = s.Table().RefreshFrom(ctx, known); err != nil {
				return 0, fmt.Errorf("merge %s: drain: %w", s.Target(), err)
			}
		}
		s.ObserveBase(base)
	}
	wm := base.Watermark(s.Shard())
	if wm == 0 {
		return 0, nil // nothing of this shard merged, ever
	}
	if _, open := s.WriterStats(); !open {
		// Not written since this worker started: look before opening a writer,
		// which would create the shard of a store it never wrote.
		sm, err := wal.LoadShard(ctx, s.Bucket(), s.Entry().URI, s.Shard())
		if errors.Is(err, wal.ErrNoShard) {
			return 0, nil
		}
		if err != nil {
			return 0, fmt.Errorf("merge %s: drain: %w", s.Target(), err)
		}
		if len(sm.Generations) == 0 || sm.Generations[0].Generation > wm || sm.Retired != nil {
			return 0, nil
		}
	}
	w, err := s.Writer(ctx)
	if err != nil {
		return 0, err
	}
	return m.drain(ctx, w, s, wm)
}
