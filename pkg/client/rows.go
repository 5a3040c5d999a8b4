package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/internal/httpjson"
)

// AddOptions qualify an add.
type AddOptions struct {
	// Flush seals the rows at once (?flush=true): readable through every worker
	// when the add answers.
	Flush bool
	// After orders the add after a causal token (an earlier add's Seq); 0: none.
	After uint64
}

// AddResult is the answer of an add.
type AddResult struct {
	Version uint64   `json:"version"`
	IDs     []string `json:"ids,omitempty"`
	Count   int      `json:"count"`
	// Seq is the highest _seq the add gave: the causal token to pass as After.
	Seq uint64 `json:"seq"`
	// BackpressureDelay is how long the add waited because its store is behind
	// on merges (X-Tidemark-Backpressure-Delay), 0 if it did not.
	BackpressureDelay time.Duration `json:"-"`
}

// AddRows adds rows to the store k/name: rows is a slice of rows, each anything
// that encodes as a JSON object (a struct, a map, a json.RawMessage). Rows are
// deduplicated by id, so re-sending an add that failed never duplicates a row.
func (c *Client) AddRows(ctx context.Context, k Kind, name string, rows any, opts AddOptions) (AddResult, error) {
	var res AddResult
	if !k.valid() {
		return res, errKind
	}
	r := request{method: http.MethodPost, path: rowsPath(k, name), body: map[string]any{k.RowsKey(): rows}}
	if opts.Flush {
		r.query = url.Values{"flush": {"true"}}
	}
	if opts.After != 0 {
		r.header = http.Header{httpjson.AfterHeader: {strconv.FormatUint(opts.After, 10)}}
	}
	h, err := c.send(ctx, r, &res)
	if err != nil {
		return res, err
	}
	res.BackpressureDelay = backpressureDelay(h)
	return res, nil
}

// ReadOptions qualify a read (a list, a get, a batch get).
type ReadOptions struct {
	// Version reads the store as of that base-table version (0: the current).
	Version uint64
	// Source is "wal" (the pending rows alone), "all" (the default) or "".
	Source string
	// After orders the read after a causal token (an add's Seq); 0: none.
	After uint64
	// Columns (generic stores) names the columns to answer; nil: every column
	// but the blob ones.
	Columns []string
}

func (o ReadOptions) query(q url.Values) url.Values {
	if o.Version != 0 {
		q.Set("version", strconv.FormatUint(o.Version, 10))
	}
	if o.Source != "" {
		q.Set("source", o.Source)
	}
	if o.After != 0 {
		q.Set("after", strconv.FormatUint(o.After, 10))
	}
	if o.Columns != nil {
		q.Set("columns", strings.Join(o.Columns, ","))
	}
	return q
}

// ListOptions qualify a list.
type ListOptions struct {
	ReadOptions
	// Limit is the page size (at most 10,000); 0: every row, in one answer
	// (bounded by the client's MaxAnswer).
	Limit int
	// Offset skips that many matching rows.
	Offset int
	// Cursor is a page's NextCursor: the page after it. StartAfter starts after
	// an id instead.
	Cursor, StartAfter string
	// Filters (rollout stores) are equality tests on the filterable fields.
	Filters map[string]any
	// Filter (generic stores) is a SQL predicate over the columns.
	Filter string
	// Order is "storage" to read every row in storage order, the fast snapshot
	// read (without Limit, Offset, Cursor or StartAfter), or "" / "id": id order.
	Order string
}

// Page is a list's answer.
type Page struct {
	Rows  []json.RawMessage
	Count int
	// NextCursor is set when rows follow the page (with a Limit).
	NextCursor string
}

// ListRows lists the rows of the store k/name, ordered by id.
func (c *Client) ListRows(ctx context.Context, k Kind, name string, opts ListOptions) (Page, error) {
	if !k.valid() {
		return Page{}, errKind
	}
	q, err := opts.query()
	if err != nil {
		return Page{}, err
	}
	var ans map[string]json.RawMessage
	if _, err := c.send(ctx, request{method: http.MethodGet, path: rowsPath(k, name), query: q}, &ans); err != nil {
		return Page{}, err
	}
	if _, ok := ans[k.RowsKey()]; !ok {
		return Page{}, &decodeError{path: rowsPath(k, name), err: fmt.Errorf("no %q array", k.RowsKey())}
	}
	var p Page
	for key, v := range map[string]any{k.RowsKey(): &p.Rows, "count": &p.Count, "next_cursor": &p.NextCursor} {
		if raw, ok := ans[key]; ok {
			if err := json.Unmarshal(raw, v); err != nil {
				return Page{}, &decodeError{path: rowsPath(k, name), err: err}
			}
		}
	}
	return p, nil
}

// query is a list's query.
func (opts ListOptions) query() (url.Values, error) {
	q := opts.ReadOptions.query(url.Values{})
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	if opts.Offset > 0 {
		q.Set("offset", strconv.Itoa(opts.Offset))
	}
	if opts.Cursor != "" {
		q.Set("cursor", opts.Cursor)
	}
	if opts.StartAfter != "" {
		q.Set("start_after", opts.StartAfter)
	}
	if len(opts.Filters) > 0 {
		text, err := json.Marshal(opts.Filters)
		if err != nil {
			return nil, err
		}
		q.Set("filters", string(text))
	}
	if opts.Filter != "" {
		q.Set("filter", opts.Filter)
	}
	if opts.Order != "" {
		q.Set("order", opts.Order)
	}
	return q, nil
}

// GetRow reads the row id of the store k/name. A rollout store answers an absent
// record with nil (and no error), as the reference does; a generic store with an
// *Error matching ErrNotFound.
func (c *Client) GetRow(ctx context.Context, k Kind, name, id string, opts ReadOptions) (json.RawMessage, error) {
	if !k.valid() {
		return nil, errKind
	}
	var raw json.RawMessage
	r := request{method: http.MethodGet, path: rowPath(k, name, id), query: opts.query(url.Values{})}
	if _, err := c.send(ctx, r, &raw); err != nil {
		return nil, err
	}
	if k == Generic {
		return raw, nil
	}
	var ans map[string]json.RawMessage
	if err := json.Unmarshal(raw, &ans); err != nil {
		return nil, &decodeError{path: r.path, err: err}
	}
	if row := ans[k.rowKey()]; len(row) > 0 && string(row) != "null" {
		return row, nil
	}
	return nil, nil
}

// GetRows reads the rows ids of the generic store name, each found once in the
// order first asked, missing ids left out (at most 1,024 ids). opts.Columns
// names the columns to answer (["id"] checks existence).
func (c *Client) GetRows(ctx context.Context, name string, ids []string, opts ReadOptions) ([]json.RawMessage, error) {
	var ans struct {
		Rows []json.RawMessage `json:"rows"`
	}
	_, err := c.send(ctx, getRowsRequest(name, ids, opts), &ans)
	return ans.Rows, err
}

// getRowsRequest is a batch get's request: the columns go in the body.
func getRowsRequest(name string, ids []string, opts ReadOptions) request {
	body := map[string]any{"ids": ids}
	if opts.Columns != nil {
		body["columns"] = opts.Columns
	}
	opts.Columns = nil
	return request{method: http.MethodPost, path: getRowsPath(name), query: opts.query(url.Values{}), body: body}
}

// OpenBlob opens the binary_payload of the record id of the rollout store name,
// streamed: the caller reads and closes it, within the client's timeout. A record
// without one is an *Error matching ErrNotFound.
func (c *Client) OpenBlob(ctx context.Context, name, id string) (io.ReadCloser, int64, error) {
	resp, cancel, err := c.open(ctx, request{method: http.MethodGet, path: blobPath(name, id)})
	if err != nil {
		return nil, 0, err
	}
	return &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}, resp.ContentLength, nil
}

// decodeError is a 2xx answer whose parts do not decode; it is ErrUndecodable.
type decodeError struct {
	path string
	err  error
}

func (e *decodeError) Error() string {
	return e.path + ": " + ErrUndecodable.Error() + ": " + e.err.Error()
}
func (e *decodeError) Is(target error) bool { return target == ErrUndecodable }
