// Package master is the control plane's behaviour: the scheduler that claims tasks
// from the etcd task queue and runs them, the merge_wal fan-out to workers,
// worker discovery, and (in sibling files) the admin gRPC service and HTTP API.
//
// Invariants:
//
//   - A merge_wal task commits on the live workers one after another, never two at
//     once: every worker's merge commits a new version of the same base table, and
//     parallel commits are the commit storm this system exists to prevent. Only
//     prepares, which commit nothing, run on every worker at once (the two-phase
//     shape, FanOutTwoPhase; FanOutSerial prepares and commits each in turn). Each
//     call carries the task's fencing token (the target lock's etcd revision), so a
//     worker refuses a call from a master that lost the target to a newer claim.
//   - A worker that cannot be reached before admission (no connection) is skipped and
//     named, and so is one whose prepare failed (a prepare changes nothing); any
//     error of a commit stops the fan-out, except a corrupt object (the worker
//     answered, so it no longer merges, and the others' merges do not depend on it),
//     and the prepares left are aborted. The task fails if any worker was skipped or
//     failed, so the next sweep retries it.
//   - Outcomes are classified in one place (package errclass): a merge whose store
//     was deleted is skipped (done, "skipped: store deleted"), not failed; one that
//     hit a corrupt object fails naming it and cools its target down, instead of
//     failing the same way at every sweep.
//   - Capacity is reserved before a claim: a claimed task never waits for a slot while
//     holding its target lock.
//   - Retry policy lives in one place (the task queue's cooldown and the merge sweep),
//     never in a runner.
package master
