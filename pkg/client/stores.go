package client

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// Health is the answer of GET /api/v1/health.
type Health struct {
	Status     string `json:"status"`
	InstanceID string `json:"instance_id"`
}

// Health asks whether the worker is up; a draining worker answers a 503 *Error
// (ErrOverloaded).
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	_, err := c.send(ctx, request{method: http.MethodGet, path: healthPath}, &h)
	return h, err
}

// StoreSpec is a store to create.
type StoreSpec struct {
	Name string `json:"name"`
	// Schema is a generic store's schema spec ({"columns": [[name, {...}], ...]}).
	Schema json.RawMessage `json:"schema,omitempty"`
	// SealOnAdd (generic stores) seals every add at once.
	SealOnAdd *bool `json:"seal_on_add,omitempty"`
	// MaxConsumerLag is a Go duration ("10m"); empty: off.
	MaxConsumerLag string `json:"max_consumer_lag,omitempty"`
}

// Store describes a store: the fields of the create, get and list answers
// (Version and the counts only in a get's, Schema only for generic stores).
type Store struct {
	Name           string          `json:"name"`
	URI            string          `json:"uri"`
	Version        *uint64         `json:"version,omitempty"`
	Kind           string          `json:"kind"`
	Target         string          `json:"target"`
	CreatedAt      time.Time       `json:"created_at"`
	Schema         json.RawMessage `json:"schema,omitempty"`
	SealOnAdd      *bool           `json:"seal_on_add,omitempty"`
	MaxConsumerLag string          `json:"max_consumer_lag,omitempty"`

	RowCount           int64 `json:"row_count"`
	FragmentCount      int   `json:"fragment_count"`
	Bytes              int64 `json:"bytes"`
	DeletedRows        int64 `json:"deleted_rows"`
	PendingGenerations int   `json:"pending_generations"`
	PendingRows        int64 `json:"pending_rows"`
}

// CreateStore creates a store of kind k; one that exists is an *Error matching
// ErrAlreadyExists.
func (c *Client) CreateStore(ctx context.Context, k Kind, spec StoreSpec) (Store, error) {
	var s Store
	if !k.valid() {
		return s, errKind
	}
	_, err := c.send(ctx, request{method: http.MethodPost, path: storesPath(k), body: spec}, &s)
	return s, err
}

// GetStore describes the store k/name, its version and counts included.
func (c *Client) GetStore(ctx context.Context, k Kind, name string) (Store, error) {
	var s Store
	if !k.valid() {
		return s, errKind
	}
	_, err := c.send(ctx, request{method: http.MethodGet, path: storePath(k, name)}, &s)
	return s, err
}

// ListStores lists the stores of kind k.
func (c *Client) ListStores(ctx context.Context, k Kind) ([]Store, error) {
	if !k.valid() {
		return nil, errKind
	}
	var ans struct {
		Stores []Store `json:"stores"`
	}
	_, err := c.send(ctx, request{method: http.MethodGet, path: storesPath(k)}, &ans)
	return ans.Stores, err
}

// DeleteStore deletes the store k/name (and its consumers).
func (c *Client) DeleteStore(ctx context.Context, k Kind, name string) error {
	if !k.valid() {
		return errKind
	}
	_, err := c.send(ctx, request{method: http.MethodDelete, path: storePath(k, name)}, nil)
	return err
}

// Flush seals this worker's rows of the generic store name into a generation,
// readable through every worker. (A rollout store's rows are sealed by an add
// with AddOptions.Flush.)
func (c *Client) Flush(ctx context.Context, name string) error {
	_, err := c.send(ctx, request{method: http.MethodPost, path: flushPath(name)}, nil)
	return err
}

// MergeResult is the answer of a merge-wal.
type MergeResult struct {
	Reclaimed   int    `json:"reclaimed"`
	Generations int    `json:"generations"`
	Rows        int64  `json:"rows"`
	Version     uint64 `json:"version"`
	Passes      int    `json:"passes"`
}

// MergeWAL merges this worker's shard of the generic store name into its base
// table now (a control route: it needs the credential).
func (c *Client) MergeWAL(ctx context.Context, name string) (MergeResult, error) {
	var m MergeResult
	_, err := c.send(ctx, request{method: http.MethodPost, path: mergeWALPath(name)}, &m)
	return m, err
}

// MergeTarget is MergeWAL for a target: "<name>" for a rollout store,
// "generic:<name>" for a generic one.
func (c *Client) MergeTarget(ctx context.Context, target string) (MergeResult, error) {
	var m MergeResult
	_, err := c.send(ctx, request{method: http.MethodPost, path: mergeTargetPath(target)}, &m)
	return m, err
}

// CompactTask is the answer of a compact request: the master's task.
type CompactTask struct {
	TaskID       string `json:"task_id"`
	State        string `json:"state"`
	Deduplicated bool   `json:"deduplicated"`
}

// Compact enqueues the master's compact task of the store k/name (a control
// route).
func (c *Client) Compact(ctx context.Context, k Kind, name string) (CompactTask, error) {
	var t CompactTask
	if !k.valid() {
		return t, errKind
	}
	_, err := c.send(ctx, request{method: http.MethodPost, path: compactPath(k, name)}, &t)
	return t, err
}
