package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/scanner"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	"github.com/tidemark-io/tidemark/tools/mdreport"
)

// SkewConfig sizes issue 31's skewed ingest: the workers of a sustained-ingest
// run write one hot store as RunIngest does, and QuietStores quiet stores share
// QuietShare of all rows between them, each getting an add every QuietEvery
// through a worker chosen at random.
type SkewConfig struct {
	// Ingest is the hot store's ingest (workers, rows, seal interval, duration,
	// sampling, object-store latency, the master's intervals), as in RunIngest.
	Ingest IngestConfig
	// QuietStores are the quiet stores; each gets QuietRows() rows every
	// QuietEvery (the first at a phase spread over the interval), added through
	// one worker and sealed there at once: one generation per add, as that
	// worker's next flush would seal them.
	QuietStores int
	QuietEvery  time.Duration
	// QuietShare is the quiet stores' share of all rows (0.1: the hot store
	// takes 90%).
	QuietShare float64
}

// DefaultSkewConfig is issue 31's skewed ingest: the 20 workers of the sustained
// ingest (DefaultIngestConfig, the master at its defaults) on one hot store with
// 90% of the rows, and 50 quiet stores with an add of a few rows every 5 s each,
// for d.
func DefaultSkewConfig(d time.Duration) SkewConfig {
	in := DefaultIngestConfig(20)
	in.Duration = d
	return SkewConfig{Ingest: in, QuietStores: 50, QuietEvery: 5 * time.Second, QuietShare: 0.1}
}

// QuietRows is the rows of one quiet add: the quiet stores' share of the rows the
// hot store's workers write per QuietEvery, over the quiet stores (at least 1).
func (c SkewConfig) QuietRows() int {
	hotPerSecond := float64(c.Ingest.Workers*c.Ingest.RowsPerGeneration) / c.Ingest.SealEvery.Seconds()
	quietPerSecond := hotPerSecond * c.QuietShare / (1 - c.QuietShare)
	return max(1, int(math.Round(quietPerSecond*c.QuietEvery.Seconds()/float64(c.QuietStores))))
}

// QuietStore is one quiet store's waits from seal to merged.
type QuietStore struct {
	Name string
	// SealToMerged are the waits no sample saw end after the run; Unmerged
	// counts the generations no sample saw merged, OldestUnmerged how long the
	// oldest of them had waited at the end (a wait still running).
	SealToMerged   Quantiles
	Unmerged       int
	OldestUnmerged time.Duration
	// Tasks are the store's merge_wal tasks.
	Tasks int
}

// Longest is the store's longest wait, merged or still running at the end.
func (q QuietStore) Longest() time.Duration { return max(q.SealToMerged.Max, q.OldestUnmerged) }

// SkewResult is one run of the skewed ingest.
type SkewResult struct {
	Mode fanout.Shape
	// Hot is the hot store as a sustained-ingest run reports its store (its own
	// tasks only; the merges on demand counts are every store's).
	Hot IngestResult
	// QuietSealToMerged are the waits of every quiet store's generations, seal to
	// the commit that merged them, as the samples found it; QuietUnmerged the quiet generations
	// no sample saw merged, QuietOldestUnmerged the longest of their waits at the
	// end. Worst is the quiet store with the longest wait.
	QuietSealToMerged   Quantiles
	QuietUnmerged       int
	QuietOldestUnmerged time.Duration
	Worst               QuietStore
	// QuietSealed counts the quiet generations; HotRows and QuietRows the
	// acknowledged rows of the hot store and of all quiet stores.
	QuietSealed        int
	HotRows, QuietRows int
	// QuietSampleEvery is the quiet stores' mean time between samples (a round
	// of all of them may take longer than SampleEvery).
	QuietSampleEvery time.Duration
	// Tasks, FailedTasks and TaskTimes are every merge_wal task of the run;
	// QuietTasks and QuietTaskTimes the quiet stores'.
	Tasks, FailedTasks, QuietTasks int
	TaskTimes, QuietTaskTimes      Quantiles
	FirstError                     string
	// Waits splits the late quiet generations' waits into their parts.
	Waits WaitBreakdown
	// Peak is what the hot store's tasks did around its pending maximum.
	Peak HotPeak
	// MaxDelay is the master's MERGE_MAX_DELAY.
	MaxDelay           time.Duration
	Requests           int64
	Elapsed            time.Duration
	LoadStart, LoadEnd string
}

// QuietLongest is the longest wait of any quiet generation, merged or still
// running at the end.
func (r SkewResult) QuietLongest() time.Duration {
	return max(r.QuietSealToMerged.Max, r.QuietOldestUnmerged)
}

// QuietGoal is issue 31's bound on a quiet store's wait: MERGE_MAX_DELAY plus one
// merge time, taken as the run's task-time p99 (every store's tasks).
func (r SkewResult) QuietGoal() time.Duration { return r.MaxDelay + r.TaskTimes.P99 }

// SkewRun is one run with its configuration, as the report lists them.
type SkewRun struct {
	Config SkewConfig
	Result SkewResult
}

const hotStore = "hot"

// RunSkew runs the skewed ingest once in fan-out mode: the cluster of RunIngest
// (workers with their pending records and gRPC WorkerService, a master built by
// master.New) with one hot store written as RunIngest writes its store, and
// cfg.QuietStores quiet stores written by one writer each. Afterwards whatever is
// pending is merged without faults and every acknowledged row of every store is
// checked.
func RunSkew(ctx context.Context, env *Env, cfg SkewConfig, mode fanout.Shape) (SkewResult, error) {
	res := SkewResult{Mode: mode, Hot: IngestResult{Mode: mode}, MaxDelay: scanner.DefaultMergeMaxDelay}
	ic := cfg.Ingest
	if ic.Workers < 1 || ic.SealEvery <= 0 || ic.Duration <= 0 || ic.SampleEvery <= 0 || cfg.QuietStores < 1 ||
		cfg.QuietEvery <= 0 || cfg.QuietShare <= 0 || cfg.QuietShare >= 1 {
		return res, fmt.Errorf("skew: config %+v: workers, intervals, duration and quiet stores must be positive, the quiet share below 1", cfg)
	}
	c, err := newIngestCluster(ctx, env, ingestClusterConfig{Name: "skew", Workers: ic.Workers, Mode: mode,
		Scan: ic.ScanInterval, Sweep: ic.SweepInterval})
	if err != nil {
		return res, err
	}
	defer c.close()
	hot, err := c.addStore(ctx, hotStore)
	if err != nil {
		return res, fmt.Errorf("skew: %w", err)
	}
	quiet := make([]*clusterStore, cfg.QuietStores)
	for i := range quiet {
		if quiet[i], err = c.addStore(ctx, fmt.Sprintf("quiet-%02d", i)); err != nil {
			return res, fmt.Errorf("skew: %w", err)
		}
	}
	c.start(ctx, ic.faults())
	res.LoadStart = mdreport.ThisMachine().LoadAvg
	quietRows := cfg.QuietRows()
	env.log().Info("skew: start", "mode", mode, "workers", ic.Workers, "quiet_stores", cfg.QuietStores,
		"quiet_rows", quietRows, "quiet_every", cfg.QuietEvery, "duration", ic.Duration)

	hotIn := newIngest()
	hotWatch := &watchedStore{dir: hot.dir, seals: hotIn.seals}
	quietIn := make([]*ingest, len(quiet))
	quietWatch := make([]*watchedStore, len(quiet))
	for i, qs := range quiet {
		quietIn[i] = newIngest()
		quietWatch[i] = &watchedStore{dir: qs.dir, seals: quietIn[i].seals}
	}
	start := time.Now()
	ingestCtx, stopIngest := context.WithTimeout(ctx, ic.Duration)
	defer stopIngest()
	var wg sync.WaitGroup
	for i, s := range hot.handles {
		gen := newRowGen(env.Seed+uint64(i)+1, ic.Row)
		phase := ic.SealEvery * time.Duration(i) / time.Duration(ic.Workers)
		wg.Go(func() { hotIn.worker(ingestCtx, s, gen, ic, phase) })
	}
	for i, qs := range quiet {
		seed := env.Seed + uint64(ic.Workers+i) + 1
		gen := newRowGen(seed, ic.Row)
		rng := rand.New(rand.NewPCG(seed, 0x717569657421))
		phase := cfg.QuietEvery * time.Duration(i) / time.Duration(len(quiet))
		wg.Go(func() { quietIn[i].quiet(ingestCtx, qs.handles, gen, rng, quietRows, cfg.QuietEvery, phase) })
	}
	// Two samplers: a round over every quiet store may take longer than
	// SampleEvery on a loaded machine, and the hot store's samples must not wait
	// for it.
	var samplers sync.WaitGroup
	var hotErr, quietErr error
	samplers.Go(func() { hotErr = sample(ingestCtx, c.raw, start, ic.SampleEvery, hotWatch) })
	samplers.Go(func() { quietErr = sample(ingestCtx, c.raw, start, ic.SampleEvery, quietWatch...) })
	wg.Wait()
	samplers.Wait()
	res.Elapsed = time.Since(start)
	res.Hot.Elapsed, res.Hot.Samples = res.Elapsed, hotWatch.samples
	for _, in := range append([]*ingest{hotIn}, quietIn...) {
		if in.err != nil {
			return res, in.err
		}
	}
	if err := errors.Join(hotErr, quietErr); err != nil {
		return res, fmt.Errorf("skew: %w", err)
	}
	if res.Hot.FinalPending, err = hotWatch.final(ctx, c.raw, res.Elapsed); err != nil {
		return res, fmt.Errorf("skew: %w", err)
	}
	end := time.Now()
	var quietWaits durations
	for i, w := range quietWatch {
		if _, err := w.final(ctx, c.raw, res.Elapsed); err != nil {
			return res, fmt.Errorf("skew: %w", err)
		}
		waits := quietIn[i].seals.waitTimes()
		quietWaits = append(quietWaits, waits...)
		q := QuietStore{Name: quiet[i].name, SealToMerged: waits.quantiles(), OldestUnmerged: w.seals.oldestOpen(end)}
		_, q.Unmerged = w.seals.result()
		res.QuietSealed += quietIn[i].sealed
		res.QuietUnmerged += q.Unmerged
		res.QuietOldestUnmerged = max(res.QuietOldestUnmerged, q.OldestUnmerged)
		if i == 0 || q.Longest() > res.Worst.Longest() {
			res.Worst = q
		}
	}
	res.QuietSealToMerged = quietWaits.quantiles()
	if n := len(quietWatch[0].samples); n > 0 {
		res.QuietSampleEvery = res.Elapsed / time.Duration(n)
	}
	res.LoadEnd = mdreport.ThisMachine().LoadAvg
	res.Requests = c.faults.TotalRequests()
	h := &res.Hot
	h.Requests, h.PeakInFlight = res.Requests, c.faults.PeakInFlight()
	h.SealToMerged, h.Unmerged = hotIn.seals.result()
	h.Sealed, h.AppendFailures, h.SealFailures = hotIn.sealed, hotIn.appendFailures, hotIn.sealFailures
	for _, in := range quietIn {
		h.AppendFailures += in.appendFailures
		h.SealFailures += in.sealFailures
	}
	h.Merged = h.Sealed - h.FinalPending
	h.summarize(ic)

	if err := c.stopMaster(); err != nil {
		return res, fmt.Errorf("skew: master: %w", err)
	}
	if err := res.countTasks(ctx, c.master.Tasks(), hot.name); err != nil {
		return res, fmt.Errorf("skew: %w", err)
	}
	seen := map[string][]seenMerged{}
	for i, qs := range quiet {
		seen[qs.name] = quietIn[i].seals.mergedTimes()
	}
	everything, err := listTasks(ctx, c.master.Tasks(), tasks.ListFilter{})
	if err != nil {
		return res, fmt.Errorf("skew: %w", err)
	}
	res.Waits = breakdownWaits(everything, seen, hot.name, res.MaxDelay)
	res.Peak = hotPeak(h.Samples, start, everything, hot.name)
	if h.DemandByGenerations, h.DemandByAge, err = demandEnqueues(c.metrics); err != nil {
		return res, err
	}
	if err := c.drain(ctx, append([]*clusterStore{hot}, quiet...)...); err != nil {
		return res, fmt.Errorf("skew: %w", err)
	}
	rows, err := verifyBase(ctx, c.raw, hot.dir, hotIn.want, hotIn.maybe)
	if err != nil {
		return res, fmt.Errorf("skew: hot store: %w", err)
	}
	res.HotRows, h.Rows = int(rows), rows
	for i, qs := range quiet {
		rows, err := verifyBase(ctx, c.raw, qs.dir, quietIn[i].want, quietIn[i].maybe)
		if err != nil {
			return res, fmt.Errorf("skew: quiet store %s: %w", qs.name, err)
		}
		res.QuietRows += int(rows)
	}
	env.log().Info("skew: done", "mode", mode, "hot_sealed", h.Sealed, "hot_max_pending", h.MaxPending,
		"hot_median_pending", h.MedianPending, "hot_seal_to_merged_p99", h.SealToMerged.P99,
		"quiet_sealed", res.QuietSealed, "quiet_seal_to_merged_p50", res.QuietSealToMerged.P50,
		"quiet_seal_to_merged_p99", res.QuietSealToMerged.P99, "quiet_longest", res.QuietLongest(),
		"worst_quiet", res.Worst.Name, "goal", res.QuietGoal(), "tasks", res.Tasks, "quiet_tasks", res.QuietTasks,
		"task_p99", res.TaskTimes.P99, "failed_tasks", res.FailedTasks, "requests", res.Requests)
	return res, nil
}

// quiet adds rows to one quiet store every `every`, the first after phase,
// through the handle of a worker rng picks each time, and seals them there at
// once, until ctx ends. A tick missed because the previous add took longer is
// dropped.
func (in *ingest) quiet(ctx context.Context, handles []*store.Store, gen *rowGen, rng *rand.Rand, rows int, every, phase time.Duration) {
	if sleepCtx(ctx, phase) != nil {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if !in.add(ctx, handles[rng.IntN(len(handles))], gen, rows) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// countTasks reads every merge_wal task of the run: the hot store's into Hot, the
// others as the quiet stores', all of them into Tasks and TaskTimes, and each
// quiet store's count into Worst when it is that store.
func (r *SkewResult) countTasks(ctx context.Context, ts *tasks.Queue, hot string) error {
	all, err := listMergeTasks(ctx, ts, registry.Target{})
	if err != nil {
		return err
	}
	// The run's stores are rollout stores.
	hotTarget, worst := registry.NewTarget(registry.KindRollout, hot), registry.NewTarget(registry.KindRollout, r.Worst.Name)
	var hotTasks []tasks.Task
	var times, quietTimes durations
	for _, t := range all {
		r.Tasks++
		if t.State == tasks.StateFailed {
			r.FailedTasks++
			r.FirstError = cmp.Or(r.FirstError, fmt.Sprintf("%s: %s", t.Target, t.Error))
		}
		d, finished := taskTime(t)
		if finished {
			times = append(times, d)
		}
		if t.Target == hotTarget {
			hotTasks = append(hotTasks, t)
			continue
		}
		r.QuietTasks++
		if finished {
			quietTimes = append(quietTimes, d)
		}
		if t.Target == worst {
			r.Worst.Tasks++
		}
	}
	r.Hot.countTasks(hotTasks)
	r.TaskTimes, r.QuietTaskTimes = times.quantiles(), quietTimes.quantiles()
	return nil
}

// goals says whether the run met issue 31's goals for skewed ingest: "yes", or
// the ones it missed. The quiet stores: every generation merged within
// QuietGoal (a wait still running at the end counts with its length so far). The
// hot store: bounded as the sustained ingest's goals say.
func (r SkewResult) goals() string {
	var missed []string
	if r.QuietSealToMerged.N == 0 || r.QuietLongest() > r.QuietGoal() {
		missed = append(missed, fmt.Sprintf("quiet longest %s > %s", fmtDur(r.QuietLongest()), fmtDur(r.QuietGoal())))
	}
	if hot := r.Hot.goals(); hot != "yes" {
		missed = append(missed, "hot store "+strings.TrimPrefix(hot, "**no**: "))
	}
	if len(missed) == 0 {
		return "yes"
	}
	return "**no**: " + strings.Join(missed, ", ")
}
