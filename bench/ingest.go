package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/scanner"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/table"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	"github.com/tidemark-io/tidemark/pkg/worker/rpc"
	"github.com/tidemark-io/tidemark/tools/mdreport"
)

// IngestConfig sizes the sustained-ingest scenario of issue 16: workers that seal a
// generation every SealEvery while a real master (master.New, as cmd/master builds
// it) scans, sweeps and runs merge_wal tasks, and whether pending generations stay
// bounded.
type IngestConfig struct {
	// Workers each own one shard of one rollout store; every SealEvery each
	// appends RowsPerGeneration rows and seals them into one generation.
	Workers           int
	RowsPerGeneration int
	Row               RowShape
	SealEvery         time.Duration
	// Duration is the measured phase; pending generations are counted every
	// SampleEvery.
	Duration    time.Duration
	SampleEvery time.Duration
	// Latency (+ up to Jitter) is added to every object-store request from the
	// start (ingest, scans and merges alike); at most MaxConcurrent are in flight
	// and Throttle says what the others get.
	Latency, Jitter time.Duration
	MaxConcurrent   int
	Throttle        objstore.ThrottleMode
	// ScanInterval and SweepInterval are the master's STATS_SCAN_INTERVAL and
	// MERGE_WAL_INTERVAL; zero means the master's defaults (scanner.DefaultScanInterval,
	// scanner.DefaultMergeSweepInterval), which is what the scenario is about. Every
	// other master setting is its default.
	ScanInterval, SweepInterval time.Duration
}

// DefaultIngestConfig is issue 16's sustained ingest for the given number of
// workers: a generation of 50 small rows per worker every second for 3 minutes,
// with the store latency of the merge-throughput runs (FanOutThroughputConfigs:
// 20 ms + up to 5 ms per request, 64 in flight, the rest wait) and the master at
// its defaults.
func DefaultIngestConfig(workers int) IngestConfig {
	return IngestConfig{
		Workers: workers, RowsPerGeneration: 50, Row: SmallRow, SealEvery: time.Second,
		Duration: 3 * time.Minute, SampleEvery: time.Second,
		Latency: 20 * time.Millisecond, Jitter: 5 * time.Millisecond, MaxConcurrent: 64, Throttle: objstore.ThrottleWait,
	}
}

// Short master intervals of the second set of ingest runs: at the defaults the
// first scan that can see a pending generation comes 300 s after the start, so a
// 3-minute run measures the scan interval and not the fan-out. With these, merges
// are frequent enough that the fan-out is what bounds pending generations.
const (
	IngestShortScanInterval  = 10 * time.Second
	IngestShortSweepInterval = 5 * time.Second
)

// IngestWorkers are the worker counts of the scenario's runs.
var IngestWorkers = []int{3, 20}

// IngestConfigs are the runs of the scenario: each of workers (IngestWorkers when
// empty) with the master at its defaults, then the same with the short scan and
// sweep intervals (short false leaves those out). d is each run's duration.
func IngestConfigs(d time.Duration, short bool, workers []int) []IngestConfig {
	var out []IngestConfig
	intervals := [][2]time.Duration{{0, 0}}
	if short {
		intervals = append(intervals, [2]time.Duration{IngestShortScanInterval, IngestShortSweepInterval})
	}
	if len(workers) == 0 {
		workers = IngestWorkers
	}
	for _, iv := range intervals {
		for _, n := range workers {
			c := DefaultIngestConfig(n)
			c.Duration, c.ScanInterval, c.SweepInterval = d, iv[0], iv[1]
			out = append(out, c)
		}
	}
	return out
}

// Intervals returns the scan and sweep intervals the master runs with.
func (c IngestConfig) Intervals() (scan, sweep time.Duration) {
	scan, sweep = c.ScanInterval, c.SweepInterval
	if scan <= 0 {
		scan = scanner.DefaultScanInterval
	}
	if sweep <= 0 {
		sweep = scanner.DefaultMergeSweepInterval
	}
	return scan, sweep
}

// IngestSample is the number of pending generations At into the measured phase,
// and Merged, the sum of every shard's merged watermark then: a shard numbers its
// generations one by one, so the sum grows by the generations merged.
type IngestSample struct {
	At      time.Duration
	Pending int
	Merged  uint64
}

// IngestResult is one run of the scenario in one fan-out shape.
type IngestResult struct {
	// Mode is fanout.Serial or fanout.Gather.
	Mode fanout.Shape
	// Samples are the pending generations over the run (every worker's shard, above
	// its merged watermark, read from the bucket without the latency).
	Samples []IngestSample
	// MaxPending is the maximum over the run, FirstMinuteMax over its first
	// minute, MedianPending the median of every sample, SteadyP50 the median of
	// the last third, FinalPending the count right after the ingest stopped.
	// MiddleMax and LastMax are the maxima of the middle and the last third;
	// Bounded is set when LastMax <= 1.1 x MiddleMax + Workers (a growing backlog
	// fails it).
	MaxPending, FirstMinuteMax, MedianPending int
	// MinuteMax is the maximum of each minute of the run (the last may be
	// partial): where a backlog rose.
	MinuteMax               []int
	SteadyP50, FinalPending int
	MiddleMax, LastMax      int
	Bounded                 bool
	// SealToMerged are the times from each generation's seal to the commit of
	// the version that merged it, as the samples found it (watchedStore.observe);
	// Unmerged counts the generations sealed in the measured phase that no
	// sample saw merged.
	SealToMerged Quantiles
	Unmerged     int
	// Sealed counts the generations the workers sealed in the measured phase;
	// Merged = Sealed - FinalPending, the ones merged by its end.
	Sealed, Merged int
	// AppendFailures and SealFailures count failed calls (a failed append's rows
	// may be durable: they are allowed in the table, not required).
	AppendFailures, SealFailures int
	// Tasks counts the merge_wal tasks the master's sweep enqueued and ran;
	// EmptyTasks merged nothing, FailedTasks failed. TaskTimes are their run times
	// (claim to finish), MergedByTasks the generations their stats report.
	Tasks, EmptyTasks, FailedTasks int
	TaskTimes                      Quantiles
	MergedByTasks                  int64
	// DemandByGenerations and DemandByAge count the tasks merges on demand
	// enqueued (scanner.MergeDemand, from the workers' pending records): for
	// MERGE_WAL_MIN_GENERATIONS pending generations, or for an oldest one older
	// than MERGE_MAX_DELAY. The sweep enqueued the rest.
	DemandByGenerations, DemandByAge int
	FirstError                       string
	// Requests are the object-store requests of the measured phase (ingest,
	// scans, merges); PeakInFlight the most in flight at once.
	Requests     int64
	PeakInFlight int
	// Versions is the number of base versions committed by the end of the drain.
	Versions uint64
	Elapsed  time.Duration
	// LoadStart and LoadEnd are /proc/loadavg's 1, 5 and 15 minute averages.
	LoadStart, LoadEnd string
	// Rows is the number of rows in the base table after the drain and the check
	// (every acknowledged row present once, nothing pending).
	Rows int64
}

// MergedPerSecond is the rate of Merged over the measured phase.
func (r IngestResult) MergedPerSecond() float64 { return float64(r.Merged) / r.Elapsed.Seconds() }

// SealedPerSecond is the rate of Sealed over the measured phase.
func (r IngestResult) SealedPerSecond() float64 { return float64(r.Sealed) / r.Elapsed.Seconds() }

// IngestRun is one run with its configuration, as the report lists them.
type IngestRun struct {
	Config IngestConfig
	Result IngestResult
}

const ingestStore = "ingest"

// RunIngest runs the scenario once in fan-out mode (fanout.Serial or
// fanout.Gather): the workers serve their real gRPC WorkerService on
// loopback, and a master built by master.New (static discovery of those workers,
// its scanner, merge sweep, scheduler and FanOut) runs for Duration while the
// workers seal. Afterwards whatever is pending is merged without faults and every
// acknowledged row is checked.
func RunIngest(ctx context.Context, env *Env, cfg IngestConfig, mode fanout.Shape) (IngestResult, error) {
	res := IngestResult{Mode: mode}
	if cfg.Workers < 1 || cfg.SealEvery <= 0 || cfg.Duration <= 0 || cfg.SampleEvery <= 0 {
		return res, fmt.Errorf("ingest: config %+v: workers, seal interval, duration and sample interval must be positive", cfg)
	}
	scan, sweep := cfg.Intervals()
	c, err := newIngestCluster(ctx, env, ingestClusterConfig{Name: "ingest", Workers: cfg.Workers, Mode: mode,
		Scan: cfg.ScanInterval, Sweep: cfg.SweepInterval})
	if err != nil {
		return res, err
	}
	defer c.close()
	cs, err := c.addStore(ctx, ingestStore)
	if err != nil {
		return res, fmt.Errorf("ingest: %w", err)
	}
	c.start(ctx, cfg.faults())
	res.LoadStart = mdreport.ThisMachine().LoadAvg
	env.log().Info("ingest: start", "mode", mode, "workers", cfg.Workers, "duration", cfg.Duration,
		"scan_interval", scan, "sweep_interval", sweep)

	in := newIngest()
	watched := &watchedStore{dir: cs.dir, seals: in.seals}
	start := time.Now()
	ingestCtx, stopIngest := context.WithTimeout(ctx, cfg.Duration)
	defer stopIngest()
	var wg sync.WaitGroup
	for i, s := range cs.handles {
		gen := newRowGen(env.Seed+uint64(i)+1, cfg.Row)
		// Workers seal at evenly spread phases of the interval, as independent
		// processes would, not all in the same instant.
		phase := cfg.SealEvery * time.Duration(i) / time.Duration(cfg.Workers)
		wg.Go(func() { in.worker(ingestCtx, s, gen, cfg, phase) })
	}
	var samplerErr error
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		samplerErr = sample(ingestCtx, c.raw, start, cfg.SampleEvery, watched)
	}()
	wg.Wait()
	<-samplerDone
	res.Elapsed = time.Since(start)
	res.Samples = watched.samples
	if in.err != nil {
		return res, in.err
	}
	if samplerErr != nil {
		return res, samplerErr
	}
	if res.FinalPending, err = watched.final(ctx, c.raw, res.Elapsed); err != nil {
		return res, err
	}
	res.SealToMerged, res.Unmerged = in.seals.result()
	res.LoadEnd = mdreport.ThisMachine().LoadAvg
	res.Requests, res.PeakInFlight = c.faults.TotalRequests(), c.faults.PeakInFlight()
	res.Sealed, res.AppendFailures, res.SealFailures = in.sealed, in.appendFailures, in.sealFailures
	res.Merged = res.Sealed - res.FinalPending
	res.summarize(cfg)

	if err := c.stopMaster(); err != nil {
		return res, fmt.Errorf("ingest: master: %w", err)
	}
	if err := res.readTasks(ctx, c.master.Tasks(), registry.Target{}); err != nil {
		return res, err
	}
	if res.DemandByGenerations, res.DemandByAge, err = demandEnqueues(c.metrics); err != nil {
		return res, err
	}
	if err := c.drain(ctx, cs); err != nil {
		return res, fmt.Errorf("ingest: %w", err)
	}
	if res.Rows, err = verifyBase(ctx, c.raw, cs.dir, in.want, in.maybe); err != nil {
		return res, fmt.Errorf("ingest (%s, %d workers): %w", mode, cfg.Workers, err)
	}
	_, bm, err := baseIDs(ctx, c.raw, cs.dir)
	if err != nil {
		return res, err
	}
	res.Versions = bm.Version - 1 // version 1 is the create
	env.log().Info("ingest: done", "mode", mode, "workers", cfg.Workers, "sealed", res.Sealed, "merged", res.Merged,
		"max_pending", res.MaxPending, "first_minute_max", res.FirstMinuteMax, "median_pending", res.MedianPending,
		"steady_p50", res.SteadyP50, "final_pending", res.FinalPending, "bounded", res.Bounded,
		"seal_to_merged_p50", res.SealToMerged.P50, "seal_to_merged_p99", res.SealToMerged.P99, "unmerged", res.Unmerged,
		"tasks", res.Tasks, "demand_by_generations", res.DemandByGenerations, "demand_by_age", res.DemandByAge, "empty_tasks", res.EmptyTasks, "failed_tasks", res.FailedTasks, "requests", res.Requests)
	return res, nil
}

// faults is the run's latency and concurrency of the object store.
func (c IngestConfig) faults() faultsConfig {
	return faultsConfig{Latency: c.Latency, Jitter: c.Jitter, MaxConcurrent: c.MaxConcurrent, Throttle: c.Throttle}
}

// ingest is the writers' shared record of what was acknowledged in one store.
type ingest struct {
	mu                           sync.Mutex
	want, maybe                  map[string]bool
	seals                        *sealWatch
	sealed                       int
	appendFailures, sealFailures int
	err                          error
}

func newIngest() *ingest {
	return &ingest{want: map[string]bool{}, maybe: map[string]bool{}, seals: newSealWatch()}
}

// worker appends a generation's rows and seals them every cfg.SealEvery, starting
// phase after the start, until ctx ends. A tick missed because the previous
// append and seal took longer is dropped (time.Ticker), as a client that waits for
// its adds would.
func (in *ingest) worker(ctx context.Context, s *store.Store, gen *rowGen, cfg IngestConfig, phase time.Duration) {
	if sleepCtx(ctx, phase) != nil {
		return
	}
	t := time.NewTicker(cfg.SealEvery)
	defer t.Stop()
	for {
		if !in.add(ctx, s, gen, cfg.RowsPerGeneration) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// add appends n new rows to s and, once they are acknowledged, seals them into a
// generation, recording both; false means the rows could not be generated (the
// run's error is set).
func (in *ingest) add(ctx context.Context, s *store.Store, gen *rowGen, n int) bool {
	rec, ids, err := gen.batch(n)
	if err != nil {
		in.mu.Lock()
		in.err = errors.Join(in.err, err)
		in.mu.Unlock()
		return false
	}
	err = s.Append(ctx, rec)
	rec.Release()
	in.mu.Lock()
	into := in.want
	if err != nil {
		// Not acknowledged, yet maybe durable (the WAL entry may have been
		// written before the context ended).
		into = in.maybe
		if ctx.Err() == nil {
			in.appendFailures++
		}
	}
	for _, id := range ids {
		into[id] = true
	}
	in.mu.Unlock()
	if err == nil {
		g, err := s.Seal(ctx)
		in.mu.Lock()
		switch {
		case err != nil && ctx.Err() == nil:
			in.sealFailures++ // the rows stay in the memtable for the next seal
		case err == nil && g != nil:
			in.sealed++
			in.seals.sealed(s.Shard(), g)
		}
		in.mu.Unlock()
	}
	return true
}

// watchedStore is a store the sampler counts: its table directory, the seal
// watch its merged watermarks go to, and the pending generations of each sample.
type watchedStore struct {
	dir     string
	seals   *sealWatch
	samples []IngestSample
	// last is final's count, after the samples.
	last *IngestSample
	// version is the newest base table version a sample read.
	version uint64
}

// final counts the store's pending generations right after the ingest stopped,
// tells its seal watch the watermarks and keeps the count as the last sample,
// at elapsed.
func (w *watchedStore) final(ctx context.Context, raw *objstore.Bucket, elapsed time.Duration) (int, error) {
	n, t, m, err := pendingAndLatest(ctx, raw, w.dir)
	if err != nil {
		return 0, fmt.Errorf("final pending count of %s: %w", w.dir, err)
	}
	w.observe(ctx, t, m)
	w.last = &IngestSample{At: elapsed, Pending: n, Merged: sumWatermarks(m.MergedGenerations)}
	return n, nil
}

// observe tells w's seal watch the watermarks of every version committed since
// the last sample up to m, each at its own commit time (the manifest's
// updated_at, set as the commit is written): a generation counts as merged when
// the version that merged it committed, not when the sampler next looked, which
// was up to a sample interval (and a round of 50 stores) later. A version
// retention pruned meanwhile is skipped: the next one's time stands for it,
// which can only make a wait longer.
func (w *watchedStore) observe(ctx context.Context, t *table.Table, m *table.Manifest) {
	for v := w.version + 1; v < m.Version; v++ {
		if mv, err := t.Load(ctx, v); err == nil {
			w.seals.merged(mv.MergedGenerations, mv.UpdatedAt)
		}
	}
	w.seals.merged(m.MergedGenerations, m.UpdatedAt)
	w.version = max(w.version, m.Version)
}

func sumWatermarks(watermarks map[string]uint64) uint64 {
	var sum uint64
	for _, g := range watermarks {
		sum += g
	}
	return sum
}

// sample counts the pending generations of every store every interval until ctx
// ends, and tells each store's seal watch the merged watermarks of the versions
// committed since its last round, at their commit times (observe). It reads
// raw, the bucket without latency or counters, so the sampling neither slows the
// run nor shows in its request counts. A round that takes longer than every
// drops the ticks it overran (time.Ticker): the samples say when they were taken.
func sample(ctx context.Context, raw *objstore.Bucket, start time.Time, every time.Duration, stores ...*watchedStore) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		for _, w := range stores {
			n, t, m, err := pendingAndLatest(ctx, raw, w.dir)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("count pending generations of %s: %w", w.dir, err)
			}
			w.observe(ctx, t, m)
			w.samples = append(w.samples, IngestSample{At: time.Since(start), Pending: n, Merged: sumWatermarks(m.MergedGenerations)})
		}
	}
}

// summarize derives the maxima, the steady-state median and Bounded from the
// samples.
func (r *IngestResult) summarize(cfg IngestConfig) {
	var all, last []int
	third := r.Elapsed / 3
	for _, s := range r.Samples {
		r.MaxPending = max(r.MaxPending, s.Pending)
		all = append(all, s.Pending)
		if s.At <= time.Minute {
			r.FirstMinuteMax = max(r.FirstMinuteMax, s.Pending)
		}
		// A sample at exactly n minutes closes minute n.
		minute := max(0, int((s.At-1)/time.Minute))
		for len(r.MinuteMax) <= minute {
			r.MinuteMax = append(r.MinuteMax, 0)
		}
		r.MinuteMax[minute] = max(r.MinuteMax[minute], s.Pending)
		switch {
		case s.At >= 2*third:
			r.LastMax = max(r.LastMax, s.Pending)
			last = append(last, s.Pending)
		case s.At >= third:
			r.MiddleMax = max(r.MiddleMax, s.Pending)
		}
	}
	r.MaxPending = max(r.MaxPending, r.FinalPending)
	r.LastMax = max(r.LastMax, r.FinalPending)
	last = append(last, r.FinalPending)
	r.SteadyP50 = medianInt(last)
	r.MedianPending = medianInt(all)
	r.Bounded = float64(r.LastMax) <= 1.1*float64(r.MiddleMax)+float64(cfg.Workers)
}

func medianInt(v []int) int {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// readTasks counts the run's merge_wal tasks of target (zero: of every target) from
// the master's task queue.
func (r *IngestResult) readTasks(ctx context.Context, ts *tasks.Queue, target registry.Target) error {
	all, err := listMergeTasks(ctx, ts, target)
	if err != nil {
		return err
	}
	r.countTasks(all)
	return nil
}

// countTasks counts ts, merge_wal tasks, into r.
func (r *IngestResult) countTasks(ts []tasks.Task) {
	var times durations
	for _, t := range ts {
		r.Tasks++
		if t.State == tasks.StateFailed {
			r.FailedTasks++
			if r.FirstError == "" {
				r.FirstError = t.Error
			}
		}
		// Workers > 0: the fan-out ran and counted (not a skipped or refused task).
		if s := t.Stats; s.Workers > 0 {
			r.MergedByTasks += s.GenerationsMerged
			if s.GenerationsMerged == 0 {
				r.EmptyTasks++
			}
		}
		if d, ok := taskTime(t); ok {
			times = append(times, d)
		}
	}
	r.TaskTimes = times.quantiles()
}

// taskTime is a finished task's run time, claim to finish.
func taskTime(t tasks.Task) (time.Duration, bool) {
	if !t.State.Finished() || t.StartedAt.IsZero() {
		return 0, false
	}
	return t.FinishedAt.Sub(t.StartedAt), true
}

// listMergeTasks returns the merge_wal tasks of target (zero: of every target) in
// the master's task queue.
func listMergeTasks(ctx context.Context, ts *tasks.Queue, target registry.Target) ([]tasks.Task, error) {
	return listTasks(ctx, ts, tasks.ListFilter{Kind: tasks.KindMergeWAL, Target: target})
}

// listTasks returns every task f matches, page after page.
func listTasks(ctx context.Context, ts *tasks.Queue, f tasks.ListFilter) ([]tasks.Task, error) {
	var out []tasks.Task
	f.Limit = tasks.MaxListLimit
	for {
		page, next, err := ts.List(ctx, f)
		if err != nil {
			return nil, fmt.Errorf("list %s tasks: %w", cmp.Or(string(f.Kind), "all"), err)
		}
		out = append(out, page...)
		if next == "" {
			return out, nil
		}
		f.PageToken = next
	}
}

// serveWorkers serves every worker's real gRPC WorkerService on a loopback port and
// returns them as a static discovery list, and a func that stops the servers.
func serveWorkers(workers []*benchWorker) (fanout.StaticDiscovery, func(), error) {
	var discovery fanout.StaticDiscovery
	var stops []func()
	stop := func() {
		for _, s := range stops {
			s()
		}
	}
	for _, wk := range workers {
		svc, err := rpc.NewWorkerService(rpc.WorkerServiceConfig{InstanceID: wk.id, Stores: wk.stores, Merger: wk.merger})
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("worker service of %s: %w", wk.id, err)
		}
		gs, err := rpc.NewGRPCServer(rpc.GRPCConfig{Service: svc})
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("gRPC server of %s: %w", wk.id, err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("listen for %s: %w", wk.id, err)
		}
		go func() { _ = gs.Serve(ln) }()
		stops = append(stops, gs.Stop)
		discovery = append(discovery, fanout.Worker{InstanceID: wk.id, GRPCAddr: ln.Addr().String()})
	}
	return discovery, stop, nil
}

// Issue 31's goals for sustained ingest, as measured in one run.
const (
	IngestGoalMaxPending      = 64
	IngestGoalMedianPending   = 24
	IngestGoalSealToMergedP99 = 15 * time.Second
)

// goals says whether the run met IngestGoal*: "yes", or the ones it missed.
func (r IngestResult) goals() string {
	var missed []string
	if r.MaxPending > IngestGoalMaxPending {
		missed = append(missed, fmt.Sprintf("max %d > %d", r.MaxPending, IngestGoalMaxPending))
	}
	if r.MedianPending > IngestGoalMedianPending {
		missed = append(missed, fmt.Sprintf("median %d > %d", r.MedianPending, IngestGoalMedianPending))
	}
	if r.SealToMerged.N == 0 || r.SealToMerged.P99 > IngestGoalSealToMergedP99 {
		missed = append(missed, fmt.Sprintf("seal to merged p99 %s > %s", r.SealToMerged.P99.Round(time.Second), IngestGoalSealToMergedP99))
	}
	if len(missed) == 0 {
		return "yes"
	}
	return "**no**: " + strings.Join(missed, ", ")
}
