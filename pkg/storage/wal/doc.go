// Package wal is one shard's write-ahead log: durable group-committed appends,
// a memtable, seals into immutable generations, the shard manifest, writer epochs
// (fencing), replay, and the reader-side view of every shard of a store.
//
// A store directory D holds one shard per writer under D/_wal/<shard>/ (FORMAT.md,
// "WAL"): dense entry objects entries/<pos>.arrow, a versioned shard manifest
// (_manifests/, a versions.Log) and immutable generation files gen/<rand>_gen_<n>.arrow.
//
// Invariants:
//
//   - An acknowledged row is in an entry or a generation. Append returns nil only
//     after the entry holding the row was written; a seal deletes entries only after
//     the manifest version that lists their generation (and moves
//     replay_after_wal_entry_position past them) was written. A failed Append may
//     still have made its rows durable (durable-but-unacknowledged is allowed,
//     acknowledged-but-lost is not).
//   - One writer epoch per shard. Opening a Writer creates the next manifest version
//     with writer_epoch+1 (put-if-absent, so each epoch has exactly one owner), and
//     every entry carries its writer's id and epoch. A writer whose epoch is stale is
//     fenced: its next entry write or manifest edit fails with ErrFenced, and it never
//     overwrites or deletes what the newer writer relies on (see the fencing argument
//     in fence.go).
//   - Entry positions are dense and never reused: a writer writes position p only
//     after p-1 exists and retries a failed write at the same position; an opening
//     writer claims the positions above the highest one ever written (or
//     replay_after) with fence entries. The only gaps are inside a fence range whose
//     writer died while claiming it, and the next opener fills them; any other gap
//     above replay_after is reported as corruption, never sealed around.
//   - Every row carries _seq, a hybrid logical clock of its writer that strictly
//     increases per writer, also across restarts, and roughly follows wall-clock time
//     across writers. Last write wins means highest _seq (rowkey.NewestPerID).
//   - Generations are immutable and numbered densely per shard; current_generation
//     never decreases. A drain (merge side) is a relative edit of the latest manifest
//     that removes only the generations it merged and keeps everything sealed
//     meanwhile; it never claims an epoch.
//
// Readers take a Snapshot (every shard's latest manifest), read the generations above
// each shard's merged watermark through a GenerationCache, and merge rows by id,
// highest _seq first. A drained generation's file outlives the drain by a delete delay;
// a reader whose snapshot is older still than that gets objstore.ErrNotFound and
// refreshes (the base table has the rows by then). A drain deletes no file: the
// drains after the delay take the file out of the manifest and hand it to a
// DeleteQueue, whose deleter (the worker's cleanup sweeper) deletes it off the
// merge's path, and Cleanup collects what a lost queue never deleted.
//
// Nothing a shard writes grows without bound: Cleanup prunes manifest versions older
// than a safety window (beyond the newest few) and deletes the leftovers of crashes
// and failed deletes that no kept version references; seals merge kept_entries
// ranges so the manifest does not grow with every open.
//
// Concurrency: a Writer is safe for concurrent use. Appends are batched by one
// committer goroutine per Writer; Seal may run concurrently with appends. Manifests,
// Snapshots and decoded generations are immutable values that may be shared freely.
package wal
