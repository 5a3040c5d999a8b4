package tasks

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// UpdateProgress records p as the progress of c's running task (Task.Progress,
// UpdatedAt set now) and returns the record as written, whose CancelRequested
// tells the runner whether to stop. Only the claim's holder can: a claimer whose
// lease is gone (the task requeued, or claimed by another) gets ErrClaimLost and
// writes nothing, so a stale run never overwrites its successor's progress.
//
// Each call is a read and a transaction: runners call it at most every few
// seconds, not per batch of work.
func (s *Queue) UpdateProgress(ctx context.Context, c *Claim, p Progress) (Task, error) {
	id := c.Task.ID
	p.UpdatedAt = s.now()
	for range maxTxnAttempts {
		t, rev, err := s.getTask(ctx, id)
		if errors.Is(err, ErrTaskNotFound) {
			return Task{}, fmt.Errorf("progress of task %s: %w", id, ErrClaimLost)
		}
		if err != nil {
			return Task{}, fmt.Errorf("progress of task %s: %w", id, err)
		}
		if t.State != StateRunning || t.ClaimToken != c.Token {
			return Task{}, fmt.Errorf("progress of task %s (%s %s): it is %s under another claim: %w", id, t.Kind, t.Target, t.State, ErrClaimLost)
		}
		t.Progress = &p
		record := encodeTask(t)

		// Progress transaction:
		//   if   value(P/claims/<id>) == token              we hold the claim (its lease lives): a stale
		//                                                    run's report never lands
		//        mod_revision(P/tasks/<id>) == r             the record as read, so a cancel request written
		//                                                    since is kept, not overwritten
		//   then put P/tasks/<id> = task with the progress
		//        put P/running/<id> = the same               the running index is a copy
		//   else get P/claims/<id>                           lost the claim, or only the record changed
		resp, err := s.client.Txn(ctx).If(
			clientv3.Compare(clientv3.Value(s.keys.Claim(id)), "=", c.Token),
			clientv3.Compare(clientv3.ModRevision(s.keys.Task(id)), "=", rev),
		).Then(
			clientv3.OpPut(s.keys.Task(id), record),
			clientv3.OpPut(s.keys.Running(id), record),
		).Else(
			clientv3.OpGet(s.keys.Claim(id)),
		).Commit()
		if err != nil {
			return Task{}, fmt.Errorf("progress of task %s: %w", id, err)
		}
		if resp.Succeeded {
			return t, nil
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 || string(kvs[0].Value) != c.Token {
			return Task{}, fmt.Errorf("progress of task %s (%s %s): %w", id, t.Kind, t.Target, ErrClaimLost)
		}
		// Only the record changed (a cancel request): read it again.
	}
	return Task{}, fmt.Errorf("progress of task %s: gave up after %d attempts: its record keeps changing", id, maxTxnAttempts)
}
