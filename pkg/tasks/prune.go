package tasks

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// pruneBatch is how many tasks one prune transaction deletes: one compare and one
// delete each, within etcd's --max-txn-ops (128 by default).
const pruneBatch = 64

// pruneRead is the page size of Prune's read of P/tasks/.
const pruneRead = 1000

// Prune deletes finished tasks beyond the keep most recently finished ones and
// finished tasks that finished more than maxAge ago (keep <= 0 or maxAge <= 0
// turns that rule off), and returns how many it deleted. It never deletes a live
// (queued or running) task, nor a finished task that a live task depends on: the
// dependent needs its outcome to run or to fail. It also deletes cooldown records
// that expired more than maxAge ago.
//
// A batch that races with a new enqueue (which may name a victim as dependency)
// is retried from a fresh read; Prune gives up quietly after a few such races, and
// the next Prune goes on.
func (s *Queue) Prune(ctx context.Context, keep int, maxAge time.Duration) (int, error) {
	if keep <= 0 && maxAge <= 0 {
		return 0, nil
	}
	now := s.now()
	deleted := 0
	for range maxTxnAttempts {
		victims, rev, err := s.pruneVictims(ctx, keep, maxAge, now)
		if err != nil {
			return deleted, err
		}
		raced := false
		for batch := range slices.Chunk(victims, pruneBatch) {
			// Prune transaction (one per batch):
			//   if   mod_revision(P/tasks/<id>) == r, each id      still the finished record we read (not
			//                                                     pruned by another replica meanwhile)
			//        create_revision(P/queue/*) <= R, whole prefix no task was queued (enqueued, released or
			//                                                     recovered) since our read at R: it could
			//                                                     depend on a victim
			//   then delete P/tasks/<id>, each id
			//   else nothing: read again
			cmps := []clientv3.Cmp{
				clientv3.Compare(clientv3.CreateRevision(s.keys.QueuePrefix()), "<", rev+1).WithPrefix(),
			}
			ops := make([]clientv3.Op, 0, len(batch))
			for _, v := range batch {
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.keys.Task(v.ID)), "=", v.rev))
				ops = append(ops, clientv3.OpDelete(s.keys.Task(v.ID)))
			}
			resp, err := s.client.Txn(ctx).If(cmps...).Then(ops...).Commit()
			if err != nil {
				return deleted, fmt.Errorf("prune %s: %w", s.keys.TasksPrefix(), err)
			}
			if !resp.Succeeded {
				raced = true
				break
			}
			deleted += len(batch)
		}
		if !raced {
			break
		}
	}
	if deleted > 0 {
		s.opts.logger.Info("pruned finished tasks", "deleted", deleted, "keep", keep, "max_age", maxAge)
	}
	if maxAge > 0 {
		if err := s.pruneCooldowns(ctx, now.Add(-maxAge)); err != nil {
			return deleted, err
		}
	}
	return deleted, nil
}

type taskAt struct {
	Task
	rev int64
}

// pruneVictims reads every task at one revision and returns the finished tasks to
// delete, with that revision.
func (s *Queue) pruneVictims(ctx context.Context, keep int, maxAge time.Duration, now time.Time) ([]taskAt, int64, error) {
	var (
		finished  []taskAt
		protected = map[string]bool{}
		rev       int64
		from      = s.keys.TasksPrefix()
		end       = clientv3.GetPrefixRangeEnd(s.keys.TasksPrefix())
	)
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(pruneRead)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := s.client.Get(ctx, from, opts...)
		if err != nil {
			return nil, 0, fmt.Errorf("prune: read %s: %w", s.keys.TasksPrefix(), err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			t, err := decodeTask(string(kv.Key), kv.Value)
			if err != nil {
				return nil, 0, err
			}
			if t.State.Finished() {
				finished = append(finished, taskAt{t, kv.ModRevision})
				continue
			}
			for _, dep := range t.DependsOn {
				protected[dep] = true
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	// Most recently finished first; ids (enqueue order) break ties.
	slices.SortFunc(finished, func(a, b taskAt) int {
		if c := b.FinishedAt.Compare(a.FinishedAt); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	var victims []taskAt
	for i, t := range finished {
		tooMany := keep > 0 && i >= keep
		tooOld := maxAge > 0 && t.FinishedAt.Before(now.Add(-maxAge))
		if (tooMany || tooOld) && !protected[t.ID] {
			victims = append(victims, t)
		}
	}
	return victims, rev, nil
}

// pruneCooldowns deletes cooldown records whose Until is before cutoff.
func (s *Queue) pruneCooldowns(ctx context.Context, cutoff time.Time) error {
	resp, err := s.client.Get(ctx, s.keys.CooldownPrefix(), clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("prune: read %s: %w", s.keys.CooldownPrefix(), err)
	}
	for _, kv := range resp.Kvs {
		cd, err := decodeCooldown(string(kv.Key), kv.Value)
		if err != nil || !cd.Until.Before(cutoff) {
			continue // a corrupt record is left for an operator to see
		}
		// Cooldown prune transaction:
		//   if   mod_revision(P/cooldown/<kind>/<target>) == r   no failure counted on it since we read it
		//   then delete P/cooldown/<kind>/<target>
		_, err = s.client.Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision),
		).Then(clientv3.OpDelete(string(kv.Key))).Commit()
		if err != nil {
			return fmt.Errorf("prune %s: %w", kv.Key, err)
		}
	}
	return nil
}
