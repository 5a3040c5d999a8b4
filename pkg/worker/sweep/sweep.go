package sweep

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/worker/mergesvc"
)

// Sweeper defaults (FLUSH_INTERVAL, the per-store step timeout).
const (
	DefaultFlushInterval = 30 * time.Second
	DefaultStepTimeout   = 60 * time.Second
)

// Config configures the sweeps.
type Config struct {
	Stores *store.Stores
	Merger *merge.Merger
	// Merges is where seals and merges are counted (mergesvc.Metrics, with the
	// other parts'); nil: a service of its own with unregistered series.
	Merges *mergesvc.Service
	// Metrics are the sweeps' own series; nil creates unregistered ones.
	Metrics *Metrics
	// FlushInterval is the flush sweep's period: seal every resident store (and,
	// with MergePending, merge what this worker's shards hold pending).
	FlushInterval time.Duration
	// MergePending makes the flush sweep merge everything pending in this
	// worker's shard of every resident store after sealing it (the time
	// trigger). Only for a standalone worker (no etcd, so no master decides when
	// its stores merge); in a cluster the master alone decides, and a sweep that
	// merged too would race its merges for the same slots and shards.
	MergePending bool
	// Deletes, if set, is the queue the worker's WAL drains hand the drained files
	// that came due to (wal.WithDeleteQueue); the sweeper deletes them as
	// soon as it is woken, so no merge waits for them.
	Deletes *wal.DeleteQueue
	// StepTimeout bounds one store's step of a sweep, and one pass of deletes.
	StepTimeout time.Duration
	Clock       clock.WithTicker
	Logger      *slog.Logger
}

// Sweeper runs the worker's periodic seals (and a standalone worker's merges), and
// the deletes of drained WAL files. Sweeps only try for a merge slot: a busy
// worker skips merging this round rather than queueing behind request-driven
// merges.
type Sweeper struct {
	cfg Config
	log *slog.Logger
}

// New returns a Sweeper; call Run to start it.
func New(cfg Config) (*Sweeper, error) {
	if cfg.Stores == nil || cfg.Merger == nil {
		return nil, errors.New("sweep: Stores and Merger are required")
	}
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = DefaultFlushInterval
	}
	if cfg.StepTimeout <= 0 {
		cfg.StepTimeout = DefaultStepTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(prometheus.NewRegistry())
	}
	if cfg.Merges == nil {
		m, err := mergesvc.New(mergesvc.Config{Stores: cfg.Stores, Merger: cfg.Merger, Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		cfg.Merges = m
	}
	return &Sweeper{cfg: cfg, log: cfg.Logger}, nil
}

// Run runs the sweeps until ctx is done. The deletes of drained files run apart
// from the periodic pass, whenever drains queue some: a pass that seals and
// merges every store must not hold them back, nor they it.
func (sw *Sweeper) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { sw.every(ctx, sw.cfg.FlushInterval, sw.FlushPass) })
	if q := sw.cfg.Deletes; q != nil {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return // what is still queued is garbage for wal.Cleanup
				case <-q.Ready():
					sw.DeletePass(ctx)
				}
			}
		})
	}
	wg.Wait()
}

func (sw *Sweeper) every(ctx context.Context, d time.Duration, pass func(context.Context)) {
	t := sw.cfg.Clock.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			pass(ctx)
		}
	}
}

// FlushPass seals every resident store and, with MergePending, merges everything
// pending in this worker's shard of each (the time trigger), if a merge slot is
// free. Store kinds run concurrently, so one slow kind cannot delay another; each
// store's step is bounded by StepTimeout.
func (sw *Sweeper) FlushPass(ctx context.Context) {
	sw.perStore(ctx, "flush", func(ctx context.Context, s *store.Store) {
		kind := string(s.Entry().Kind)
		start := sw.cfg.Clock.Now()
		g, err := s.Seal(ctx)
		sw.cfg.Merges.Metrics().ObserveSeal(kind, g != nil, err, sw.cfg.Clock.Since(start))
		if err != nil {
			sw.log.Warn("flush sweeper: seal failed", "store", s.Entry().Name, "kind", kind, "err", err)
		}
		// A failed seal leaves earlier generations to merge all the same.
		if sw.cfg.MergePending && merge.PendingOwn(s) > 0 {
			sw.merge(ctx, s, mergesvc.TriggerTime, func(ctx context.Context) (merge.Result, error) {
				return sw.cfg.Merger.Merge(ctx, s, false)
			})
		}
	})
}

// DeletePass deletes the drained generation files the worker's drains queued
// (their delete delay has passed and no manifest lists them), bounded by
// StepTimeout, and reports them under tidemark_wal_drained_files_total. This is
// where those deletes are counted: a merge's drain only queues them.
func (sw *Sweeper) DeletePass(ctx context.Context) wal.DeleteResult {
	q := sw.cfg.Deletes
	if q == nil {
		return wal.DeleteResult{}
	}
	ctx, cancel := context.WithTimeout(ctx, sw.cfg.StepTimeout)
	defer cancel()
	r := q.Delete(ctx)
	sw.cfg.Metrics.DrainedFiles.WithLabelValues(DrainedDeleted).Add(float64(r.Deleted))
	sw.cfg.Metrics.DrainedFiles.WithLabelValues(DrainedFailed).Add(float64(r.Failed))
	sw.cfg.Metrics.DrainedFiles.WithLabelValues(DrainedDropped).Add(float64(r.Dropped))
	switch {
	case r.Failed > 0 || r.Dropped > 0:
		sw.log.Warn("cleanup sweeper: drained WAL files left for garbage collection", "deleted", r.Deleted,
			"failed", r.Failed, "dropped", r.Dropped, "err", r.Err)
	case r.Deleted > 0:
		sw.log.Debug("cleanup sweeper: deleted drained WAL files", "deleted", r.Deleted)
	}
	return r
}

// merge runs one sweeper merge and reports it under the cleanup counters.
func (sw *Sweeper) merge(ctx context.Context, s *store.Store, trigger string, run func(context.Context) (merge.Result, error)) {
	kind := string(s.Entry().Kind)
	start := sw.cfg.Clock.Now()
	r, err := run(ctx)
	// rollout_wal_cleanup_total in the reference's words; tidemark_merge_total
	// keeps its own (success, failure, timeout).
	result, cleanup := "success", ResultMerged
	switch {
	case errors.Is(err, merge.ErrBusy):
		sw.cfg.Metrics.Cleanups.WithLabelValues(ResultBusy, kind).Inc()
		return // not a merge: nothing ran
	case errors.Is(err, context.DeadlineExceeded):
		result, cleanup = "timeout", mergesvc.ResultTimeout
	case err != nil:
		result, cleanup = "failure", mergesvc.ResultFailed
	}
	// A merge that found nothing to merge is not a cleanup, as in the reference.
	if err != nil || r.Generations > 0 {
		sw.cfg.Metrics.Cleanups.WithLabelValues(cleanup, kind).Inc()
	}
	sw.cfg.Metrics.GenerationsReclaimed.WithLabelValues(kind).Add(float64(r.Generations))
	m := sw.cfg.Merges.Metrics()
	m.Merges.WithLabelValues(trigger, result).Inc()
	m.MergeDuration.WithLabelValues(trigger).Observe(sw.cfg.Clock.Since(start).Seconds())
	m.MergedGenerations.WithLabelValues(kind).Add(float64(r.Generations))
	if err != nil {
		sw.log.Warn("sweeper merge failed", "store", s.Entry().Name, "kind", kind, "trigger", trigger, "err", err)
	}
}

// perStore runs step on every resident store: kinds concurrently, stores of a kind
// one after another, each under StepTimeout. It also refreshes the pending gauge.
func (sw *Sweeper) perStore(ctx context.Context, sweep string, step func(context.Context, *store.Store)) {
	stores, rels := sw.cfg.Stores.Resident()
	defer func() {
		for _, r := range rels {
			r()
		}
	}()
	byKind := map[registry.Kind][]*store.Store{}
	for _, s := range stores {
		byKind[s.Entry().Kind] = append(byKind[s.Entry().Kind], s)
	}
	var wg sync.WaitGroup
	for kind, list := range byKind {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, s := range list {
				if ctx.Err() != nil {
					return
				}
				sctx, cancel := context.WithTimeout(ctx, sw.cfg.StepTimeout)
				step(sctx, s)
				if errors.Is(sctx.Err(), context.DeadlineExceeded) {
					sw.log.Warn(sweep+" sweeper timed out", "store", s.Entry().Name, "kind", kind, "timeout", sw.cfg.StepTimeout.String())
				}
				cancel()
				sw.cfg.Merges.Metrics().PendingGenerations.WithLabelValues(string(kind), s.Entry().Name).Set(float64(s.Snapshot().PendingCount()))
			}
		}()
	}
	wg.Wait()
}
