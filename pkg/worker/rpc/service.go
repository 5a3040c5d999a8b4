package rpc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
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
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	"github.com/tidemark-io/tidemark/pkg/worker/maintain"
	"github.com/tidemark-io/tidemark/pkg/worker/mergesvc"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
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
	// Merges runs merges under fencing tokens and keeps the record of them, which
	// the HTTP API shares; nil: one of Stores and Merger of its own, counting in
	// unregistered series.
	Merges *mergesvc.Service
	// Maintainer runs compact, verify and repair tasks; nil: one with the default
	// options, charging Merger's slots and budget.
	Maintainer *maintain.Maintainer
	// Horizons is the worker's view of the stores' change-feed horizons, which an
	// export of a store now reads for its feed cursor; nil (no etcd): exports
	// record no cursor.
	Horizons Horizons
	// Metrics are the service's own series; nil creates unregistered ones.
	Metrics *Metrics
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
}

// WorkerService implements tidemark.v1.WorkerService over a worker's stores and
// merger; its merges and fencing are mergesvc's (see the package doc for its
// invariants).
type WorkerService struct {
	tidemarkv1.UnimplementedWorkerServiceServer

	cfg    WorkerServiceConfig
	log    *slog.Logger
	health *health.Server
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
	if cfg.Merges == nil {
		m, err := mergesvc.New(mergesvc.Config{Stores: cfg.Stores, Merger: cfg.Merger, Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		cfg.Merges = m
	}
	if cfg.Maintainer == nil {
		cfg.Maintainer = maintain.New(maintain.Config{Reserver: cfg.Merger, CostFactor: merge.PassCostFactor,
			Logger: cfg.Logger.With("component", "maintain")})
	}
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(tidemarkv1.WorkerService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	return &WorkerService{
		cfg:    cfg,
		log:    cfg.Logger,
		health: hs,
	}, nil
}

// Health is the service's gRPC health server (registered by NewGRPCServer; ServeGRPC
// switches it to NOT_SERVING when shutdown starts).
func (w *WorkerService) Health() *health.Server { return w.health }

// MergeWal merges this worker's shard of the request's target. The fencing token is
// required: 0 is INVALID_ARGUMENT (only the HTTP internal route may merge unfenced).
func (w *WorkerService) MergeWal(ctx context.Context, req *tidemarkv1.MergeWalRequest) (*tidemarkv1.MergeWalResponse, error) {
	target, err := parseTarget(req.GetTarget())
	if err != nil {
		return nil, err
	}
	if err := requireToken(target, req.GetFencingToken()); err != nil {
		return nil, err
	}
	r, err := w.cfg.Merges.MergeTarget(ctx, target, req.GetFencingToken(), mergesvc.TriggerMaster)
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

// parseTarget parses a request's target, once, where it enters the worker; its
// error is a gRPC status.
func parseTarget(text string) (registry.Target, error) {
	target, err := registry.ParseTarget(text)
	if err != nil {
		return registry.Target{}, grpcError(err)
	}
	return target, nil
}

// admitFenced checks a master call's fencing token (required: only the HTTP
// internal route merges unfenced) and admits it in the task's lane of target
// (admit); its errors are gRPC statuses. The log it returns names the target,
// store and token.
func (w *WorkerService) admitFenced(target registry.Target, lane tasks.Lane, token int64) (*slog.Logger, error) {
	if err := requireToken(target, token); err != nil {
		return nil, err
	}
	log := w.log.With("target", target, "store", target.Name, "kind", target.Kind, "fencing_token", token)
	if err := w.cfg.Merges.Admit(target, lane, token, log); err != nil {
		return nil, grpcError(err)
	}
	return log, nil
}

// AdoptShard drains and retires another worker's shard of the request's target
// (merge.Merger.Adopt), under the same fencing as MergeWal.
func (w *WorkerService) AdoptShard(ctx context.Context, req *tidemarkv1.AdoptShardRequest) (*tidemarkv1.AdoptShardResponse, error) {
	target, err := parseTarget(req.GetTarget())
	if err != nil {
		return nil, err
	}
	kind, name := target.Kind, target.Name
	shard := req.GetShard()
	if err := wal.ValidateShard(shard); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "shard %q: %v", shard, err)
	}
	if shard == w.cfg.InstanceID {
		return nil, status.Errorf(codes.InvalidArgument, "shard %q is this worker's own: MergeWal merges it", shard)
	}
	log, err := w.admitFenced(target, tasks.LaneMerge, req.GetFencingToken())
	if err != nil {
		return nil, err
	}
	log = log.With("shard", shard)
	s, err := w.cfg.Stores.OpenShard(ctx, kind, name, shard)
	if err != nil {
		return nil, grpcError(mergesvc.StoreGone(ctx, w.cfg.Stores.Registry(), kind, name, err))
	}
	start := time.Now()
	r, err := w.cfg.Merger.Adopt(ctx, s, w.cfg.InstanceID)
	if cerr := s.Close(context.WithoutCancel(ctx)); cerr != nil {
		log.Warn("closing the adopted shard's writer", "err", cerr)
	}
	if errors.Is(err, wal.ErrNoShard) {
		return nil, status.Errorf(codes.NotFound, "store %s has no shard %q", target, shard)
	}
	if err != nil {
		log.Warn("adoption failed", "err", err, "duration", time.Since(start).String())
		return nil, grpcError(mergesvc.StoreGone(ctx, w.cfg.Stores.Registry(), kind, name, err))
	}
	w.cfg.Merges.Metrics().MergedGenerations.WithLabelValues(string(kind)).Add(float64(r.Merged.Generations))
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
	target, err := parseTarget(req.GetTarget())
	if err != nil {
		return nil, err
	}
	kind, name := target.Kind, target.Name
	sealed, err := w.flushStore(ctx, kind, name)
	if err != nil {
		return nil, grpcError(mergesvc.StoreGone(ctx, w.cfg.Stores.Registry(), kind, name, err))
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
	w.cfg.Merges.Metrics().ObserveSeal(kind, g != nil, err, time.Since(start))
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
			Target:             s.Target().String(),
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

// grpcError answers err with the gRPC code of its class (package errclass). The
// message is the error's text, which names the target or object concerned.
// UNAVAILABLE is never returned (see WorkerService): the retryable classes are
// RESOURCE_EXHAUSTED (retry later) and ABORTED (the call lost a race with a
// concurrent change of the store: retry the whole call).
func grpcError(err error) error {
	return errclass.ToGRPC(err)
}
