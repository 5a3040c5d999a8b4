package rpc

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidemark-io/tidemark/pkg/data/exportfmt"
	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/export"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	"github.com/tidemark-io/tidemark/pkg/worker/mergesvc"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

// Horizons is the worker's view of each store's change-feed horizon
// (pkg/coord/horizon.View): every row that will ever be live with _seq at or
// below it is sealed already. An export of the store now reads it to say where a
// consumer can tail the feed from after the snapshot.
type Horizons interface {
	// Horizon returns the store's horizon, and false while no shard published one.
	Horizon(ctx context.Context, target registry.Target) (h uint64, ok bool, err error)
}

// exportProgressEvery spaces the progress messages of an export's stream: the
// master records them every few seconds, and a message per row group would be
// thousands for nothing.
const exportProgressEvery = time.Second

// errHorizon is an export of the store now whose feed cursor could not be told
// (etcd away): the manifest must not promise a cursor it does not know, and an
// export without one would leave its consumer nowhere to tail from. Retry.
var errHorizon = errclass.New(errclass.Unavailable, "the store's change-feed horizon could not be read")

// Export writes a snapshot of the request's target to its destination (package
// export), under the same fencing as Maintain (the maintenance lane: no
// compaction of the store deletes the files the export reads while it runs), and
// streams its progress; the last message carries the manifest's summary.
//
// The feed cursor of an export of the store now is where a consumer tails the
// change feed from to see every change after the snapshot. Its order is the
// feed's (pkg/worker/feed's Read): the horizon H is read first, then the store's
// snapshot is refreshed (Sync) and the scan opened on it, so the snapshot holds
// every row with _seq <= H (the horizon's promise) and the cursor after H misses
// none of what came later; rows the snapshot also holds (above H) may come again.
// An export at a version has no cursor: which feed position a past version ends
// at is not recorded, and a cursor that were off would miss rows.
func (w *WorkerService) Export(req *tidemarkv1.ExportRequest, stream tidemarkv1.WorkerService_ExportServer) error {
	ctx := stream.Context()
	target, err := parseTarget(req.GetTarget())
	if err != nil {
		return err
	}
	spec := export.Spec{Destination: req.GetSpec().GetDestination(), Version: req.GetSpec().GetVersion(),
		Columns: req.GetSpec().GetColumns(), Filter: req.GetSpec().GetFilter()}
	if err := spec.Validate(); err != nil {
		return grpcError(err)
	}
	if _, err := uuid.Parse(req.GetTaskId()); err != nil {
		return status.Errorf(codes.InvalidArgument, "task_id %q: want the export task's id (a UUID): it names the export's files", req.GetTaskId())
	}
	log, err := w.admitFenced(target, tasks.LaneMaintenance, req.GetFencingToken())
	if err != nil {
		return err
	}
	log = log.With("task", req.GetTaskId(), "destination", redactURL(spec.Destination))
	start := time.Now()
	m, err := w.export(ctx, target, req.GetTaskId(), spec, func(p export.Progress) error {
		return stream.Send(&tidemarkv1.ExportProgress{InstanceId: w.cfg.InstanceID, Rows: p.Rows, Files: p.Files,
			Bytes: p.Bytes, Estimate: p.Estimate})
	})
	w.observeExport(target.Kind, m, err)
	if err != nil {
		log.Warn("export failed", "err", err, "duration", time.Since(start).String())
		return grpcError(mergesvc.StoreGone(ctx, w.cfg.Stores.Registry(), target.Kind, target.Name, err))
	}
	log.Info("export done", "rows", m.Rows, "files", len(m.Files), "bytes", m.Bytes, "version", m.Version,
		"feed_cursor", m.FeedCursor, "duration", time.Since(start).String())
	return stream.Send(&tidemarkv1.ExportProgress{InstanceId: w.cfg.InstanceID, Rows: m.Rows, Files: int64(len(m.Files)),
		Bytes: m.Bytes, Estimate: m.Rows, Done: true, Manifest: manifestURL(spec.Destination), Version: m.Version,
		FeedCursor: m.FeedCursor})
}

// export opens the store and the destination and writes the export, calling
// send with its progress at most every exportProgressEvery.
func (w *WorkerService) export(ctx context.Context, target registry.Target, taskID string, spec export.Spec,
	send func(export.Progress) error) (export.Manifest, error) {
	st, release, err := w.cfg.Stores.Open(ctx, target.Kind, target.Name)
	if err != nil {
		return export.Manifest{}, err
	}
	defer release()
	cursor := ""
	if spec.Version == 0 {
		if cursor, err = w.feedCursor(ctx, st); err != nil {
			return export.Manifest{}, err
		}
	}
	dst, err := export.OpenDestination(ctx, spec)
	if err != nil {
		return export.Manifest{}, err
	}
	defer dst.Close()
	sc, err := export.Open(ctx, st, spec)
	if err != nil {
		return export.Manifest{}, err
	}

	// Progress comes on Write's goroutine, the only one sending until it returns.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var sent time.Time
	progress := func(p export.Progress) {
		if time.Since(sent) < exportProgressEvery {
			return
		}
		sent = time.Now()
		if err := send(p); err != nil {
			cancel(fmt.Errorf("the master stopped listening: %w", err)) // it went away: stop writing
		}
	}
	m, err := export.Write(ctx, sc, target, dst, export.Options{TaskID: taskID, Spec: spec, FeedCursor: cursor,
		Progress: progress, Logger: w.log.With("target", target, "task", taskID)})
	if err != nil && context.Cause(ctx) != nil && ctx.Err() != nil {
		err = fmt.Errorf("%w (%w)", err, context.Cause(ctx))
	}
	return m, err
}

// feedCursor reads the store's horizon and then refreshes its snapshot, in that
// order (see Export), and returns the cursor after the horizon: "" when no
// shard has published one yet (the feed's beginning then misses nothing either:
// a feed read from "" starts at the first row). A worker without etcd has no
// horizons and no feed: "".
func (w *WorkerService) feedCursor(ctx context.Context, st *store.Store) (string, error) {
	if w.cfg.Horizons == nil {
		return "", nil
	}
	h, ok, err := w.cfg.Horizons.Horizon(ctx, st.Target())
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", fmt.Errorf("store %s: %w: %w", st.Target(), errHorizon, err)
	}
	if err := st.Sync(ctx, 0); err != nil {
		return "", err
	}
	if !ok {
		return "", nil
	}
	return rowkey.After(h).Cursor(), nil
}

// observeExport counts an export in the worker's metrics.
func (w *WorkerService) observeExport(kind registry.Kind, m export.Manifest, err error) {
	result := "success"
	switch {
	case errors.Is(err, context.Canceled):
		result = "cancelled"
	case err != nil:
		result = "failure"
	}
	w.cfg.Metrics.Exports.WithLabelValues(result).Inc()
	if err == nil {
		w.cfg.Metrics.ExportedRows.WithLabelValues(string(kind)).Add(float64(m.Rows))
		w.cfg.Metrics.ExportedBytes.WithLabelValues(string(kind)).Add(float64(m.Bytes))
	}
}

// manifestURL is the URL of an export's manifest in its destination: the
// bucket's URL with the key (under the ?prefix=) as its path, user info left out.
func manifestURL(destination string) string {
	u, err := url.Parse(destination)
	if err != nil {
		return ""
	}
	u.User = nil
	q := u.Query()
	prefix := q.Get("prefix")
	q.Del("prefix")
	u.RawQuery = q.Encode()
	u.Path = path.Join("/", u.Path, prefix, exportfmt.ManifestName)
	return u.String()
}

// redactURL drops a URL's user info, for logs.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User = nil
	return u.String()
}
