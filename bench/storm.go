package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/tidemark-io/tidemark/pkg/master"
	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/table"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	"github.com/tidemark-io/tidemark/pkg/worker/rpc"
	"github.com/tidemark-io/tidemark/testutil/faultproxy"
)

// StormShape is how the shards of one store get merged in the commit-storm scenario.
type StormShape string

const (
	// OldShapePerWorkerTimers is the reference system's shape, which exists only in
	// this package: every worker merges its own shard on its own timer, all at the
	// same moment, so N workers race to commit versions of one base table. A worker
	// whose merge failed tries again at its next tick.
	OldShapePerWorkerTimers StormShape = "old: each worker merges on its own timer"
	// NewShapeSerialFanOut is Tidemark's: one deduplicated merge_wal task in etcd,
	// claimed by the master's Scheduler, whose FanOut calls every worker's gRPC
	// WorkerService.MergeWal one after another.
	NewShapeSerialFanOut StormShape = "new: master task, serial fan-out"
	// NewShapeGatherFanOut is the same task with the master's default fan-out
	// (MERGE_FANOUT=gather): one worker's MergeStore merges every shard in one
	// commit, then the others' DrainMerged at once.
	NewShapeGatherFanOut StormShape = "new: master task, gather fan-out"
)

// StormConfig sizes the commit-storm scenario.
type StormConfig struct {
	// Workers each own one shard of the store, with GenerationsPerWorker pending
	// generations of RowsPerGeneration rows.
	Workers              int
	GenerationsPerWorker int
	RowsPerGeneration    int
	Row                  RowShape
	// Latency (+ up to Jitter) is added to every object-store request once the
	// backlog is built; at most MaxConcurrent requests are in flight, and Throttle
	// says what the others get: objstore.ThrottleReject refuses them at once with
	// objstore.ErrThrottled, as a real store's 503 SlowDown does (the table and the
	// merger send them again after a backoff); objstore.ThrottleWait queues them.
	Latency, Jitter time.Duration
	MaxConcurrent   int
	Throttle        objstore.ThrottleMode
	// RetryTimeout is the base table's optimistic-commit retry timeout
	// (table.WithRetryTimeout; production: 30 s).
	RetryTimeout time.Duration
	// RetryInterval is when a failed merge is tried again: the old shape's next
	// timer tick, the new shape's next merge sweep.
	RetryInterval time.Duration
	// Deadline bounds the measured phase; whatever is left is reported as not
	// drained (and merged afterwards, without faults, so the rows can be checked).
	Deadline time.Duration
	// S3URL, if set, runs the storm on a real S3-compatible store instead of
	// mem://: the bucket of this s3:// URL (DATA_URL form, credentials from the
	// environment), behind a fault proxy that adds Latency and Jitter and answers
	// what is over MaxConcurrent with S3's 503 SlowDown (Throttle must be
	// ThrottleReject). Request counts are then the proxy's: HTTP requests,
	// the SDK's own resends included.
	S3URL string
}

// DefaultStormConfig is the commit storm of the reference system, with the issue's
// numbers (BENCHMARKS.md explains each): 20 workers, 50 ms per request, a store that
// serves 8 requests at once and refuses the rest (503 SlowDown), the 30 s commit
// retry timeout and a worker merge timer of 30 s; each worker has 32 pending
// generations (four passes at the MERGE_MAX_GENERATIONS of 8 this scenario was
// written for; one pass at today's default of 256).
func DefaultStormConfig() StormConfig {
	return StormConfig{
		Workers: 20, GenerationsPerWorker: 32, RowsPerGeneration: 25, Row: SmallRow,
		Latency: 50 * time.Millisecond, Jitter: 10 * time.Millisecond, MaxConcurrent: 8, Throttle: objstore.ThrottleReject,
		RetryTimeout: 30 * time.Second, RetryInterval: 30 * time.Second, Deadline: 8 * time.Minute,
	}
}

// FanOutThroughputConfigs are issue 16's merge-throughput runs of the fan-out
// shapes, without the storm's throttling: 4 workers, 20 ms (+ up to 5 ms) per
// request, 64 requests in flight; 1,000 tiny generations (250 per worker, 10 rows
// each), and 8 large ones (2 per worker, 20,000 rows each).
func FanOutThroughputConfigs() []StormConfig {
	base := StormConfig{
		Workers: 4, Row: SmallRow, Latency: 20 * time.Millisecond, Jitter: 5 * time.Millisecond, MaxConcurrent: 64,
		Throttle: objstore.ThrottleWait, RetryTimeout: 30 * time.Second, RetryInterval: 5 * time.Second, Deadline: 5 * time.Minute,
	}
	tiny, large := base, base
	tiny.GenerationsPerWorker, tiny.RowsPerGeneration = 250, 10
	large.GenerationsPerWorker, large.RowsPerGeneration = 2, 20000
	return []StormConfig{tiny, large}
}

// FanOutThroughput is one fan-out shape's drain of a FanOutThroughputConfigs backlog.
type FanOutThroughput struct {
	Config StormConfig
	Result StormResult
}

// GenerationsPerSecond and RowsPerSecond are the drain's rates.
func (f FanOutThroughput) GenerationsPerSecond() float64 {
	return float64(f.Config.Workers*f.Config.GenerationsPerWorker) / f.Result.Elapsed.Seconds()
}

func (f FanOutThroughput) RowsPerSecond() float64 {
	return float64(f.Config.Workers*f.Config.GenerationsPerWorker*f.Config.RowsPerGeneration) / f.Result.Elapsed.Seconds()
}

// RequestRate is the most requests per second the storm's bucket serves: at most
// MaxConcurrent in flight, each holding its slot for the mean latency (Latency plus
// half the Jitter, which is drawn uniformly from [0, Jitter)). A refused request
// holds no slot: it is answered at once.
func (c StormConfig) RequestRate() float64 {
	mean := c.Latency + c.Jitter/2
	if mean <= 0 || c.MaxConcurrent <= 0 {
		return 0
	}
	return float64(c.MaxConcurrent) / mean.Seconds()
}

// ScaledStormConfig is DefaultStormConfig with every time (latency, jitter, retry
// timeout, retry interval) multiplied by f, which keeps their ratios: how many
// commit attempts fit in a retry timeout stays the same.
func ScaledStormConfig(f float64) StormConfig {
	c := DefaultStormConfig()
	scale := func(d time.Duration) time.Duration { return time.Duration(float64(d) * f) }
	c.Latency, c.Jitter = scale(c.Latency), scale(c.Jitter)
	c.RetryTimeout, c.RetryInterval = scale(c.RetryTimeout), scale(c.RetryInterval)
	return c
}

// StormResult is one shape's outcome.
type StormResult struct {
	Shape StormShape
	// MergesOK and MergesFailed count worker merges (a worker's Merge call, or one
	// worker call of the fan-out); TooManyWriters counts the failures that ran out
	// of commit retries ("too many concurrent writers").
	MergesOK, MergesFailed, TooManyWriters int
	// ThrottledFailures counts the failed merges whose error was a request the
	// store kept refusing (ErrThrottled after its retries), not a lost commit race.
	ThrottledFailures int
	FirstError        string
	// MergeTimes are the durations of the worker merges (failed ones included).
	MergeTimes Quantiles
	// Tasks is the number of merge_wal tasks the new shape ran.
	Tasks int
	// Drained is set when no generation was pending at the end of the measured
	// phase; Elapsed is the time until then.
	Drained bool
	Elapsed time.Duration
	// Requests are the object-store requests of the measured phase; PutIfAbsent are
	// the conditional writes among them (every commit attempt is one).
	Requests, PutIfAbsent int64
	// Refused is how many requests the store refused (ThrottleReject), each sent
	// again after a backoff.
	Refused      int64
	PeakInFlight int
	// Versions is the number of base versions committed.
	Versions uint64
	// Rows is the number of rows found in the base table, each once, after the
	// check (every acknowledged row present, none twice, nothing pending).
	Rows int64
}

// Served is how many requests the store served: Requests minus the Refused, which
// it answered at once without a slot.
func (r StormResult) Served() int64 { return r.Requests - r.Refused }

func (r *StormResult) record(err error, d time.Duration, times *durations) {
	*times = append(*times, d)
	if err == nil {
		r.MergesOK++
		return
	}
	r.MergesFailed++
	// Through gRPC the error is a status message, so match its text as well.
	switch {
	case errors.Is(err, table.ErrTooManyWriters) || strings.Contains(err.Error(), table.ErrTooManyWriters.Error()):
		r.TooManyWriters++
	case errors.Is(err, objstore.ErrThrottled) || strings.Contains(err.Error(), objstore.ErrThrottled.Error()):
		r.ThrottledFailures++
	}
	if r.FirstError == "" {
		r.FirstError = err.Error()
	}
}

// defaultMergeConfig is what cmd/worker's flags default to (merge.Config's zero caps
// mean "no cap").
func defaultMergeConfig() merge.Config {
	return merge.Config{MaxGenerations: merge.DefaultMaxGenerations, MaxBytes: merge.DefaultMaxBytes}
}

const stormStore = "storm"

type stormWorld struct {
	raw, bucket *objstore.Bucket
	faults      *objstore.Faults // mem:// runs
	s3          *s3Storm         // S3URL runs
	log         *slog.Logger
	workers     []*benchWorker
	stores      []*store.Store
	releases    []store.Release
	dir         string
	want        map[string]bool
}

func (w *stormWorld) close() {
	for _, r := range w.releases {
		r()
	}
	for _, wk := range w.workers {
		wk.close()
	}
	if w.s3 != nil {
		if err := w.s3.close(context.Background()); err != nil {
			w.log.Warn("storm: objects left in the bucket", "err", err)
		}
	}
}

// newStormWorld builds the backlog, without faults: one rollout store, each worker's
// shard holding its pending generations.
func newStormWorld(ctx context.Context, env *Env, cfg StormConfig) (*stormWorld, error) {
	w := &stormWorld{want: map[string]bool{}, log: env.log()}
	if cfg.S3URL != "" {
		if cfg.Throttle != objstore.ThrottleReject {
			return nil, errors.New("storm on S3: the fault proxy refuses what is over MaxConcurrent (ThrottleReject); it cannot queue")
		}
		s3, err := openS3Storm(ctx, cfg.S3URL, env.Seed)
		if err != nil {
			return nil, err
		}
		w.raw, w.bucket, w.s3 = s3.raw, s3.proxied, s3
	} else {
		raw, faulty, f, err := openMem(ctx, env.Seed)
		if err != nil {
			return nil, err
		}
		w.raw, w.bucket, w.faults = raw, faulty, f
	}
	faulty := w.bucket
	sc := store.Config{TableOptions: []table.Option{table.WithRetryTimeout(cfg.RetryTimeout)}}
	for i := range cfg.Workers {
		w.workers = append(w.workers, newWorker(faulty, fmt.Sprintf("worker-%02d", i), sc, defaultMergeConfig()))
	}
	e, err := w.workers[0].stores.Create(ctx, registry.Entry{Kind: registry.KindRollout, Name: stormStore})
	if err != nil {
		w.close()
		return nil, err
	}
	w.dir = e.URI
	gen := newRowGen(env.Seed, cfg.Row)
	for _, wk := range w.workers {
		s, rel, err := wk.stores.Open(ctx, registry.KindRollout, stormStore)
		if err != nil {
			w.close()
			return nil, err
		}
		w.stores, w.releases = append(w.stores, s), append(w.releases, rel)
		for range cfg.GenerationsPerWorker {
			rec, ids, err := gen.batch(cfg.RowsPerGeneration)
			if err != nil {
				w.close()
				return nil, err
			}
			err = s.Append(ctx, rec)
			rec.Release()
			if err == nil {
				_, err = s.Seal(ctx)
			}
			if err != nil {
				w.close()
				return nil, fmt.Errorf("storm backlog of %s: %w", wk.id, err)
			}
			for _, id := range ids {
				w.want[id] = true
			}
		}
	}
	return w, nil
}

// RunStorm builds the backlog and drains it in the given shape.
func RunStorm(ctx context.Context, env *Env, cfg StormConfig, shape StormShape) (StormResult, error) {
	res := StormResult{Shape: shape}
	w, err := newStormWorld(ctx, env, cfg)
	if err != nil {
		return res, err
	}
	defer w.close()
	env.log().Info("storm: backlog built", "shape", string(shape), "workers", cfg.Workers,
		"generations", cfg.Workers*cfg.GenerationsPerWorker, "rows", len(w.want))

	if w.s3 != nil {
		w.s3.inject(cfg)
	} else {
		w.faults.SetLatency(cfg.Latency, cfg.Jitter)
		w.faults.SetMaxConcurrent(cfg.MaxConcurrent, cfg.Throttle)
		w.faults.ResetCounters()
	}
	runCtx, cancel := context.WithTimeout(ctx, cfg.Deadline+2*cfg.RetryTimeout)
	defer cancel()
	switch shape {
	case OldShapePerWorkerTimers:
		w.runPerWorkerTimers(runCtx, cfg, &res)
	case NewShapeSerialFanOut:
		if err := w.runFanOut(runCtx, env, cfg, fanout.Serial, &res); err != nil {
			return res, err
		}
	case NewShapeGatherFanOut:
		if err := w.runFanOut(runCtx, env, cfg, fanout.Gather, &res); err != nil {
			return res, err
		}
	default:
		return res, fmt.Errorf("storm: unknown shape %q", shape)
	}
	var byOp any
	if w.s3 != nil {
		c := w.s3.proxy.Counts()
		byOp = c
		res.Requests, res.PutIfAbsent, res.PeakInFlight, res.Refused = c.Requests, c.ConditionalWrites, c.PeakInFlight, c.Throttled
		w.s3.proxy.Set(faultproxy.Faults{})
	} else {
		byOp = w.faults.RequestCounts()
		res.Requests = w.faults.TotalRequests()
		res.PutIfAbsent = w.faults.Requests(objstore.OpPutIfAbsent)
		res.PeakInFlight = w.faults.PeakInFlight()
		res.Refused = w.faults.Throttled()
		w.faults.Clear()
	}

	pending, err := pendingGenerations(ctx, w.raw, w.dir)
	if err != nil {
		return res, err
	}
	res.Drained = pending == 0
	// Whatever the shape left is merged now, serially and without faults, so the
	// check below holds every shape to the same standard: nothing lost.
	for i, wk := range w.workers {
		if _, err := wk.merger.Merge(ctx, w.stores[i], true); err != nil {
			return res, fmt.Errorf("storm: finishing the drain of %s: %w", wk.id, err)
		}
	}
	if res.Rows, err = verifyBase(ctx, w.raw, w.dir, w.want, nil); err != nil {
		return res, fmt.Errorf("storm (%s): %w", shape, err)
	}
	_, m, err := baseIDs(ctx, w.raw, w.dir)
	if err != nil {
		return res, err
	}
	res.Versions = m.Version - 1 // version 1 is the create
	env.log().Info("storm: done", "shape", string(shape), "drained", res.Drained, "elapsed", res.Elapsed.Round(time.Millisecond),
		"merges_ok", res.MergesOK, "merges_failed", res.MergesFailed, "too_many_writers", res.TooManyWriters, "requests", res.Requests,
		"requests_by_op", fmt.Sprintf("%+v", byOp))
	return res, nil
}

// runPerWorkerTimers is OldShapePerWorkerTimers: every worker's timer fires at the
// same moment and each merges its own shard; a worker whose merge failed waits for
// its next tick.
func (w *stormWorld) runPerWorkerTimers(ctx context.Context, cfg StormConfig, res *StormResult) {
	start := time.Now()
	deadline := start.Add(cfg.Deadline)
	var mu sync.Mutex
	var wg sync.WaitGroup
	var times durations
	for i, wk := range w.workers {
		s := w.stores[i]
		wg.Go(func() {
			for {
				t0 := time.Now()
				_, err := wk.merger.Merge(ctx, s, true)
				mu.Lock()
				res.record(err, time.Since(t0), &times)
				mu.Unlock()
				if err == nil || ctx.Err() != nil || time.Until(deadline) < cfg.RetryInterval {
					return
				}
				if sleepCtx(ctx, cfg.RetryInterval) != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.MergeTimes = times.quantiles()
}

// runFanOut is NewShapeSerialFanOut or NewShapeGatherFanOut (mode): every worker
// serves its real gRPC WorkerService on loopback; one merge_wal task is enqueued in
// etcd and the master's Scheduler runs it with the FanOut runner in that mode. A
// failed task is enqueued again after RetryInterval (the next merge sweep would).
func (w *stormWorld) runFanOut(ctx context.Context, env *Env, cfg StormConfig, mode fanout.Shape, res *StormResult) error {
	var discovery fanout.StaticDiscovery
	for _, wk := range w.workers {
		svc, err := rpc.NewWorkerService(rpc.WorkerServiceConfig{InstanceID: wk.id, Stores: wk.stores, Merger: wk.merger})
		if err != nil {
			return err
		}
		gs, err := rpc.NewGRPCServer(rpc.GRPCConfig{Service: svc})
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		go func() { _ = gs.Serve(ln) }()
		defer gs.Stop()
		discovery = append(discovery, fanout.Worker{InstanceID: wk.id, GRPCAddr: ln.Addr().String()})
	}
	caller := fanout.NewGRPCCaller(fanout.GRPCCallerConfig{})
	defer caller.Close()
	var mu sync.Mutex
	var times durations
	fan := fanout.New(fanout.Config{Discovery: discovery, Caller: caller, Shape: mode, WorkerTimeout: cfg.Deadline, Logger: quiet,
		OnWorkerDone: func(_ fanout.Worker, d time.Duration, err error) {
			mu.Lock()
			defer mu.Unlock()
			res.record(err, d, &times)
		}})
	sess, err := concurrency.NewSession(env.Etcd, concurrency.WithTTL(10))
	if err != nil {
		return fmt.Errorf("storm: master session: %w", err)
	}
	defer sess.Close()
	ts := tasks.New(env.Etcd, fmt.Sprintf("/bench/storm-%d", time.Now().UnixNano()),
		tasks.WithLogger(quiet), tasks.WithHolder("bench-master"))
	sched := master.NewScheduler(master.SchedulerConfig{
		Tasks: ts, Lease: sess.Lease, PollInterval: 100 * time.Millisecond, TaskTimeout: cfg.Deadline, Logger: quiet,
		Runners: map[tasks.Kind]master.Runner{tasks.KindMergeWAL: fan}, MergeConcurrency: 1,
	})
	schedCtx, stop := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() { defer close(stopped); sched.Run(schedCtx, 10*time.Second) }()
	defer func() { stop(); <-stopped }()

	start := time.Now()
	deadline := start.Add(cfg.Deadline)
	for {
		task, _, err := ts.Enqueue(ctx, tasks.KindMergeWAL, registry.NewTarget(registry.KindRollout, stormStore))
		if err != nil {
			return fmt.Errorf("storm: enqueue: %w", err)
		}
		sched.Wake()
		res.Tasks++
		t, err := waitFinished(ctx, ts, task.ID)
		if err != nil {
			if ctx.Err() != nil { // the measured phase is over: reported as not drained
				if res.FirstError == "" {
					res.FirstError = err.Error()
				}
				break
			}
			return err
		}
		if t.State == tasks.StateDone {
			break
		}
		if res.FirstError == "" {
			res.FirstError = t.Error
		}
		if time.Until(deadline) < cfg.RetryInterval || sleepCtx(ctx, cfg.RetryInterval) != nil {
			break
		}
	}
	res.Elapsed = time.Since(start)
	mu.Lock()
	res.MergeTimes = times.quantiles()
	mu.Unlock()
	return nil
}

// waitFinished polls the task until it is done or failed.
func waitFinished(ctx context.Context, ts *tasks.Queue, id string) (tasks.Task, error) {
	for {
		t, err := ts.Get(ctx, id)
		if err != nil {
			return t, fmt.Errorf("task %s: %w", id, err)
		}
		if t.State.Finished() {
			return t, nil
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return t, fmt.Errorf("task %s still %s: %w", id, t.State, err)
		}
	}
}

// label names the result's row: its shape.
func (r StormResult) label() string { return string(r.Shape) }
