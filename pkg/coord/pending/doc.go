// Package pending is how the master learns, within a second or two, that a store
// needs a merge: each worker keeps in etcd, per store it holds open, the pending WAL
// generations of its own shard, and the master watches them.
//
//	P/pending/<instance>/<target>   {generations, bytes, oldest_sealed_at,
//	                                published_at}   under the worker's lease
//
// A Publisher (on the worker) writes the entries that changed when a seal or a
// merge changes what is pending, at most once per MinInterval, in one transaction,
// and deletes the entry of a store with nothing pending. A View (on the master)
// follows every entry with one etcd watch and sums them by store.
//
// Invariants:
//
//   - An entry is a hint, never the truth: it lives under the worker's
//     registration lease, so a worker that dies takes its entries with it, and what
//     a dead or silent worker left pending is found by the stats scan, which stays
//     the authoritative reconciliation (orphaned shards included). A lost or late
//     entry can delay a merge until the next scan; it can never lose a row.
//   - Cheap for etcd, in writes and in bytes: one key per store, so a seal
//     rewrites one small value (~150 bytes), not the worker's whole list, and the
//     history etcd keeps grows with what changed, not with how many stores a worker
//     holds. A worker writes at most one transaction per MinInterval however fast
//     it seals, and nothing when no entry changed. The master reads every entry
//     once and then only watch events; a broken watch is listed again from scratch,
//     so a change made meanwhile is seen late, never lost.
//   - Ages without clock skew: an entry carries its worker's publication time
//     beside the seal time, both on the worker's clock, so the master ages an entry
//     by their difference plus how long ago it received the entry on its own clock;
//     a worker's clock off by minutes neither makes its stores look overdue nor
//     hides them.
//   - Each entry counts only the worker's own shard of the store, above the base
//     table's merged watermark as the worker last saw it; the View sums the shards.
package pending
