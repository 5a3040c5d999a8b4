package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/internal/httpjson"
	"github.com/tidemark-io/tidemark/pkg/data/exportfmt"
	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// maxExportBody bounds the body of POST .../export: a URL, a version, column
// names and a filter (as the task record holds it: tasks.MaxExportSpecBytes).
const maxExportBody = tasks.MaxExportSpecBytes

// exportRequest is the body of POST /rollouts/{name}/export and
// /generic/{name}/export.
type exportRequest struct {
	Destination string   `json:"destination"`
	Version     uint64   `json:"version"`
	Columns     []string `json:"columns"`
	Filter      string   `json:"filter"`
	// ID is the task id the client picked (a UUID), so that sending the request
	// again enqueues nothing new; "": a new one.
	ID string `json:"id"`
}

// exportTask is an export task as the export routes answer it: the task record
// of the queue (pkg/tasks) without its claim's internals, the destination's user
// info left out.
type exportTask struct {
	ID              string              `json:"id"`
	Kind            tasks.Kind          `json:"kind"`
	Target          registry.Target     `json:"target"`
	State           tasks.State         `json:"state"`
	Error           string              `json:"error,omitempty"`
	Detail          string              `json:"detail,omitempty"`
	EnqueuedAt      time.Time           `json:"enqueued_at"`
	StartedAt       time.Time           `json:"started_at,omitzero"`
	FinishedAt      time.Time           `json:"finished_at,omitzero"`
	Attempts        int                 `json:"attempts"`
	Export          exportfmt.Spec      `json:"export"`
	Progress        *tasks.Progress     `json:"progress,omitempty"`
	CancelRequested bool                `json:"cancel_requested,omitempty"`
	Exported        *tasks.ExportResult `json:"exported,omitempty"`
}

func exportTaskOf(t tasks.Task) exportTask {
	ans := exportTask{ID: t.ID, Kind: t.Kind, Target: t.Target, State: t.State, Error: t.Error, Detail: t.Detail,
		EnqueuedAt: t.EnqueuedAt, StartedAt: t.StartedAt, FinishedAt: t.FinishedAt, Attempts: t.Attempts,
		Progress: t.Progress, CancelRequested: t.CancelRequested, Exported: t.Exported}
	_ = json.Unmarshal(t.Export, &ans.Export) // the record's spec, written by the enqueue that validated it
	ans.Export.Destination = withoutUserInfo(ans.Export.Destination)
	return ans
}

// withoutUserInfo is a URL without its user info, which never goes into an
// answer.
func withoutUserInfo(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	u.User = nil
	return u.String()
}

// errNoExportQueue answers an export on a worker without etcd: nothing could run
// the task it would enqueue.
var errNoExportQueue = &apiError{status: http.StatusServiceUnavailable, code: CodeTasksUnavailable,
	message: "this worker has no etcd (ETCD_ENDPOINTS) to enqueue an export task in; run `master admin export` instead"}

// exportStore is POST /rollouts/{name}/export and /generic/{name}/export: it
// checks the request against the store (a 400 names the bad field: a
// destination URL, a column the schema lacks, a filter that does not compile; a
// version the store cannot be read at is the 404 of reads at a version) and
// enqueues an export task for the master to run, answering 202 with it. A
// request with the id of an export of the same store and spec answers that task
// with 200 and enqueues nothing; an id of another task is a 409.
func (s *Server) exportStore(k kindAPI) apiHandler {
	return func(w http.ResponseWriter, r *http.Request) error {
		name, err := pathName(r)
		if err != nil {
			return err
		}
		if s.cfg.Tasks == nil {
			return errNoExportQueue
		}
		var req exportRequest
		if err := decodeBody(w, r, maxExportBody, &req); err != nil {
			return err
		}
		spec := exportfmt.Spec{Destination: req.Destination, Version: req.Version, Columns: req.Columns, Filter: req.Filter}
		if err := spec.Validate(); err != nil {
			return badRequest("%s", strings.TrimPrefix(err.Error(), exportfmt.ErrInvalidSpec.Error()+": "))
		}
		st, release, err := s.cfg.Stores.Open(r.Context(), k.kind, name)
		if err != nil {
			return err
		}
		defer release()
		if err := checkExport(r, st, spec); err != nil {
			return err
		}
		ctx, cancel := detached(r)
		defer cancel()
		raw, err := json.Marshal(spec)
		if err != nil {
			return internalError(err, "the export's spec could not be encoded")
		}
		task, existing, err := s.cfg.Tasks.EnqueueExport(ctx, st.Target(), raw, req.ID)
		switch c := errclass.Of(err); {
		case err == nil:
		case c == errclass.Invalid:
			return badRequest("%s", invalidMessage(err))
		case c == errclass.Exists:
			return &apiError{status: http.StatusConflict, code: CodeAlreadyExists, message: err.Error()}
		default:
			s.cfg.Logger.Warn("export: enqueue failed", "store", name, "kind", k.kind, "err", err)
			return &apiError{status: http.StatusServiceUnavailable, code: CodeTasksUnavailable,
				message: "the export task could not be enqueued (etcd unavailable?); send the request again (with its id, it enqueues one task whatever the tries)"}
		}
		status := http.StatusAccepted
		if existing {
			status = http.StatusOK
		}
		httpjson.WriteJSON(w, status, exportTaskOf(task))
		return nil
	}
}

// checkExport checks spec against st, as the export will read it, so that a
// mistake is a 400 now rather than a failed task later: every column is one of
// the store's (not the hidden _seq, which every export writes), the filter
// compiles against its schema, and a version is one the store can be read at.
func checkExport(r *http.Request, st *store.Store, spec exportfmt.Spec) error {
	cols := st.ColumnsExcept(nil)
	for i, c := range spec.Columns {
		if c == rowkey.SeqColumn || !slices.Contains(cols, c) {
			return badRequest("columns[%d]: no column %q in this store's schema", i, c)
		}
	}
	if spec.Filter != "" {
		if _, _, err := st.CompileFilter(spec.Filter); err != nil {
			return badRequest("%v", err) // worded for the client: "filter: ..." or "filters: ..."
		}
	}
	if spec.Version > 0 {
		if _, err := st.At(r.Context(), spec.Version); err != nil {
			return versionFailure(st.Entry(), err)
		}
	}
	return nil
}

// getExport is GET /rollouts/{name}/export/{id} and /generic/{name}/export/{id}:
// the export task, its state, progress and, once done, its manifest in brief, so
// that a client polls the worker it posted to, without the master.
func (s *Server) getExport(k kindAPI) apiHandler {
	return func(w http.ResponseWriter, r *http.Request) error {
		name, err := pathName(r)
		if err != nil {
			return err
		}
		if s.cfg.Tasks == nil {
			return errNoExportQueue
		}
		id := r.PathValue("id")
		task, err := s.cfg.Tasks.Get(r.Context(), id)
		target := registry.NewTarget(k.kind, name)
		switch c := errclass.Of(err); {
		case err == nil && (task.Kind != tasks.KindExport || task.Target != target):
			return notFound("no export task %s of %s store '%s'", id, k.kind, name)
		case err == nil:
		case c == errclass.Invalid:
			return badRequest("%s", invalidMessage(err))
		case c == errclass.Gone:
			return notFound("no export task %s of %s store '%s' (never enqueued, or pruned from the task history)", id, k.kind, name)
		default:
			s.cfg.Logger.Warn("export: reading the task failed", "store", name, "kind", k.kind, "task", id, "err", err)
			return &apiError{status: http.StatusServiceUnavailable, code: CodeTasksUnavailable,
				message: fmt.Sprintf("task %s could not be read (etcd unavailable?); retry later", id)}
		}
		httpjson.WriteJSON(w, http.StatusOK, exportTaskOf(task))
		return nil
	}
}

// invalidMessage is the client's message of a task queue's ErrInvalidArgument:
// its text without the sentinel's prefix.
func invalidMessage(err error) string {
	return strings.TrimPrefix(err.Error(), tasks.ErrInvalidArgument.Error()+": ")
}
