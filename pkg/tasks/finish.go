package tasks

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrClaimLost means the caller no longer holds the claim it tries to finish or
// release: its lease expired or was revoked, and the task may already be queued
// again or running under someone else's claim. Nothing was changed.
var ErrClaimLost = errors.New("claim lost")

// Result is the outcome of running a claimed task.
type Result struct {
	// Err is nil when the task succeeded; otherwise the task fails with its text.
	Err error
	// Report is what the run did (a failed run's partial progress included): it
	// becomes the record's detail and stats.
	Report
	// Halt marks a failure that needs a human (a corrupt object): retrying it cannot
	// help, so the kind+target cools down whatever its kind, merge_wal included.
	Halt bool
}

// Finish records the outcome of a claimed task and drops its claim, target lock
// and dedupe key, so the target is free and the kind+target may be enqueued again.
// A failure of a non-merge kind, or a halting failure of any kind, puts its
// kind+target in cooldown (exponential backoff); a success ends the cooldown.
//
// Only the claim's holder can finish it: if the claim was lost, Finish returns
// ErrClaimLost and changes nothing.
func (s *Queue) Finish(ctx context.Context, c *Claim, r Result) (Task, error) {
	t := c.Task
	t.State = StateDone
	t.Error = ""
	if r.Err != nil {
		t.State = StateFailed
		t.Error = r.Err.Error()
		if t.Error == "" {
			t.Error = "failed"
		}
	}
	t.Detail, t.Stats = r.Detail, r.Stats
	t.FinishedAt = s.now()
	if r.Progress != nil {
		p := *r.Progress
		if p.UpdatedAt.IsZero() {
			p.UpdatedAt = t.FinishedAt
		}
		t.Progress = &p
	}
	t.Exported = r.Exported
	t.ClaimToken = ""
	t.FencingToken = c.FencingToken
	record := encodeTask(t)

	for range maxTxnAttempts {
		var cd Cooldown
		var cdRev int64
		if r.Err != nil && cools(t.Kind, r) {
			var err error
			if cd, cdRev, _, err = s.getCooldown(ctx, t.Kind, t.Target); err != nil {
				return Task{}, fmt.Errorf("finish task %s: %w", t.ID, err)
			}
		}
		cdCmps, cdOps := s.cooldownOps(t, r, cd, cdRev)

		// Finish transaction:
		//   if   value(P/claims/<id>) == token                    we still hold the claim: lease alive, not
		//                                                         recovered and claimed by someone else
		//        value(L) == token                                and the lane's target lock (Queue.lock) that
		//                                                          fences the workers
		//        mod_revision(P/cooldown/<kind>/<target>) == c    (a failure that cools: of a non-merge kind,
		//                                                         or halting) the failure count we add one
		//                                                         to is current
		//   then put P/tasks/<id> = done | failed task            finished_at, error, detail, stats, fencing token
		//        delete P/running/<id>                            out of the running index
		//        delete P/claims/<id>                             the claim is over
		//        delete L                                         the target's lane is free
		//        put P/cooldown/<kind>/<target> = {failures+1, until, last_error}   (a failure that cools)
		//        or delete P/cooldown/<kind>/<target>                              (success: the streak ends)
		//        txn: if value(P/dedupe/<kind>/<target>) == <id>  no longer live: the next enqueue makes a
		//             then delete P/dedupe/<kind>/<target>        new task; never drop another task's key
		//   else get P/claims/<id>, get L                          to tell a lost claim from a cooldown race
		cmps := append([]clientv3.Cmp{
			clientv3.Compare(clientv3.Value(s.keys.Claim(t.ID)), "=", c.Token),
			clientv3.Compare(clientv3.Value(s.lock(t)), "=", c.Token),
		}, cdCmps...)
		ops := append([]clientv3.Op{
			clientv3.OpPut(s.keys.Task(t.ID), record),
			clientv3.OpDelete(s.keys.Running(t.ID)),
			clientv3.OpDelete(s.keys.Claim(t.ID)),
			clientv3.OpDelete(s.lock(t)),
			s.dropDedupe(t),
		}, cdOps...)
		resp, err := s.client.Txn(ctx).If(cmps...).Then(ops...).Else(
			clientv3.OpGet(s.keys.Claim(t.ID)),
			clientv3.OpGet(s.lock(t)),
		).Commit()
		if err != nil {
			return Task{}, fmt.Errorf("finish task %s: %w", t.ID, err)
		}
		if resp.Succeeded {
			s.opts.logger.Info("task finished", "task", t.ID, "kind", t.Kind, "target", t.Target,
				"state", t.State, "error", t.Error, "detail", t.Detail, "stats", t.Stats)
			return t, nil
		}
		if !holds(resp, c.Token) {
			return Task{}, fmt.Errorf("finish task %s (%s %s): %w", t.ID, t.Kind, t.Target, ErrClaimLost)
		}
		// Only the cooldown record changed (a concurrent Finish of the same
		// kind+target cannot happen, but an operator may edit it): read it again.
	}
	return Task{}, fmt.Errorf("finish task %s: gave up after %d attempts: %s keeps changing",
		t.ID, maxTxnAttempts, s.keys.Cooldown(string(t.Kind), t.Target.String()))
}

// holds reports whether the else-branch reads of a failed Finish or Release
// (claim key, then target lock) both still hold token.
func holds(resp *clientv3.TxnResponse, token string) bool {
	for _, r := range resp.Responses[:2] {
		kvs := r.GetResponseRange().Kvs
		if len(kvs) == 0 || string(kvs[0].Value) != token {
			return false
		}
	}
	return true
}

// Release puts a claimed task back in the queue at its original place, for a
// master that shuts down gracefully before running it to the end. Attempts keep
// counting. Like Finish, it returns ErrClaimLost and changes nothing if the claim
// was lost.
func (s *Queue) Release(ctx context.Context, c *Claim) (Task, error) {
	t := c.Task
	t.State = StateQueued
	t.StartedAt = time.Time{}
	t.ClaimToken = ""
	record := encodeTask(t)

	// Release transaction:
	//   if   value(P/claims/<id>) == token                    we still hold the claim
	//        value(L) == token                                and the lane's target lock
	//   then put P/tasks/<id> = queued task                   attempts kept
	//        put P/queue/<id> = queued task                   back at its place in the FIFO (same id)
	//        delete P/running/<id>, P/claims/<id>, L
	//   else nothing: ErrClaimLost
	resp, err := s.client.Txn(ctx).If(
		clientv3.Compare(clientv3.Value(s.keys.Claim(t.ID)), "=", c.Token),
		clientv3.Compare(clientv3.Value(s.lock(t)), "=", c.Token),
	).Then(
		clientv3.OpPut(s.keys.Task(t.ID), record),
		clientv3.OpPut(s.keys.Queue(t.ID), record),
		clientv3.OpDelete(s.keys.Running(t.ID)),
		clientv3.OpDelete(s.keys.Claim(t.ID)),
		clientv3.OpDelete(s.lock(t)),
	).Commit()
	if err != nil {
		return Task{}, fmt.Errorf("release task %s: %w", t.ID, err)
	}
	if !resp.Succeeded {
		return Task{}, fmt.Errorf("release task %s (%s %s): %w", t.ID, t.Kind, t.Target, ErrClaimLost)
	}
	s.opts.logger.Info("task released", "task", t.ID, "kind", t.Kind, "target", t.Target)
	return t, nil
}
