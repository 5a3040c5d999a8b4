// Package scanner will be the master's stats scanner and merge sweep. It is built in a
// later issue; this file only states its role and the invariants it will guarantee.
//
// Every STATS_SCAN_INTERVAL the scanner lists both store registries, observes each
// store (base table version, rows, fragments, pending WAL generations per shard) and
// writes a stats row per target to P/stats/<target> in etcd. The merge sweep then
// enqueues a merge_wal task (through pkg/tasks) for every target with at least
// MERGE_WAL_MIN_GENERATIONS pending generations, worst first, capped per tick.
//
// Invariants it will guarantee:
//
//   - Cheap on unchanged stores: a store whose manifests did not change since the last
//     scan costs a few metadata reads, so one master can visit thousands of stores.
//   - Writes only what changed: a stats row is rewritten only when its content changes.
//   - One scanner at a time: scans and sweeps hold a coordination lock in etcd, so
//     master replicas do not double the work, and each write is guarded by a compare on
//     the holder's own key (a lost lock stops the writes).
//   - Orphaned shards are noticed: pending generations are counted per shard whether or
//     not that shard's worker is still alive, so such shards still get merged.
package scanner
