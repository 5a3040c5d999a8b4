package rpc

import (
	"context"
	"time"

	"github.com/tidemark-io/tidemark/pkg/tasks"
	"github.com/tidemark-io/tidemark/pkg/worker/mergesvc"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

// MergeStore merges every shard of the request's target's store in one commit per
// pass (merge.Merger.MergeStore), under the same fencing as MergeWal.
func (w *WorkerService) MergeStore(ctx context.Context, req *tidemarkv1.MergeStoreRequest) (*tidemarkv1.MergeStoreResponse, error) {
	target, err := parseTarget(req.GetTarget())
	if err != nil {
		return nil, err
	}
	kind, name := target.Kind, target.Name
	log, err := w.admitFenced(target, tasks.LaneMerge, req.GetFencingToken())
	if err != nil {
		return nil, err
	}
	log = log.With("trigger", mergesvc.TriggerMaster)
	s, release, err := w.cfg.Stores.Open(ctx, kind, name)
	if err != nil {
		return nil, grpcError(mergesvc.StoreGone(ctx, w.cfg.Stores.Registry(), kind, name, err))
	}
	defer release()
	start := time.Now()
	r, err := w.cfg.Merger.MergeStore(ctx, s, true)
	if err != nil {
		err = mergesvc.StoreGone(ctx, w.cfg.Stores.Registry(), kind, name, err)
	}
	w.cfg.Merges.ObserveMerge(kind, mergesvc.TriggerMaster, start, r.Result, err, log)
	if err != nil {
		return nil, grpcError(err)
	}
	return &tidemarkv1.MergeStoreResponse{
		Generations: int64(r.Generations),
		Rows:        r.Rows,
		Reclaimed:   int64(r.Reclaimed),
		BaseVersion: r.Version,
		InstanceId:  w.cfg.InstanceID,
		Merged:      r.Merged,
		// Level0 is of the last commit, as BaseVersion is.
		Level0Fragments: int64(r.Level0),
	}, nil
}

// DrainMerged drains this worker's shard of the request's target up to the base
// table's watermark (merge.Merger.DrainMerged), under the same fencing as MergeWal.
func (w *WorkerService) DrainMerged(ctx context.Context, req *tidemarkv1.DrainMergedRequest) (*tidemarkv1.DrainMergedResponse, error) {
	target, err := parseTarget(req.GetTarget())
	if err != nil {
		return nil, err
	}
	kind, name := target.Kind, target.Name
	log, err := w.admitFenced(target, tasks.LaneMerge, req.GetFencingToken())
	if err != nil {
		return nil, err
	}
	s, release, err := w.cfg.Stores.Open(ctx, kind, name)
	if err != nil {
		return nil, grpcError(mergesvc.StoreGone(ctx, w.cfg.Stores.Registry(), kind, name, err))
	}
	defer release()
	n, err := w.cfg.Merger.DrainMerged(ctx, s, nil, req.GetBaseVersion())
	if err != nil {
		log.Warn("drain of merged generations failed", "err", err)
		return nil, grpcError(mergesvc.StoreGone(ctx, w.cfg.Stores.Registry(), kind, name, err))
	}
	if n > 0 {
		log.Debug("drained the generations another worker merged", "generations", n)
	}
	return &tidemarkv1.DrainMergedResponse{Reclaimed: int64(n), InstanceId: w.cfg.InstanceID}, nil
}
