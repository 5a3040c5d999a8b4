// Package tasks is the master's task queue in etcd: deduplicated enqueue, claims
// under the claimer's lease with a per-target lock (one for merges, one for
// maintenance) whose revision is the fencing token sent to workers, finish guarded by the claim token, orphan recovery,
// dependencies, cooldown of failing tasks, pruning, and coordination locks that
// let one master replica at a time scan or sweep.
//
// Keys live under a prefix P (ETCD_PREFIX, default /tidemark). Values are JSON, so
// `etcdctl get --prefix P/tasks/` reads well, and targets appear raw in keys:
//
//	P/tasks/<id>                 task record {id, kind, target, state, error, detail, stats,
//	                             enqueued_at, due_at, started_at, finished_at, depends_on, attempts,
//	                             claim_token, fencing_token, and an export's export, progress,
//	                             cancel_requested, exported}
//	P/queue/<id>                 copy of the record while queued; ids are UUIDv7, so key order is
//	                             enqueue order
//	P/running/<id>               copy of the record while running
//	P/claims/<id>                claim token, under the claimer's lease
//	P/target-locks/<target>      a merge's claim token, under the same lease; the key's create
//	                             revision is the fencing token
//	P/maintenance-locks/<target> the same, of a compact, verify, repair or export task
//	P/dedupe/<kind>/<target>     id of the live task of that kind and target (not of exports)
//	P/cooldown/<kind>/<target>   {failures, until, last_error}; no lease, until is checked
//	P/coordination/<name>        holder name, under the holder's lease
//
// Package keys builds every one of these keys, and the ones other packages own
// (P/stats/ of package stats, P/workers/ of package membership), so the layout is
// defined once.
//
// Invariants:
//
//   - At most one running merge and one running maintenance task per target,
//     across every master replica: a claim creates the lock of its task's lane
//     (Kind.Lane) in the same transaction and only if it is absent. The two lanes
//     run side by side because the base table's commits are optimistic and each
//     rebases onto the other (a compaction onto a merge's deletions, a merge onto
//     a compaction's outputs): a store's merges never wait for a compaction that
//     takes seconds, and two rewrites of one table never race (table.Compact).
//   - An enqueue of a live (queued or running) kind+target returns the live task
//     instead of adding one: the dedupe key is created only if absent, in the same
//     transaction as the task. Exports are the exception (Kind.Deduplicated): each
//     names its destination, so each is a task; an export is idempotent by its id
//     instead (the record is created only if absent), and an id that names another
//     task is refused (ErrIDInUse).
//   - Only the claim holder can finish a task: Finish and Release compare the claim
//     key and the target lock with the holder's token; a master that lost its claim
//     gets ErrClaimLost and changes nothing.
//   - A claim lives no longer than the claimer's lease. A running task whose claim
//     is gone goes back to the queue (orphan recovery, at startup and before every
//     claim); with Release and Retry (a failure a retry may mend, of a kind
//     nothing enqueues again: Kind.Requeued, at most MaxAttempts claims), that is
//     the only way from running to queued.
//   - Only the claim holder writes a running task's progress (UpdateProgress
//     compares the claim key with its token), and a cancel request of a running
//     task (Kind.CancelsRunning) is never lost to a progress write: both compare
//     the record's revision.
//   - Fencing tokens of a target's lane only grow: each is the etcd revision that
//     created the lane's lock, so a worker can refuse a token older than one it has
//     seen in that lane.
//   - Queued tasks are claimed due first (due_at, or the enqueue time of a task
//     enqueued without one), then in enqueue order, skipping those that wait for a
//     dependency, a cooldown or a locked target, and kinds the claimer left out;
//     the order holds within the oldest 256 queued tasks (a page), and pages go in
//     enqueue order.
//   - A failed task of a non-merge kind but export, or any task whose failure needs a human
//     (Result.Halt: a corrupt object), blocks its kind+target's claims for a
//     backoff that doubles with each failure in a row; a success ends it. Other
//     merge_wal failures never wait: the next sweep retries them.
//   - A task runs only after every task it depends on is done; if one of them
//     fails, it fails with "dependency <id> did not complete".
//   - States move queued -> running -> done | failed; every move is one etcd
//     transaction with a compare on the keys that prove the mover's right to make
//     it (the task's mod revision, or the caller's claim or lock).
//   - Finished tasks are pruned by count and age, never live tasks nor tasks a
//     live task depends on.
//
// Each file holds one primitive; each transaction is preceded by a comment that
// lists its compares and ops, one a line, and why.
package tasks
