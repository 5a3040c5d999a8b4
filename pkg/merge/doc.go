// Package merge will merge one shard's WAL generations into its store's base table. It
// is built in a later issue; this file only states its role and the invariants it will
// guarantee.
//
// A merge is split in two so that a store's exclusive lock is never held across
// object-store reads:
//
//   - prepare (no exclusive lock; adds, gets and lists keep flowing): read the shard
//     manifest, choose the oldest pending generations up to MERGE_MAX_GENERATIONS and
//     MERGE_MAX_BYTES (a generation is never split), read them, keep the newest row per
//     id (highest _seq), and stage the new fragment files.
//   - commit (the store's exclusive lock, briefly): commit the base manifest with the new
//     fragments, deletion vectors for replaced ids and the advanced watermark
//     merged_generations[shard]; swap the store's read snapshot; drain the merged
//     generations from the shard manifest; delete their files (best effort).
//
// Invariants it will guarantee:
//
//   - Idempotent: the watermark is committed in the same manifest write as the data it
//     describes, so a merge retried after a crash or a lost response adds nothing twice.
//   - Convergent: a crash at any step leaves a state the next merge finishes from.
//   - Last write wins across shards and in any merge order (the row with the highest
//     _seq per id survives).
//   - Bounded: a merge reads at most its generation and byte caps, with memory from a
//     worker-wide budget.
//   - A failed merge is reported as a merge (cleanup) failure, never as a flush failure.
package merge
