// Package horizon keeps the change feed's horizon of every store: the _seq at or
// below which every row the store will ever hold is already sealed, so a feed that
// answers rows up to it never later finds one it should have answered before.
//
//	P/horizon/<target>/<shard>   {epoch, promise, open, instance, at}   durable
//
// Each shard's writer promises (wal.Writer.Promise): every row of the shard with
// _seq <= promise is sealed, every later row is numbered above it. A Keeper (one
// per worker) registers a writer when it opens (Open), publishes its promises as
// they move, and marks the shard closed when the writer closes with nothing
// unsealed (Close). A View (on any worker) follows every key with one watch; a
// store's horizon is the smallest promise of its open shards, or the largest
// promise of all when none is open.
//
// Invariants, and the interleavings they answer:
//
//   - A promise is a fact about the past, so keys are durable, not leased: a worker
//     that dies leaves its shards open at their last promise, and the horizon
//     waits there until the shard's next writer (the worker back, or an adopter)
//     seals what it replays. A slow, partitioned or dead shard holds the horizon
//     back; it is never skipped.
//   - Promises never decrease, and only the shard's newest writer moves them: every
//     write is a transaction on the key's mod revision as the writer last wrote it,
//     so a fenced writer's late write fails instead of overwriting its successor's.
//   - A writer that opens a shard (new, closed, or taken over) numbers its rows
//     above every promise of the store before it numbers any: Open marks the shard
//     open and reads every promise of the store in one transaction, and the
//     writer observes their maximum. A horizon computed before that transaction is
//     at most some shard's promise then, and promises only grow, so it is below the
//     maximum read; one computed after sees the shard open, at or below its
//     promise.
//   - A closed shard has nothing unsealed and no writer: it does not hold the
//     horizon back, and its next writer goes through Open.
//   - A View's copy is the keys as of one etcd revision (package follow), so the
//     horizon it computes is one that held; read the store's manifests after
//     reading it and every row up to it is in what was read.
package horizon
