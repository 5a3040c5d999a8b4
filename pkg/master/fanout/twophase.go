package fanout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// abortTimeout bounds the AbortMerge calls that release the prepares a stopped
// fan-out will not commit; a worker that misses it aborts at MERGE_PREPARED_TTL.
const abortTimeout = 10 * time.Second

// twoPhase has every worker prepare its merge at once (at most
// PrepareConcurrency in flight, started in discovery's order) and commits them
// one after another in discovery's order, so commits never overlap. Preparing
// reads the generations, deduplicates and stages the fragment: the bulk of a
// merge, and it commits nothing, so it needs no turn; each commit only rebases
// onto the commits before it (fragments of other shards) and writes the manifest.
// A worker's commit starts as soon as its own prepare and the commit before it
// are done, so the commits overlap the prepares still running instead of waiting
// for the slowest of them.
//
// A commit answers once the base table has its version, without draining its
// worker's shard manifest (defer_drain), when the caller can drain: the fan-out
// then drains that worker (DrainMerged) beside the commits after it, and waits
// for the drains before the task ends. The chain of commits is then the base
// table's writes alone: half the round trips of a commit that drains.
//
// A worker whose prepare fails is skipped, with the failure reported, and the
// others commit (a prepare changes nothing, so skipping it loses nothing: the
// next task merges that shard). A store deleted skips the rest of the task. In
// the commit phase the serial fan-out's rules apply (FanOut.call); when they stop
// it, the prepares not committed are aborted once they are done.
func (f *FanOut) twoPhase(ctx context.Context, c *tasks.Claim, tp twoPhaseCaller, workers []Worker, t *tally, log *slog.Logger) error {
	target, token := c.Task.Target, c.FencingToken
	type prepared struct {
		err      error
		timedOut bool
		done     chan struct{} // closed once err and timedOut are set
	}
	res := make([]prepared, len(workers))
	for i := range res {
		res[i].done = make(chan struct{})
	}
	g := errgroup.Group{}
	if f.cfg.PrepareConcurrency > 0 {
		g.SetLimit(f.cfg.PrepareConcurrency)
	}
	launched := make(chan struct{})
	go func() {
		defer close(launched)
		for i, w := range workers {
			g.Go(func() error { // blocks while PrepareConcurrency prepares run
				defer close(res[i].done)
				_, timedOut, d, err := f.bounded(ctx, w, func(ctx context.Context) (MergeResult, error) {
					return tp.PrepareMerge(ctx, w, target, token)
				})
				// One observation per worker and task: its commit's, or a failed prepare's.
				if err != nil && f.cfg.OnWorkerDone != nil {
					f.cfg.OnWorkerDone(w, d, err)
				}
				res[i].err, res[i].timedOut = err, timedOut
				return nil
			})
		}
	}()
	// stop aborts, once every prepare is done, those from..len(workers)-1 that
	// succeeded and every one that timed out (it may still finish, and nothing
	// would commit it).
	var late []Worker
	stop := func(from int) {
		<-launched
		_ = g.Wait()
		abort := late
		for i := from; i < len(workers); i++ {
			if res[i].err == nil {
				abort = append(abort, workers[i])
			}
		}
		f.abort(ctx, tp, abort, target, token, log)
	}

	dc, deferDrain := tp.(drainer)
	ds := &drains{f: f, d: dc, target: target, token: token, log: log, ownCommits: true}
	defer func() { t.ok -= ds.wait() }()

	// Each commit tells the next the version it created (t.version), so the next
	// one reads it instead of searching for the newest version: the commits are
	// the serial part of the task, and the search is several round trips of each.
	for i, w := range workers {
		<-res[i].done // every prepare ends: bounded by the worker timeout
		switch err := res[i].err; {
		case err == nil:
			if err := ctx.Err(); err != nil {
				stop(i)
				return err
			}
			committed := false
			err := f.call(ctx, w, "merge", t, log, func(ctx context.Context) (MergeResult, error) {
				r, err := tp.CommitMerge(ctx, w, target, token, t.version, deferDrain)
				committed = err == nil
				return r, err
			})
			if err != nil {
				stop(i + 1)
				return err
			}
			if committed && deferDrain {
				ds.start(ctx, w, t.version)
			}
		case errors.Is(err, ErrUnreachable):
			log.Warn("merge_wal: worker unreachable, skipping it", "worker", w.InstanceID, "addr", w.GRPCAddr, "err", err)
			t.unavailable = append(t.unavailable, w.InstanceID)
		case errclass.Of(err) == errclass.Gone:
			log.Info("merge_wal: the store is deleted; the task is skipped", "worker", w.InstanceID, "err", err)
			stop(i + 1)
			return errclass.Wrap(errclass.Gone, fmt.Errorf("worker %s (%s): %w", w.InstanceID, w.GRPCAddr, err))
		case errclass.Of(err) == errclass.Halt:
			log.Error("merge_wal: worker found a corrupt object; an operator must look, the other workers go on",
				"worker", w.InstanceID, "addr", w.GRPCAddr, "err", err)
			t.corrupt = append(t.corrupt, fmt.Errorf("worker %s (%s): %w", w.InstanceID, w.GRPCAddr, err))
		case res[i].timedOut:
			log.Warn("merge_wal: worker did not prepare within the worker timeout; the others commit", "worker", w.InstanceID,
				"addr", w.GRPCAddr, "timeout", f.cfg.WorkerTimeout, "err", err)
			late = append(late, w) // its prepare may finish after all: not to be held
			t.failures = append(t.failures, fmt.Errorf("worker %s (%s): merge did not finish within the worker timeout of %s: %w",
				w.InstanceID, w.GRPCAddr, f.cfg.WorkerTimeout, err))
		default:
			log.Warn("merge_wal: worker failed to prepare; the others commit", "worker", w.InstanceID, "addr", w.GRPCAddr, "err", err)
			t.failures = append(t.failures, fmt.Errorf("worker %s (%s): prepare: %w", w.InstanceID, w.GRPCAddr, err))
		}
	}
	stop(len(workers))
	return nil
}

// abort releases the prepares of workers that will not be committed, in
// parallel and best effort: a worker that does not hear it aborts on its own at
// MERGE_PREPARED_TTL, or when the next task of the target prepares.
func (f *FanOut) abort(ctx context.Context, tp twoPhaseCaller, workers []Worker, target registry.Target, token int64, log *slog.Logger) {
	if len(workers) == 0 {
		return
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() {
			if err := tp.AbortMerge(actx, w, target, token); err != nil {
				log.Warn("merge_wal: aborting a prepared merge failed; the worker aborts it at its MERGE_PREPARED_TTL",
					"worker", w.InstanceID, "addr", w.GRPCAddr, "err", err)
			}
		})
	}
	wg.Wait()
}
