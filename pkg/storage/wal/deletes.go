package wal

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

// DeleteQueue takes the drained generation files whose delete delay has passed from
// the drains that drop them from their shard manifests to whoever deletes them (the
// worker's cleanup sweeper), so that a drain, which runs inside a merge's serialized
// commit, writes its manifest edit and nothing else.
//
// Invariants:
//
//   - A file is queued only after the manifest version that stops listing it was
//     written, and only once it had been listed under deferred_deletes for the
//     delete delay: a reader's snapshot that still lists it is older than that
//     (doc.go), so deleting it at any later time is as safe as deleting it in the
//     drain was.
//   - Bounded: at most its limit of files wait. A file that does not fit is dropped
//     and counted, never waited for. A dropped file, one queued in a process that
//     died, and one whose delete failed are garbage that Cleanup collects: it deletes
//     a generation file that no kept manifest version lists.
//
// A DeleteQueue is safe for concurrent use.
type DeleteQueue struct {
	limit int
	ready chan struct{} // one token: files were queued since the last Delete took them

	mu      sync.Mutex
	files   []queuedDelete
	dropped int // since the last Delete
}

type queuedDelete struct {
	bucket *objstore.Bucket
	key    string
}

// DefaultDeleteQueueLimit bounds a worker's queue: a drain queues at most as many
// files as an earlier drain dropped from the manifest (a merge pass's generations),
// and the sweeper takes them within a second of the wake-up, so the bound is only
// reached while deletes fail or hang; a key is ~100 bytes.
const DefaultDeleteQueueLimit = 1 << 14

// drainedDeletes bounds the deletes of drained files in flight at once.
const drainedDeletes = 8

// NewDeleteQueue returns a queue holding at most limit files (DefaultDeleteQueueLimit
// if limit <= 0).
func NewDeleteQueue(limit int) *DeleteQueue {
	if limit <= 0 {
		limit = DefaultDeleteQueueLimit
	}
	return &DeleteQueue{limit: limit, ready: make(chan struct{}, 1)}
}

// WithDeleteQueue sets Options.Deletes.
func WithDeleteQueue(q *DeleteQueue) Option { return func(o *Options) { o.Deletes = q } }

// Ready receives after files were queued; the deleter then calls Delete. Several
// additions before a receive wake it once.
func (q *DeleteQueue) Ready() <-chan struct{} { return q.ready }

// Len returns how many files wait.
func (q *DeleteQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.files)
}

// add queues the objects keys of bucket and returns how many it dropped for lack
// of room.
func (q *DeleteQueue) add(bucket *objstore.Bucket, keys []string) (dropped int) {
	if len(keys) == 0 {
		return 0
	}
	q.mu.Lock()
	room := max(q.limit-len(q.files), 0)
	if len(keys) > room {
		dropped = len(keys) - room
		keys = keys[:room]
	}
	for _, k := range keys {
		q.files = append(q.files, queuedDelete{bucket: bucket, key: k})
	}
	q.dropped += dropped
	q.mu.Unlock()
	if len(keys) > 0 {
		select {
		case q.ready <- struct{}{}:
		default:
		}
	}
	return dropped
}

// DeleteResult says what one Delete did.
type DeleteResult struct {
	// Deleted counts the files deleted (or found already gone).
	Deleted int
	// Failed counts the files whose delete failed or was not tried because ctx
	// ended; they are garbage now, for Cleanup. Err is the first such failure.
	Failed int
	Err    error
	// Dropped counts the files the queue had no room for since the last Delete
	// (also garbage for Cleanup).
	Dropped int
}

// Delete takes every queued file and deletes it, drainedDeletes at a time. A file
// whose delete fails is not queued again: a store that fails it now may fail it
// forever, and Cleanup collects it.
func (q *DeleteQueue) Delete(ctx context.Context) DeleteResult {
	q.mu.Lock()
	files, dropped := q.files, q.dropped
	q.files, q.dropped = nil, 0
	q.mu.Unlock()

	res := DeleteResult{Dropped: dropped}
	var deleted atomic.Int64
	var (
		mu       sync.Mutex
		firstErr error
	)
	var g errgroup.Group
	g.SetLimit(drainedDeletes)
	for _, f := range files {
		g.Go(func() error {
			err := ctx.Err()
			if err == nil {
				err = f.bucket.Delete(ctx, f.key)
			}
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("delete drained generation file %s: %w", f.key, err)
				}
				mu.Unlock()
				return nil
			}
			deleted.Add(1)
			return nil
		})
	}
	_ = g.Wait()
	res.Deleted = int(deleted.Load())
	res.Failed = len(files) - res.Deleted
	res.Err = firstErr
	return res
}
