package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/internal/dev/mdreport"
	"github.com/tidemark-io/tidemark/pkg/coord/tasks"
	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/worker/store"
)

// OverloadConfig sizes issue 31's overload: writers that add through the
// workers' real HTTP add route (POST /api/v1/rollouts/{name}/records?flush=true,
// so every add passes the store's backpressure, store.Store.AdmitAdd, and is
// sealed into a generation of its own) at Factor times what merges sustain.
type OverloadConfig struct {
	// Workers each serve the HTTP API and the gRPC WorkerService and own one shard
	// of one rollout store; one writer per worker adds RowsPerAdd rows at a time
	// to its worker and waits for the answer.
	Workers    int
	RowsPerAdd int
	Row        RowShape
	// ProbeGenerations is the backlog of the probe, per worker: sealed before
	// the master starts, drained by its merges, and the rate they drained it at
	// is what merges sustain. ProbeTimeout bounds the drain.
	ProbeGenerations int
	ProbeTimeout     time.Duration
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
// bucket of the sustained ingest (DefaultIngestConfig), adds of 50 small rows,
// a probe of 24 generations per worker (three merges' worth at
// MERGE_MAX_GENERATIONS 8), and writers at twice its rate.
func DefaultOverloadConfig(d time.Duration) OverloadConfig {
	in := DefaultIngestConfig(20)
	return OverloadConfig{Workers: in.Workers, RowsPerAdd: in.RowsPerGeneration, Row: in.Row, ProbeGenerations: 24,
		ProbeTimeout: 5 * time.Minute, Factor: 2, Duration: d, SampleEvery: in.SampleEvery,
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
	// PendingMax is the most pending generations a sample of the minute saw.
	PendingMax int
	// Merged are the generations merged in the minute: the adds answered in it
	// (each sealed one) less the growth of pending, from the samples closest to
	// its ends.
	Merged int
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
	// Ingest holds the phase's pending samples and their summary and its
	// merge_wal tasks (those enqueued after the probe).
	Ingest IngestResult
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
// their rate is what merges sustain. Then for cfg.Duration one writer per worker
// adds through the HTTP add route with ?flush=true at cfg.Factor times that rate
// in all. Afterwards whatever is pending is merged without faults and every
// acknowledged row is checked.
func RunOverload(ctx context.Context, env *Env, cfg OverloadConfig, mode fanout.Shape) (OverloadResult, error) {
	res := OverloadResult{Mode: mode, FailedByStatus: map[int]int{}, Ingest: IngestResult{Mode: mode}}
	if cfg.Workers < 1 || cfg.RowsPerAdd < 1 || cfg.ProbeGenerations < 1 || cfg.ProbeTimeout <= 0 || cfg.Factor <= 0 ||
		cfg.Duration <= 0 || cfg.SampleEvery <= 0 {
		return res, fmt.Errorf("overload: config %+v: workers, rows, probe, factor, duration and sample interval must be positive", cfg)
	}
	c, err := newIngestCluster(ctx, env, ingestClusterConfig{Name: "overload", Workers: cfg.Workers, Mode: mode})
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
	api, err := serveWorkerAPIs(c.workers)
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
	res.Period = time.Duration(float64(cfg.Workers) / res.Offered * float64(time.Second))
	res.LoadStart = mdreport.ThisMachine().LoadAvg
	c.faults.ResetCounters()
	env.log().Info("overload: start", "mode", mode, "workers", cfg.Workers, "probe_rate", res.ProbeRate,
		"offered", res.Offered, "period", res.Period, "duration", cfg.Duration)

	watched := &watchedStore{dir: cs.dir, seals: newSealWatch()}
	adds := &addLog{in: in}
	start := time.Now()
	phaseCtx, stopPhase := context.WithTimeout(ctx, cfg.Duration)
	defer stopPhase()
	var wg sync.WaitGroup
	for i := range cfg.Workers {
		gen := newRowGen(env.Seed+uint64(cfg.Workers+i)+1, cfg.Row)
		phase := res.Period * time.Duration(i) / time.Duration(cfg.Workers)
		url := api.urls[i] + "/api/v1/rollouts/" + overloadStore + "/records?flush=true"
		wg.Go(func() { adds.writer(phaseCtx, api.client, url, gen, cfg.RowsPerAdd, res.Period, phase, start) })
	}
	var samplerErr error
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		samplerErr = sample(phaseCtx, c.raw, start, cfg.SampleEvery, watched)
	}()
	wg.Wait()
	<-samplerDone
	res.Elapsed = time.Since(start)
	if samplerErr != nil {
		return res, fmt.Errorf("overload: %w", samplerErr)
	}
	ig := &res.Ingest
	ig.Elapsed, ig.Samples = res.Elapsed, watched.samples
	if ig.FinalPending, err = watched.final(ctx, c.raw); err != nil {
		return res, fmt.Errorf("overload: %w", err)
	}
	res.LoadEnd = mdreport.ThisMachine().LoadAvg
	res.Requests = c.faults.TotalRequests()
	ig.Requests, ig.PeakInFlight = res.Requests, c.faults.PeakInFlight()
	ig.summarize(IngestConfig{Workers: cfg.Workers})
	adds.summarize(&res)
	ig.Sealed, ig.Merged = res.Adds, res.Adds-ig.FinalPending+pendingAt(ig.Samples, 0)
	if res.MetricDelayed, res.MetricDelaySum, res.MetricRefusals, err = api.backpressure(); err != nil {
		return res, fmt.Errorf("overload: %w", err)
	}

	if err := c.stopMaster(); err != nil {
		return res, fmt.Errorf("overload: master: %w", err)
	}
	all, err := listMergeTasks(ctx, c.master.Tasks(), "")
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
		if ts, err = listMergeTasks(ctx, c.master.Tasks(), ""); err != nil {
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

// pendingAt returns the pending generations of the last sample at or before at
// (the first sample when none is).
func pendingAt(samples []IngestSample, at time.Duration) int {
	if len(samples) == 0 {
		return 0
	}
	n := samples[0].Pending
	for _, s := range samples {
		if s.At > at {
			break
		}
		n = s.Pending
	}
	return n
}
