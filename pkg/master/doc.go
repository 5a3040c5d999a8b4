// Package master is the master process: it keeps an etcd session, runs the
// scheduler that claims tasks from the etcd task queue and hands them to their
// runners, and wires its parts together, each its own package:
//
//	scanner    the stats scan and the merge and compaction sweeps that enqueue tasks
//	fanout     the runners that call the workers (merge_wal, maintenance), discovery,
//	           the orphaned-shard tracker
//	api        the AdminService and the HTTP API
//	dashboard  the operator dashboard the HTTP API serves under /ui/
//
// Config nests each part's own configuration under the name its settings have
// (MergeSweep.MinGenerations is MERGE_WAL_MIN_GENERATIONS); New sets what ties
// the parts together (the logger, the metrics registry, the session lease, the
// orphan tracker, the hooks).
//
// Invariants:
//
//   - Capacity is reserved before a claim: a claimed task never waits for a slot while
//     holding its target lock.
//   - A run's outcome is classified in one place (taskResult, by errclass): a task
//     whose store was deleted is skipped (done, "skipped: store deleted"), not
//     failed; one that hit a corrupt object fails and cools its target down, instead
//     of failing the same way at every sweep; any other error fails it for the next
//     sweep to retry.
//   - A run whose claim's lease is gone is cancelled and not recorded: another
//     master may run the task under a newer fencing token.
//   - Losing etcd never stops the master: claims, scans and sweeps fail their rounds
//     and back off, and resume when etcd answers again.
//   - Retry policy lives in one place (the task queue's cooldown and the merge sweep),
//     never in a runner.
package master
