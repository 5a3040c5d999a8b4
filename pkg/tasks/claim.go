package tasks

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/google/uuid"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrNoTask means no queued task can be claimed now: the queue is empty, or every
// queued task waits for a dependency, a cooldown or a locked target, or is of a
// kind the filter leaves out.
var ErrNoTask = errors.New("no claimable task")

// queuePage is how many queue entries Claim reads per round trip.
const queuePage = 256

// ClaimFilter narrows what Claim may pick.
type ClaimFilter struct {
	// Kinds are the kinds the caller has capacity for; empty means any kind.
	Kinds []Kind
}

func (f ClaimFilter) accepts(k Kind) bool { return len(f.Kinds) == 0 || slices.Contains(f.Kinds, k) }

// Claim is a running task held by one claimer. Only its holder can Finish or
// Release it, and only while the lease it was claimed under lives.
type Claim struct {
	// Task is the task as claimed: state running, StartedAt set, Attempts counted.
	Task Task
	// Token is the value of P/claims/<id> and of the target's lock of the task's
	// lane (P/target-locks/<target> or P/maintenance-locks/<target>); Finish and
	// Release compare both keys against it.
	Token string
	// FencingToken is the revision that created that lock. Fencing tokens of one
	// target and lane only grow (etcd revisions are global and increasing), so a
	// worker that has seen a newer one in the lane refuses this one.
	FencingToken int64
	// Lease is the claimer's lease: the claim and the target lock die with it.
	Lease clientv3.LeaseID
}

// Claim picks the claimable queued task due first (Task.Due: DueAt, or its
// enqueue time; ties in enqueue order) and marks it running under lease
// (normally the claimer's session lease). A task is claimable when its kind passes
// filter, its dependencies are all done, its kind+target is not in cooldown and
// no task of any kind runs on its target. The order is kept within a page of
// queuePage queued tasks (the oldest first); the next page is read only when
// nothing on the ones before it is claimable, so a queue longer than a page is in
// enqueue order across pages, as it was before tasks had a due time.
//
// On the way, Claim recovers orphans (running tasks whose claim lease is gone) and
// fails queued tasks whose dependency failed ("dependency <id> did not complete").
// It returns ErrNoTask when nothing is claimable, and the etcd error (e.g.
// rpctypes.ErrLeaseNotFound) when the lease is already gone.
func (s *Queue) Claim(ctx context.Context, lease clientv3.LeaseID, filter ClaimFilter) (*Claim, error) {
	if lease == clientv3.NoLease {
		return nil, fmt.Errorf("%w: claims need a lease, so that they die with their holder", ErrInvalidArgument)
	}
	for _, k := range filter.Kinds {
		if err := validateKind(k); err != nil {
			return nil, err
		}
	}
	snap, err := s.readSnapshot(ctx)
	if err != nil {
		return nil, err
	}
	if n, err := s.recoverOrphansIn(ctx, snap); err != nil {
		return nil, err
	} else if n > 0 {
		if snap, err = s.readSnapshot(ctx); err != nil {
			return nil, err
		}
	}

	now := s.now()
	deps := map[string]Task{} // dependencies read during this call
	page, more := snap.queue, snap.queueMore
	for {
		// The page's candidates, due first (then in enqueue order): a task due
		// earlier overtakes the ones enqueued before it.
		var candidates []Task
		for _, kv := range page {
			queued, err := decodeTask(string(kv.Key), kv.Value)
			if err != nil {
				return nil, err
			}
			if !filter.accepts(queued.Kind) || snap.locked[s.lock(queued)] {
				continue
			}
			if cd, ok := snap.cooldowns[string(queued.Kind)+"/"+queued.Target.String()]; ok && now.Before(cd.Until) {
				continue
			}
			candidates = append(candidates, queued)
		}
		slices.SortStableFunc(candidates, func(a, b Task) int { return a.Due().Compare(b.Due()) })
		for _, queued := range candidates {
			if snap.locked[s.lock(queued)] {
				continue // taken by a claim lost below
			}
			ready, err := s.dependenciesDone(ctx, queued, deps)
			if err != nil {
				return nil, err
			}
			if !ready {
				continue
			}
			c, err := s.tryClaim(ctx, queued.ID, lease, snap.cooldowns[string(queued.Kind)+"/"+queued.Target.String()].rev)
			if err != nil {
				return nil, err
			}
			if c != nil {
				return c, nil
			}
			// Lost a race for the task or its lock: the lock is likely taken now.
			snap.locked[s.lock(queued)] = true
		}
		if !more || len(page) == 0 {
			return nil, ErrNoTask
		}
		resp, err := s.client.Get(ctx, string(page[len(page)-1].Key)+"\x00",
			clientv3.WithRange(clientv3.GetPrefixRangeEnd(s.keys.QueuePrefix())), clientv3.WithLimit(queuePage))
		if err != nil {
			return nil, fmt.Errorf("claim: read %s: %w", s.keys.QueuePrefix(), err)
		}
		page, more = resp.Kvs, resp.More
	}
}

// tryClaim claims task id if it is still queued and claimable. It returns nil
// without an error when another claimer or a cancel got there first.
func (s *Queue) tryClaim(ctx context.Context, id string, lease clientv3.LeaseID, cooldownRev int64) (*Claim, error) {
	t, rev, err := s.getTask(ctx, id)
	if errors.Is(err, ErrTaskNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if t.State != StateQueued {
		return nil, nil
	}
	token := s.opts.holder + "/" + strconv.FormatInt(int64(lease), 16) + "/" + uuid.NewString()
	t.State = StateRunning
	t.StartedAt = s.now()
	t.Attempts++
	t.ClaimToken = token
	record := encodeTask(t)

	// Claim transaction:
	//   if   mod_revision(P/tasks/<id>) == r                    the task is as we read it: queued, and not
	//                                                          claimed, cancelled or failed since
	//        create_revision(P/claims/<id>) == 0               nobody holds a claim on it
	//        create_revision(L) == 0                           no task of the lane runs on the target
	//                                                          (L: P/target-locks/<target> for a merge,
	//                                                          P/maintenance-locks/<target> otherwise)
	//        mod_revision(P/cooldown/<kind>/<target>) == c     the cooldown we checked is still the one in
	//                                                          force (c = 0: none)
	//   then put P/tasks/<id> = running task                    started_at, attempts+1, claim token
	//        delete P/queue/<id>                                out of the FIFO
	//        put P/running/<id> = running task                  the running index
	//        put P/claims/<id> = token (claimer's lease)        the claim dies with the claimer
	//        put L = token (same lease)                        its create revision is the fencing token
	//   else nothing: someone else won; the caller tries the next task
	lock := s.lock(t)
	resp, err := s.client.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(s.keys.Task(id)), "=", rev),
		clientv3.Compare(clientv3.CreateRevision(s.keys.Claim(id)), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(lock), "=", 0),
		clientv3.Compare(clientv3.ModRevision(s.keys.Cooldown(string(t.Kind), t.Target.String())), "=", cooldownRev),
	).Then(
		clientv3.OpPut(s.keys.Task(id), record),
		clientv3.OpDelete(s.keys.Queue(id)),
		clientv3.OpPut(s.keys.Running(id), record),
		clientv3.OpPut(s.keys.Claim(id), token, clientv3.WithLease(lease)),
		clientv3.OpPut(lock, token, clientv3.WithLease(lease)),
	).Commit()
	if err != nil {
		return nil, fmt.Errorf("claim task %s (%s %s) under lease %x: %w", id, t.Kind, t.Target, int64(lease), err)
	}
	if !resp.Succeeded {
		return nil, nil
	}
	s.opts.logger.Info("task claimed", "task", id, "kind", t.Kind, "target", t.Target,
		"fencing_token", resp.Header.Revision, "attempt", t.Attempts)
	return &Claim{Task: t, Token: token, FencingToken: resp.Header.Revision, Lease: lease}, nil
}

// dependenciesDone reports whether every dependency of t is done. If one failed
// (or is gone), it fails t and reports false. seen caches the dependencies read
// during one Claim call: a dependency that finishes meanwhile is seen by the next.
func (s *Queue) dependenciesDone(ctx context.Context, t Task, seen map[string]Task) (bool, error) {
	var unread []string
	for _, dep := range t.DependsOn {
		if _, ok := seen[dep]; !ok {
			unread = append(unread, dep)
		}
	}
	if len(unread) > 0 {
		ops := make([]clientv3.Op, len(unread))
		for i, dep := range unread {
			ops[i] = clientv3.OpGet(s.keys.Task(dep))
		}
		resp, err := s.client.Txn(ctx).Then(ops...).Commit() // one consistent read
		if err != nil {
			return false, fmt.Errorf("read dependencies of task %s: %w", t.ID, err)
		}
		for i, dep := range unread {
			kvs := resp.Responses[i].GetResponseRange().Kvs
			if len(kvs) == 0 {
				seen[dep] = Task{ID: dep, State: StateFailed, Error: "task not found"}
				continue
			}
			d, err := decodeTask(string(kvs[0].Key), kvs[0].Value)
			if err != nil {
				return false, err
			}
			seen[dep] = d
		}
	}
	ready := true
	for _, dep := range t.DependsOn {
		switch d := seen[dep]; d.State {
		case StateDone:
		case StateFailed:
			return false, s.failDependent(ctx, t.ID, d)
		default:
			ready = false
		}
	}
	return ready, nil
}

// failDependent fails queued task id because its dependency dep failed.
func (s *Queue) failDependent(ctx context.Context, id string, dep Task) error {
	t, rev, err := s.getTask(ctx, id)
	if errors.Is(err, ErrTaskNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if t.State != StateQueued {
		return nil
	}
	t.State = StateFailed
	t.Error = fmt.Sprintf("dependency %s did not complete", dep.ID)
	t.Detail = fmt.Sprintf("dependency %s failed: %s", dep.ID, dep.Error)
	t.FinishedAt = s.now()

	ok, err := s.failQueued(ctx, t, rev)
	if err != nil {
		return fmt.Errorf("fail task %s after its dependency %s failed: %w", id, dep.ID, err)
	}
	if ok {
		s.opts.logger.Info("task failed: dependency did not complete", "task", id, "kind", t.Kind,
			"target", t.Target, "dependency", dep.ID)
	}
	return nil
}

// dropDedupe deletes t's dedupe key only if it still names t (a nested txn).
func (s *Queue) dropDedupe(t Task) clientv3.Op {
	key := s.keys.Dedupe(string(t.Kind), t.Target.String())
	return clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.Value(key), "=", t.ID)},
		[]clientv3.Op{clientv3.OpDelete(key)},
		nil,
	)
}

// snapshot is one consistent read of everything Claim needs besides the queue's
// later pages.
type snapshot struct {
	queue     []*mvccpb.KeyValue // first page of P/queue/
	queueMore bool
	running   []*mvccpb.KeyValue // P/running/ records
	claimed   map[string]bool    // task ids with a P/claims/ key
	locked    map[string]bool    // lock keys held (P/target-locks/, P/maintenance-locks/)
	cooldowns map[string]cooldownAt
}

type cooldownAt struct {
	Cooldown
	rev int64
}

func (s *Queue) readSnapshot(ctx context.Context) (*snapshot, error) {
	// A transaction of reads only: every range sees the same revision.
	resp, err := s.client.Txn(ctx).Then(
		clientv3.OpGet(s.keys.QueuePrefix(), clientv3.WithPrefix(), clientv3.WithLimit(queuePage)),
		clientv3.OpGet(s.keys.RunningPrefix(), clientv3.WithPrefix()),
		clientv3.OpGet(s.keys.ClaimsPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(s.keys.LocksPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(s.keys.CooldownPrefix(), clientv3.WithPrefix()),
		clientv3.OpGet(s.keys.MaintenanceLocksPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return nil, fmt.Errorf("read task queue %s: %w", s.keys.Prefix(), err)
	}
	queue := resp.Responses[0].GetResponseRange()
	snap := &snapshot{
		queue:     queue.Kvs,
		queueMore: queue.More,
		running:   resp.Responses[1].GetResponseRange().Kvs,
		claimed:   map[string]bool{},
		locked:    map[string]bool{},
		cooldowns: map[string]cooldownAt{},
	}
	for _, kv := range resp.Responses[2].GetResponseRange().Kvs {
		snap.claimed[string(kv.Key[len(s.keys.ClaimsPrefix()):])] = true
	}
	for _, r := range []int{3, 5} {
		for _, kv := range resp.Responses[r].GetResponseRange().Kvs {
			snap.locked[string(kv.Key)] = true
		}
	}
	for _, kv := range resp.Responses[4].GetResponseRange().Kvs {
		cd, err := decodeCooldown(string(kv.Key), kv.Value)
		if err != nil {
			return nil, err
		}
		snap.cooldowns[string(kv.Key[len(s.keys.CooldownPrefix()):])] = cooldownAt{cd, kv.ModRevision}
	}
	return snap, nil
}
