// Package store is a worker's handle on one store: its base table, its own shard's
// WAL writer, a snapshot of every other shard, and the lock discipline that keeps
// reads and appends flowing while merges run.
//
// Invariants:
//
//   - The exclusive lock is held only to commit a merge's base manifest and swap the
//     snapshot (Store.Commit). Nothing else takes it: appends go straight to the WAL
//     writer, reads take the shared lock only for the nanoseconds it takes to copy the
//     snapshot pointer, and a merge's prepare (reading generations, staging files)
//     runs under no lock at all. So no object-store read ever happens under the
//     exclusive lock, and a slow merge never stalls an add, get or list.
//   - A read sees one immutable snapshot: a base manifest version plus, for every
//     shard, the sealed generations above that shard's merged watermark. Rows merge
//     by id, highest _seq first, so last-write-wins holds across shards and whatever
//     order merges happen in. Unsealed rows are durable but invisible until the next
//     seal.
//   - Above RefuseGenerations pending generations a read fails with ErrOverloaded
//     instead of fanning out over all of them (the reference system ran out of memory
//     at 12.6k); above WarnGenerations it logs.
//   - Stores are opened through Stores, which serializes create/open/delete per name,
//     keeps at most MaxOpen handles, and closes an evicted handle only after its last
//     user releases it. A deleted store's handle is fenced: later appends fail.
package store
