package tasks

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/errclass"
)

// ShouldRetry reports whether the failure err of c's run puts its task back in
// the queue (Retry) rather than failing it: the task's kind is Requeued, err is
// of a class a retry may mend (errclass.Class.Retryable: a worker that died
// mid-run reads as Unavailable), and the task has had fewer than MaxAttempts
// claims. The scheduler asks; the policy is here, beside the kinds it names.
func ShouldRetry(c *Claim, err error) bool {
	return err != nil && c.Task.Kind.Requeued() && errclass.Of(err).Retryable() && c.Task.Attempts < MaxAttempts
}

// Retry puts c's task back in the queue at its original place after a run that
// failed with cause, for another claim (by any master, calling any worker) to
// run again; Attempts keep counting, and the detail says why. Progress and a
// cancel request are kept. A task asked to stop meanwhile (CancelRequested) is
// not requeued: Retry returns false, and the caller finishes it as cancelled.
// Like Finish, it returns ErrClaimLost and changes nothing if the claim was lost.
func (s *Queue) Retry(ctx context.Context, c *Claim, cause error) (Task, bool, error) {
	id := c.Task.ID
	for range maxTxnAttempts {
		t, rev, err := s.getTask(ctx, id)
		if errors.Is(err, ErrTaskNotFound) {
			return Task{}, false, fmt.Errorf("retry task %s: %w", id, ErrClaimLost)
		}
		if err != nil {
			return Task{}, false, fmt.Errorf("retry task %s: %w", id, err)
		}
		if t.State != StateRunning || t.ClaimToken != c.Token {
			return Task{}, false, fmt.Errorf("retry task %s (%s %s): it is %s under another claim: %w", id, t.Kind, t.Target, t.State, ErrClaimLost)
		}
		if t.CancelRequested {
			// Left for the caller to Finish, which checks the claim; say now if
			// there is none to finish under.
			if held, err := s.value(ctx, s.keys.Claim(id)); err != nil {
				return Task{}, false, fmt.Errorf("retry task %s: %w", id, err)
			} else if held != c.Token {
				return Task{}, false, fmt.Errorf("retry task %s (%s %s): %w", id, t.Kind, t.Target, ErrClaimLost)
			}
			return t, false, nil
		}
		t.State = StateQueued
		t.StartedAt = time.Time{}
		t.ClaimToken = ""
		t.Detail = fmt.Sprintf("attempt %d of %d failed, queued to run again: %v", t.Attempts, MaxAttempts, cause)
		record := encodeTask(t)

		// Retry transaction:
		//   if   value(P/claims/<id>) == token                    we still hold the claim
		//        value(L) == token                                and the lane's target lock
		//        mod_revision(P/tasks/<id>) == r                  the record as read: a cancel request written
		//                                                         since is seen on the next read
		//   then put P/tasks/<id> = queued task                   attempts, progress kept; detail says why
		//        put P/queue/<id> = queued task                   back at its place in the FIFO (same id)
		//        delete P/running/<id>, P/claims/<id>, L
		//   else get P/claims/<id>, get L                          to tell a lost claim from a changed record
		lock := s.lock(t)
		resp, err := s.client.Txn(ctx).If(
			clientv3.Compare(clientv3.Value(s.keys.Claim(id)), "=", c.Token),
			clientv3.Compare(clientv3.Value(lock), "=", c.Token),
			clientv3.Compare(clientv3.ModRevision(s.keys.Task(id)), "=", rev),
		).Then(
			clientv3.OpPut(s.keys.Task(id), record),
			clientv3.OpPut(s.keys.Queue(id), record),
			clientv3.OpDelete(s.keys.Running(id)),
			clientv3.OpDelete(s.keys.Claim(id)),
			clientv3.OpDelete(lock),
		).Else(
			clientv3.OpGet(s.keys.Claim(id)),
			clientv3.OpGet(lock),
		).Commit()
		if err != nil {
			return Task{}, false, fmt.Errorf("retry task %s: %w", id, err)
		}
		if resp.Succeeded {
			s.opts.logger.Warn("task queued to run again after a failure a retry may mend", "task", id, "kind", t.Kind,
				"target", t.Target, "attempt", t.Attempts, "max_attempts", MaxAttempts, "err", cause)
			return t, true, nil
		}
		if !holds(resp, c.Token) {
			return Task{}, false, fmt.Errorf("retry task %s (%s %s): %w", id, t.Kind, t.Target, ErrClaimLost)
		}
	}
	return Task{}, false, fmt.Errorf("retry task %s: gave up after %d attempts: its record keeps changing", id, maxTxnAttempts)
}

// value reads a key's value ("" when absent).
func (s *Queue) value(ctx context.Context, key string) (string, error) {
	resp, err := s.client.Get(ctx, key)
	if err != nil {
		return "", fmt.Errorf("get %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}
