// Package client is a Go client of a worker's HTTP data API (/api/v1, docs/API.md):
// the one place outside package worker that knows the routes. It covers health;
// creating, describing, listing and deleting rollout and generic stores; adding
// rows (JSON, or an Arrow IPC stream's bytes: AddArrow), listing them (cursor,
// limit, offset, filters, version, source, order), reading one by id, a batch
// get, a rollout record's blob; flush and merge-wal; compaction and exports
// (enqueued for the master, an export's task polled); the change feed (a page
// after a cursor, long polls) and named consumers' cursors (commit, get).
// Lists, gets, batch gets and feed pages are also read as Arrow IPC streams
// (arrow_read.go: ListArrow, ...), batch by batch as the worker sends them.
// Package tail, below it, follows a feed with it.
//
// Invariants:
//
//   - Route paths and their query parameters are built here only; users name a
//     kind (Rollouts, Generic), a store and options, never a path.
//   - Context first, and every call bounded: a call that waits longer than the
//     client's timeout (DefaultTimeout, WithTimeout) ends with the context's error;
//     a long poll gets its wait on top of it. The caller's context can only
//     shorten that.
//   - What a call holds of an answer is bounded (WithMaxAnswer): a larger answer is
//     refused with ErrTooLarge, never cut short and decoded; an answer that does
//     not decode is ErrUndecodable.
//   - Every answer other than a 2xx is an *Error carrying the HTTP status and the
//     {"error":{"code","message"}} body's code and message; errors.Is matches it
//     against the sentinel of its code (ErrNotFound, ErrAlreadyExists, ErrConflict,
//     ErrOverloaded, ...). A call that got no answer (the worker is unreachable,
//     the connection was cut) returns the transport's error, never an *Error.
//   - Every request carries the credential given (WithToken's bearer token,
//     WithTLS's client certificate); a Client is safe for concurrent use.
//   - An Arrow stream that ends without its end-of-stream marker is ErrTruncated,
//     never a shorter answer that looks whole.
//
// It imports neither package worker nor the master: it speaks the API's JSON and
// Arrow IPC (arrow-go, a library), so any program can import it. Its codes are
// the worker's (a test keeps them equal).
package client
