package merge

import (
	"context"
	"errors"
	"fmt"

	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// AdoptResult says what an adoption did.
type AdoptResult struct {
	// Sealed counts the rows replayed from the shard's unsealed entries and sealed
	// into a generation (acknowledged rows of the worker that is gone).
	Sealed int64
	// Merged is the merge of the shard's generations.
	Merged Result
	// Retired reports that the shard is retired (now or before); Adopted that
	// this call retired it.
	Retired, Adopted bool
	// Due counts the drained generation files of a shard retired earlier whose
	// delete delay had passed: taken out of its manifest and handed to the worker's
	// delete queue (wal.DrainResult.Due); the cleanup sweeper deletes them.
	Due int
}

// Adopt drains the shard of s (a handle from store.Stores.OpenShard, whose shard is
// that of a worker that did not come back) and retires it, recording by as the
// adopter:
//
//  1. Opening the shard's writer claims the next writer epoch, which fences the
//     worker that owned it should it still be alive behind a partition (its next
//     append or seal fails with wal.ErrFenced), and replays every unsealed entry.
//  2. The replayed rows are sealed into a generation, and every generation of the
//     shard is merged into the base table and drained, exactly once (the merged
//     watermark is committed with the rows).
//  3. The shard is marked retired (wal.Writer.Retire): nothing of it is pending, and
//     it needs no owner until its worker returns and opens it again.
//
// A retired shard is not reopened: Adopt only takes the drained generation files
// whose delete delay has passed out of its manifest, for the cleanup sweeper to
// delete. The caller holds the store's target lock, so no merge of the store runs
// meanwhile; each step is idempotent, so an adoption that fails part-way is simply
// run again.
func (m *Merger) Adopt(ctx context.Context, s *store.Store, by string) (AdoptResult, error) {
	var res AdoptResult
	sm, err := wal.LoadShard(ctx, s.Bucket(), s.Entry().URI, s.Shard())
	if err != nil {
		return res, fmt.Errorf("adopt shard %s of %s: %w", s.Shard(), s.Target(), err)
	}
	if sm.Retired != nil {
		res.Retired = true
		if len(sm.DeferredDeletes) == 0 {
			return res, nil
		}
		d, err := wal.Drain(ctx, s.Bucket(), s.Entry().URI, s.Shard(), 0, sm.WriterEpoch, s.WALOptions()...)
		if errors.Is(err, wal.ErrFenced) {
			// Its worker came back and opened it: its own drains hand the files over.
			return AdoptResult{}, nil
		}
		if err != nil {
			return res, fmt.Errorf("adopt shard %s of %s: drain the files due for deletion: %w", s.Shard(), s.Target(), err)
		}
		res.Due = d.Due
		return res, nil
	}
	w, err := s.Writer(ctx)
	if err != nil {
		return res, fmt.Errorf("adopt shard %s of %s: %w", s.Shard(), s.Target(), err)
	}
	g, err := s.Seal(ctx)
	if err != nil {
		return res, fmt.Errorf("adopt shard %s of %s: %w", s.Shard(), s.Target(), err)
	}
	if g != nil {
		res.Sealed = g.Rows
	}
	res.Merged, err = m.Merge(ctx, s, true)
	if err != nil {
		return res, fmt.Errorf("adopt shard %s of %s: %w", s.Shard(), s.Target(), err)
	}
	if _, err := w.Retire(ctx, by); err != nil {
		return res, fmt.Errorf("adopt shard %s of %s: %w", s.Shard(), s.Target(), err)
	}
	res.Retired, res.Adopted = true, true
	return res, nil
}
