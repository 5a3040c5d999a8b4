// Package objstore is Tidemark's only door to object storage.
//
// A Bucket is opened from a URL (file://, mem://, s3://, azblob://, gs://, with an
// optional ?prefix=) and offers the handful of operations the table and WAL formats
// need: whole-object get and put, streamed writes, ranged reads, listing, delete, and
// put-if-absent.
// GetRanges reads several ranges of one object; on file:// (Local) in one open,
// where a request is system calls rather than a round trip.
//
// Invariants:
//
//   - PutIfAbsent is atomic on every driver: of any number of concurrent writers of one
//     key, in any number of processes, exactly one succeeds and the others get
//     ErrExists; the object's bytes are the winner's bytes; no reader ever sees a
//     partially written object. gocloud's IfNotExist is atomic on memblob, s3blob,
//     azureblob and gcsblob, but on fileblob it is check-then-rename, so file:// has
//     its own create (a fully written and synced temp file published with link(2),
//     which fails if the name exists). On azureblob a conditional write that loses
//     through the pipe writer panics inside gocloud v0.47, so every write goes through
//     Bucket.Upload with a ContentType, which takes the non-pipe path.
//   - Every call is bounded: each operation runs under the bucket's per-operation
//     timeout unless the caller's context is already shorter.
//   - Errors carry the key they concern and wrap ErrNotFound / ErrExists /
//     ErrInvalidKey / ErrTooLarge so callers decide with errors.Is, never by string.
//   - A streamed write (NewWriter, for objects too large to hold in memory: an
//     export's Parquet files) publishes nothing until Close succeeds, and then the
//     whole object: an aborted, cancelled or failed stream leaves no object.
//   - GetMax never holds more than its limit of an object in memory: an object over
//     it is refused from its size before the body is read. Metadata readers use it.
//
// WithRetry resends the requests a store throttles (refused for its rate, so not
// performed), within the caller's deadline; it is the one place that does. Its
// Bucket keeps a concurrency limit shared by every request of the process on that
// bucket: none until the store throttles, then halved on a throttled answer and
// raised by one per limit's worth of answers (limit.go). Under throttling the
// process keeps at most the limit in flight, so a store that refuses above N
// requests settles it near N, without losing a request or an answer; callers see
// no error they did not see before (a wait for a slot ends only with their
// context).
//
// WithFaults wraps a Bucket with injected latency, transient errors, throttling and
// per-key failures, so tests and benchmarks exercise the production code path against
// a misbehaving store instead of a mock.
package objstore
