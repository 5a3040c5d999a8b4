// Package sweep is the worker's periodic work on its own shards: the flush sweep
// seals every resident store every FLUSH_INTERVAL, and the deletes of drained WAL
// files run whenever a drain queues some.
//
// Invariants:
//
//   - In a cluster (a worker with etcd) the master alone decides when a store is
//     merged: the sweeps seal and never merge (Config.MergePending is off). A
//     standalone worker (no etcd, no master to decide) merges everything pending
//     in its own shard after each flush sweep's seal, so its WAL never grows
//     without bound.
//   - A sweep only tries for a merge slot: a busy worker skips merging this round
//     rather than queueing behind the merges requests asked for (ResultBusy).
//   - Store kinds are swept concurrently and each store's step is bounded by
//     StepTimeout, so one slow store or kind cannot hold back the others.
//   - A merge deletes no file: its drain queues the files that came due
//     (wal.DeleteQueue), and the sweeper deletes them off the merge's path; what
//     it cannot delete (a failed delete, a full queue) is counted and left for
//     garbage collection.
//   - Seals and merges are counted in mergesvc's series with everyone else's; the
//     sweeps' own series are Metrics.
package sweep
