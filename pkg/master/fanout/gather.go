package fanout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// gatherCaller is a Caller that can have one worker merge every shard of a store
// and the others drain what it merged of theirs (the GRPCCaller can).
type gatherCaller interface {
	MergeStore(ctx context.Context, w Worker, target registry.Target, fencingToken int64) (MergeResult, error)
	drainer
}

// errNoGather means the worker asked to merge the store does not implement it (a
// worker of an older version, during a rolling upgrade): the task falls back to the
// serial shape.
var errNoGather = errors.New("worker cannot merge a whole store")

// gather has one worker merge every shard of the store, in one commit per pass
// (WorkerService.MergeStore), then has the workers whose shards it merged drain
// them, all at once: drains edit each worker's own shard manifest and conflict
// with nothing. A task is therefore one commit, not one per worker, which is what
// lets pending generations stay low at many workers.
//
// The merging worker rotates with the fencing token, so that the reading and
// staging spread over the workers across tasks; one that cannot be reached is
// passed over for the next. Its other outcomes follow the serial fan-out's rules
// (FanOut.call). A drain that fails is left for the next (drains).
func (f *FanOut) gather(ctx context.Context, c *tasks.Claim, gc gatherCaller, workers []Worker, t *tally, log *slog.Logger) error {
	if len(workers) == 0 {
		return nil
	}
	target, token := c.Task.Target, c.FencingToken
	first := int(token % int64(len(workers)))
	var (
		by     Worker
		merged MergeResult
		done   bool
	)
	for k := range workers {
		w := workers[(first+k)%len(workers)]
		try := &tally{total: t.total}
		err := f.call(ctx, w, "merge of the store", try, log, func(ctx context.Context) (MergeResult, error) {
			r, err := gc.MergeStore(ctx, w, target, token)
			if status.Code(err) == codes.Unimplemented {
				err = fmt.Errorf("worker %s (%s): %w: %w", w.InstanceID, w.GRPCAddr, errNoGather, err)
			}
			merged = r
			return r, err
		})
		if err != nil {
			return err // errNoGather included: the caller falls back
		}
		t.corrupt = append(t.corrupt, try.corrupt...)
		if len(try.corrupt) > 0 {
			return nil // the worker answered: the object it found is every worker's
		}
		if try.ok == 1 {
			by, done = w, true
			break
		}
		// Unreachable: the next worker merges the store.
	}
	if !done {
		return fmt.Errorf("merge of the store: %w: none of %s could be reached", ErrUnreachable, count(int64(len(workers)), "worker"))
	}
	// Every worker's shard is merged now, unless its drain fails below: a worker
	// whose shard had nothing pending had nothing to do.
	t.ok = len(workers)
	t.merged, t.rows = merged.Generations, merged.Rows
	t.version = max(t.version, merged.BaseVersion)
	t.level0 = merged.Level0

	ds := &drains{f: f, d: gc, target: target, token: token, log: log}
	n := 0
	for _, w := range workers {
		if _, ok := merged.Merged[w.InstanceID]; ok && w.InstanceID != by.InstanceID {
			ds.start(ctx, w, merged.BaseVersion)
			n++
		}
	}
	failed := ds.wait()
	t.ok -= failed
	log.Info("merge_wal: store merged", "by", by.InstanceID, "shards", len(merged.Merged), "generations", merged.Generations,
		"rows", merged.Rows, "version", merged.BaseVersion, "drains", n, "drains_failed", failed)
	return nil
}
