// Package tasks will be the master's task store in etcd. It is built in a later issue;
// this file only states its role and the invariants it will guarantee.
//
// Keys live under ETCD_PREFIX (P, default /tidemark) and values are JSON, so
// `etcdctl get --prefix P/tasks/` is readable by an operator:
//
//	P/tasks/<id>               task record {id, kind, target, state, error, detail, ...}
//	P/queue/<id>, P/running/<id>  index copies; ids are UUIDv7, so key order is FIFO
//	P/claims/<id>              claim token, under the claimer's lease
//	P/target-locks/<target>    claim token, under the claimer's lease; its revision is
//	                           the fencing token sent to workers
//	P/dedupe/<kind>/<target>   id of the live task for that kind and target
//	P/cooldown/<kind>/<target> {failures, until, last_error}, under a long lease
//
// Invariants it will guarantee, in the spirit of client-go's workqueue:
//
//   - Stingy: enqueueing a kind and target that already has a live task returns that
//     task instead of adding another (a create-if-absent of the dedupe key in the same
//     transaction).
//   - Fair: queued tasks are claimed in enqueue order.
//   - Exclusive: at most one running task per target, whatever the kind, across every
//     master replica (the claim transaction requires the target lock to be absent).
//   - Owned: only the holder of a task's claim token can finish it; a master that lost
//     its claim (lease expired) cannot record an outcome.
//   - Never lost: a running task whose claim lease has expired goes back to queued
//     (orphan recovery), the only way a task moves from running to queued.
//   - States move queued -> running -> done | failed, and each move is one etcd
//     transaction guarded by a compare on the caller's own keys.
package tasks
