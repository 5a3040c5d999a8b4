package fanout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/dustin/go-humanize/english"

	"github.com/tidemark-io/tidemark/pkg/coord/membership"
	"github.com/tidemark-io/tidemark/pkg/coord/stats"
	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// ErrUnreachable marks a worker call that failed before the worker admitted it (no
// connection could be made): the fan-out skips that worker and goes on.
var ErrUnreachable = errors.New("worker unreachable")

// Worker is one live worker as discovery sees it: its membership record.
type Worker = membership.Worker

// Discovery lists the live workers.
type Discovery interface {
	Workers(ctx context.Context) ([]Worker, error)
}

// MergeResult is what one worker's merge reports.
type MergeResult struct {
	Generations int64
	Rows        int64
	Reclaimed   int64
	// BaseVersion is the base table version the merge committed last (0: none).
	BaseVersion uint64
	// Merged, for a merge of a whole store (the gather shape), maps each shard it
	// merged to the generation the shard is now merged up to.
	Merged map[string]uint64
	// Level0 counts the base table's level-0 fragments after a merge of a whole
	// store (0 from the other shapes: they do not say).
	Level0 int64
}

// Caller calls workers. MergeWal returns an error wrapping ErrUnreachable when the
// worker could not be reached before it admitted the call.
type Caller interface {
	MergeWal(ctx context.Context, w Worker, target registry.Target, fencingToken int64) (MergeResult, error)
}

// AdoptResult is what one adoption reports.
type AdoptResult struct {
	SealedRows  int64
	Generations int64
	Retired     bool
}

// shardAdopter is a Caller that can have a worker adopt the shard of a worker that
// is gone (the GRPCCaller can).
type shardAdopter interface {
	AdoptShard(ctx context.Context, w Worker, target registry.Target, shard string, fencingToken int64) (AdoptResult, error)
}

// ConnRetainer is a Caller that keeps connections: the fan-out and the watch of
// the membership (the master's Run) tell it which workers are live, so it can
// drop the rest.
type ConnRetainer interface {
	Retain(live []Worker)
}

// Shape is a fan-out's shape (MERGE_FANOUT).
type Shape string

// Fan-out shapes.
const (
	// Gather has one worker merge every shard of the store in one commit per pass,
	// then every other worker whose shard it merged drain it, all at once (the
	// default): a task is one commit whatever the number of workers.
	Gather Shape = "gather"
	// Serial calls MergeWal on one worker after another, each preparing and
	// committing in turn (the reference system's shape).
	Serial Shape = "serial"
)

// ParseShape returns the shape named s, or an error naming the shapes there are.
func ParseShape(s string) (Shape, error) {
	switch sh := Shape(s); sh {
	case Gather, Serial:
		return sh, nil
	}
	return "", fmt.Errorf("fan-out shape %q: want %q or %q", s, Gather, Serial)
}

// String is the shape's name.
func (s Shape) String() string { return string(s) }

// Set sets the shape named name (flag.Value).
func (s *Shape) Set(name string) error {
	sh, err := ParseShape(name)
	if err != nil {
		return err
	}
	*s = sh
	return nil
}

// Type names a shape flag's value in --help (pflag.Value).
func (Shape) Type() string { return "shape" }

// DefaultWorkerTimeout is the bound on one worker's merge in a fan-out when
// Config.WorkerTimeout is zero (the master derives it from TASK_TIMEOUT).
const DefaultWorkerTimeout = 10 * time.Minute

// Config configures a FanOut: its settings, and the parts it calls (which the
// master sets).
type Config struct {
	// Shape is MERGE_FANOUT: Gather (also when empty; it needs a Caller that can
	// merge a store, as the GRPCCaller can, and a task whose merging worker cannot
	// falls back to Serial) or Serial.
	Shape Shape
	// WorkerTimeout bounds one worker's merge (DefaultWorkerTimeout when zero;
	// the master derives it from TASK_TIMEOUT): a stuck worker fails the task
	// with a message naming it instead of holding the target forever.
	WorkerTimeout time.Duration

	// Discovery lists the workers and Caller calls them. Required.
	Discovery Discovery
	Caller    Caller
	// OnWorkerDone, if set, observes each worker's merge call, its duration and
	// outcome: a MergeWal, or a gather's MergeStore.
	OnWorkerDone func(w Worker, d time.Duration, err error)
	// Row reads a target's stats row, and Orphans names its orphaned shards;
	// with both set (and a Caller that adopts), the fan-out has each orphaned
	// shard adopted before the live workers merge.
	Row     func(ctx context.Context, target registry.Target) (stats.Row, error)
	Orphans *Orphans
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
}

// FanOut runs merge_wal tasks. Commits of one target never overlap: one worker
// commits the whole store (gather), or the workers commit one after another, in
// discovery's order (serial).
type FanOut struct {
	cfg Config
}

// New returns the fan-out of cfg.
func New(cfg Config) *FanOut {
	if cfg.WorkerTimeout <= 0 {
		cfg.WorkerTimeout = DefaultWorkerTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &FanOut{cfg: cfg}
}

// ErrNoLiveWorkers means discovery lists no worker to merge on.
var ErrNoLiveWorkers = errors.New("no live workers")

// Ready implements Gate: merge_wal tasks are claimed only while some worker is
// listed, so a merge queued while every worker restarts waits for them.
func (f *FanOut) Ready(ctx context.Context) error { return anyWorker(ctx, f.cfg.Discovery) }

// anyWorker returns nil when discovery lists a worker, ErrNoLiveWorkers when it
// lists none.
func anyWorker(ctx context.Context, d Discovery) error {
	workers, err := d.Workers(ctx)
	if err != nil {
		return fmt.Errorf("discover workers: %w", err)
	}
	if len(workers) == 0 {
		return ErrNoLiveWorkers
	}
	return nil
}

// Run implements Runner for merge_wal. Its error's class (package errclass) tells
// the scheduler what became of the task: Gone (a worker answered that the store is
// deleted) skips it, Halt (a worker found a corrupt object) fails it and cools the
// target down, anything else fails it for the next sweep to retry.
func (f *FanOut) Run(ctx context.Context, c *tasks.Claim) (tasks.Report, error) {
	target := c.Task.Target
	workers, err := f.cfg.Discovery.Workers(ctx)
	if err != nil {
		return tasks.Report{}, fmt.Errorf("discover workers: %w", err)
	}
	if r, ok := f.cfg.Caller.(ConnRetainer); ok {
		r.Retain(workers)
	}
	if len(workers) == 0 {
		return tasks.Report{}, ErrNoLiveWorkers // they all left between Ready and the claim
	}
	log := f.cfg.Logger.With("task", c.Task.ID, "target", target, "fencing_token", c.FencingToken)
	t := &tally{total: len(workers)}
	// Adoptions first: the merges below may stop at a worker's error, and a shard
	// whose worker is gone must not wait for every live worker to answer well. A
	// worker that could not be reached for an adoption is not called again.
	adopted, adoptErrs, unreachable := f.adopt(ctx, c, workers, log)
	var live []Worker
	for _, w := range workers {
		if unreachable[w.InstanceID] {
			t.unavailable = append(t.unavailable, w.InstanceID)
			continue
		}
		live = append(live, w)
	}
	gc, canGather := f.cfg.Caller.(gatherCaller)
	if canGather && (f.cfg.Shape == Gather || f.cfg.Shape == "") {
		err = f.gather(ctx, c, gc, live, t, log)
		if errors.Is(err, errNoGather) {
			log.Warn("merge_wal: a worker cannot merge a whole store (an older version); this task merges on each worker in turn", "err", err)
			err = f.serial(ctx, c, live, t, log)
		}
	} else {
		err = f.serial(ctx, c, live, t, log)
	}
	if err != nil {
		return tasks.Report{}, err
	}
	report := tasks.Report{Stats: tasks.Stats{
		Workers:           int64(len(workers)),
		WorkersMerged:     int64(t.ok),
		WorkersSkipped:    int64(len(t.unavailable)),
		WorkersFailed:     int64(len(t.corrupt) + len(t.failures)),
		GenerationsMerged: t.merged,
		RowsMerged:        t.rows,
		ShardsAdopted:     int64(adopted),
		BaseVersion:       t.version,
		Level0Fragments:   t.level0,
	}}
	s := report.Stats
	report.Detail = fmt.Sprintf("merged %s across %d/%s", count(s.GenerationsMerged, "generation"), s.WorkersMerged, count(s.Workers, "worker"))
	failures := t.failures
	if adopted > 0 || len(adoptErrs) > 0 {
		report.Detail += fmt.Sprintf("; adopted %s", count(s.ShardsAdopted, "orphaned shard"))
		failures = append(failures, adoptErrs...)
	}
	if len(t.corrupt) > 0 {
		// Halt: the errors name the objects, and the target cools down.
		failures = append(failures, errclass.Wrap(errclass.Halt, errors.Join(t.corrupt...)))
	}
	if len(t.unavailable) > 0 {
		failures = append(failures, fmt.Errorf("unavailable: %s", strings.Join(t.unavailable, ", ")))
	}
	if len(failures) > 0 {
		return report, fmt.Errorf("%s; %w", report.Detail, errors.Join(failures...))
	}
	return report, nil
}

// tally is what a fan-out's worker calls came to.
type tally struct {
	total       int // workers discovery listed
	ok          int
	merged      int64 // generations
	rows        int64
	version     uint64 // the base table version the latest commit created
	level0      int64  // level-0 fragments after it (gather only)
	unavailable []string
	corrupt     []error
	failures    []error // workers skipped for an error that did not stop the task
}

// serial calls MergeWal on each worker in turn.
func (f *FanOut) serial(ctx context.Context, c *tasks.Claim, workers []Worker, t *tally, log *slog.Logger) error {
	for _, w := range workers {
		err := f.call(ctx, w, "merge", t, log, func(ctx context.Context) (MergeResult, error) {
			return f.cfg.Caller.MergeWal(ctx, w, c.Task.Target, c.FencingToken)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// call makes one worker's merge call (fn, bounded by the worker timeout) and
// applies the serial fan-out's rules to its outcome: an unreachable worker is
// skipped, a corrupt object is recorded and the next worker goes on, a store
// deleted skips the task, and any other error (a timeout included) stops the
// fan-out with an error naming the worker. what names the call in messages.
func (f *FanOut) call(ctx context.Context, w Worker, what string, t *tally, log *slog.Logger, fn func(context.Context) (MergeResult, error)) error {
	r, timedOut, d, err := f.bounded(ctx, w, fn)
	if f.cfg.OnWorkerDone != nil {
		f.cfg.OnWorkerDone(w, d, err)
	}
	switch {
	case errors.Is(err, ErrUnreachable):
		log.Warn("merge_wal: worker unreachable, skipping it", "worker", w.InstanceID, "addr", w.GRPCAddr, "err", err)
		t.unavailable = append(t.unavailable, w.InstanceID)
		return nil
	case timedOut:
		// Said in words: a bare "DeadlineExceeded" reads like the master's own
		// deadline, when it is this worker that did not answer in time.
		log.Warn("merge_wal: worker did not answer within the worker timeout", "worker", w.InstanceID, "addr", w.GRPCAddr, "timeout", f.cfg.WorkerTimeout, "err", err)
		return fmt.Errorf("worker %s (%s): %s did not finish within the worker timeout of %s: %w (fan-out stopped after %d/%s)",
			w.InstanceID, w.GRPCAddr, what, f.cfg.WorkerTimeout, err, t.ok, count(int64(t.total), "worker"))
	case err != nil && errclass.Of(err) == errclass.Gone:
		// Every other worker would answer the same: the store was deleted.
		log.Info("merge_wal: the store is deleted; the task is skipped", "worker", w.InstanceID, "err", err)
		return errclass.Wrap(errclass.Gone, fmt.Errorf("worker %s (%s): %w", w.InstanceID, w.GRPCAddr, err))
	case err != nil && errclass.Of(err) == errclass.Halt:
		// The worker answered, so it is not merging any more, and what it found
		// corrupt stops only its own merge: the next worker merges its shard into
		// the base table as usual (a corrupt base manifest stops each of them
		// the same way, and each says so).
		log.Error("merge_wal: worker found a corrupt object; an operator must look, the other workers go on",
			"worker", w.InstanceID, "addr", w.GRPCAddr, "err", err)
		t.corrupt = append(t.corrupt, fmt.Errorf("worker %s (%s): %w", w.InstanceID, w.GRPCAddr, err))
		return nil
	case err != nil:
		return fmt.Errorf("worker %s (%s): %w (fan-out stopped after %d/%s)", w.InstanceID, w.GRPCAddr, err, t.ok, count(int64(t.total), "worker"))
	}
	t.ok++
	t.merged += r.Generations
	t.rows += r.Rows
	t.version = max(t.version, r.BaseVersion)
	log.Info("merge_wal: worker merged", "worker", w.InstanceID, "generations", r.Generations, "rows", r.Rows, "reclaimed", r.Reclaimed)
	return nil
}

// bounded runs fn under the worker timeout and reports whether it was that
// timeout (not the task's own deadline) that ended it, and how long fn took.
func (f *FanOut) bounded(ctx context.Context, w Worker, fn func(context.Context) (MergeResult, error)) (r MergeResult, timedOut bool, d time.Duration, err error) {
	wctx, cancel := context.WithTimeout(ctx, f.cfg.WorkerTimeout)
	start := time.Now()
	r, err = fn(wctx)
	// Read before cancel, which would turn the worker context's error into Canceled.
	// The clock is checked too: the worker's side of the call can end it (RST_STREAM,
	// code DeadlineExceeded) a moment before this side's timer has marked wctx done.
	// The task's own deadline, when it comes first, is not the worker's timeout.
	deadline, _ := wctx.Deadline()
	taskDeadline, taskBounded := ctx.Deadline()
	timedOut = err != nil && ctx.Err() == nil &&
		(!taskBounded || taskDeadline.After(deadline)) &&
		(errors.Is(wctx.Err(), context.DeadlineExceeded) || !time.Now().Before(deadline))
	cancel()
	return r, timedOut, time.Since(start), err
}

// adopt has a live worker adopt each orphaned shard of the claim's target, under
// the claim's fencing token: the target lock that keeps merges of the store one at
// a time covers adoptions too. It returns how many were adopted and the failures
// (a failed adoption is tried again by the next merge_wal of the target).
func (f *FanOut) adopt(ctx context.Context, c *tasks.Claim, workers []Worker, log *slog.Logger) (adopted int, errs []error, unreachable map[string]bool) {
	unreachable = map[string]bool{}
	ad, ok := f.cfg.Caller.(shardAdopter)
	if !ok || f.cfg.Row == nil || f.cfg.Orphans == nil {
		return 0, nil, unreachable
	}
	row, err := f.cfg.Row(ctx, c.Task.Target)
	if err != nil {
		if errors.Is(err, stats.ErrRowNotFound) {
			return 0, nil, unreachable // not scanned yet: nothing known to adopt
		}
		return 0, []error{fmt.Errorf("orphaned shards: %w", err)}, unreachable
	}
	for _, shard := range f.cfg.Orphans.Of(row, workers) {
		var last error
		for _, w := range ringFrom(shard, workers) {
			if unreachable[w.InstanceID] {
				continue
			}
			log.Warn("merge_wal: shard orphaned (its worker is gone); having it adopted", "shard", shard, "adopter", w.InstanceID)
			wctx, cancel := context.WithTimeout(ctx, f.cfg.WorkerTimeout)
			r, err := ad.AdoptShard(wctx, w, c.Task.Target, shard, c.FencingToken)
			cancel()
			if errors.Is(err, ErrUnreachable) {
				// Gone since discovery listed it (a rollout): the next one adopts.
				log.Warn("merge_wal: adopter unreachable, asking the next worker", "shard", shard, "adopter", w.InstanceID, "err", err)
				unreachable[w.InstanceID] = true
				last = fmt.Errorf("adopt shard %s: worker %s (%s): %w", shard, w.InstanceID, w.GRPCAddr, err)
				continue
			}
			last = nil
			if err != nil {
				log.Warn("merge_wal: adoption failed", "shard", shard, "adopter", w.InstanceID, "err", err)
				errs = append(errs, fmt.Errorf("adopt shard %s on worker %s (%s): %w", shard, w.InstanceID, w.GRPCAddr, err))
				break
			}
			adopted++
			log.Info("merge_wal: shard adopted", "shard", shard, "adopter", w.InstanceID,
				"sealed_rows", r.SealedRows, "generations", r.Generations, "retired", r.Retired)
			break
		}
		if last != nil {
			errs = append(errs, last)
		}
	}
	return adopted, errs, unreachable
}

// count is n and noun, plural unless n is 1: "1 generation", "0 generations". For
// a fraction ("2/3 workers") n is the whole.
func count(n int64, noun string) string { return english.Plural(int(n), noun, noun+"s") }
