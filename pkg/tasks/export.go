package tasks

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"time"

	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

// ErrIDInUse means an export was enqueued under the id of a task of another kind,
// target or spec: the id names that task, and the new one was not enqueued
// (a client's id collision, or a request edited before it was sent again).
var ErrIDInUse = errclass.New(errclass.Exists, "task id in use by another task")

// errPrunedMeanwhile is an export enqueue that found its id taken and then the
// task gone (pruned in between): sending it again enqueues it.
var errPrunedMeanwhile = errclass.New(errclass.Conflict, "the task holding the id was pruned while it was read; send the request again")

// Limits of an ExportSpec, which travels in every task record and gRPC call.
const (
	MaxExportColumns     = 1024
	MaxExportFilterBytes = 16 << 10
)

// ExportSpec is what an export task writes, and where: the one definition of it,
// stored in the task record (Task.Export), sent to the worker that runs it, and
// read by package export (a worker's part), whose Spec it is.
type ExportSpec struct {
	// Destination is a bucket URL the workers can write, with the schemes and
	// ?prefix= of DATA_URL (objstore.Open): file://, s3://, azblob://, gs://. The
	// credentials are the worker's.
	Destination string `json:"destination"`
	// Version is the base-table version to export; 0: the store now (base and
	// pending rows).
	Version uint64 `json:"version,omitempty"`
	// Columns are the columns written besides id and _seq; nil: every column.
	Columns []string `json:"columns,omitempty"`
	// Filter selects rows: a generic store's SQL predicate (the list's filter=),
	// a rollout store's filters JSON object (the list's filters=); "": every row.
	Filter string `json:"filter,omitempty"`
}

// Validate checks s without I/O: a destination whose URL Open would take (not
// mem://, which dies with the worker's call), columns that are distinct
// non-empty names, a filter of bounded size. Whether the columns exist and the
// filter compiles is the store's to say (the worker checks both). The error
// wraps ErrInvalidArgument (Invalid) and names the field.
func (s ExportSpec) Validate() error {
	if s.Destination == "" {
		return fmt.Errorf("%w: destination is required (a bucket URL: file:///dir, s3://bucket?region=..., gs://bucket, azblob://container, each with an optional ?prefix=dir/)", ErrInvalidArgument)
	}
	if err := objstore.CheckURL(s.Destination); err != nil {
		return fmt.Errorf("%w: destination: %w", ErrInvalidArgument, err)
	}
	if u, _ := url.Parse(s.Destination); u.Scheme == "mem" {
		return fmt.Errorf("%w: destination: a mem:// bucket lives in one worker's memory for one call: export to a bucket readers can open", ErrInvalidArgument)
	}
	if len(s.Columns) > MaxExportColumns {
		return fmt.Errorf("%w: columns: %d names, at most %d", ErrInvalidArgument, len(s.Columns), MaxExportColumns)
	}
	for i, c := range s.Columns {
		if c == "" {
			return fmt.Errorf("%w: columns[%d]: empty column name", ErrInvalidArgument, i)
		}
		if slices.Contains(s.Columns[:i], c) {
			return fmt.Errorf("%w: columns[%d]: %q is named twice", ErrInvalidArgument, i, c)
		}
	}
	if len(s.Filter) > MaxExportFilterBytes {
		return fmt.Errorf("%w: filter: %d bytes, at most %d", ErrInvalidArgument, len(s.Filter), MaxExportFilterBytes)
	}
	return nil
}

// Equal reports whether s and o ask for the same export (nil and empty Columns
// alike).
func (s ExportSpec) Equal(o ExportSpec) bool {
	return s.Destination == o.Destination && s.Version == o.Version && s.Filter == o.Filter &&
		slices.Equal(s.Columns, o.Columns)
}

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

// EnqueueExport adds a queued export of target with spec, under id if given (a
// UUID the client picked; "" makes a UUIDv7, which sorts in enqueue order as
// the queue's own ids do). It is idempotent by id: if a task with the id
// exists, an export of the same target and spec is returned with existing true
// and nothing is added, and any other task is ErrIDInUse. Exports are never
// deduplicated by kind and target.
//
// A bad target, spec or id is an ErrInvalidArgument naming it.
func (s *Queue) EnqueueExport(ctx context.Context, target registry.Target, spec ExportSpec, id string) (Task, bool, error) {
	t, existing, err := s.enqueueExport(ctx, target, spec, id)
	if err == nil && s.opts.onEnqueue != nil {
		s.opts.onEnqueue(KindExport, existing)
	}
	return t, existing, err
}

func (s *Queue) enqueueExport(ctx context.Context, target registry.Target, spec ExportSpec, id string) (Task, bool, error) {
	if err := validateTarget(target); err != nil {
		return Task{}, false, err
	}
	if err := spec.Validate(); err != nil {
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
	if len(spec.Columns) == 0 {
		spec.Columns = nil // one form of "every column", so Equal and the record agree
	}
	t := Task{
		ID:         id,
		Kind:       KindExport,
		Target:     target,
		State:      StateQueued,
		EnqueuedAt: s.now(),
		Export:     &spec,
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
		s.opts.logger.Debug("task enqueued", "task", id, "kind", KindExport, "target", target, "destination", redactURL(spec.Destination))
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
	if old.Kind != KindExport || old.Target != target || old.Export == nil || !old.Export.Equal(spec) {
		return Task{}, false, fmt.Errorf("enqueue export %s: id %s is task of kind %s on %s%s: %w",
			target, id, old.Kind, old.Target, specDiffers(old, spec), ErrIDInUse)
	}
	return old, true, nil
}

// specDiffers says, for ErrIDInUse's message, that the task holding the id is
// an export of the same target with another spec.
func specDiffers(old Task, spec ExportSpec) string {
	if old.Kind == KindExport && old.Export != nil && !old.Export.Equal(spec) {
		return " with another destination, version, columns or filter"
	}
	return ""
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
