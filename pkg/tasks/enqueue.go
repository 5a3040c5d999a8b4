package tasks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/registry"
)

// maxTxnAttempts bounds the retries of a transaction that lost a race. Each retry
// follows a change someone else committed, so running out means heavy contention.
const maxTxnAttempts = 16

// Enqueue adds a queued task of kind on target, to run after the tasks in
// dependsOn are done. If a live (queued or running) task of the same kind and
// target exists, Enqueue returns it with deduplicated true and adds nothing; the
// dependsOn of a deduplicated call are ignored.
//
// A bad kind or target is an ErrInvalidArgument (a malformed target also wraps
// registry.ErrInvalidName), as is an export (EnqueueExport enqueues those); a
// dependency that does not exist is ErrTaskNotFound.
func (s *Queue) Enqueue(ctx context.Context, kind Kind, target registry.Target, dependsOn ...string) (Task, bool, error) {
	return s.EnqueueDue(ctx, kind, target, time.Time{}, dependsOn...)
}

// EnqueueDue is Enqueue of a task due at due (Task.DueAt; zero: at its enqueue):
// Claim takes the claimable task due first, so a task due earlier than the
// queued ones ahead of it overtakes them. A deduplicated call leaves the live
// task's due as it is.
func (s *Queue) EnqueueDue(ctx context.Context, kind Kind, target registry.Target, due time.Time, dependsOn ...string) (Task, bool, error) {
	t, deduplicated, err := s.enqueue(ctx, kind, target, due, dependsOn...)
	if err == nil && s.opts.onEnqueue != nil {
		s.opts.onEnqueue(kind, deduplicated)
	}
	return t, deduplicated, err
}

func (s *Queue) enqueue(ctx context.Context, kind Kind, target registry.Target, due time.Time, dependsOn ...string) (Task, bool, error) {
	if err := validateKind(kind); err != nil {
		return Task{}, false, err
	}
	if !kind.Deduplicated() {
		return Task{}, false, fmt.Errorf("%w: an %s task needs its spec: enqueue it with EnqueueExport", ErrInvalidArgument, kind)
	}
	if err := validateTarget(target); err != nil {
		return Task{}, false, err
	}
	deps, err := validateDependencies(dependsOn)
	if err != nil {
		return Task{}, false, err
	}
	dedupe := s.keys.Dedupe(string(kind), target.String())
	// The first attempt expects no dedupe key; after finding a stale one, it
	// expects that key unchanged instead (see below).
	dedupeCmp := clientv3.Compare(clientv3.CreateRevision(dedupe), "=", 0)

	for range maxTxnAttempts {
		id, err := uuid.NewV7()
		if err != nil {
			return Task{}, false, fmt.Errorf("enqueue %s %s: new task id: %w", kind, target, err)
		}
		t := Task{
			ID:         id.String(),
			Kind:       kind,
			Target:     target,
			State:      StateQueued,
			EnqueuedAt: s.now(),
			DependsOn:  deps,
		}
		if !due.IsZero() {
			t.DueAt = due.UTC()
		}
		record := encodeTask(t)

		// Enqueue transaction:
		//   if   create_revision(P/dedupe/<kind>/<target>) == 0     no live task of this kind+target, or after a
		//        (or mod_revision(...) == r)                        stale pointer was found: that pointer unchanged
		//        create_revision(P/tasks/<dep>) > 0, each dep      every dependency exists (Prune may delete
		//                                                          finished tasks; it cannot race past this)
		//   then put P/tasks/<id> = task                            the record
		//        put P/queue/<id> = task                            the queue (ids are UUIDv7: enqueue order)
		//        put P/dedupe/<kind>/<target> = <id>                later enqueues find this task
		//   else get P/dedupe/<kind>/<target>                       the live task, to return it
		//        get P/tasks/<dep> (count only), each dep           which dependency is missing
		cmps := []clientv3.Cmp{dedupeCmp}
		elseOps := []clientv3.Op{clientv3.OpGet(dedupe)}
		for _, dep := range deps {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(s.keys.Task(dep)), ">", 0))
			elseOps = append(elseOps, clientv3.OpGet(s.keys.Task(dep), clientv3.WithCountOnly()))
		}
		resp, err := s.client.Txn(ctx).If(cmps...).Then(
			clientv3.OpPut(s.keys.Task(t.ID), record),
			clientv3.OpPut(s.keys.Queue(t.ID), record),
			clientv3.OpPut(dedupe, t.ID),
		).Else(elseOps...).Commit()
		if err != nil {
			return Task{}, false, fmt.Errorf("enqueue %s %s: %w", kind, target, err)
		}
		if resp.Succeeded {
			s.opts.logger.Debug("task enqueued", "task", t.ID, "kind", kind, "target", target)
			return t, false, nil
		}

		pointer := resp.Responses[0].GetResponseRange()
		if len(pointer.Kvs) > 0 {
			liveID := string(pointer.Kvs[0].Value)
			live, _, err := s.getTask(ctx, liveID)
			switch {
			case err == nil && live.State.Live():
				return live, true, nil
			case err != nil && !errors.Is(err, ErrTaskNotFound):
				return Task{}, false, fmt.Errorf("enqueue %s %s: %w", kind, target, err)
			}
		}
		for i, dep := range deps {
			if resp.Responses[1+i].GetResponseRange().Count == 0 {
				// A task that is gone never comes back: ids are not reused.
				return Task{}, false, fmt.Errorf("enqueue %s %s: dependency %s: %w", kind, target, dep, ErrTaskNotFound)
			}
		}
		if len(pointer.Kvs) == 0 {
			// The key vanished after the compare failed: try to create it again.
			dedupeCmp = clientv3.Compare(clientv3.CreateRevision(dedupe), "=", 0)
			continue
		}
		// A stale dedupe key names a finished or pruned task: take it over, but only
		// if nobody changed it since we read it.
		s.opts.logger.Warn("replacing stale dedupe key", "key", dedupe, "task", string(pointer.Kvs[0].Value), "kind", kind, "target", target)
		dedupeCmp = clientv3.Compare(clientv3.ModRevision(dedupe), "=", pointer.Kvs[0].ModRevision)
	}
	return Task{}, false, fmt.Errorf("enqueue %s %s: gave up after %d attempts: the dedupe key %s keeps changing", kind, target, maxTxnAttempts, dedupe)
}
