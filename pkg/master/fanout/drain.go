package fanout

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/tidemark-io/tidemark/pkg/registry"
)

// drainer is a Caller that can have a worker drain its shard of a store up to
// the base table's watermark (the GRPCCaller can).
type drainer interface {
	DrainMerged(ctx context.Context, w Worker, target registry.Target, fencingToken int64, baseVersion uint64) (int64, error)
}

// drains are the DrainMerged calls of one task, run beside its other calls: a
// drain edits only its worker's own shard manifest, so it conflicts with no
// commit. A drain that fails is logged and left for the shard's next drain,
// which drains up to the watermark whatever it covers; until then reads skip
// the merged generations by the watermark, so the task does not fail for it.
type drains struct {
	f      *FanOut
	d      drainer
	target registry.Target
	token  int64
	log    *slog.Logger
	wg     sync.WaitGroup
	failed atomic.Int64
}

// start drains w's shard up to the watermark of version (a hint: the version
// the merge that covers it created) in the background.
func (ds *drains) start(ctx context.Context, w Worker, version uint64) {
	ds.wg.Go(func() {
		_, _, _, err := ds.f.bounded(ctx, w, func(ctx context.Context) (MergeResult, error) {
			n, err := ds.d.DrainMerged(ctx, w, ds.target, ds.token, version)
			return MergeResult{Reclaimed: n}, err
		})
		if err != nil {
			ds.log.Warn("merge_wal: drain of the merged generations failed; the next task drains them",
				"worker", w.InstanceID, "addr", w.GRPCAddr, "err", err)
			ds.failed.Add(1)
		}
	})
}

// wait waits for every drain started and returns how many failed.
func (ds *drains) wait() int {
	ds.wg.Wait()
	return int(ds.failed.Load())
}
