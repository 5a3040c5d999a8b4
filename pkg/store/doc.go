// Package store is a worker's handle on one store: its base table, its own shard's
// WAL writer, a snapshot of every other shard, and the lock discipline that keeps
// reads and appends flowing while merges run.
//
// Invariants:
//
//   - No reader waits for object-store I/O it did not ask for. A store has no lock
//     that readers take: a read loads the current snapshot from an atomic pointer,
//     appends go straight to the WAL writer, a merge's prepare runs beside both, and
//     its commit (manifest write, rebase, retries and backoff) publishes its result
//     by one atomic swap of the snapshot when it is done.
//   - A read sees one immutable snapshot: a base manifest version plus, for every
//     shard, the sealed generations above that shard's merged watermark. Rows merge
//     by id, highest _seq first, so last-write-wins holds across shards and whatever
//     order merges happen in. Unsealed rows are durable but invisible until the next
//     seal.
//   - Reads never go back (monotonic reads, no lost visibility): once a row is
//     visible through a worker, every later read through that worker returns it or
//     a newer value of its id, until the store is deleted; and a row sealed into a
//     generation stays visible through every worker that has seen it, across
//     merges of its shard by any worker. It holds because a refresh reads the shard
//     manifests before the base manifest, and a merge commits the base (with its
//     watermark) before it drains the shard: a generation absent from the shard
//     manifests read is covered by the watermark of the base read after them, and
//     one present in both is read from the base only. Snapshots only move forward
//     (a refresh keeps the newer of what it read and what the handle already had),
//     and drained generation files outlive a snapshot (wal.Options.DeleteDelay,
//     5 min, against SnapshotTTL, 1 s).
//   - A store's version is its base table's manifest version, and a read at
//     version v (Store.At) is the base table's state at v: the rows merges had
//     committed by v, deletion vectors applied, without any row still in a WAL
//     generation (those are newer than every merge and belong to no version yet).
//     It returns the same rows every time while v is retained, whatever merges,
//     compactions and retention do meanwhile; a version no longer retained, or
//     never written, fails with ErrVersionNotFound naming the readable range
//     (version.go).
//   - A change-feed page (Changes, changes.go) after cursor c under horizon H
//     answers each live row with c < Position <= H once, in Position order, from
//     a snapshot refreshed after H was read; it reads only the fragments and
//     pending generations whose _seq range reaches c, and holds candidates
//     bounded by its limit, never by the store.
//   - Above RefuseGenerations pending generations a read fails with ErrOverloaded
//     instead of fanning out over all of them (the reference system ran out of memory
//     at 12.6k); above WarnGenerations it logs.
//   - Adds slow down before they are refused (AdmitAdd): from WarnGenerations
//     pending generations an add waits in proportion to how far past it the store
//     is, up to MaxAddDelay, and from RefuseGenerations it fails with ErrOverloaded
//     without being written. Below WarnGenerations the decision costs no I/O.
//   - Stores are opened through Stores, which serializes create/open/delete per name,
//     keeps at most MaxOpen handles, and closes an evicted handle only after its last
//     user releases it. A deleted store's handle is fenced: later appends fail.
//   - Each life of a name has a directory of its own (registry.IncarnationDir), named
//     by its registry object: a store created again never sees a row, a file or a
//     delete of an earlier life of its name, whatever the workers interleave.
package store
