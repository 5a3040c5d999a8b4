package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/tidemark-io/tidemark/internal/httpjson"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// TaskQueue enqueues master tasks, and reads them back for the export routes:
// the task queue in etcd (tasks.Queue). The worker only enqueues; the master's
// scheduler claims and runs them.
type TaskQueue interface {
	Enqueue(ctx context.Context, kind tasks.Kind, target registry.Target, dependsOn ...string) (tasks.Task, bool, error)
	EnqueueExport(ctx context.Context, target registry.Target, spec json.RawMessage, id string) (tasks.Task, bool, error)
	Get(ctx context.Context, id string) (tasks.Task, error)
}

// errNoTaskQueue answers a compact request on a worker without etcd: nothing could
// run the task it would enqueue.
var errNoTaskQueue = &apiError{status: http.StatusServiceUnavailable, code: CodeTasksUnavailable,
	message: "this worker has no etcd (ETCD_ENDPOINTS) to enqueue a compact task in; run `master admin compact` instead"}

// compactAnswer is the body of POST .../{name}/compact (202): the compact task
// now queued or running for the store, and whether it was there already.
type compactAnswer struct {
	TaskID       string `json:"task_id"`
	State        string `json:"state"`
	Deduplicated bool   `json:"deduplicated"`
}

// compactStore is POST /rollouts/{name}/compact and /generic/{name}/compact: it
// enqueues a compact task for the master to run (deduplicated), and answers 202.
// Both kinds compact the same way: a generic store's table is a base table like a
// rollout store's.
func (s *Server) compactStore(k kindAPI) apiHandler {
	return func(w http.ResponseWriter, r *http.Request) error {
		name, err := pathName(r)
		if err != nil {
			return err
		}
		if s.cfg.Tasks == nil {
			return errNoTaskQueue
		}
		// The store must exist: a task on a missing store would only be skipped.
		if _, err := s.cfg.Stores.Registry().Get(r.Context(), k.kind, name); err != nil {
			return err
		}
		ctx, cancel := detached(r)
		defer cancel()
		task, dedup, err := s.cfg.Tasks.Enqueue(ctx, tasks.KindCompact, registry.NewTarget(k.kind, name))
		if err != nil {
			s.cfg.Logger.Warn("compact: enqueue failed", "store", name, "kind", k.kind, "err", err)
			return &apiError{status: http.StatusServiceUnavailable, code: CodeTasksUnavailable,
				message: "the compact task could not be enqueued (etcd unavailable?); retry later"}
		}
		httpjson.WriteJSON(w, http.StatusAccepted, compactAnswer{TaskID: task.ID, State: string(task.State), Deduplicated: dedup})
		return nil
	}
}

// compactStats is the body of GET .../{name}/compact/stats: what compaction
// looks at in the newest base version, and the last compaction that committed.
type compactStats struct {
	Version        uint64          `json:"version"`
	Fragments      int             `json:"fragments"`
	Rows           int64           `json:"rows"`
	DeletedRows    int64           `json:"deleted_rows"`
	Bytes          int64           `json:"bytes"`
	LastCompaction *lastCompaction `json:"last_compaction"`
}

type lastCompaction struct {
	Version uint64    `json:"version"`
	At      time.Time `json:"at"`
	Sources int       `json:"sources"`
	Outputs int       `json:"outputs"`
}

// compactStatsOf is GET /rollouts/{name}/compact/stats and /generic/{name}/compact/stats.
func (s *Server) compactStatsOf(k kindAPI) apiHandler {
	return func(w http.ResponseWriter, r *http.Request) error {
		_, snap, release, err := s.freshStore(r, k)
		if err != nil {
			return err
		}
		defer release()
		base := snap.Base.Stats()
		ans := compactStats{Version: base.Version, Fragments: base.Fragments, Rows: base.Rows,
			DeletedRows: base.DeletedRows, Bytes: base.Bytes}
		if lc := snap.Base.LastCompaction; lc != nil {
			ans.LastCompaction = &lastCompaction{Version: lc.Version, At: lc.At, Sources: lc.Sources, Outputs: lc.Outputs}
		}
		httpjson.WriteJSON(w, http.StatusOK, ans)
		return nil
	}
}
