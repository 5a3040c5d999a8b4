package api

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/tidemark-io/tidemark/pkg/client"
	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/master/workerhttp"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// Record browsing through the master (GET /api/v1/experiments/{name}/records).
const (
	// DefaultRecordPage and MaxRecordPage: the default page, and the largest one
	// answer holds (a larger limit is lowered, and the answer's limit says so).
	DefaultRecordPage = 50
	MaxRecordPage     = 1000
	// RecordsTimeout bounds the whole request (one worker's answer is bounded by
	// the workerhttp.Client's timeout, so a hung worker leaves time to ask the
	// next).
	RecordsTimeout = 30 * time.Second
)

// Record sources of ?source=: the reference's names.
const (
	SourceFragments = "fragments" // the base table only (merged rows)
	SourceWAL       = "wal"       // the pending WAL generations only
	SourceAll       = "all"       // both, newest row per id
)

// ExperimentRecords is the body of GET /api/v1/experiments/{name}/records: the
// reference's ExperimentRecordsResponse, and the worker that answered. Records
// are the worker's rows, as its data API encodes them.
type ExperimentRecords struct {
	Records []json.RawMessage `json:"records"`
	HasMore bool              `json:"has_more"`
	Limit   int               `json:"limit"`
	Offset  int               `json:"offset"`
	Source  string            `json:"source"`
	Worker  string            `json:"worker"`
}

// workerAnswerError is what the master answers for a worker's answer it passes
// on: the worker's status and code (a 5xx other than 503 as 502 BAD_GATEWAY,
// since the worker, not the master, failed), or 502 for an answer it cannot use;
// the message names the worker.
type workerAnswerError struct {
	status        int
	code, message string
}

func (e *workerAnswerError) Error() string { return e.message }

// passOn makes a worker's answer among err a *workerAnswerError; other errors
// are left as they are.
func passOn(err error) error {
	var ae *workerhttp.AnswerError
	switch {
	case errors.As(err, &ae):
		status, code := ae.Status, ae.Code
		if status >= 500 && status != http.StatusServiceUnavailable {
			status, code = http.StatusBadGateway, CodeBadGateway
		}
		if code == "" {
			code = http.StatusText(status)
		}
		return &workerAnswerError{status: status, code: code, message: ae.Error()}
	case errors.Is(err, workerhttp.ErrUndecodable):
		return &workerAnswerError{status: http.StatusBadGateway, code: CodeBadGateway, message: err.Error()}
	}
	return err
}

// recordQuery is a parsed records request.
type recordQuery struct {
	target        registry.Target
	limit, offset int
	source        string
	id            string         // ?id=: one record
	filters       map[string]any // the rollout filters, as the worker's filters= takes them
}

// listRecords answers a page of a store's records, read through a live worker.
//
// source=all reads what a worker serves without a version: the base table and
// the pending WAL generations, newest row per id. source=fragments (the
// default, as in the reference) reads the base table alone: the store's version
// is asked first, then the page is read at that version, which leaves the
// pending rows out and stays the same while the version is retained. wal reads
// the pending rows alone (the worker's ?source=wal): rows not yet merged into any
// version.
func (a *httpAPI) listRecords(ctx context.Context, r *http.Request) (any, error) {
	rq, err := parseRecordQuery(r)
	if err != nil {
		return nil, err
	}
	if _, err := a.cfg.Admin.cfg.Registry.Get(ctx, rq.target.Kind, rq.target.Name); err != nil {
		if errors.Is(err, registry.ErrNotFound) {
			return nil, reworded{fmt.Sprintf("experiment '%s' does not exist", r.PathValue("name")), err}
		}
		return nil, err
	}
	out := ExperimentRecords{Records: []json.RawMessage{}, Limit: rq.limit, Offset: rq.offset, Source: rq.source}
	var read client.ReadOptions
	if rq.source == SourceFragments {
		var info client.Store
		info, out.Worker, err = a.cfg.Workers.Store(ctx, rq.target.Kind, rq.target.Name)
		if err != nil {
			return nil, passOn(err)
		}
		if info.Version == nil {
			return nil, &workerAnswerError{status: http.StatusBadGateway, code: CodeBadGateway,
				message: fmt.Sprintf("worker %s: its answer about %s has no version", out.Worker, r.PathValue("name"))}
		}
		if *info.Version == 0 {
			return out, nil // nothing merged yet
		}
		read.Version = *info.Version
	}
	if rq.source == SourceWAL {
		read.Source = SourceWAL // the worker's pending rows alone
	}
	if rq.id != "" {
		var row json.RawMessage
		if row, out.Worker, err = a.cfg.Workers.Row(ctx, rq.target.Kind, rq.target.Name, rq.id, read); err != nil {
			return nil, passOn(err)
		}
		if rq.offset == 0 && rq.limit > 0 && row != nil {
			match, err := matches(row, rq.filters)
			if err != nil {
				return nil, fmt.Errorf("worker %s: record %q: %w", out.Worker, rq.id, err)
			}
			if match {
				out.Records = append(out.Records, row)
			}
		}
		return out, nil
	}
	if rq.limit == 0 {
		return out, nil // the worker reads limit=0 as every row
	}
	page, worker, err := a.cfg.Workers.Rows(ctx, rq.target.Kind, rq.target.Name, client.ListOptions{ReadOptions: read,
		Limit: rq.limit + 1, Offset: rq.offset, Filters: rq.filters})
	if out.Worker = worker; err != nil {
		return nil, passOn(err)
	}
	rows := page.Rows
	if len(rows) > rq.limit {
		rows, out.HasMore = rows[:rq.limit], true
	}
	out.Records = append(out.Records, rows...)
	return out, nil
}

// parseRecordQuery checks the name and the query parameters of a records request.
func parseRecordQuery(r *http.Request) (recordQuery, error) {
	q := r.URL.Query()
	filterKeys := schema.RolloutFilterKeys()
	if err := onlyParams(q, append([]string{"limit", "offset", "source", "id"}, filterKeys...)...); err != nil {
		return recordQuery{}, err
	}
	var rq recordQuery
	var err error
	if rq.target, err = registry.ParseTarget(r.PathValue("name")); err != nil {
		return recordQuery{}, fmt.Errorf("%w: %w", tasks.ErrInvalidArgument, err)
	}
	if rq.limit, err = pageParam(q.Get("limit"), "limit", DefaultRecordPage); err != nil {
		return recordQuery{}, err
	}
	rq.limit = min(rq.limit, MaxRecordPage)
	if rq.offset, err = pageParam(q.Get("offset"), "offset", 0); err != nil {
		return recordQuery{}, err
	}
	switch rq.source = cmp.Or(q.Get("source"), SourceFragments); rq.source {
	case SourceAll, SourceFragments, SourceWAL:
	default:
		return recordQuery{}, fmt.Errorf("%w: source %q is not one of fragments, wal, all", tasks.ErrInvalidArgument, rq.source)
	}
	rq.id = q.Get("id")
	if q.Has("id") && rq.id == "" {
		return recordQuery{}, fmt.Errorf("%w: id is empty", tasks.ErrInvalidArgument)
	}
	for _, k := range filterKeys {
		v := q.Get(k)
		if v == "" {
			continue
		}
		if rq.target.Kind != registry.KindRollout {
			return recordQuery{}, fmt.Errorf("%w: filter %s: filters are supported on rollout stores only", tasks.ErrInvalidArgument, k)
		}
		if rq.filters == nil {
			rq.filters = map[string]any{}
		}
		if k != "include_in_training" {
			rq.filters[k] = v
			continue
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return recordQuery{}, fmt.Errorf("%w: filter include_in_training: %q is not true or false", tasks.ErrInvalidArgument, v)
		}
		rq.filters[k] = b
	}
	if rq.id != "" && rq.target.Kind != registry.KindRollout {
		return recordQuery{}, fmt.Errorf("%w: id: filters are supported on rollout stores only; read a row by id on a worker", tasks.ErrInvalidArgument)
	}
	return rq, nil
}

// matches reports whether record's values equal every filter's.
func matches(record json.RawMessage, filters map[string]any) (bool, error) {
	if len(filters) == 0 {
		return true, nil
	}
	var values map[string]any
	if err := json.Unmarshal(record, &values); err != nil {
		return false, err
	}
	for k, want := range filters {
		if values[k] != want {
			return false, nil
		}
	}
	return true, nil
}
