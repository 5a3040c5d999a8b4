package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	"github.com/tidemark-io/tidemark/tools/mdreport"
)

// OverloadConfig sizes issue 31's overload: writers that add through the
// workers' real HTTP add route (POST /api/v1/rollouts/{name}/records?flush=true,
// so every add passes the store's backpressure, store.Store.AdmitAdd, and is
// sealed into a generation of its own) at Factor times what merges sustain.
type OverloadConfig struct {
	// Workers each serve the HTTP API and the gRPC WorkerService and own one shard
	// of one rollout store; Writers per worker add RowsPerAdd rows at a time to
	// it, each waiting for its answer before its next add.
	Workers, Writers int
	RowsPerAdd       int
	Row              RowShape
	// ProbeGenerations is the backlog of the probe, per worker: sealed before
	// the master starts, drained by its merges, and the rate they drained it at
	// is what merges sustain. ProbeTimeout bounds the drain.
	ProbeGenerations int
	ProbeTimeout     time.Duration
	// MergeMaxGenerations is the workers' MERGE_MAX_GENERATIONS. A gather merge
	// takes every shard's pending generations in passes of at most this many, so
	// at the default (256) its rate grows with the load, and writers on the
	// bench's own 2 cores cannot outrun it; a small cap makes the merges the
	// bound, which is what an overload is.
	MergeMaxGenerations int
	// Factor times the probe's rate is the rate the writers offer, spread evenly
	// over them; a writer that is late for its next add (its add took longer,
	// backpressure included) drops the tick, as a client that waits for its
	// adds would.
	Factor float64
	// Duration is the overload phase; pending generations are counted every
	// SampleEvery.
	Duration, SampleEvery time.Duration
	// Latency (+ up to Jitter) per object-store request from the probe on, at
	// most MaxConcurrent in flight, Throttle for the others.
	Latency, Jitter time.Duration
	MaxConcurrent   int
	Throttle        objstore.ThrottleMode
}

// DefaultOverloadConfig is issue 31's overload for d: the 20 workers and the
// bucket of the sustained ingest (DefaultIngestConfig), 3 writers per worker
// (an add and its seal are several round trips, so one writer waiting for its
// answers offers too little), adds of 50 small rows, a probe of 24 generations
// per worker, and writers at twice its rate.
func DefaultOverloadConfig(d time.Duration) OverloadConfig {
	in := DefaultIngestConfig(20)
	return OverloadConfig{Workers: in.Workers, Writers: 3, RowsPerAdd: in.RowsPerGeneration, Row: in.Row, ProbeGenerations: 24,
		MergeMaxGenerations: 8, ProbeTimeout: 5 * time.Minute, Factor: 2, Duration: d, SampleEvery: in.SampleEvery,
		Latency: in.Latency, Jitter: in.Jitter, MaxConcurrent: in.MaxConcurrent, Throttle: in.Throttle}
}

// OverloadMinute is one minute of the overload phase, by when each add started.
type OverloadMinute struct {
	// Adds were answered 201, Failed otherwise (or not at all).
	Adds, Failed int
	Latency      Quantiles
	// Delayed adds carried the backpressure header; Delay is its value.
	Delayed int
	Delay   Quantiles
	// PendingMax is the most pending generations a sample of the minute saw;
	// ViewMax the most any worker's own snapshot counted (the count AdmitAdd
	// decides on without refreshing).
	PendingMax, ViewMax int
	// Merged are the generations merged and Sealed those sealed (merged plus the
	// growth of pending) between the samples closest to the minute's ends,
	// Length apart.
	Merged, Sealed int
	Length         time.Duration
}

// rate is n per second of the minute.
func (m OverloadMinute) rate(n int) float64 {
	if m.Length <= 0 {
		return 0
	}
	return float64(n) / m.Length.Seconds()
}

// OverloadResult is one run of the overload.
type OverloadResult struct {
	Mode fanout.Shape
	// The probe: ProbeSealed generations drained by ProbeTasks merge_wal tasks
	// in ProbeTime (first claim to last finish), ProbeRate generations/s.
	ProbeSealed, ProbeTasks int
	ProbeTime               time.Duration
	ProbeRate               float64
	// Offered is the rate the writers aimed at (adds/s over all of them), Period
	// each writer's interval.
	Offered float64
	Period  time.Duration
	// Adds and Failed count the phase's adds; FailedByStatus the failures by HTTP
	// status (0: no answer), FirstFailure the first one's error.
	Adds, Failed   int
	FailedByStatus map[int]int
	FirstFailure   string
	Latency        Quantiles
	Delayed        int
	Delay          Quantiles
	Minutes        []OverloadMinute
	// MetricDelayed and MetricDelaySum are tidemark_add_backpressure_delay_seconds
	// summed over the workers, MetricRefusals tidemark_add_backpressure_refusals_total.
	MetricDelayed  uint64
	MetricDelaySum float64
	MetricRefusals float64
	// The workers' mean times of the phase's (and the probe's, which adds no
	// requests) successful adds: MeanRequest the add request past body parsing
	// (rollout_add_request_duration_seconds{flush="true"}: backpressure, append
	// and seal), MeanAppend its durable WAL append (rollout_add_duration_seconds),
	// MeanSeal a seal (rollout_flush_duration_seconds, the probe's included).
	MeanRequest, MeanAppend, MeanSeal time.Duration
	// Ingest holds the phase's pending samples and their summary and its
	// merge_wal tasks (those enqueued after the probe).
	Ingest IngestResult
	// ViewMax is the most pending generations any worker's own store snapshot
	// counted at a sample: what AdmitAdd decides on below WarnGenerations.
	ViewMax int
	// WarnGenerations and RefuseGenerations are the workers' thresholds.
	WarnGenerations, RefuseGenerations int
	Requests                           int64
	Elapsed                            time.Duration
	LoadStart, LoadEnd                 string
	Rows                               int64
}

// AddsPerSecond is the rate of the phase's successful adds.
func (r OverloadResult) AddsPerSecond() float64 { return float64(r.Adds) / r.Elapsed.Seconds() }

// OverloadRun is one run with its configuration, as the report lists it.
type OverloadRun struct {
	Config OverloadConfig
	Result OverloadResult
}

const overloadStore = "overload"

// RunOverload runs the overload once in fan-out mode: the cluster of RunIngest
// with every worker also serving its real HTTP API (worker.NewServer) on
// loopback. First the probe: every worker seals cfg.ProbeGenerations generations
// through its store handle, then the master starts and its merges drain them;
// their rate is what merges sustain. Then for cfg.Duration cfg.Writers writers
// per worker add through the HTTP add route with ?flush=true at cfg.Factor times
// that rate in all. Afterwards whatever is pending is merged without faults and every
// acknowledged row is checked.
func RunOverload(ctx context.Context, env *Env, cfg OverloadConfig, mode fanout.Shape) (OverloadResult, error) {
	res := OverloadResult{Mode: mode, FailedByStatus: map[int]int{}, Ingest: IngestResult{Mode: mode}}
	if cfg.Workers < 1 || cfg.Writers < 1 || cfg.RowsPerAdd < 1 || cfg.ProbeGenerations < 1 || cfg.ProbeTimeout <= 0 || cfg.Factor <= 0 ||
		cfg.Duration <= 0 || cfg.SampleEvery <= 0 {
		return res, fmt.Errorf("overload: config %+v: workers, rows, probe, factor, duration and sample interval must be positive", cfg)
	}
	c, err := newIngestCluster(ctx, env, ingestClusterConfig{Name: "overload", Workers: cfg.Workers, Mode: mode,
		MergeMaxGenerations: cfg.MergeMaxGenerations})
	if err != nil {
		return res, err
	}
	defer c.close()
	cs, err := c.addStore(ctx, overloadStore)
	if err != nil {
		return res, fmt.Errorf("overload: %w", err)
	}
	// The bench's workers take the store's defaults, as cmd/worker does.
	res.WarnGenerations, res.RefuseGenerations = store.DefaultWarnGenerations, store.DefaultRefuseGenerations
	api, err := serveWorkerAPIs(c.workers, cfg.Writers)
	if err != nil {
		return res, fmt.Errorf("overload: %w", err)
	}
	defer api.close()
	c.fault(faultsConfig{Latency: cfg.Latency, Jitter: cfg.Jitter, MaxConcurrent: cfg.MaxConcurrent, Throttle: cfg.Throttle})

	in := newIngest()
	probeEnd, err := res.probe(ctx, env, c, cs, in, cfg)
	if err != nil {
		return res, err
	}
	res.Offered = cfg.Factor * res.ProbeRate
	writers := cfg.Workers * cfg.Writers
	res.Period = time.Duration(float64(writers) / res.Offered * float64(time.Second))
	res.LoadStart = mdreport.ThisMachine().LoadAvg
	c.faults.ResetCounters()
	env.log().Info("overload: start", "mode", mode, "workers", cfg.Workers, "probe_rate", res.ProbeRate,
		"offered", res.Offered, "period", res.Period, "duration", cfg.Duration)

	watched := &watchedStore{dir: cs.dir, seals: newSealWatch()}
	adds := &addLog{in: in}
	n, watermarks, err := pendingAndWatermarks(ctx, c.raw, cs.dir)
	if err != nil {
		return res, fmt.Errorf("overload: %w", err)
	}
	first := IngestSample{Pending: n, Merged: sumWatermarks(watermarks)}
	start := time.Now()
	phaseCtx, stopPhase := context.WithTimeout(ctx, cfg.Duration)
	defer stopPhase()
	var wg sync.WaitGroup
	for i := range writers {
		gen := newRowGen(env.Seed+uint64(cfg.Workers+i)+1, cfg.Row)
		phase := res.Period * time.Duration(i) / time.Duration(writers)
		wc := api.clients[i%cfg.Workers]
		wg.Go(func() { adds.writer(phaseCtx, wc, gen, cfg.RowsPerAdd, res.Period, phase, start) })
	}
	var samplerErr error
	var samplers sync.WaitGroup
	samplers.Go(func() { samplerErr = sample(phaseCtx, c.raw, start, cfg.SampleEvery, watched) })
	views := &viewSamples{}
	samplers.Go(func() { views.run(phaseCtx, cs.handles, start, cfg.SampleEvery) })
	wg.Wait()
	samplers.Wait()
	res.Elapsed = time.Since(start)
	if samplerErr != nil {
		return res, fmt.Errorf("overload: %w", samplerErr)
	}
	ig := &res.Ingest
	ig.Elapsed, ig.Samples = res.Elapsed, watched.samples
	if ig.FinalPending, err = watched.final(ctx, c.raw, res.Elapsed); err != nil {
		return res, fmt.Errorf("overload: %w", err)
	}
	counts := append(append([]IngestSample{first}, watched.samples...), *watched.last)
	res.LoadEnd = mdreport.ThisMachine().LoadAvg
	res.Requests = c.faults.TotalRequests()
	ig.Requests, ig.PeakInFlight = res.Requests, c.faults.PeakInFlight()
	ig.summarize(IngestConfig{Workers: cfg.Workers})
	adds.summarize(&res, counts)
	views.summarize(&res)
	ig.Merged = int(watched.last.Merged - first.Merged)
	ig.Sealed = ig.Merged + watched.last.Pending - first.Pending
	if err := res.readWorkerMetrics(api); err != nil {
		return res, fmt.Errorf("overload: %w", err)
	}

	if err := c.stopMaster(); err != nil {
		return res, fmt.Errorf("overload: master: %w", err)
	}
	all, err := listMergeTasks(ctx, c.master.Tasks(), registry.Target{})
	if err != nil {
		return res, fmt.Errorf("overload: %w", err)
	}
	var phaseTasks []tasks.Task
	for _, t := range all {
		if t.EnqueuedAt.After(probeEnd) {
			phaseTasks = append(phaseTasks, t)
		}
	}
	ig.countTasks(phaseTasks)
	if ig.DemandByGenerations, ig.DemandByAge, err = demandEnqueues(c.metrics); err != nil {
		return res, err
	}
	if err := c.drain(ctx, cs); err != nil {
		return res, fmt.Errorf("overload: %w", err)
	}
	if res.Rows, err = verifyBase(ctx, c.raw, cs.dir, in.want, in.maybe); err != nil {
		return res, fmt.Errorf("overload: %w", err)
	}
	env.log().Info("overload: done", "mode", mode, "adds", res.Adds, "failed", res.Failed, "latency_p50", res.Latency.P50,
		"latency_p99", res.Latency.P99, "delayed", res.Delayed, "delay_p99", res.Delay.P99, "max_pending", ig.MaxPending,
		"refuse", res.RefuseGenerations, "tasks", ig.Tasks, "failed_tasks", ig.FailedTasks, "requests", res.Requests)
	return res, nil
}

// readWorkerMetrics reads the backpressure's metrics and the add path's mean
// times from the workers' registries.
func (r *OverloadResult) readWorkerMetrics(api *workerAPIs) error {
	var err error
	if r.MetricDelayed, r.MetricDelaySum, err = api.histogram("tidemark_add_backpressure_delay_seconds"); err != nil {
		return err
	}
	if r.MetricRefusals, err = api.counter("tidemark_add_backpressure_refusals_total"); err != nil {
		return err
	}
	for _, m := range []struct {
		name string
		into *time.Duration
	}{
		{"rollout_add_request_duration_seconds", &r.MeanRequest},
		{"rollout_add_duration_seconds", &r.MeanAppend},
		{"rollout_flush_duration_seconds", &r.MeanSeal},
	} {
		n, sum, err := api.histogram(m.name)
		if err != nil {
			return err
		}
		*m.into = mean(n, sum)
	}
	return nil
}

// probe seals cfg.ProbeGenerations generations on every worker, starts the
// cluster and waits until its merges have drained them: their rate, from the
// first task's claim to the last one's finish, is what merges sustain. It
// returns when the drain was seen.
func (r *OverloadResult) probe(ctx context.Context, env *Env, c *ingestCluster, cs *clusterStore, in *ingest, cfg OverloadConfig) (time.Time, error) {
	env.log().Info("overload: probe", "workers", cfg.Workers, "generations_per_worker", cfg.ProbeGenerations)
	var wg sync.WaitGroup
	for i, s := range cs.handles {
		gen := newRowGen(env.Seed+uint64(i)+1, cfg.Row)
		wg.Go(func() {
			for range cfg.ProbeGenerations {
				if !in.add(ctx, s, gen, cfg.RowsPerAdd) {
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(in.err, ctx.Err()); err != nil {
		return time.Time{}, fmt.Errorf("overload: probe backlog: %w", err)
	}
	if in.appendFailures+in.sealFailures > 0 {
		return time.Time{}, fmt.Errorf("overload: probe backlog: %d appends and %d seals failed", in.appendFailures, in.sealFailures)
	}
	r.ProbeSealed = in.sealed
	c.run(ctx)
	deadline := time.Now().Add(cfg.ProbeTimeout)
	for {
		n, err := pendingGenerations(ctx, c.raw, cs.dir)
		if err != nil {
			return time.Time{}, fmt.Errorf("overload: probe: %w", err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("overload: probe: %d of %d generations still pending after %s", n, r.ProbeSealed, cfg.ProbeTimeout)
		}
		if err := sleepCtx(ctx, cfg.SampleEvery); err != nil {
			return time.Time{}, err
		}
	}
	drained := time.Now()
	// The last merge's commit is in the bucket a moment before its task is
	// finished in etcd: wait for every task to finish (a few seconds at most).
	var ts []tasks.Task
	for wait := time.Now().Add(30 * time.Second); ; {
		var err error
		if ts, err = listMergeTasks(ctx, c.master.Tasks(), registry.Target{}); err != nil {
			return time.Time{}, fmt.Errorf("overload: probe: %w", err)
		}
		live := slices.ContainsFunc(ts, func(t tasks.Task) bool { return !t.State.Finished() })
		if !live || time.Now().After(wait) {
			break
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return time.Time{}, err
		}
	}
	var first, last time.Time
	for _, t := range ts {
		if t.Stats.GenerationsMerged == 0 || !t.State.Finished() || t.StartedAt.IsZero() {
			continue
		}
		r.ProbeTasks++
		if first.IsZero() || t.StartedAt.Before(first) {
			first = t.StartedAt
		}
		if t.FinishedAt.After(last) {
			last = t.FinishedAt
		}
	}
	if r.ProbeTasks == 0 || !last.After(first) {
		return time.Time{}, fmt.Errorf("overload: probe: no finished merge of the backlog among %d tasks", len(ts))
	}
	r.ProbeTime = last.Sub(first)
	r.ProbeRate = float64(r.ProbeSealed) / r.ProbeTime.Seconds()
	env.log().Info("overload: probe done", "generations", r.ProbeSealed, "tasks", r.ProbeTasks, "time", r.ProbeTime,
		"rate", r.ProbeRate)
	return drained, nil
}

// viewSamples are the largest pending count any worker's own snapshot of the
// store held, at each sample, by minute.
type viewSamples struct {
	minuteMax []int
}

// run samples the handles' snapshots every interval until ctx ends; it reads
// memory only.
func (v *viewSamples) run(ctx context.Context, handles []*store.Store, start time.Time, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n := 0
		for _, h := range handles {
			n = max(n, h.Snapshot().PendingCount())
		}
		m := int(time.Since(start) / time.Minute)
		for len(v.minuteMax) <= m {
			v.minuteMax = append(v.minuteMax, 0)
		}
		v.minuteMax[m] = max(v.minuteMax[m], n)
	}
}

func (v *viewSamples) summarize(r *OverloadResult) {
	for m, n := range v.minuteMax {
		r.ViewMax = max(r.ViewMax, n)
		if m < len(r.Minutes) {
			r.Minutes[m].ViewMax = n
		}
	}
}

// sampleAt returns the last of samples (in time order, not empty) taken at or
// before at, or the first.
func sampleAt(samples []IngestSample, at time.Duration) IngestSample {
	out := samples[0]
	for _, s := range samples {
		if s.At > at {
			break
		}
		out = s
	}
	return out
}
