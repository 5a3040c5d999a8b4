// Package merge merges one shard's WAL generations into its store's base table.
//
// A merge is split in two, and neither half holds a lock that reads or appends take
// (the store has none):
//
//   - prepare (adds, gets and lists keep flowing): read the shard
//     manifest, choose the oldest pending generations up to MaxGenerations and MaxBytes
//     and what the memory budget pays for at PassCostFactor bytes per generation byte
//     (a generation is never split, so one larger than MaxBytes still merges alone),
//     reserve that memory from the worker-wide budget, read them, keep the newest row per id
//     (highest _seq), and stage the new fragment files (table.Prepare).
//   - commit (no lock that readers take: store.Store.Commit): commit the base
//     manifest with the new fragments, deletion vectors for replaced ids and the
//     advanced watermark merged_generations[shard], rebasing and retrying on
//     conflict; then swap the store's read snapshot. Only then drain the merged
//     generations from the shard manifest (the order reads rely on, see pkg/store);
//     the drain writes that manifest edit and nothing else: a later drain hands
//     their files, once their delete delay has passed, to the worker's cleanup
//     sweeper (wal.DeleteQueue), which deletes them off the merge's path.
//
// Merge runs both halves, one pass after another; a commit that lost a race to
// another's (a merge of another shard, or of the same one) is rebased by the
// table's optimistic commit. MergeStore, for the master's gather fan-out, merges every shard of a store, other workers' too, in one commit per
// pass; it reads their manifests and generations and writes neither, and their
// workers drain them afterwards (DrainMerged).
//
// Invariants:
//
//   - Idempotent: the watermark is committed in the same manifest write as the data it
//     describes, so a merge retried after a crash or a lost response adds nothing twice
//     (table.ErrAlreadyCommitted), and it only drains.
//   - Convergent: a crash at any step leaves a state the next merge finishes from;
//     generations at or below the watermark are drained without being merged again.
//   - Last write wins across shards and in any merge order (rowkey.NewestPerID and the
//     table's _seq comparison).
//   - Bounded: at most Concurrency merges run at once per worker (request-driven merges
//     wait for a slot, sweepers only try), and prepared data is charged to a worker-wide
//     memory budget before it is read.
//   - A merge never claims a WAL writer epoch of its own: it drains under the epoch of
//     this worker's writer, and a fenced writer cannot drain. Only a shard's own
//     worker drains it, and only up to a watermark it read from a committed version.
package merge
