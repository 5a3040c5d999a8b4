// Package table is Tidemark's base-table format: one table per store, kept as
// immutable Parquet fragments and deletion vectors under versioned JSON manifests on
// object storage (see FORMAT.md for the exact layout).
//
// Invariants:
//
//   - Versions are dense and immutable: manifest v+1 is created with put-if-absent, so
//     of any number of concurrent committers exactly one creates each version, and a
//     reader that loaded version v sees the same table forever.
//   - At most one live row per id: a commit that adds a row for an id deletes (through
//     deletion vectors) every older row for that id, and a commit whose incoming row is
//     older than the live one deletes its own incoming row instead. "Older" is decided
//     by the hidden _seq column, never by commit order, so last-write-wins holds
//     whatever order shards are merged in.
//   - Watermarks commit with their data: merged_generations[shard] advances in the same
//     manifest write that adds the shard's rows, so a transaction carrying a watermark
//     the table already covers is reported as ErrAlreadyCommitted and adds nothing.
//   - Data files are written before the manifest that references them and are never
//     rewritten; a crash leaves at most unreferenced files, never a manifest that points
//     at missing data.
//   - A commit writes at most one deletion-vector object, whatever the number of
//     fragments it deletes from: each vector in it is its own checked envelope at an
//     offset the fragment's entry names (format 3), read alone, and the object lives
//     while any retained version points into it. Refs of format 2 name a whole
//     object and read as before.
//   - A row keeps its version, (_seq, shard), for as long as it is live: a fragment
//     records the shard that wrote its rows, or shard runs when it mixes shards, so
//     ties of _seq between shards break the same way before and after a compaction.
//   - Compaction (Compact) rewrites fragments without changing what any id reads: its
//     outputs hold the sources' live rows, and its commit is the newest version minus
//     the sources plus the outputs. Deletions other commits made on the sources
//     meanwhile move onto the outputs (each source row's place is known); a source
//     another compaction took aborts it (ErrConflict). A merge prepared before a
//     compaction and committed after it resolves its rows against the outputs.
//
// Commits are optimistic: Prepare stages every data file against the version it read,
// and Commit only writes the manifest. On a lost race Commit reloads, rebases (or stops
// if the watermark shows the work already landed), backs off in proportion to how long
// the attempt took, and gives up after RetryTimeout with an error that says "too many
// concurrent writers" and the attempt count. A request the store refuses as throttled
// (objstore.ErrThrottled, a 503 SlowDown: not performed) is sent again by the bucket
// (objstore.WithRetry) within RetryTimeout; a manifest write still refused after that
// is a lost attempt like a conflict.
//
// Reads cost as few round trips as the format allows: a fragment is opened without a
// Stat (the manifest has its size), its footer and, if it is small, the whole fragment
// come in one ranged read, a row group's column chunks in one coalesced read (or a few
// in parallel), and a batch get or a commit's conflict check looks into every fragment
// it needs at once, bounded by the requests it has in flight (inflight.go), not by
// fragments.
package table
