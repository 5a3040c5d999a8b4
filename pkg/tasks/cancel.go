package tasks

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/coord/follow"
	"github.com/tidemark-io/tidemark/pkg/errclass"
)

// ErrNotCancellable means the task is finished, or running and of a kind that
// runs to its end (Kind.CancelsRunning): only a queued task, or a running export,
// can be cancelled (FailedPrecondition, not NotFound or InvalidArgument).
var ErrNotCancellable = errclass.New(errclass.Precondition, "task is not queued")

// ErrCancelled is the failure of a running task stopped because it was
// cancelled (its runner returns it; the task fails with "cancelled").
var ErrCancelled = errclass.New(errclass.Canceled, "cancelled")

// Cancel fails a queued task with error "cancelled" and frees its kind+target for
// a new enqueue. A running task of a kind that stops when cancelled
// (Kind.CancelsRunning) gets CancelRequested instead and stays running until its
// runner, which watches for it (WatchCancel), stopped the work and failed it with
// "cancelled"; the task is returned as recorded. Any other running task, or a
// finished one, gives ErrNotCancellable, a missing one ErrTaskNotFound.
func (s *Queue) Cancel(ctx context.Context, id string) (Task, error) {
	if err := validateID("task id", id); err != nil {
		return Task{}, err
	}
	for range maxTxnAttempts {
		t, rev, err := s.getTask(ctx, id)
		if err != nil {
			return Task{}, err
		}
		var ok bool
		switch {
		case t.State == StateRunning && t.Kind.CancelsRunning():
			if t.CancelRequested {
				return t, nil
			}
			t.CancelRequested = true
			if ok, err = s.requestCancel(ctx, t, rev); err == nil && ok {
				s.opts.logger.Info("running task asked to stop", "task", id, "kind", t.Kind, "target", t.Target)
				return t, nil
			}
		case t.State == StateQueued:
			t.State = StateFailed
			t.Error = "cancelled"
			t.FinishedAt = s.now()
			if ok, err = s.failQueued(ctx, t, rev); err == nil && ok {
				s.opts.logger.Info("task cancelled", "task", id, "kind", t.Kind, "target", t.Target)
				return t, nil
			}
		default:
			return Task{}, fmt.Errorf("cancel task %s: it is %s: %w", id, t.State, ErrNotCancellable)
		}
		if err != nil {
			return Task{}, fmt.Errorf("cancel task %s: %w", id, err)
		}
	}
	return Task{}, fmt.Errorf("cancel task %s: gave up after %d attempts: it keeps changing", id, maxTxnAttempts)
}

// requestCancel writes t, a running task read at mod revision rev, with its
// cancel request. It reports false when the task changed since it was read.
func (s *Queue) requestCancel(ctx context.Context, t Task, rev int64) (bool, error) {
	record := encodeTask(t)
	// Cancel-request transaction (a running export):
	//   if   mod_revision(P/tasks/<id>) == r                    still the running record as read (not finished,
	//                                                          requeued or its progress written since)
	//   then put P/tasks/<id> = task with cancel_requested      the runner's watch sees it
	//        put P/running/<id> = the same                      the running index is a copy
	//   else nothing: the caller reads it again and decides anew
	resp, err := s.client.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(s.keys.Task(t.ID)), "=", rev),
	).Then(
		clientv3.OpPut(s.keys.Task(t.ID), record),
		clientv3.OpPut(s.keys.Running(t.ID), record),
	).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// WatchCancel returns a channel closed once task id's record asks it to stop
// (CancelRequested): the runner of a task that CancelsRunning selects on it.
// It follows the record until ctx is done (an etcd outage only delays it: the
// watch lists the record again when it breaks); the channel is never closed for
// a task that is not asked to stop.
func (s *Queue) WatchCancel(ctx context.Context, id string) <-chan struct{} {
	ch := make(chan struct{})
	fctx, stop := context.WithCancel(ctx)
	h := &cancelWatch{key: s.keys.Task(id), asked: func() { close(ch); stop() }}
	go func() {
		defer stop()
		follow.Run(fctx, s.client, s.keys.Task(id), h, nil, s.opts.logger, "task "+id+" (cancel requests)")
	}()
	return ch
}

// cancelWatch is WatchCancel's follow.Handler: it keeps no copy, and calls asked
// once, at the first version of the record that asks the task to stop.
type cancelWatch struct {
	key   string
	asked func()
	done  bool
}

func (w *cancelWatch) Reset(kvs []*mvccpb.KeyValue, _ int64) {
	for _, kv := range kvs {
		w.check(kv)
	}
}

func (w *cancelWatch) Apply(events []*clientv3.Event, _ int64) {
	for _, e := range events {
		if e.Type == clientv3.EventTypePut {
			w.check(e.Kv)
		}
	}
}

func (w *cancelWatch) check(kv *mvccpb.KeyValue) {
	if w.done || string(kv.Key) != w.key {
		return // a prefix match of a longer key: not this task's record
	}
	if t, err := decodeTask(string(kv.Key), kv.Value); err == nil && t.CancelRequested {
		w.done = true
		w.asked()
	}
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
