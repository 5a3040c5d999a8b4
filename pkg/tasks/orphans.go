package tasks

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// RecoverOrphans puts every running task whose claim is gone (its lease expired
// or was revoked) back in the queue at its original place, and returns how many it
// recovered. This is the only way, besides Release, that a task goes from running
// back to queued. Claim does it too before it picks; call it at startup as well.
func (s *Queue) RecoverOrphans(ctx context.Context) (int, error) {
	// Running records and claims read at one revision: a task whose running key
	// is there but claim key is not was orphaned at that revision.
	resp, err := s.client.Txn(ctx).Then(
		clientv3.OpGet(s.keys.RunningPrefix(), clientv3.WithPrefix()),
		clientv3.OpGet(s.keys.ClaimsPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", s.keys.RunningPrefix(), err)
	}
	snap := &snapshot{running: resp.Responses[0].GetResponseRange().Kvs, claimed: map[string]bool{}}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		snap.claimed[string(kv.Key[len(s.keys.ClaimsPrefix()):])] = true
	}
	return s.recoverOrphansIn(ctx, snap)
}

func (s *Queue) recoverOrphansIn(ctx context.Context, snap *snapshot) (int, error) {
	n := 0
	for _, kv := range snap.running {
		id := string(kv.Key[len(s.keys.RunningPrefix()):])
		if snap.claimed[id] {
			continue
		}
		ok, err := s.recoverOrphan(ctx, id)
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}

// recoverOrphan requeues running task id if its claim is gone. It reports
// false when the task finished, was released or recovered meanwhile.
func (s *Queue) recoverOrphan(ctx context.Context, id string) (bool, error) {
	t, rev, err := s.getTask(ctx, id)
	if errors.Is(err, ErrTaskNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if t.State != StateRunning {
		return false, nil
	}
	staleToken := t.ClaimToken
	t.State = StateQueued
	t.StartedAt = time.Time{}
	t.ClaimToken = ""
	record := encodeTask(t)

	// Orphan recovery transaction:
	//   if   mod_revision(P/tasks/<id>) == r                    still the running record we read: not finished,
	//                                                          released or recovered by another replica since
	//        create_revision(P/claims/<id>) == 0               the claim is gone: its lease expired or was revoked
	//   then put P/tasks/<id> = queued task                     attempts kept, to run again
	//        put P/queue/<id> = queued task                     at its original place in the FIFO (same id)
	//        delete P/running/<id>                              out of the running index
	//        txn: if value(L) == token                          the lock of the task's lane normally died with
	//             then delete L                                the same lease; if it did not, drop it, but
	//                                                          never another claim's
	//   else nothing: someone else handled it
	lock := s.lock(t)
	ops := []clientv3.Op{
		clientv3.OpPut(s.keys.Task(id), record),
		clientv3.OpPut(s.keys.Queue(id), record),
		clientv3.OpDelete(s.keys.Running(id)),
	}
	if staleToken != "" {
		ops = append(ops, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value(lock), "=", staleToken)},
			[]clientv3.Op{clientv3.OpDelete(lock)},
			nil,
		))
	}
	resp, err := s.client.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(s.keys.Task(id)), "=", rev),
		clientv3.Compare(clientv3.CreateRevision(s.keys.Claim(id)), "=", 0),
	).Then(ops...).Commit()
	if err != nil {
		return false, fmt.Errorf("recover orphaned task %s: %w", id, err)
	}
	if resp.Succeeded {
		s.opts.logger.Warn("orphaned task requeued: its claim's lease is gone", "task", id,
			"kind", t.Kind, "target", t.Target, "attempts", t.Attempts)
	}
	return resp.Succeeded, nil
}
