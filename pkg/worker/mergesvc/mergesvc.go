package mergesvc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

var (
	// ErrStaleFencingToken means a merge request carried a fencing token older than
	// the newest this worker has seen for the target: a newer master claim of the
	// target exists, so the request's claim is gone and it must not merge.
	ErrStaleFencingToken = errclass.New(errclass.Precondition, "stale fencing token")
	// ErrInvalidFencingToken means a fencing token that is not a revision (negative,
	// or 0 where fencing is required).
	ErrInvalidFencingToken = errclass.New(errclass.Invalid, "invalid fencing token")
)

// Merge triggers for the metrics (Metrics.Merges, MergeDuration): the master's
// calls (MergeWal, MergeStore), the HTTP merge-wal routes, and a standalone
// worker's flush sweep (pkg/worker/sweep).
const (
	TriggerMaster  = "master"
	TriggerRequest = "request"
	TriggerTime    = "time"
)

// Config is what a Service needs.
type Config struct {
	// Stores and Merger do the work. Required.
	Stores *store.Stores
	Merger *merge.Merger
	// Metrics are the series merges and seals are counted in; nil creates
	// unregistered ones.
	Metrics *Metrics
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
}

// Service merges stores on request under fencing tokens (MergeTarget) and keeps
// the record of the newest token seen per target and lane (Admit). One Service
// backs every part of a worker that merges, so they share that record.
type Service struct {
	cfg   Config
	log   *slog.Logger
	fence fencingTokens
}

// New returns the service of cfg.
func New(cfg Config) (*Service, error) {
	if cfg.Stores == nil || cfg.Merger == nil {
		return nil, errors.New("merge service: Stores and Merger are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(prometheus.NewRegistry())
	}
	return &Service{cfg: cfg, log: cfg.Logger, fence: fencingTokens{newest: map[fenced]int64{}}}, nil
}

// Metrics returns the series the service counts in, for the parts that seal and
// merge beside it.
func (s *Service) Metrics() *Metrics { return s.cfg.Metrics }

// MergeTarget merges this worker's shard of target's store into its base table,
// waiting for a merge slot, until nothing of the shard is pending. The HTTP
// routes call it with token 0, which skips fencing; a token > 0 is checked
// against, and then recorded as, the newest token of the target's merge lane.
// trigger labels the merge metrics (TriggerMaster, TriggerRequest).
//
// Errors wrap ErrInvalidFencingToken,
// ErrStaleFencingToken, registry.ErrNotFound (no such store), store.ErrDeleted (the
// store was deleted during the merge, whatever the merge tripped over then), or the
// merge's error.
func (s *Service) MergeTarget(ctx context.Context, target registry.Target, token int64, trigger string) (merge.Result, error) {
	kind, name := target.Kind, target.Name
	if token < 0 {
		return merge.Result{}, fmt.Errorf("target %s: %w: %d is negative", target, ErrInvalidFencingToken, token)
	}
	log := s.log.With("target", target, "store", name, "kind", kind, "trigger", trigger, "fencing_token", token)
	if token > 0 {
		if err := s.Admit(target, tasks.LaneMerge, token, log); err != nil {
			return merge.Result{}, err
		}
	}
	st, release, err := s.cfg.Stores.Open(ctx, kind, name)
	if err != nil {
		return merge.Result{}, StoreGone(ctx, s.cfg.Stores.Registry(), kind, name, err)
	}
	defer release()

	start := time.Now()
	r, err := s.cfg.Merger.Merge(ctx, st, true)
	if err != nil {
		// A merge of a deleted store is skipped by the master, not failed.
		err = StoreGone(ctx, s.cfg.Stores.Registry(), kind, name, err)
	}
	s.ObserveMerge(kind, trigger, start, r, err, log)
	return r, err
}

// Admit checks token against, and records it as, the newest fencing token of
// target in lane; a refusal (ErrStaleFencingToken) is counted and logged. Merges
// and adoptions of a target share one record (both run under the master's merge
// lock of the target); maintenance has its own, as its lock is another key whose
// tokens interleave with the merges' (a compaction claimed after a merge began
// must not make that merge's later calls stale).
func (s *Service) Admit(target registry.Target, lane tasks.Lane, token int64, log *slog.Logger) error {
	if err := s.fence.admit(target, lane, token); err != nil {
		s.cfg.Metrics.FencingRefusals.WithLabelValues(string(target.Kind)).Inc()
		log.Warn("refused: stale fencing token", "lane", lane, "err", err)
		return err
	}
	return nil
}

// ObserveMerge counts and logs one merge of trigger that started at start.
func (s *Service) ObserveMerge(kind registry.Kind, trigger string, start time.Time, r merge.Result, err error, log *slog.Logger) {
	result := "success"
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		result = "timeout"
	case errors.Is(err, context.Canceled):
		result = "cancelled"
	case err != nil:
		result = "failure"
	}
	m := s.cfg.Metrics
	m.Merges.WithLabelValues(trigger, result).Inc()
	m.MergeDuration.WithLabelValues(trigger).Observe(time.Since(start).Seconds())
	m.MergedGenerations.WithLabelValues(string(kind)).Add(float64(r.Generations))
	if trigger == TriggerMaster && err == nil {
		m.MergeRequestDuration.Observe(time.Since(start).Seconds())
	}
	if err != nil {
		log.Warn("merge failed", "err", err, "duration", time.Since(start).String())
		return
	}
	log.Info("merge done", "generations", r.Generations, "rows", r.Rows, "reclaimed", r.Reclaimed,
		"version", r.Version, "duration", time.Since(start).String())
}

// fencingTokens keeps the newest fencing token seen per target and lane, in
// memory: at most two entries per target ever merged or maintained with a token,
// so bounded by the registered stores.
// A restarted worker starts empty and accepts the first token it sees for a target,
// whatever its value. That costs no data (merges are idempotent and every commit is
// put-if-absent); it only lets one stale call through after a restart.
type fencingTokens struct {
	mu     sync.Mutex
	newest map[fenced]int64
}

// fenced is what one record of fencingTokens is for: a target's lane.
type fenced struct {
	target registry.Target
	lane   tasks.Lane
}

// admit accepts token for target's lane if it is not older than the newest seen
// there, and records it as the newest.
func (f *fencingTokens) admit(target registry.Target, lane tasks.Lane, token int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := fenced{target, lane}
	if cur := f.newest[k]; token < cur {
		return fmt.Errorf("target %s: %w: %d is older than %d, the newest this worker has seen in the %s lane (a newer claim of the target exists)",
			target, ErrStaleFencingToken, token, cur, lane)
	}
	f.newest[k] = token
	return nil
}
