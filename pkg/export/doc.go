// Package export writes a snapshot export: one store read whole (store.Scan, at a
// version or now), written to a bucket as plain Parquet files with every deletion
// applied, then a _manifest.json that lists them (package exportfmt). Any Parquet
// reader (DuckDB, pyarrow, Polars) opens the files; the manifest says what they
// hold and where a consumer of the change feed goes on from.
//
// Invariants:
//
//   - The files hold each live row of the snapshot once, in its newest version;
//     no overwritten or deleted version ever appears (store.Scan's invariant).
//   - The manifest is the commit point: it is written last, with put-if-absent,
//     and only after every file it lists is whole in the bucket. A destination
//     without one holds no export a reader should take as complete, whatever an
//     attempt that failed, was cancelled or died left there.
//   - Memory is bounded by a row group (about 1M rows or 128 MiB of Arrow data)
//     and the scan's own, never a file and never the store: each file is
//     streamed to the bucket (objstore.Writer) row group by row group.
//   - Files are cut at about Options.MaxFileBytes (256 MiB), so parallel readers
//     split an export by files.
//
// # Attempts, retries and destinations
//
// An export runs as a task, and a task may run more than once: after its worker
// died, after a cancel, or twice at once when a worker the master gave up on is
// still running (a zombie) while the retry runs. An attempt of task T at a
// destination D follows these rules:
//
//  1. Committed. If D holds a manifest of T, the attempt returns it and writes
//     nothing (a retry after the commit); a manifest of another task, or a
//     _manifest.json that is no export manifest, is ErrDestinationInUse.
//  2. Claim. Otherwise D may hold only what attempts of T left: the marker
//     _export.json naming T, and part files. Anything else (a marker of another
//     task, files Tidemark did not write, a directory) is ErrDestinationInUse,
//     before anything is written. The attempt then writes the marker naming T
//     and its own attempt token (a random tag).
//  3. Files of its own. An attempt's files are named part-NNNNN-<token>.parquet,
//     so no two attempts ever write the same key: a zombie cannot overwrite a
//     file the retry's manifest lists, and each attempt's manifest describes the
//     bytes it wrote itself. (An unpinned export's attempts read different
//     snapshots: with shared names, a zombie's file would replace the retry's
//     between its write and its commit.)
//  4. Commit. The manifest is created with put-if-absent, so of two attempts
//     that finish, the first commits and the second finds the manifest taken:
//     it deletes its own files and returns the committed manifest (rule 1).
//  5. Clean-up. After its commit, an attempt deletes the part files the manifest
//     does not list (earlier attempts' leftovers) and the marker. A failed or
//     cancelled attempt deletes its own files, best effort.
//
// So every interleaving of a zombie and its retry ends with one manifest whose
// files are whole and hold what it says; with a pinned version both attempts
// export the same rows. What the rules cannot do is delete the files of an
// attempt that is still writing when another commits: the zombie deletes them
// itself when it finds the manifest taken (rule 4), and if it dies first they
// stay as strays until a retry of the task passes (rule 1 cleans up too). A
// reader that lists the manifest's files never sees them; a glob of
// part-*.parquet may, while a zombie runs.
//
// An export at version 0 (now) reads the store as each attempt finds it: a retry
// exports the store as of the retry, not as of the first attempt (pending rows
// belong to no version, so there is nothing to pin them to).
package export
