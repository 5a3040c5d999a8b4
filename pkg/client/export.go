package client

import (
	"context"
	"net/http"
	"time"
)

// ExportRequest is an export of a store: where to, and what (POST .../export).
type ExportRequest struct {
	// Destination is a bucket URL the workers can write with their own
	// credentials: file:///dir, s3://bucket?region=..., gs://bucket,
	// azblob://container, each with an optional ?prefix=dir/.
	Destination string `json:"destination"`
	// Version is the base-table version to export; 0: the store now.
	Version uint64 `json:"version,omitempty"`
	// Columns are the columns written besides id and _seq; nil: every column.
	Columns []string `json:"columns,omitempty"`
	// Filter selects rows: a generic store's SQL predicate, a rollout store's
	// filters JSON object.
	Filter string `json:"filter,omitempty"`
	// ID is a task id (a UUID) the caller picks, so that sending the request
	// again after a timeout enqueues nothing new; "": the worker's queue picks.
	ID string `json:"id,omitempty"`
}

// ExportTask is an export task, as the worker answers it.
type ExportTask struct {
	ID         string    `json:"id"`
	Kind       string    `json:"kind"`
	Target     string    `json:"target"`
	State      string    `json:"state"` // queued, running, done or failed
	Error      string    `json:"error,omitempty"`
	Detail     string    `json:"detail,omitempty"`
	EnqueuedAt time.Time `json:"enqueued_at"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	Attempts   int       `json:"attempts"`
	// Export is the request as the task holds it (the destination without user
	// info).
	Export ExportRequest `json:"export"`
	// Progress is how far the export got, as last recorded (nil: not yet).
	Progress *ExportProgress `json:"progress,omitempty"`
	// CancelRequested: the export was asked to stop.
	CancelRequested bool `json:"cancel_requested,omitempty"`
	// Exported is the manifest in brief, once done.
	Exported *ExportResult `json:"exported,omitempty"`
}

// Finished reports whether the task is done or failed.
func (t ExportTask) Finished() bool { return t.State == "done" || t.State == "failed" }

// ExportProgress is how far an export got.
type ExportProgress struct {
	Rows  int64 `json:"rows"`
	Files int64 `json:"files"`
	Bytes int64 `json:"bytes"`
	// Estimate is an upper bound of the rows in all (0: unknown).
	Estimate  int64     `json:"estimate,omitempty"`
	Worker    string    `json:"worker,omitempty"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// ExportResult is a done export's manifest in brief.
type ExportResult struct {
	// Manifest is the URL of _manifest.json at the destination.
	Manifest string `json:"manifest"`
	Version  uint64 `json:"version"`
	Rows     int64  `json:"rows"`
	Files    int64  `json:"files"`
	Bytes    int64  `json:"bytes"`
	// FeedCursor is the change-feed cursor to tail from after the snapshot (""
	// for an export at a version).
	FeedCursor string `json:"feed_cursor,omitempty"`
}

// Export enqueues an export of the store k/name for the master to run (a
// control route). existing is true when req.ID named an export of the same store
// and request already: that task is answered, and nothing new enqueued.
func (c *Client) Export(ctx context.Context, k Kind, name string, req ExportRequest) (t ExportTask, existing bool, err error) {
	if !k.valid() {
		return t, false, errKind
	}
	resp, err := c.sendStatus(ctx, request{method: http.MethodPost, path: exportPath(k, name), body: req}, &t)
	if err != nil {
		return t, false, err
	}
	return t, resp.StatusCode == http.StatusOK, nil
}

// GetExport reads the export task id of the store k/name: its state, progress
// and, once done, its manifest in brief.
func (c *Client) GetExport(ctx context.Context, k Kind, name, id string) (ExportTask, error) {
	var t ExportTask
	if !k.valid() {
		return t, errKind
	}
	_, err := c.send(ctx, request{method: http.MethodGet, path: exportTaskPath(k, name, id)}, &t)
	return t, err
}
