// Package exportfmt is the format of a snapshot export: what a caller asks for
// (Spec), what an export leaves beside its Parquet files (Manifest, the
// _manifest.json), and how far a running one got (Progress). It does no I/O, so
// the master (which enqueues and shows export tasks) and the worker (which writes
// them, package export) share one definition; docs/API.md's "Exports" section
// describes the same fields for readers.
//
// Invariants:
//
//   - Spec.Validate needs no store and no network: what it accepts may still fail
//     against the store (a column it lacks, a filter that does not compile) or the
//     bucket (no such container), and what it refuses is refused everywhere, as
//     an Invalid error naming the field.
//   - A Spec never carries credentials: a destination URL with user information
//     is refused, since specs are stored in task records an operator reads.
//   - A Manifest's counts describe its files exactly: Rows is the sum of the
//     files' rows and Bytes the sum of their sizes.
package exportfmt
