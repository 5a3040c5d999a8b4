package tasks

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/errclass"
)

// ErrNotCancellable means the task is running or finished: only a queued task can
// be cancelled (FailedPrecondition, not NotFound or InvalidArgument).
var ErrNotCancellable = errclass.New(errclass.Precondition, "task is not queued")

// Cancel fails a queued task with error "cancelled" and frees its kind+target for
// a new enqueue. A running or finished task gives ErrNotCancellable, a missing one
// ErrTaskNotFound.
func (s *Queue) Cancel(ctx context.Context, id string) (Task, error) {
	if err := validateID("task id", id); err != nil {
		return Task{}, err
	}
	for range maxTxnAttempts {
		t, rev, err := s.getTask(ctx, id)
		if err != nil {
			return Task{}, err
		}
		if t.State != StateQueued {
			return Task{}, fmt.Errorf("cancel task %s: it is %s: %w", id, t.State, ErrNotCancellable)
		}
		t.State = StateFailed
		t.Error = "cancelled"
		t.FinishedAt = s.now()

		ok, err := s.failQueued(ctx, t, rev)
		if err != nil {
			return Task{}, fmt.Errorf("cancel task %s: %w", id, err)
		}
		if ok {
			s.opts.logger.Info("task cancelled", "task", id, "kind", t.Kind, "target", t.Target)
			return t, nil
		}
	}
	return Task{}, fmt.Errorf("cancel task %s: gave up after %d attempts: it keeps changing", id, maxTxnAttempts)
}

// failQueued moves a queued task, read at mod revision rev, to its failed state t.
// It reports false when the task changed since it was read (claimed, cancelled or
// failed by someone else), in which case nothing was written.
func (s *Queue) failQueued(ctx context.Context, t Task, rev int64) (bool, error) {
	// Fail-queued transaction (cancel, and a failed dependency):
	//   if   mod_revision(P/tasks/<id>) == r                    still queued as read (not claimed since)
	//   then put P/tasks/<id> = failed task
	//        delete P/queue/<id>                                out of the FIFO
	//        txn: if value(P/dedupe/<kind>/<target>) == <id>    no longer live, so the kind+target may be
	//             then delete P/dedupe/<kind>/<target>          enqueued again; never drop another task's key
	//   else nothing: the caller reads it again and decides anew
	resp, err := s.client.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(s.keys.Task(t.ID)), "=", rev),
	).Then(
		clientv3.OpPut(s.keys.Task(t.ID), encodeTask(t)),
		clientv3.OpDelete(s.keys.Queue(t.ID)),
		s.dropDedupe(t),
	).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}
