package api

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidemark-io/tidemark/pkg/coord/stats"
	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

// errWorkerRegistered refuses to adopt a shard whose worker lives: adopting it
// would fence a writer that is still acknowledging rows.
var errWorkerRegistered = errclass.New(errclass.Precondition, "its worker is registered")

// errShardNotActive refuses to adopt a shard the store's stats row does not list
// as active: the fan-out adopts only those, so the task would adopt nothing.
var errShardNotActive = errclass.New(errclass.Gone, "not an active shard of the store")

// ForceAdopt marks one shard of a target orphaned now and enqueues merge_wal for
// the target (deduplicated), so a live worker adopts it without waiting for the
// grace.
func (a *AdminService) ForceAdopt(ctx context.Context, req *tidemarkv1.ForceAdoptRequest) (*tidemarkv1.ForceAdoptResponse, error) {
	if a.cfg.Orphans == nil {
		return nil, status.Error(codes.FailedPrecondition, "adopt: this master does not track orphaned shards: it calls a static worker list (WORKER_ENDPOINTS), and only workers registered in etcd say which shards have an owner")
	}
	return call(ctx, a, func(ctx context.Context) (*tidemarkv1.ForceAdoptResponse, error) {
		shard := req.GetShard()
		target, err := checkShard(ctx, a.cfg.Registry, req.GetTarget(), shard)
		if err != nil {
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
		m := a.cfg.Orphans.Force(target, shard)
		a.cfg.Logger.Warn("admin: shard marked orphaned by an operator; its adoption skips the grace", "target", target, "shard", shard, "missing_since", m.Since)
		t, dedup, err := a.enqueueTarget(ctx, tasks.KindMergeWAL, target, nil)
		if err != nil {
			return nil, err
		}
		return &tidemarkv1.ForceAdoptResponse{Task: TaskProto(t), Deduplicated: dedup, Shard: missingShardProto(m)}, nil
	})
}

// checkShard checks the shard's name before the target, so a malformed request is
// refused without a registry read.
func checkShard(ctx context.Context, reg *registry.Registry, text, shard string) (registry.Target, error) {
	if shard == "" {
		return registry.Target{}, fmt.Errorf("%w: shard is required (the INSTANCE_ID of the worker that is gone)", tasks.ErrInvalidArgument)
	}
	if err := wal.ValidateShard(shard); err != nil {
		return registry.Target{}, fmt.Errorf("%w: %w", tasks.ErrInvalidArgument, err)
	}
	return CheckTarget(ctx, reg, text)
}

// activeShard returns nil when target's stats row lists shard as active. A row
// that does not (or is missing) may be older than the shard: the target is
// observed again before the shard is refused.
func (a *AdminService) activeShard(ctx context.Context, target registry.Target, shard string) error {
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
