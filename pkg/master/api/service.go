package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidemark-io/tidemark/pkg/coord/membership"
	"github.com/tidemark-io/tidemark/pkg/coord/stats"
	"github.com/tidemark-io/tidemark/pkg/data/exportfmt"
	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/scanner"
	"github.com/tidemark-io/tidemark/pkg/tasks"
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
	Discovery fanout.Discovery
	// Wake, if set, is called after an enqueue so the scheduler looks for work at
	// once instead of at its next poll.
	Wake func()
	// CallTimeout bounds one call's work (DefaultCallTimeout); Rescan of every
	// store is bounded by the client's deadline only.
	CallTimeout time.Duration
	Logger      *slog.Logger
	// Orphans is the tracker the merge sweep and the fan-out read: stats show its
	// missing shards, and ForceAdopt marks one in it. Nil: stats show none, and
	// ForceAdopt is refused (FAILED_PRECONDITION).
	Orphans *fanout.Orphans
}

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

// EnqueueTask queues a task of a known kind on a registered target; an export
// with its spec, idempotent by the request's id (EnqueueExport).
func (a *AdminService) EnqueueTask(ctx context.Context, req *tidemarkv1.EnqueueTaskRequest) (*tidemarkv1.EnqueueTaskResponse, error) {
	return call(ctx, a, func(ctx context.Context) (*tidemarkv1.EnqueueTaskResponse, error) {
		kind, err := tasks.ParseKind(req.GetKind())
		if err != nil {
			return nil, err
		}
		var t tasks.Task
		var dedup bool
		switch {
		case kind == tasks.KindExport:
			if len(req.GetDependsOn()) > 0 {
				return nil, fmt.Errorf("%w: depends_on: an export runs when claimed, after no other task", tasks.ErrInvalidArgument)
			}
			if req.GetExport() == nil {
				return nil, fmt.Errorf("%w: export: an export task needs its spec (destination, and optionally version, columns, filter)", tasks.ErrInvalidArgument)
			}
			t, dedup, err = a.EnqueueExport(ctx, req.GetTarget(), fanout.ExportSpecOf(req.GetExport()), req.GetId())
		case req.GetExport() != nil || req.GetId() != "":
			return nil, fmt.Errorf("%w: export and id are taken with kind export only, not %s", tasks.ErrInvalidArgument, kind)
		default:
			t, dedup, err = a.enqueue(ctx, kind, req.GetTarget(), req.GetDependsOn())
		}
		if err != nil {
			return nil, err
		}
		return &tidemarkv1.EnqueueTaskResponse{Task: TaskProto(t), Deduplicated: dedup}, nil
	})
}

// EnqueueExport enqueues an export of the target a request names (checked by
// CheckTarget) with spec, under id ("": a new one), and wakes the scheduler;
// existing reports an export of the same id, target and spec answered instead.
func (a *AdminService) EnqueueExport(ctx context.Context, text string, spec exportfmt.Spec, id string) (tasks.Task, bool, error) {
	if err := spec.Validate(); err != nil {
		return tasks.Task{}, false, err
	}
	target, err := CheckTarget(ctx, a.cfg.Registry, text)
	if err != nil {
		return tasks.Task{}, false, err
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return tasks.Task{}, false, fmt.Errorf("export spec: %w", err)
	}
	t, existing, err := a.cfg.Tasks.EnqueueExport(ctx, target, raw, id)
	if err != nil {
		return tasks.Task{}, false, err
	}
	if a.cfg.Wake != nil && !existing {
		a.cfg.Wake()
	}
	a.cfg.Logger.Info("admin: task enqueued", "task", t.ID, "kind", tasks.KindExport, "target", target, "deduplicated", existing)
	return t, existing, nil
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

// enqueue enqueues kind on the target a request names (its text, checked by
// CheckTarget).
func (a *AdminService) enqueue(ctx context.Context, kind tasks.Kind, text string, dependsOn []string) (tasks.Task, bool, error) {
	target, err := CheckTarget(ctx, a.cfg.Registry, text)
	if err != nil {
		return tasks.Task{}, false, err
	}
	return a.enqueueTarget(ctx, kind, target, dependsOn)
}

// enqueueTarget enqueues kind on a target CheckTarget returned.
func (a *AdminService) enqueueTarget(ctx context.Context, kind tasks.Kind, target registry.Target, dependsOn []string) (tasks.Task, bool, error) {
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

// CheckTarget parses the target a request names, where its text enters, and
// returns it. The error wraps tasks.ErrInvalidArgument for a malformed target
// ("", "generic:", "a/b", "generic:../x") and registry.ErrNotFound for a
// well-formed target whose store is not registered.
func CheckTarget(ctx context.Context, reg *registry.Registry, text string) (registry.Target, error) {
	target, err := ParseTarget(text)
	if err != nil {
		return registry.Target{}, err
	}
	if _, err := reg.Get(ctx, target.Kind, target.Name); err != nil {
		return registry.Target{}, fmt.Errorf("target %q: %w", text, err)
	}
	return target, nil
}

// ParseTarget parses the target a request names; the error wraps
// tasks.ErrInvalidArgument, and says a target is required when text is empty.
func ParseTarget(text string) (registry.Target, error) {
	if text == "" {
		return registry.Target{}, fmt.Errorf(`%w: target is required ("<name>" for a rollout store, "generic:<name>" for a generic store)`, tasks.ErrInvalidArgument)
	}
	target, err := registry.ParseTarget(text)
	if err != nil {
		return registry.Target{}, fmt.Errorf("%w: %w", tasks.ErrInvalidArgument, err)
	}
	return target, nil
}

// targetFilter parses a list's target filter: "" is any target (the zero Target).
func targetFilter(text string) (registry.Target, error) {
	if text == "" {
		return registry.Target{}, nil
	}
	return ParseTarget(text)
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
		target, err := targetFilter(req.GetTarget())
		if err != nil {
			return nil, err
		}
		list, next, err := a.cfg.Tasks.List(ctx, tasks.ListFilter{
			State:       tasks.State(req.GetState()),
			Kind:        tasks.Kind(req.GetKind()),
			Target:      target,
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

// CancelTask fails a queued task with "cancelled", or asks a running export to
// stop.
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
	if a.cfg.Orphans == nil || len(rows) == 0 {
		return out, nil
	}
	live, err := a.cfg.Discovery.Workers(ctx)
	if err != nil {
		return nil, fmt.Errorf("missing shards: discover workers: %w", err)
	}
	for i, missing := range a.cfg.Orphans.MissingOf(rows, live) {
		for _, m := range missing {
			out[i].MissingShards = append(out[i].MissingShards, missingShardProto(m))
		}
	}
	return out, nil
}

// statsPage is scanner.Stats with the page token checked: a stats page token is
// the last target of the previous page, so anything that is not a target is a
// client's mistake.
func statsPage(ctx context.Context, s *scanner.Scanner, limit int, token string) ([]stats.Row, string, error) {
	if token != "" {
		if _, err := registry.ParseTarget(token); err != nil {
			return nil, "", fmt.Errorf("%w: page token %q is not one a previous call returned", tasks.ErrInvalidArgument, token)
		}
	}
	return s.Stats(ctx, scanner.Page{Limit: limit, PageToken: token})
}

// Rescan observes one target, or every store, now. Observing takes as long as the
// stores make it (the scanner bounds each store by its own timeout), so only the
// client's deadline bounds the call.
func (a *AdminService) Rescan(ctx context.Context, req *tidemarkv1.RescanRequest) (*tidemarkv1.RescanResponse, error) {
	text := req.GetTarget()
	if text == "" {
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
	// Malformed is InvalidArgument; Rescan checks that the target is registered
	// (NotFound, and a stale row of it is deleted).
	target, err := registry.ParseTarget(text)
	if err != nil {
		return nil, statusOf(ctx, fmt.Errorf("rescan: %w: %w", tasks.ErrInvalidArgument, err))
	}
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
	fanout.Worker
	Source string `json:"source"`
}

func listWorkers(ctx context.Context, d fanout.Discovery) ([]WorkerEntry, error) {
	ws, err := d.Workers(ctx)
	if err != nil {
		return nil, err
	}
	source := ""
	switch d.(type) {
	case fanout.StaticDiscovery:
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
