package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/tidemark-io/tidemark/internal/httpjson"
	"github.com/tidemark-io/tidemark/pkg/data/exportfmt"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// Task list paging of GET /api/v1/tasks: the reference's default page, and the
// largest page one answer holds (a larger limit is lowered, and the answer's
// limit says so).
const (
	DefaultTaskPage = 50
	MaxTaskPage     = tasks.MaxListLimit
)

// maxEnqueueBody bounds the body of POST /api/v1/tasks: a kind, a target and a
// few dependency ids, or an export's spec (up to tasks.MaxExportColumns names
// and a filter of tasks.MaxExportFilterBytes).
const maxEnqueueBody = 256 << 10

// TaskRecord is a task as the HTTP API answers it: the reference's TaskRecord
// (timestamps in Unix milliseconds; error, detail, started_at, finished_at and
// depends_on left out when empty) followed by Tidemark's own fields (stats left
// out until the task counted something).
type TaskRecord struct {
	ID         string          `json:"id"`
	Kind       tasks.Kind      `json:"kind"`
	Target     registry.Target `json:"target"`
	State      tasks.State     `json:"state"`
	Error      string          `json:"error,omitempty"`
	Detail     string          `json:"detail,omitempty"`
	EnqueuedAt int64           `json:"enqueued_at"`
	DueAt      *int64          `json:"due_at,omitempty"`
	StartedAt  *int64          `json:"started_at,omitempty"`
	FinishedAt *int64          `json:"finished_at,omitempty"`
	DependsOn  []string        `json:"depends_on,omitempty"`

	Attempts     int         `json:"attempts"`
	ClaimToken   string      `json:"claim_token,omitempty"`
	FencingToken int64       `json:"fencing_token,omitempty"`
	Stats        tasks.Stats `json:"stats,omitzero"`

	// An export's spec, progress (as last recorded), cancel request and, once
	// done, its manifest in brief; left out of other tasks.
	Export          json.RawMessage     `json:"export,omitempty"`
	Progress        *TaskProgress       `json:"progress,omitempty"`
	CancelRequested bool                `json:"cancel_requested,omitempty"`
	Exported        *tasks.ExportResult `json:"exported,omitempty"`
}

// TaskProgress is a task's progress as the HTTP API answers it: the record's,
// with its time in Unix milliseconds like the record's other times.
type TaskProgress struct {
	Rows      int64  `json:"rows"`
	Files     int64  `json:"files"`
	Bytes     int64  `json:"bytes"`
	Estimate  int64  `json:"estimate,omitempty"`
	Worker    string `json:"worker,omitempty"`
	UpdatedAt *int64 `json:"updated_at,omitempty"`
}

// NewTaskRecord converts a stored task.
func NewTaskRecord(t tasks.Task) TaskRecord {
	r := TaskRecord{
		ID: t.ID, Kind: t.Kind, Target: t.Target, State: t.State, Error: t.Error, Detail: t.Detail,
		EnqueuedAt: t.EnqueuedAt.UnixMilli(), DueAt: unixMilli(t.DueAt), StartedAt: unixMilli(t.StartedAt), FinishedAt: unixMilli(t.FinishedAt),
		DependsOn: t.DependsOn, Attempts: t.Attempts, ClaimToken: t.ClaimToken, FencingToken: t.FencingToken,
		Stats: t.Stats, Export: t.Export, CancelRequested: t.CancelRequested, Exported: t.Exported,
	}
	if p := t.Progress; p != nil {
		r.Progress = &TaskProgress{Rows: p.Rows, Files: p.Files, Bytes: p.Bytes, Estimate: p.Estimate, Worker: p.Worker,
			UpdatedAt: unixMilli(p.UpdatedAt)}
	}
	return r
}

// unixMilli is t in Unix milliseconds, nil for the zero time (not happened yet).
func unixMilli(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	ms := t.UnixMilli()
	return &ms
}

// TaskPage is the body of GET /api/v1/tasks: the reference's TaskListResponse
// ({tasks,total,limit,offset}) and the page token of the next page.
type TaskPage struct {
	Tasks []TaskRecord `json:"tasks"`
	// Total counts the tasks matching the filters, on every page.
	Total  int `json:"total"`
	Limit  int `json:"limit"`
	Offset int `json:"offset"`
	// NextPageToken, when set, continues the listing after this page
	// (?page_token=); it is set whenever more matching tasks follow.
	NextPageToken string `json:"next_page_token,omitempty"`
}

// EnqueueRequest is the body of POST /api/v1/tasks (the reference's
// EnqueueTaskRequest).
type EnqueueRequest struct {
	Kind      string   `json:"kind"`
	Target    string   `json:"target"`
	DependsOn []string `json:"depends_on,omitempty"`
	// Export is an export's spec (kind "export" only, and required with it);
	// ID the id it is enqueued under ("": a new one), which makes the request
	// idempotent.
	Export *exportfmt.Spec `json:"export,omitempty"`
	ID     string          `json:"id,omitempty"`
}

// EnqueueAnswer is the body of a 202 answer to POST /api/v1/tasks: the task (new,
// or the live one of the same kind and target) and whether it was deduplicated.
type EnqueueAnswer struct {
	TaskRecord
	Deduplicated bool `json:"deduplicated"`
}

// listTasks answers one page of tasks, newest first unless newest_first=false.
// A page is chosen by limit and offset (the reference's paging) or, from a
// previous answer's next_page_token, by page_token; total counts every match.
func (a *httpAPI) listTasks(ctx context.Context, r *http.Request) (any, error) {
	q := r.URL.Query()
	if err := onlyParams(q, "state", "kind", "target", "limit", "offset", "page_token", "newest_first"); err != nil {
		return nil, err
	}
	limit, err := pageParam(q.Get("limit"), "limit", DefaultTaskPage)
	if err != nil {
		return nil, err
	}
	limit = min(limit, MaxTaskPage)
	offset, err := pageParam(q.Get("offset"), "offset", 0)
	if err != nil {
		return nil, err
	}
	token := q.Get("page_token")
	if token != "" {
		if q.Has("offset") {
			return nil, fmt.Errorf("%w: give offset or page_token, not both", tasks.ErrInvalidArgument)
		}
		if _, err := uuid.Parse(token); err != nil {
			return nil, fmt.Errorf("%w: page token %q is not one a previous call returned", tasks.ErrInvalidArgument, token)
		}
	}
	newest := true
	if v := q.Get("newest_first"); v != "" {
		if newest, err = strconv.ParseBool(v); err != nil {
			return nil, fmt.Errorf("%w: newest_first %q is not a boolean", tasks.ErrInvalidArgument, v)
		}
	}
	target, err := targetFilter(q.Get("target"))
	if err != nil {
		return nil, err
	}
	f := tasks.ListFilter{State: tasks.State(q.Get("state")), Kind: tasks.Kind(q.Get("kind")), Target: target, NewestFirst: newest}
	w, err := taskWindow(ctx, a.cfg.Tasks, f, token, offset, limit)
	if err != nil {
		return nil, err
	}
	page := TaskPage{Tasks: make([]TaskRecord, 0, len(w.tasks)), Total: w.total, Limit: limit, Offset: offset}
	for _, t := range w.tasks {
		page.Tasks = append(page.Tasks, NewTaskRecord(t))
	}
	if w.more && len(w.tasks) > 0 {
		page.NextPageToken = w.tasks[len(w.tasks)-1].ID
	}
	return page, nil
}

// window is a page of a task listing and what the listing holds besides it.
type window struct {
	tasks []tasks.Task
	total int  // every task matching the filter
	more  bool // matching tasks follow the page
}

// taskWindow walks every task matching f, in f's order, one store page at a time
// (memory: a store page and the window), and returns the limit tasks after the
// first offset of those that come after the task id token ("" : from the start).
// Counting the total is what costs the full walk; task history is bounded by
// pruning (TASK_HISTORY_*).
func taskWindow(ctx context.Context, ts *tasks.Queue, f tasks.ListFilter, token string, offset, limit int) (window, error) {
	var w window
	skipped := 0
	f.Limit = tasks.MaxListLimit
	for {
		list, next, err := ts.List(ctx, f)
		if err != nil {
			return window{}, err
		}
		for _, t := range list {
			w.total++
			if token != "" && (f.NewestFirst && t.ID >= token || !f.NewestFirst && t.ID <= token) {
				continue // at or before the page the token ends
			}
			switch {
			case skipped < offset:
				skipped++
			case len(w.tasks) < limit:
				w.tasks = append(w.tasks, t)
			default:
				w.more = true
			}
		}
		if next == "" {
			return w, nil
		}
		f.PageToken = next
	}
}

// getTask answers one task.
func (a *httpAPI) getTask(ctx context.Context, r *http.Request) (any, error) {
	if err := onlyParams(r.URL.Query()); err != nil {
		return nil, err
	}
	id := r.PathValue("id")
	t, err := a.cfg.Tasks.Get(ctx, id)
	if errors.Is(err, tasks.ErrTaskNotFound) {
		return nil, reworded{fmt.Sprintf("task '%s' not found", id), err}
	}
	if err != nil {
		return nil, err
	}
	return NewTaskRecord(t), nil
}

// enqueueTask queues a task of a known kind on a registered target and answers
// 202 with it; a live task of the same kind and target is answered instead of a
// new one (deduplicated). An export is enqueued with its spec and is not
// deduplicated by kind and target; a request with the id of an export of the
// same target and spec answers that one (deduplicated), and an id of another
// task is a 409.
func (a *httpAPI) enqueueTask(ctx context.Context, r *http.Request) (any, error) {
	if err := onlyParams(r.URL.Query()); err != nil {
		return nil, err
	}
	var req EnqueueRequest
	if err := decodeBody(r, maxEnqueueBody, &req); err != nil {
		return nil, err
	}
	if req.Kind == "" {
		return nil, fmt.Errorf("%w: kind is required (one of merge_wal, compact, verify, repair, export)", tasks.ErrInvalidArgument)
	}
	kind, err := tasks.ParseKind(req.Kind)
	if err != nil {
		return nil, err
	}
	var t tasks.Task
	var dedup bool
	switch {
	case kind == tasks.KindExport && req.Export == nil:
		return nil, fmt.Errorf("%w: export: an export task needs its spec ({\"destination\": ..., \"version\", \"columns\", \"filter\"})", tasks.ErrInvalidArgument)
	case kind == tasks.KindExport && len(req.DependsOn) > 0:
		return nil, fmt.Errorf("%w: depends_on: an export runs when claimed, after no other task", tasks.ErrInvalidArgument)
	case kind == tasks.KindExport:
		t, dedup, err = a.cfg.Admin.EnqueueExport(ctx, req.Target, *req.Export, req.ID)
	case req.Export != nil || req.ID != "":
		return nil, fmt.Errorf("%w: export and id are taken with kind export only, not %s", tasks.ErrInvalidArgument, kind)
	default:
		t, dedup, err = a.cfg.Admin.enqueue(ctx, kind, req.Target, req.DependsOn)
	}
	if errors.Is(err, registry.ErrNotFound) {
		return nil, reworded{fmt.Sprintf("experiment '%s' does not exist", req.Target), err}
	}
	if err != nil {
		return nil, err
	}
	return accepted{EnqueueAnswer{TaskRecord: NewTaskRecord(t), Deduplicated: dedup}}, nil
}

// reworded is err answered with the reference's wording: the message is msg, the
// class (and so the status) err's.
type reworded struct {
	msg string
	err error
}

func (e reworded) Error() string { return e.msg }
func (e reworded) Unwrap() error { return e.err }

// accepted makes route answer 202 instead of 200.
type accepted struct{ body any }

// decodeBody decodes r's JSON body into v: at most limit bytes, one JSON value,
// no field v does not have (a misspelt field is a 400 naming it, not ignored).
func decodeBody(r *http.Request, limit int64, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			return fmt.Errorf("%w: request body is over %d bytes", tasks.ErrInvalidArgument, limit)
		case errors.Is(err, io.EOF):
			return fmt.Errorf("%w: request body is empty; want a JSON object", tasks.ErrInvalidArgument)
		}
		return fmt.Errorf("%w: request body: %v", tasks.ErrInvalidArgument, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: request body holds more than one JSON value", tasks.ErrInvalidArgument)
	}
	return nil
}

// pageParam parses a non-negative integer query parameter, def when absent.
func pageParam(text, name string, def int) (int, error) {
	if text == "" {
		return def, nil
	}
	n, err := strconv.Atoi(text)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: %s must be a non-negative integer, got %q", tasks.ErrInvalidArgument, name, text)
	}
	return n, nil
}

// writeAnswer answers a route's body: 202 for an accepted one, 200 otherwise.
func writeAnswer(w http.ResponseWriter, body any) {
	if acc, ok := body.(accepted); ok {
		httpjson.WriteJSON(w, http.StatusAccepted, acc.body)
		return
	}
	httpjson.WriteJSON(w, http.StatusOK, body)
}
