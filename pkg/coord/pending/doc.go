// Package pending is how the master learns, within a second or two, that a store
// needs a merge: each worker keeps one record in etcd of its own shards' pending
// WAL generations, and the master watches those records.
//
//	P/pending/<instance>   {instance, published_at, stores: [{target, generations,
//	                       bytes, oldest_sealed_at}], omitted}   under the worker's lease
//
// A Publisher (on the worker) puts the record when a seal or a merge changes what
// is pending, at most once per MinInterval, and deletes it when nothing is. A View
// (on the master) follows every record with one etcd watch and sums them by store.
//
// Invariants:
//
//   - A record is a hint, never the truth: it is put under the worker's
//     registration lease, so a worker that dies takes its record with it, and what
//     a dead or silent worker left pending is found by the stats scan, which stays
//     the authoritative reconciliation (orphaned shards included). A lost or late
//     record can delay a merge until the next scan; it can never lose a row.
//   - Bounded: a record lists at most MaxStores stores, the most pending first, and
//     says how many it left out, so a worker with a hundred thousand resident
//     stores cannot write a value past etcd's request limit.
//   - Cheap for etcd: a worker writes at most once per MinInterval however fast it
//     seals, and writes nothing when its record would not change; the master reads
//     every record once and then only watch events (a broken watch is listed again
//     from scratch, so a change made meanwhile is seen late, never lost).
//   - Each entry counts only the worker's own shard of the store, above the base
//     table's merged watermark as the worker last saw it; the View sums the shards.
package pending
