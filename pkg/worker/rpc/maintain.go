package rpc

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	"github.com/tidemark-io/tidemark/pkg/worker/maintain"
	"github.com/tidemark-io/tidemark/pkg/worker/mergesvc"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

// Maintain runs one maintenance task (compact, verify, repair) of the request's
// target on this worker, under the same fencing as MergeWal: the master holds the
// target's lock, and a stale master's call is refused before it touches the store.
func (w *WorkerService) Maintain(ctx context.Context, req *tidemarkv1.MaintainRequest) (*tidemarkv1.MaintainResponse, error) {
	target, err := parseTarget(req.GetTarget())
	if err != nil {
		return nil, err
	}
	kind, name := target.Kind, target.Name
	task := tasks.Kind(req.GetKind())
	if task != tasks.KindCompact && task != tasks.KindVerify && task != tasks.KindRepair {
		return nil, status.Errorf(codes.InvalidArgument, "kind %q: Maintain runs compact, verify or repair", req.GetKind())
	}
	log, err := w.admitFenced(target, task.Lane(), req.GetFencingToken())
	if err != nil {
		return nil, err
	}
	log = log.With("task", task)
	s, release, err := w.cfg.Stores.Open(ctx, kind, name)
	if err != nil {
		return nil, grpcError(mergesvc.StoreGone(ctx, w.cfg.Stores.Registry(), kind, name, err))
	}
	defer release()

	start := time.Now()
	var r maintain.Report
	if task == tasks.KindCompact {
		r, err = w.cfg.Maintainer.Compact(ctx, s)
	} else {
		r, err = w.cfg.Maintainer.Verify(ctx, s, task == tasks.KindRepair)
	}
	w.observeMaintenance(kind, task, r, err)
	if err != nil {
		log.Warn("maintenance failed", "err", err, "duration", time.Since(start).String())
		return nil, grpcError(mergesvc.StoreGone(ctx, w.cfg.Stores.Registry(), kind, name, err))
	}
	log.Info("maintenance done", "summary", r.Summary(), "duration", time.Since(start).String())
	resp := &tidemarkv1.MaintainResponse{
		InstanceId:         w.cfg.InstanceID,
		Summary:            r.Summary(),
		BaseVersion:        r.Version,
		CompactedFragments: int64(r.Compaction.Sources),
		WrittenFragments:   int64(r.Compaction.Outputs),
		RewrittenRows:      r.Compaction.RowsWritten,
		DroppedDeletedRows: r.Compaction.RowsDropped,
		WrittenBytes:       r.Compaction.BytesWritten,
		DeletedObjects:     int64(r.Table.ManifestsDeleted + r.Table.FilesDeleted + r.WAL.ManifestsDeleted + r.WAL.FilesDeleted),
		DeletedBytes:       r.Table.BytesDeleted + r.WAL.BytesDeleted,
		DeletedVersions:    int64(r.Table.ManifestsDeleted),
		DeletedFiles:       int64(r.Table.FilesDeleted + r.WAL.ManifestsDeleted + r.WAL.FilesDeleted),
		DroppedFragments:   int64(r.Dropped),
		DroppedRows:        r.DroppedRows,
	}
	if v := r.Verify; v != nil {
		resp.CheckedObjects = int64(v.Objects)
		for _, p := range v.Problems {
			resp.Problems = append(resp.Problems, p.Path+": "+p.Problem)
		}
	}
	return resp, nil
}

// observeMaintenance counts a maintenance task in the worker's metrics.
func (w *WorkerService) observeMaintenance(kind registry.Kind, task tasks.Kind, r maintain.Report, err error) {
	m, k := w.cfg.Metrics, string(kind)
	if task == tasks.KindCompact {
		result := "success"
		switch {
		case err != nil:
			result = "failure"
		case r.Compaction.Sources == 0:
			result = "noop"
		}
		m.Compactions.WithLabelValues(result).Inc()
		m.CompactedFragments.WithLabelValues(k).Add(float64(r.Compaction.Sources))
		m.CompactionBytes.WithLabelValues(k).Add(float64(r.Compaction.BytesWritten))
	}
	m.CleanupObjects.WithLabelValues(k).Add(float64(r.Table.ManifestsDeleted + r.Table.FilesDeleted + r.WAL.ManifestsDeleted + r.WAL.FilesDeleted))
	m.CleanupBytes.WithLabelValues(k).Add(float64(r.Table.BytesDeleted + r.WAL.BytesDeleted))
	if r.Verify != nil {
		m.VerifyProblems.WithLabelValues(k).Add(float64(len(r.Verify.Problems)))
	}
	m.RepairDroppedFragments.WithLabelValues(k).Add(float64(r.Dropped))
}

// requireToken refuses a fencing token of 0 or less: calls from the master always
// carry the revision of its lock of target.
func requireToken(target registry.Target, token int64) error {
	if token <= 0 {
		return status.Errorf(codes.InvalidArgument,
			"fencing_token %d: must be > 0 (the etcd revision of the master's lock of target %q)", token, target.String())
	}
	return nil
}
