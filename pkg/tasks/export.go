package tasks

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/registry"
)

// ErrIDInUse means an export was enqueued under the id of a task of another kind,
// target or spec: the id names that task, and the new one was not enqueued
// (a client's id collision, or a request edited before it was sent again).
var ErrIDInUse = errclass.New(errclass.Exists, "task id in use by another task")

// errPrunedMeanwhile is an export enqueue that found its id taken and then the
// task gone (pruned in between): sending it again enqueues it.
var errPrunedMeanwhile = errclass.New(errclass.Conflict, "the task holding the id was pruned while it was read; send the request again")

// MaxExportSpecBytes bounds an export's spec as the record holds it (JSON): a
// URL, column names and a filter.
const MaxExportSpecBytes = 256 << 10

// Progress is how far a run has come, as its runner reports it (an export's
// rows, files and bytes written; its estimate of the rows in all).
type Progress struct {
	Rows  int64 `json:"rows"`
	Files int64 `json:"files"`
	Bytes int64 `json:"bytes"`
	// Estimate is an upper bound of Rows at the end (live base rows plus
	// pending rows when the run began); 0: unknown.
	Estimate int64 `json:"estimate,omitempty"`
	// Worker is the worker instance doing the work.
	Worker string `json:"worker,omitempty"`
	// UpdatedAt is when the progress was recorded.
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// ExportResult is a done export's manifest in brief: where it is and what it
// holds. The manifest itself (_manifest.json at the destination) is the
// authority; this is what an operator and a poll read without opening it.
type ExportResult struct {
	// Manifest is the manifest's URL: the destination's bucket, and the key.
	Manifest string `json:"manifest"`
	// Version is the base-table version the export read (pending rows on top
	// for an export of the store now).
	Version uint64 `json:"version"`
	Rows    int64  `json:"rows"`
	Files   int64  `json:"files"`
	Bytes   int64  `json:"bytes"`
	// FeedCursor is the change-feed cursor to tail from to see every change
	// after the snapshot; "" when none is known (an export at a version).
	FeedCursor string `json:"feed_cursor,omitempty"`
}

// EnqueueExport adds a queued export of target with spec (package exportfmt's
// Spec as JSON, which the caller validated: the queue stores it, and compares it,
// as it is), under id if given (a UUID the client picked; "" makes a UUIDv7,
// which sorts in enqueue order as the queue's own ids do). It is idempotent by
// id: if a task with the id exists, an export of the same target and spec is
// returned with existing true and nothing is added, and any other task is
// ErrIDInUse. Exports are never deduplicated by kind and target.
//
// A bad target or id, or a spec that is no JSON object, is an ErrInvalidArgument
// naming it.
func (s *Queue) EnqueueExport(ctx context.Context, target registry.Target, spec json.RawMessage, id string) (Task, bool, error) {
	t, existing, err := s.enqueueExport(ctx, target, spec, id)
	if err == nil && s.opts.onEnqueue != nil {
		s.opts.onEnqueue(KindExport, existing)
	}
	return t, existing, err
}

func (s *Queue) enqueueExport(ctx context.Context, target registry.Target, spec json.RawMessage, id string) (Task, bool, error) {
	if err := validateTarget(target); err != nil {
		return Task{}, false, err
	}
	spec, err := compactSpec(spec)
	if err != nil {
		return Task{}, false, err
	}
	if id == "" {
		v7, err := uuid.NewV7()
		if err != nil {
			return Task{}, false, fmt.Errorf("enqueue export %s: new task id: %w", target, err)
		}
		id = v7.String()
	} else if err := validateID("task id", id); err != nil {
		return Task{}, false, err
	}
	t := Task{
		ID:         id,
		Kind:       KindExport,
		Target:     target,
		State:      StateQueued,
		EnqueuedAt: s.now(),
		Export:     spec,
	}
	record := encodeTask(t)

	// Export enqueue transaction:
	//   if   create_revision(P/tasks/<id>) == 0      the id is new: a client sending its request again
	//                                                finds the task it made the first time
	//   then put P/tasks/<id> = task                 the record
	//        put P/queue/<id> = task                 the queue
	//   else get P/tasks/<id>                        the task holding the id, to compare
	// No dedupe key: exports of one target to two destinations are two tasks, and
	// the target's maintenance lock runs them one at a time.
	resp, err := s.client.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(s.keys.Task(id)), "=", 0),
	).Then(
		clientv3.OpPut(s.keys.Task(id), record),
		clientv3.OpPut(s.keys.Queue(id), record),
	).Else(
		clientv3.OpGet(s.keys.Task(id)),
	).Commit()
	if err != nil {
		return Task{}, false, fmt.Errorf("enqueue export %s: %w", target, err)
	}
	if resp.Succeeded {
		s.opts.logger.Debug("task enqueued", "task", id, "kind", KindExport, "target", target)
		return t, false, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		// Pruned between the compare and the read: a retry of the call makes it anew.
		return Task{}, false, fmt.Errorf("enqueue export %s: task %s: %w", target, id, errPrunedMeanwhile)
	}
	old, err := decodeTask(string(kvs[0].Key), kvs[0].Value)
	if err != nil {
		return Task{}, false, err
	}
	if old.Kind != KindExport || old.Target != target {
		return Task{}, false, fmt.Errorf("enqueue export %s: id %s is a %s task on %s: %w", target, id, old.Kind, old.Target, ErrIDInUse)
	}
	if oldSpec, err := compactSpec(old.Export); err != nil || !bytes.Equal(oldSpec, spec) {
		return Task{}, false, fmt.Errorf("enqueue export %s: id %s is an export of %s with another destination, version, columns or filter: %w",
			target, id, old.Target, ErrIDInUse)
	}
	return old, true, nil
}

// compactSpec is spec, a JSON object, without insignificant space: the form the
// record keeps and compares (its callers marshal one struct type, so equal specs
// are equal bytes).
func compactSpec(spec json.RawMessage) (json.RawMessage, error) {
	var buf bytes.Buffer
	switch {
	case len(spec) > MaxExportSpecBytes:
		return nil, fmt.Errorf("%w: export spec: %d bytes, at most %d", ErrInvalidArgument, len(spec), MaxExportSpecBytes)
	case json.Compact(&buf, spec) != nil || buf.Len() == 0 || buf.Bytes()[0] != '{':
		return nil, fmt.Errorf("%w: export spec: not a JSON object", ErrInvalidArgument)
	}
	return buf.Bytes(), nil
}
