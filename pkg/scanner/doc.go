// Package scanner is the master's stats scanner and its two sweeps, the merge
// sweep and the compaction sweep, and merges on demand (MergeDemand).
//
// The Scanner, every STATS_SCAN_INTERVAL (60 s; the first round at once), lists
// both store registries (a rollout store's target is its bare name, a generic
// store's is "generic:<name>"), observes every store with bounded concurrency and a
// timeout per store, and keeps one stats row per target in etcd:
//
//	P/stats/<target>   {target, kind, name, version, row_count, fragment_count, bytes,
//	                   shards, pending_wal_generations, pending_wal_rows,
//	                   pending_wal_bytes, pending_by_shard, last_updated, scanned_at}
//
// The MergeSweeper, every MERGE_WAL_INTERVAL (10 s), reads those rows and enqueues a
// merge_wal task (pkg/tasks) for every target with at least MERGE_WAL_MIN_GENERATIONS
// (8) pending generations, most pending first, at most 256 new tasks per sweep.
// The CompactionSweeper, every COMPACTION_INTERVAL (10 min), enqueues a compact
// task for every target whose row shows its base table away from its compacted
// shape (CompactionSweeper says when). Both are one loop (sweeper) with their own
// rule: which rows are due, which of those wait, and which come first.
//
// MergeDemand does not wait for a scan: it follows the workers' pending entries
// (package pending, P/pending/<instance>/<target>) and enqueues merge_wal within a second of
// a store reaching MERGE_WAL_MIN_GENERATIONS summed over its shards, or of its oldest
// pending generation passing MERGE_MAX_DELAY. The entries are hints; the scan and
// the merge sweep stay the reconciliation, and the only path for orphaned shards.
//
// Each of the loops has its own Config (Config, MergeSweepConfig,
// CompactionSweepConfig, DemandConfig); a zero field takes its default.
//
// Invariants:
//
//   - One scanner and one sweeper of each kind at a time: a round runs only on the
//     replica that holds its coordination lock (P/coordination/scanner,
//     P/coordination/merge-sweep, P/coordination/compaction-sweep, under that
//     replica's lease); the others skip the round. The holder keeps the
//     lock between rounds until its lease ends or it stops, so rounds are not doubled.
//   - A replica that lost the scanner lock writes nothing: every row write of a round
//     goes through the lock's guarded transaction (a compare on the lock key's create
//     revision), checked at the write, not at the start of the round.
//   - A row is never overwritten by a writer that did not see it: each row write also
//     compares the row's mod revision with the one its writer read. A round leaves a
//     row that changed meanwhile (by a Rescan) for the next round; a Rescan reads and
//     observes again.
//   - Writes only what changed: a row is put only when some field other than
//     scanned_at differs from the stored row. An unchanged store costs no etcd write.
//   - Cheap on unchanged stores: a store whose base version did not change since the
//     last round costs a latest-version probe of its base table, one listing of its
//     WAL shards and a probe per shard; no manifest is read. Its pending generations
//     are still recounted. Up to MaxCachedStores stores keep their handles between
//     rounds; a cached handle is dropped after FullObserveAfter (1 h) so a store
//     deleted and re-created between rounds is seen afresh.
//   - Pending generations are counted per shard, above that shard's merged watermark,
//     whether or not the shard's worker is alive, so orphaned shards still show and
//     still get merged. They are never over-counted: the WAL snapshot is read before
//     the base manifest, and a merge commits its watermark before it drains.
//   - One store's failure never aborts a round: it is logged and counted, and its row
//     keeps its previous value. A failed registry listing aborts the round before any
//     write, so a store missing from a partial listing is never taken as deleted.
//   - Rows of stores no longer registered are deleted by the next round.
//   - The sweep enqueues through the task queue's deduplicated Enqueue: a target has
//     at most one live merge_wal task however many sweeps or replicas run, and
//     deduplicated enqueues do not count against the per-sweep cap.
//   - A row scanned before the target's last merge finished is not merged on: that
//     merge took the generations the row counts. The sweep rescans the target (with
//     MergeSweepConfig.Rescan; the master's does) and merges on the fresh row if still due, or
//     else waits for the next scan's row, at most two scan intervals after the
//     merge, unless the target has orphaned shards to adopt. The last merge is the
//     one the sweep enqueued or found live.
package scanner
