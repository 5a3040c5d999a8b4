package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	"github.com/tidemark-io/tidemark/pkg/worker/maintain"
	"github.com/tidemark-io/tidemark/pkg/worker/store"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
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
// MergeWal, and the HTTP merge-wal routes.
const (
	TriggerMaster  = "master"
	TriggerRequest = "request"
)

// WorkerServiceConfig is what a WorkerService needs.
type WorkerServiceConfig struct {
	// InstanceID names this worker, and its shard in every store. Required.
	InstanceID string
	// Version is the build version Info reports.
	Version string
	// GRPCAddr and HTTPAddr are the addresses this worker advertises (Info).
	GRPCAddr, HTTPAddr string
	// Stores and Merger do the work. Required.
	Stores *store.Stores
	Merger *merge.Merger
	// PreparedTTL bounds how long a prepared merge waits for its commit
	// (MERGE_PREPARED_TTL); 0 means DefaultPreparedTTL.
	PreparedTTL time.Duration
	// Maintainer runs compact, verify and repair tasks; nil: one with the default
	// options, charging Merger's slots and budget.
	Maintainer *maintain.Maintainer
	// Metrics are the worker's series; nil creates unregistered ones.
	Metrics *Metrics
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
}

// WorkerService implements tidemark.v1.WorkerService over a worker's stores and
// merger. The same value backs the HTTP internal merge route (MergeTarget), so both
// share one record of fencing tokens.
//
// Invariants:
//
//   - Fencing tokens of a target only grow, here as in etcd: once a token has been
//     seen for a target, a merge with an older one is refused before it touches the
//     store (ErrStaleFencingToken, FAILED_PRECONDITION). A stale master (one whose
//     claim of the target expired and was taken over) therefore cannot merge after
//     its successor has called. A request admitted before a newer one arrived may
//     still finish: merges are idempotent (the merged watermark is committed with
//     the data), so two overlapping merges of one shard never add rows twice.
//   - A target names exactly one store: "generic:<name>" is the generic store
//     <name> and never the rollout store of the same name.
//   - UNAVAILABLE is never an answer of a call that reached a merge: the master
//     reads it as "this worker could not be reached" and moves on to the next
//     worker, which is only right when nothing ran.
type WorkerService struct {
	tidemarkv1.UnimplementedWorkerServiceServer

	cfg      WorkerServiceConfig
	log      *slog.Logger
	fence    fencingTokens
	prepared preparedMerges
	health   *health.Server
}

// NewWorkerService returns the service for cfg. Its health server reports SERVING
// for the whole server and for tidemark.v1.WorkerService until shutdown.
func NewWorkerService(cfg WorkerServiceConfig) (*WorkerService, error) {
	if err := wal.ValidateShard(cfg.InstanceID); err != nil {
		return nil, fmt.Errorf("instance id: %w", err)
	}
	if cfg.Stores == nil || cfg.Merger == nil {
		return nil, errors.New("worker service: Stores and Merger are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(prometheus.NewRegistry())
	}
	if cfg.PreparedTTL <= 0 {
		cfg.PreparedTTL = DefaultPreparedTTL
	}
	if cfg.Maintainer == nil {
		cfg.Maintainer = maintain.New(maintain.Config{Reserver: cfg.Merger, CostFactor: merge.PassCostFactor,
			Logger: cfg.Logger.With("component", "maintain")})
	}
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(tidemarkv1.WorkerService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	return &WorkerService{
		cfg:      cfg,
		log:      cfg.Logger,
		fence:    fencingTokens{newest: map[fenced]int64{}},
		prepared: preparedMerges{byTarget: map[string]*heldMerge{}},
		health:   hs,
	}, nil
}

// Health is the service's gRPC health server (registered by NewGRPCServer; ServeGRPC
// switches it to NOT_SERVING when shutdown starts).
func (w *WorkerService) Health() *health.Server { return w.health }

// MergeWal merges this worker's shard of the request's target. The fencing token is
// required: 0 is INVALID_ARGUMENT (only the HTTP internal route may merge unfenced).
func (w *WorkerService) MergeWal(ctx context.Context, req *tidemarkv1.MergeWalRequest) (*tidemarkv1.MergeWalResponse, error) {
	if _, err := registry.ParseTarget(req.GetTarget()); err != nil {
		return nil, grpcError(err)
	}
	if err := requireToken(req.GetTarget(), req.GetFencingToken()); err != nil {
		return nil, err
	}
	r, err := w.MergeTarget(ctx, req.GetTarget(), req.GetFencingToken(), TriggerMaster)
	if err != nil {
		return nil, grpcError(err)
	}
	return &tidemarkv1.MergeWalResponse{
		Generations: int64(r.Generations),
		Rows:        r.Rows,
		Reclaimed:   int64(r.Reclaimed),
		BaseVersion: r.Version,
		InstanceId:  w.cfg.InstanceID,
	}, nil
}

// MergeTarget merges this worker's shard of target's store into its base table,
// waiting for a merge slot, until nothing of the shard is pending. It is MergeWal
// for callers other than gRPC: the HTTP internal route calls it with token 0, which
// skips fencing; a token > 0 is checked against, and then recorded as, the newest
// token of the target. trigger labels the merge metrics (TriggerMaster,
// TriggerRequest).
//
// Errors wrap registry.ErrInvalidName (malformed target), ErrInvalidFencingToken,
// ErrStaleFencingToken, registry.ErrNotFound (no such store), store.ErrDeleted (the
// store was deleted during the merge, whatever the merge tripped over then), or the
// merge's error.
func (w *WorkerService) MergeTarget(ctx context.Context, target string, token int64, trigger string) (merge.Result, error) {
	parsed, err := registry.ParseTarget(target)
	kind, name := parsed.Kind, parsed.Name
	if err != nil {
		return merge.Result{}, err
	}
	if token < 0 {
		return merge.Result{}, fmt.Errorf("target %s: %w: %d is negative", target, ErrInvalidFencingToken, token)
	}
	log := w.log.With("target", target, "store", name, "kind", kind, "trigger", trigger, "fencing_token", token)
	if token > 0 {
		if err := w.admit(target, tasks.LaneMerge, kind, token, log); err != nil {
			return merge.Result{}, err
		}
	}
	s, release, err := w.cfg.Stores.Open(ctx, kind, name)
	if err != nil {
		return merge.Result{}, storeGone(ctx, w.cfg.Stores.Registry(), kind, name, err)
	}
	defer release()

	start := time.Now()
	r, err := w.cfg.Merger.Merge(ctx, s, true)
	if err != nil {
		// A merge of a deleted store is skipped by the master, not failed.
		err = storeGone(ctx, w.cfg.Stores.Registry(), kind, name, err)
	}
	w.observeMerge(kind, trigger, start, r, err, log)
	return r, err
}

// admitFenced checks a master call's target and fencing token (required: only the
// HTTP internal route merges unfenced) and admits the token in the task's lane
// (admit); its errors are gRPC statuses. The log it returns names the target,
// store and token.
func (w *WorkerService) admitFenced(target string, lane tasks.Lane, token int64) (registry.Kind, string, *slog.Logger, error) {
	parsed, err := registry.ParseTarget(target)
	kind, name := parsed.Kind, parsed.Name
	if err != nil {
		return "", "", nil, grpcError(err)
	}
	if err := requireToken(target, token); err != nil {
		return "", "", nil, err
	}
	log := w.log.With("target", target, "store", name, "kind", kind, "fencing_token", token)
	if err := w.admit(target, lane, kind, token, log); err != nil {
		return "", "", nil, grpcError(err)
	}
	return kind, name, log, nil
}

// admit checks token against, and records it as, the newest fencing token of
// target in lane, and, in the merge lane, aborts a merge prepared under an older
// one; a refusal is counted and logged. Merges and adoptions of a target share
// one record (both run under the master's merge lock of the target); maintenance
// has its own, as its lock is another key whose tokens interleave with the
// merges' (a compaction claimed after a merge began must not make that merge's
// later calls stale).
func (w *WorkerService) admit(target string, lane tasks.Lane, kind registry.Kind, token int64, log *slog.Logger) error {
	if err := w.fence.admit(target, lane, token); err != nil {
		w.cfg.Metrics.FencingRefusals.WithLabelValues(string(kind)).Inc()
		log.Warn("refused: stale fencing token", "lane", lane, "err", err)
		return err
	}
	if lane != tasks.LaneMerge {
		return nil
	}
	// A merge prepared under an older claim of the target will never be committed:
	// give its merge slot back before this call takes one.
	if old := w.prepared.abortOlder(target, token); old != 0 {
		log.Info("aborted the merge prepared under an older fencing token", "old_token", old)
	}
	return nil
}

// AdoptShard drains and retires another worker's shard of the request's target
// (merge.Merger.Adopt), under the same fencing as MergeWal.
func (w *WorkerService) AdoptShard(ctx context.Context, req *tidemarkv1.AdoptShardRequest) (*tidemarkv1.AdoptShardResponse, error) {
	parsed, err := registry.ParseTarget(req.GetTarget())
	kind, name := parsed.Kind, parsed.Name
	if err != nil {
		return nil, grpcError(err)
	}
	shard := req.GetShard()
	if err := wal.ValidateShard(shard); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "shard %q: %v", shard, err)
	}
	if shard == w.cfg.InstanceID {
		return nil, status.Errorf(codes.InvalidArgument, "shard %q is this worker's own: MergeWal merges it", shard)
	}
	_, _, log, err := w.admitFenced(req.GetTarget(), tasks.LaneMerge, req.GetFencingToken())
	if err != nil {
		return nil, err
	}
	log = log.With("shard", shard)
	s, err := w.cfg.Stores.OpenShard(ctx, kind, name, shard)
	if err != nil {
		return nil, grpcError(storeGone(ctx, w.cfg.Stores.Registry(), kind, name, err))
	}
	start := time.Now()
	r, err := w.cfg.Merger.Adopt(ctx, s, w.cfg.InstanceID)
	if cerr := s.Close(context.WithoutCancel(ctx)); cerr != nil {
		log.Warn("closing the adopted shard's writer", "err", cerr)
	}
	if errors.Is(err, wal.ErrNoShard) {
		return nil, status.Errorf(codes.NotFound, "store %s has no shard %q", req.GetTarget(), shard)
	}
	if err != nil {
		log.Warn("adoption failed", "err", err, "duration", time.Since(start).String())
		return nil, grpcError(storeGone(ctx, w.cfg.Stores.Registry(), kind, name, err))
	}
	w.cfg.Metrics.MergedGenerations.WithLabelValues(string(kind)).Add(float64(r.Merged.Generations))
	if r.Adopted {
		w.cfg.Metrics.ShardsAdopted.WithLabelValues(string(kind)).Inc()
		log.Info("adopted the shard of a worker that is gone", "sealed_rows", r.Sealed, "generations", r.Merged.Generations,
			"rows", r.Merged.Rows, "version", r.Merged.Version, "retired", r.Retired, "duration", time.Since(start).String())
	}
	return &tidemarkv1.AdoptShardResponse{
		SealedRows:  r.Sealed,
		Generations: int64(r.Merged.Generations),
		Rows:        r.Merged.Rows,
		Retired:     r.Retired,
		BaseVersion: r.Merged.Version,
		InstanceId:  w.cfg.InstanceID,
	}, nil
}

// Flush seals one store, or every resident store when the target is empty.
//
// For one target, a worker that has a shard in the store but no open writer (it
// restarted since it last wrote) opens the writer first, which replays the shard's
// unsealed entries, so the flush makes them visible too. A worker without a shard in
// the store seals nothing and creates none.
func (w *WorkerService) Flush(ctx context.Context, req *tidemarkv1.FlushRequest) (*tidemarkv1.FlushResponse, error) {
	if req.GetTarget() == "" {
		n, err := w.flushResident(ctx)
		if err != nil {
			return nil, grpcError(err)
		}
		return &tidemarkv1.FlushResponse{SealedGenerations: n}, nil
	}
	parsed, err := registry.ParseTarget(req.GetTarget())
	kind, name := parsed.Kind, parsed.Name
	if err != nil {
		return nil, grpcError(err)
	}
	sealed, err := w.flushStore(ctx, kind, name)
	if err != nil {
		return nil, grpcError(storeGone(ctx, w.cfg.Stores.Registry(), kind, name, err))
	}
	return &tidemarkv1.FlushResponse{SealedGenerations: sealed}, nil
}

// flushStore is Flush of one store.
func (w *WorkerService) flushStore(ctx context.Context, kind registry.Kind, name string) (int64, error) {
	s, release, err := w.cfg.Stores.Open(ctx, kind, name)
	if err != nil {
		return 0, err
	}
	defer release()
	if s.Snapshot().WAL.Shards[s.Shard()] != nil {
		if _, err := s.Writer(ctx); err != nil {
			return 0, err
		}
	}
	return w.seal(ctx, s)
}

// flushResident seals every resident store; a failure of one does not stop the
// others, and the error names every store that failed.
func (w *WorkerService) flushResident(ctx context.Context) (int64, error) {
	stores, rels := w.cfg.Stores.Resident()
	defer func() {
		for _, r := range rels {
			r()
		}
	}()
	var total int64
	var errs []error
	for _, s := range stores {
		n, err := w.seal(ctx, s)
		total += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	return total, errors.Join(errs...)
}

// seal seals s and counts it under the flush metrics.
func (w *WorkerService) seal(ctx context.Context, s *store.Store) (int64, error) {
	kind := string(s.Entry().Kind)
	start := time.Now()
	g, err := s.Seal(ctx)
	w.cfg.Metrics.ObserveSeal(kind, g != nil, err, time.Since(start))
	if err != nil {
		w.log.Warn("flush: seal failed", "target", s.Target(), "store", s.Entry().Name, "kind", kind, "err", err)
		return 0, err
	}
	if g == nil {
		return 0, nil
	}
	return 1, nil
}

// Info describes this worker and its resident stores, without I/O.
func (w *WorkerService) Info(context.Context, *tidemarkv1.InfoRequest) (*tidemarkv1.InfoResponse, error) {
	stores, rels := w.cfg.Stores.Resident()
	defer func() {
		for _, r := range rels {
			r()
		}
	}()
	infos := make([]*tidemarkv1.ShardInfo, 0, len(stores))
	for _, s := range stores {
		info := &tidemarkv1.ShardInfo{
			Target:             s.Target(),
			PendingGenerations: int64(merge.PendingOwn(s)),
		}
		if st, ok := s.WriterStats(); ok {
			info.MemtableRows = st.MemtableRows
			info.WriterEpoch = st.Epoch
		}
		infos = append(infos, info)
	}
	slices.SortFunc(infos, func(a, b *tidemarkv1.ShardInfo) int { return cmp.Compare(a.Target, b.Target) })
	return &tidemarkv1.InfoResponse{
		InstanceId: w.cfg.InstanceID,
		Version:    w.cfg.Version,
		GrpcAddr:   w.cfg.GRPCAddr,
		HttpAddr:   w.cfg.HTTPAddr,
		Stores:     infos,
	}, nil
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
	target string
	lane   tasks.Lane
}

// admit accepts token for target's lane if it is not older than the newest seen
// there, and records it as the newest.
func (f *fencingTokens) admit(target string, lane tasks.Lane, token int64) error {
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

// grpcError answers err with the gRPC code of its class (package errclass). The
// message is the error's text, which names the target or object concerned.
// UNAVAILABLE is never returned (see WorkerService): the retryable classes are
// RESOURCE_EXHAUSTED (retry later) and ABORTED (the call lost a race with a
// concurrent change of the store: retry the whole call).
func grpcError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codes.Internal
	switch errclass.Of(err) {
	case errclass.Timeout:
		code = codes.DeadlineExceeded
	case errclass.Canceled:
		code = codes.Canceled
	case errclass.Invalid:
		code = codes.InvalidArgument
	case errclass.Gone:
		code = codes.NotFound
	case errclass.Exists:
		code = codes.AlreadyExists
	case errclass.Precondition:
		code = codes.FailedPrecondition
	case errclass.Overloaded, errclass.Busy, errclass.Unavailable:
		code = codes.ResourceExhausted
	case errclass.Conflict:
		code = codes.Aborted
	case errclass.Halt:
		// The master fails the task naming the object, and cools the target down.
		code = codes.DataLoss
	}
	return status.Error(code, err.Error())
}
