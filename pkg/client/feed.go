package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// ChangesOptions say which page of a change feed to read.
type ChangesOptions struct {
	// Cursor is where the page starts: a NextCursor, "now" (the store's
	// horizon), or "" (the beginning, or Consumer's committed cursor).
	Cursor string
	// Consumer, without Cursor, starts from that named consumer's committed
	// cursor.
	Consumer string
	// Limit is the page size (0: the worker's default, 100).
	Limit int
	// Wait long-polls: while the page is empty, the worker waits up to Wait for
	// the horizon to move. The call is allowed Wait on top of its timeout.
	Wait time.Duration
	// Columns answers those columns and id; nil: every column but the blob ones.
	Columns []string
	// Filters (rollout stores) and Filter (generic stores) as in ListOptions.
	Filters map[string]any
	Filter  string
}

// Change is one row of a feed page, at its newest write.
type Change struct {
	Cursor string          `json:"cursor"`
	Row    json.RawMessage `json:"row"`
}

// ChangesPage is a page of a change feed.
type ChangesPage struct {
	Changes []Change `json:"changes"`
	// NextCursor is where the next page starts.
	NextCursor string `json:"next_cursor"`
}

// Changes reads a page of the store k/name's change feed.
func (c *Client) Changes(ctx context.Context, k Kind, name string, opts ChangesOptions) (ChangesPage, error) {
	var p ChangesPage
	if !k.valid() {
		return p, errKind
	}
	q, err := opts.query()
	if err != nil {
		return p, err
	}
	_, err = c.send(ctx, request{method: http.MethodGet, path: changesPath(k, name), query: q, wait: opts.Wait}, &p)
	return p, err
}

// query is a feed page's query.
func (opts ChangesOptions) query() (url.Values, error) {
	q := url.Values{}
	switch {
	case opts.Cursor != "":
		q.Set("cursor", opts.Cursor)
	case opts.Consumer != "":
		q.Set("consumer", opts.Consumer)
	}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	if opts.Wait > 0 {
		q.Set("wait", opts.Wait.String())
	}
	if opts.Columns != nil {
		q.Set("columns", strings.Join(opts.Columns, ","))
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
	return q, nil
}

// Consumer is a named consumer's committed cursor in a store.
type Consumer struct {
	Consumer    string    `json:"consumer"`
	Store       string    `json:"store"`
	Cursor      string    `json:"cursor"`
	CommittedAt time.Time `json:"committed_at"`
}

// CommitConsumer moves the named consumer's committed cursor in the store k/name
// forward to cursor (the NextCursor of the last page it processed). A cursor
// behind the committed one is an *Error matching ErrCursorBehind, and the
// committed cursor stays.
func (c *Client) CommitConsumer(ctx context.Context, consumer string, k Kind, name, cursor string) (Consumer, error) {
	var rec Consumer
	if !k.valid() {
		return rec, errKind
	}
	_, err := c.send(ctx, request{method: http.MethodPost, path: commitPath(consumer, k, name),
		body: map[string]string{"cursor": cursor}}, &rec)
	return rec, err
}

// GetConsumer reads the named consumer's committed cursor in the store k/name;
// one that never committed there is an *Error matching ErrNotFound.
func (c *Client) GetConsumer(ctx context.Context, consumer string, k Kind, name string) (Consumer, error) {
	var rec Consumer
	if !k.valid() {
		return rec, errKind
	}
	_, err := c.send(ctx, request{method: http.MethodGet, path: consumerPath(consumer, k, name)}, &rec)
	return rec, err
}
