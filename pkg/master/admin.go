package master

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tidemark-io/tidemark/internal/grpcserver"
	"github.com/tidemark-io/tidemark/pkg/coord/membership"
	"github.com/tidemark-io/tidemark/pkg/coord/stats"
	"github.com/tidemark-io/tidemark/pkg/coord/tasks"
	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/master/scanner"
	"github.com/tidemark-io/tidemark/pkg/storage/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

// DefaultCallTimeout bounds the etcd and object-store work of one admin call (all
// but a rescan of every store), so a call made while etcd is away answers
// UNAVAILABLE instead of hanging until the client gives up.
const DefaultCallTimeout = 10 * time.Second

// AdminConfig is what the AdminService needs.
type AdminConfig struct {
	Tasks     *tasks.Queue
	Scanner   *scanner.Scanner
	Registry  *registry.Registry
	Discovery Discovery
	// Wake, if set, is called after an enqueue so the scheduler looks for work at
	// once instead of at its next poll.
	Wake func()
	// CallTimeout bounds one call's work (DefaultCallTimeout); Rescan of every
	// store is bounded by the client's deadline only.
	CallTimeout time.Duration
	Logger      *slog.Logger
	// orphans is the tracker the merge sweep and the fan-out read: stats show its
	// missing shards, and ForceAdopt marks one in it. Nil: stats show none, and
	// ForceAdopt is UNIMPLEMENTED.
	orphans *orphans
}

// errWorkerRegistered refuses to adopt a shard whose worker lives: adopting it
// would fence a writer that is still acknowledging rows.
var errWorkerRegistered = errclass.New(errclass.Precondition, "its worker is registered")

// errShardNotActive refuses to adopt a shard the store's stats row does not list
// as active: the fan-out adopts only those, so the task would adopt nothing.
var errShardNotActive = errclass.New(errclass.Gone, "not an active shard of the store")

// AdminService implements tidemark.v1.AdminService over the task queue, the stats
// scanner, the store registries and worker discovery.
//
// Errors are mapped to status codes in one place (statusOf, by errclass): bad input
// is INVALID_ARGUMENT naming the problem, a missing task, store, stats row or
// active shard is NOT_FOUND, a task that cannot be cancelled (or a shard to adopt
// whose worker is registered) is FAILED_PRECONDITION, a corrupt object is
// DATA_LOSS naming it, etcd or the object store not answering (or throttling) is
// UNAVAILABLE.
type AdminService struct {
	tidemarkv1.UnimplementedAdminServiceServer
	cfg AdminConfig
}

// NewAdminService returns the service; Tasks, Scanner, Registry and Discovery are
// required.
func NewAdminService(cfg AdminConfig) (*AdminService, error) {
	switch {
	case cfg.Tasks == nil:
		return nil, errors.New("admin service: Tasks is required")
	case cfg.Scanner == nil:
		return nil, errors.New("admin service: Scanner is required")
	case cfg.Registry == nil:
		return nil, errors.New("admin service: Registry is required")
	case cfg.Discovery == nil:
		return nil, errors.New("admin service: Discovery is required")
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &AdminService{cfg: cfg}, nil
}

// call runs fn under the call timeout and maps its error to a status.
func call[T any](ctx context.Context, a *AdminService, fn func(ctx context.Context) (T, error)) (T, error) {
	cctx, cancel := context.WithTimeout(ctx, a.cfg.CallTimeout)
	defer cancel()
	resp, err := fn(cctx)
	if err != nil {
		var zero T
		return zero, statusOf(ctx, err)
	}
	return resp, nil
}

// EnqueueTask queues a task of a known kind on a registered target.
func (a *AdminService) EnqueueTask(ctx context.Context, req *tidemarkv1.EnqueueTaskRequest) (*tidemarkv1.EnqueueTaskResponse, error) {
	return call(ctx, a, func(ctx context.Context) (*tidemarkv1.EnqueueTaskResponse, error) {
		kind, err := tasks.ParseKind(req.GetKind())
		if err != nil {
			return nil, err
		}
		t, dedup, err := a.enqueue(ctx, kind, req.GetTarget(), req.GetDependsOn())
		if err != nil {
			return nil, err
		}
		return &tidemarkv1.EnqueueTaskResponse{Task: TaskProto(t), Deduplicated: dedup}, nil
	})
}

// RequeueMerge enqueues merge_wal on a registered target (deduplicated) and wakes
// the scheduler.
func (a *AdminService) RequeueMerge(ctx context.Context, req *tidemarkv1.RequeueMergeRequest) (*tidemarkv1.RequeueMergeResponse, error) {
	return call(ctx, a, func(ctx context.Context) (*tidemarkv1.RequeueMergeResponse, error) {
		t, dedup, err := a.enqueue(ctx, tasks.KindMergeWAL, req.GetTarget(), nil)
		if err != nil {
			return nil, err
		}
		return &tidemarkv1.RequeueMergeResponse{Task: TaskProto(t), Deduplicated: dedup}, nil
	})
}

func (a *AdminService) enqueue(ctx context.Context, kind tasks.Kind, target string, dependsOn []string) (tasks.Task, bool, error) {
	if err := CheckTarget(ctx, a.cfg.Registry, target); err != nil {
		return tasks.Task{}, false, err
	}
	t, dedup, err := a.cfg.Tasks.Enqueue(ctx, kind, target, dependsOn...)
	if err != nil {
		return tasks.Task{}, false, err
	}
	if a.cfg.Wake != nil {
		a.cfg.Wake()
	}
	a.cfg.Logger.Info("admin: task enqueued", "task", t.ID, "kind", kind, "target", target, "deduplicated", dedup)
	return t, dedup, nil
}

// CheckTarget returns an error wrapping tasks.ErrInvalidArgument for a malformed
// target ("", "generic:", "a/b", "generic:../x") and one wrapping
// registry.ErrNotFound for a well-formed target whose store is not registered.
func CheckTarget(ctx context.Context, reg *registry.Registry, target string) error {
	if target == "" {
		return fmt.Errorf(`%w: target is required ("<name>" for a rollout store, "generic:<name>" for a generic store)`, tasks.ErrInvalidArgument)
	}
	kind, name, err := registry.ParseTarget(target)
	if err != nil {
		return fmt.Errorf("%w: %w", tasks.ErrInvalidArgument, err)
	}
	if _, err := reg.Get(ctx, kind, name); err != nil {
		return fmt.Errorf("target %q: %w", target, err)
	}
	return nil
}

// GetTask returns one task.
func (a *AdminService) GetTask(ctx context.Context, req *tidemarkv1.GetTaskRequest) (*tidemarkv1.GetTaskResponse, error) {
	return call(ctx, a, func(ctx context.Context) (*tidemarkv1.GetTaskResponse, error) {
		t, err := a.cfg.Tasks.Get(ctx, req.GetId())
		if err != nil {
			return nil, err
		}
		return &tidemarkv1.GetTaskResponse{Task: TaskProto(t)}, nil
	})
}

// ListTasks lists one page of tasks.
func (a *AdminService) ListTasks(ctx context.Context, req *tidemarkv1.ListTasksRequest) (*tidemarkv1.ListTasksResponse, error) {
	return call(ctx, a, func(ctx context.Context) (*tidemarkv1.ListTasksResponse, error) {
		list, next, err := a.cfg.Tasks.List(ctx, tasks.ListFilter{
			State:       tasks.State(req.GetState()),
			Kind:        tasks.Kind(req.GetKind()),
			Target:      req.GetTarget(),
			Limit:       int(req.GetPageSize()),
			PageToken:   req.GetPageToken(),
			NewestFirst: req.GetNewestFirst(),
		})
		if err != nil {
			return nil, err
		}
		out := &tidemarkv1.ListTasksResponse{Tasks: make([]*tidemarkv1.Task, 0, len(list)), NextPageToken: next}
		for _, t := range list {
			out.Tasks = append(out.Tasks, TaskProto(t))
		}
		return out, nil
	})
}

// CancelTask fails a queued task with "cancelled".
func (a *AdminService) CancelTask(ctx context.Context, req *tidemarkv1.CancelTaskRequest) (*tidemarkv1.CancelTaskResponse, error) {
	return call(ctx, a, func(ctx context.Context) (*tidemarkv1.CancelTaskResponse, error) {
		t, err := a.cfg.Tasks.Cancel(ctx, req.GetId())
		if err != nil {
			return nil, err
		}
		return &tidemarkv1.CancelTaskResponse{Task: TaskProto(t)}, nil
	})
}

// ListStats lists one page of stats rows in target order.
func (a *AdminService) ListStats(ctx context.Context, req *tidemarkv1.ListStatsRequest) (*tidemarkv1.ListStatsResponse, error) {
	return call(ctx, a, func(ctx context.Context) (*tidemarkv1.ListStatsResponse, error) {
		rows, next, err := statsPage(ctx, a.cfg.Scanner, int(req.GetPageSize()), req.GetPageToken())
		if err != nil {
			return nil, err
		}
		stats, err := a.statsProtos(ctx, rows)
		if err != nil {
			return nil, err
		}
		return &tidemarkv1.ListStatsResponse{Stats: stats, NextPageToken: next}, nil
	})
}

// statsProtos converts rows, with their missing shards when the service tracks
// orphaned shards. The workers are listed once for the page.
func (a *AdminService) statsProtos(ctx context.Context, rows []stats.Row) ([]*tidemarkv1.StatsRow, error) {
	out := make([]*tidemarkv1.StatsRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, StatsProto(r))
	}
	if a.cfg.orphans == nil || len(rows) == 0 {
		return out, nil
	}
	live, err := a.cfg.Discovery.Workers(ctx)
	if err != nil {
		return nil, fmt.Errorf("missing shards: discover workers: %w", err)
	}
	for i, missing := range a.cfg.orphans.missingOf(rows, live) {
		for _, m := range missing {
			out[i].MissingShards = append(out[i].MissingShards, missingShardProto(m))
		}
	}
	return out, nil
}

func missingShardProto(m missingShard) *tidemarkv1.MissingShard {
	return &tidemarkv1.MissingShard{
		Shard:        m.shard,
		MissingSince: timestamp(m.since),
		OrphanedAt:   timestamp(m.orphanedAt),
		Orphaned:     m.orphaned,
	}
}

// statsPage is scanner.Stats with the page token checked: a stats page token is
// the last target of the previous page, so anything that is not a target is a
// client's mistake.
func statsPage(ctx context.Context, s *scanner.Scanner, limit int, token string) ([]stats.Row, string, error) {
	if token != "" {
		if _, _, err := registry.ParseTarget(token); err != nil {
			return nil, "", fmt.Errorf("%w: page token %q is not one a previous call returned", tasks.ErrInvalidArgument, token)
		}
	}
	return s.Stats(ctx, scanner.Page{Limit: limit, PageToken: token})
}

// Rescan observes one target, or every store, now. Observing takes as long as the
// stores make it (the scanner bounds each store by its own timeout), so only the
// client's deadline bounds the call.
func (a *AdminService) Rescan(ctx context.Context, req *tidemarkv1.RescanRequest) (*tidemarkv1.RescanResponse, error) {
	target := req.GetTarget()
	if target == "" {
		sum, err := a.cfg.Scanner.Scan(ctx)
		if err != nil {
			return nil, statusOf(ctx, err)
		}
		if sum.Skipped {
			return nil, status.Errorf(codes.FailedPrecondition,
				"rescan: another master replica is scanning (%s); send the rescan to that replica, or rescan one target", sum.SkipReason)
		}
		if sum.Errors > 0 {
			a.cfg.Logger.Warn("admin: rescan left stores unobserved; their rows keep their previous values", "errors", sum.Errors)
		}
		return &tidemarkv1.RescanResponse{
			Observed: int64(sum.Probed + sum.Observed),
			Written:  int64(sum.Changed + sum.Deleted),
		}, nil
	}
	// Rescan checks the target itself: malformed is InvalidArgument, not
	// registered is NotFound (and a stale row of it is deleted).
	before, berr := a.cfg.Scanner.Row(ctx, target)
	row, err := a.cfg.Scanner.Rescan(ctx, target)
	if err != nil {
		return nil, statusOf(ctx, err)
	}
	// The row is written by now: workers not listed cost its missing shards only.
	sctx, cancel := context.WithTimeout(ctx, a.cfg.CallTimeout)
	stats, err := a.statsProtos(sctx, []stats.Row{row})
	cancel()
	if err != nil {
		a.cfg.Logger.Warn("admin: rescan answers without the missing shards", "target", target, "err", err)
		stats = []*tidemarkv1.StatsRow{StatsProto(row)}
	}
	// Rescan writes a row only when the observation changed, and returns the
	// stored row otherwise.
	resp := &tidemarkv1.RescanResponse{Observed: 1, Stats: stats[0]}
	if berr != nil || !before.SameObservation(row) || !before.ScannedAt.Equal(row.ScannedAt) {
		resp.Written = 1
	}
	return resp, nil
}

// ForceAdopt marks one shard of a target orphaned now and enqueues merge_wal for
// the target (deduplicated), so a live worker adopts it without waiting for the
// grace.
func (a *AdminService) ForceAdopt(ctx context.Context, req *tidemarkv1.ForceAdoptRequest) (*tidemarkv1.ForceAdoptResponse, error) {
	if a.cfg.orphans == nil {
		return nil, status.Error(codes.FailedPrecondition, "adopt: this master does not track orphaned shards: it calls a static worker list (WORKER_ENDPOINTS), and only workers registered in etcd say which shards have an owner")
	}
	return call(ctx, a, func(ctx context.Context) (*tidemarkv1.ForceAdoptResponse, error) {
		target, shard := req.GetTarget(), req.GetShard()
		if err := checkShard(ctx, a.cfg.Registry, target, shard); err != nil {
			return nil, err
		}
		workers, err := a.cfg.Discovery.Workers(ctx)
		if err != nil {
			return nil, fmt.Errorf("discover workers: %w", err)
		}
		for _, w := range workers {
			if w.InstanceID == shard {
				return nil, fmt.Errorf("adopt shard %s of %s: %w: worker %s at %s; adoption is for a shard whose worker is gone (stopped, and its registration expired)",
					shard, target, errWorkerRegistered, w.InstanceID, w.GRPCAddr)
			}
		}
		if err := a.activeShard(ctx, target, shard); err != nil {
			return nil, err
		}
		// Marked before the enqueue: should the enqueue fail, the next merge sweep
		// enqueues for the shard.
		m := a.cfg.orphans.force(target, shard)
		a.cfg.Logger.Warn("admin: shard marked orphaned by an operator; its adoption skips the grace", "target", target, "shard", shard, "missing_since", m.since)
		t, dedup, err := a.enqueue(ctx, tasks.KindMergeWAL, target, nil)
		if err != nil {
			return nil, err
		}
		return &tidemarkv1.ForceAdoptResponse{Task: TaskProto(t), Deduplicated: dedup, Shard: missingShardProto(m)}, nil
	})
}

// checkShard checks the shard's name before the target, so a malformed request is
// refused without a registry read.
func checkShard(ctx context.Context, reg *registry.Registry, target, shard string) error {
	if shard == "" {
		return fmt.Errorf("%w: shard is required (the INSTANCE_ID of the worker that is gone)", tasks.ErrInvalidArgument)
	}
	if err := wal.ValidateShard(shard); err != nil {
		return fmt.Errorf("%w: %w", tasks.ErrInvalidArgument, err)
	}
	return CheckTarget(ctx, reg, target)
}

// activeShard returns nil when target's stats row lists shard as active. A row
// that does not (or is missing) may be older than the shard: the target is
// observed again before the shard is refused.
func (a *AdminService) activeShard(ctx context.Context, target, shard string) error {
	row, err := a.cfg.Scanner.Row(ctx, target)
	if err != nil && !errors.Is(err, stats.ErrRowNotFound) {
		return err
	}
	if err == nil && slices.Contains(row.ActiveShards, shard) {
		return nil
	}
	if row, err = a.cfg.Scanner.Rescan(ctx, target); err != nil {
		return err
	}
	if slices.Contains(row.ActiveShards, shard) {
		return nil
	}
	return fmt.Errorf("adopt shard %s of %s: %w (active: %s); a retired shard was adopted already",
		shard, target, errShardNotActive, orNone(strings.Join(row.ActiveShards, ", ")))
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// ListWorkers lists the workers the master calls.
func (a *AdminService) ListWorkers(ctx context.Context, _ *tidemarkv1.ListWorkersRequest) (*tidemarkv1.ListWorkersResponse, error) {
	return call(ctx, a, func(ctx context.Context) (*tidemarkv1.ListWorkersResponse, error) {
		ws, err := listWorkers(ctx, a.cfg.Discovery)
		if err != nil {
			return nil, err
		}
		out := &tidemarkv1.ListWorkersResponse{Workers: make([]*tidemarkv1.WorkerInfo, 0, len(ws))}
		for _, w := range ws {
			out.Workers = append(out.Workers, WorkerProto(w))
		}
		return out, nil
	})
}

// WorkerEntry is a worker as the admin API lists it: discovery's record and where
// it came from ("etcd" or "static").
type WorkerEntry struct {
	Worker
	Source string `json:"source"`
}

func listWorkers(ctx context.Context, d Discovery) ([]WorkerEntry, error) {
	ws, err := d.Workers(ctx)
	if err != nil {
		return nil, err
	}
	source := ""
	switch d.(type) {
	case StaticDiscovery:
		source = "static"
	case *membership.Discovery:
		source = "etcd"
	}
	out := make([]WorkerEntry, 0, len(ws))
	for _, w := range ws {
		out = append(out, WorkerEntry{Worker: w, Source: source})
	}
	return out, nil
}

// statusOf maps err to a gRPC status error. ctx is the call's own context: when it
// is done, the client gave up (CANCELLED or DEADLINE_EXCEEDED); when only the
// server's own bound ran out, etcd or the object store did not answer
// (UNAVAILABLE).
func statusOf(ctx context.Context, err error) error {
	code, msg := classify(ctx, err)
	return status.Error(code, msg)
}

// classify maps err to a code and a message for the client, by its class
// (package errclass). It is the one place the admin service's errors become codes,
// for gRPC and HTTP alike.
func classify(ctx context.Context, err error) (codes.Code, string) {
	class := errclass.Of(err)
	switch class {
	case errclass.Invalid:
		return codes.InvalidArgument, err.Error()
	case errclass.Gone:
		return codes.NotFound, err.Error()
	case errclass.Precondition:
		return codes.FailedPrecondition, err.Error()
	case errclass.Halt:
		// A corrupt registry object or stats row: the message names it.
		return codes.DataLoss, err.Error()
	}
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Code(), err.Error()
	}
	switch class {
	case errclass.Timeout:
		return codes.Unavailable, fmt.Sprintf("timed out: etcd or the object store did not answer in time: %v", err)
	case errclass.Conflict, errclass.Overloaded, errclass.Busy, errclass.Unavailable:
		if _, isStatus := status.FromError(err); isStatus || errors.As(err, new(interface{ Code() codes.Code })) {
			// etcd's client returns its transport failures as gRPC statuses (wrapped
			// by our error context) or as rpctypes errors carrying a code.
			return codes.Unavailable, fmt.Sprintf("etcd unavailable: %v", err)
		}
		return codes.Unavailable, err.Error()
	}
	return codes.Internal, err.Error()
}

// TaskProto converts a task record.
func TaskProto(t tasks.Task) *tidemarkv1.Task {
	return &tidemarkv1.Task{
		Id:           t.ID,
		Kind:         string(t.Kind),
		Target:       t.Target,
		State:        string(t.State),
		Error:        t.Error,
		Detail:       t.Detail,
		EnqueuedAt:   timestamp(t.EnqueuedAt),
		StartedAt:    timestamp(t.StartedAt),
		FinishedAt:   timestamp(t.FinishedAt),
		DependsOn:    t.DependsOn,
		Attempts:     int32(t.Attempts),
		ClaimToken:   t.ClaimToken,
		FencingToken: t.FencingToken,
		Stats:        TaskStatsProto(t.Stats),
	}
}

// TaskStatsProto converts a task's stats; a task without any converts to a
// message of zeros, so every task answers the same shape.
func TaskStatsProto(s tasks.Stats) *tidemarkv1.TaskStats {
	return &tidemarkv1.TaskStats{
		Workers:            s.Workers,
		WorkersMerged:      s.WorkersMerged,
		WorkersSkipped:     s.WorkersSkipped,
		WorkersFailed:      s.WorkersFailed,
		GenerationsMerged:  s.GenerationsMerged,
		RowsMerged:         s.RowsMerged,
		ShardsAdopted:      s.ShardsAdopted,
		FragmentsCompacted: s.FragmentsCompacted,
		FragmentsWritten:   s.FragmentsWritten,
		RowsRewritten:      s.RowsRewritten,
		DeletedRowsDropped: s.DeletedRowsDropped,
		VersionsDeleted:    s.VersionsDeleted,
		FilesDeleted:       s.FilesDeleted,
		BytesReclaimed:     s.BytesReclaimed,
		ObjectsChecked:     s.ObjectsChecked,
		ProblemsFound:      s.ProblemsFound,
		FragmentsDropped:   s.FragmentsDropped,
		RowsDropped:        s.RowsDropped,
		BaseVersion:        s.BaseVersion,
	}
}

// StatsProto converts a stats row.
func StatsProto(r stats.Row) *tidemarkv1.StatsRow {
	out := &tidemarkv1.StatsRow{
		Target:                r.Target,
		Version:               r.Version,
		RowCount:              r.RowCount,
		FragmentCount:         int64(r.FragmentCount),
		PendingWalGenerations: int64(r.PendingWALGenerations),
		LastUpdated:           timestamp(r.LastUpdated),
		ScannedAt:             timestamp(r.ScannedAt),
		Shards:                int64(r.Shards),
		ActiveShards:          r.ActiveShards,
	}
	if len(r.PendingByShard) > 0 {
		out.PendingByShard = make(map[string]int64, len(r.PendingByShard))
		for shard, n := range r.PendingByShard {
			out.PendingByShard[shard] = int64(n)
		}
	}
	return out
}

// WorkerProto converts a worker entry; a worker without a start time (a static
// one) has none.
func WorkerProto(w WorkerEntry) *tidemarkv1.WorkerInfo {
	out := &tidemarkv1.WorkerInfo{
		InstanceId: w.InstanceID,
		GrpcAddr:   w.GRPCAddr,
		HttpAddr:   w.HTTPAddr,
		Version:    w.Version,
		Source:     w.Source,
		StartedAt:  timestamp(w.StartedAt),
	}
	return out
}

func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// gRPC server limits: admin requests and answers are small (a page of at most
// 1000 tasks or rows is the largest).
const (
	grpcMaxRecvBytes         = 1 << 20
	grpcMaxSendBytes         = 16 << 20
	grpcMaxConcurrentStreams = 256
	grpcConnectionTimeout    = 10 * time.Second
)

// AdminServiceName is the health service name of the AdminService.
const AdminServiceName = "tidemark.v1.AdminService"

// NewGRPCServer returns a gRPC server with the AdminService, the standard health
// service (hs, whose statuses the caller sets) and server reflection (so grpcurl
// works without the .proto files). Every call runs under a recover: a panic
// answers INTERNAL and is logged with its stack instead of killing the master.
func NewGRPCServer(svc *AdminService, hs *health.Server, log *slog.Logger, opts ...grpc.ServerOption) *grpc.Server {
	base := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(grpcMaxRecvBytes),
		grpc.MaxSendMsgSize(grpcMaxSendBytes),
		grpc.MaxConcurrentStreams(grpcMaxConcurrentStreams),
		grpc.ConnectionTimeout(grpcConnectionTimeout),
	}
	gs := grpcserver.New(log, hs, append(base, opts...)...)
	tidemarkv1.RegisterAdminServiceServer(gs, svc)
	return gs
}
