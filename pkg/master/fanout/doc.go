// Package fanout is how the master reaches the workers: the merge_wal fan-out
// (gather and serial), the maintenance runner (compact, verify, repair on one
// worker), the export runner (an export on one worker, its progress recorded and
// its cancel heard), the worker Caller over gRPC (GRPCCaller), worker discovery
// (StaticDiscovery, or membership.Discovery through etcd), and the tracker of
// orphaned shards whose adoption a merge_wal asks for.
//
// Invariants:
//
//   - A merge_wal task's commits never overlap: every merge commits a new version
//     of the same base table, and parallel commits are the commit storm this
//     system exists to prevent. In the gather shape (Gather, the default) one
//     worker merges every shard of the store, one commit per pass, and the others
//     only drain their own shards afterwards (drains commit nothing to the table);
//     Serial has each worker prepare and commit in turn. Each call carries
//     the task's fencing token (the target lock's etcd revision), so a worker
//     refuses a call from a master that lost the target to a newer claim.
//   - A worker that cannot be reached before admission (no connection) is skipped and
//     named; any error of a merge stops the fan-out, except a corrupt object (the
//     worker answered, so it no longer merges, and the others' merges do not depend
//     on it). The task fails if any worker was skipped or failed, so the next sweep
//     retries it.
//   - Outcomes are classified in one place (package errclass): a worker that answers
//     the store is deleted ends the fan-out with a Gone error (the scheduler skips
//     the task), one that hit a corrupt object with a Halt error naming it.
//   - A shard is adopted only while its worker has been missing from discovery for
//     the grace (or an operator forced it), by one live worker, under the task's
//     fencing token; a static worker list adopts nothing (only registered workers
//     say which shards have an owner).
//   - Retry policy lives elsewhere (the task queue's cooldown, the merge sweep,
//     tasks.ShouldRetry for exports), never in a runner: a runner returns the
//     failure with its class, and the scheduler decides.
package fanout
