// Package httpapi is the worker's HTTP data API (/api/v1/...) and its Prometheus
// endpoint: routes, request parsing, JSON error answers, the Arrow IPC answers of
// the reads of rows (arrow.go), blobs and the in-flight blob budget, the add
// backpressure, and the routes of the change feed and its named consumers (their
// reads and verdicts are pkg/worker/feed's). Merges go through
// pkg/worker/mergesvc, which the gRPC WorkerService shares.
//
// Invariants:
//
//   - Every error answer, including an unknown route or a wrong method, is JSON of the
//     shape {"error":{"code":"NOT_FOUND","message":"..."}}; clients never have to parse
//     plain text.
//   - The data routes answer as the reference system's (lance-context) do - statuses,
//     field names and types, the wording of its 404s - so its clients work unchanged;
//     Tidemark's own fields sit beside the reference's, never instead of them
//     (conformance_test.go names the reference source it follows).
//   - A list without a limit is every row or a cut-off answer, never a shorter list
//     that parses: once rows went out, a failed read closes the connection. An
//     Arrow answer the same: its end-of-stream marker follows a read that
//     succeeded only (arrow.go).
//   - JSON is the default answer; a read answers Arrow only when asked (Accept,
//     ?format=arrow), and its errors are JSON whenever nothing was written yet.
//   - An add's body is JSON, multipart (rollout records) or an Arrow IPC stream
//     (add_arrow.go). A stream is a client's bytes: internal/ipcguard checks it
//     before arrow-go reads it, under a recover and an allocator bounded by the
//     body limit, so a hostile stream is a 4xx, never a panic, a 500 or an
//     out-of-memory; its rows are checked as JSON rows are and written the same way.
//   - Blob columns never travel in lists: a record's binary_payload is read from
//     its blob route, a generic blob column by naming it (blob.go). The bytes
//     of adds and blob downloads in memory at once stay within the in-flight blob
//     budget, but for one request admitted alone (blobBudget); the rest are 503s.
//   - An add to a store behind on its merges waits before it is written, in
//     proportion to its pending generations, and is refused (503) at the refuse
//     threshold (admitAdd, store.Store.AdmitAdd); the wait follows the client and
//     the server's shutdown, and an add that did not finish it wrote nothing.
//   - An add to a store with max_consumer_lag is refused (503 CONSUMER_LAG, naming
//     the consumer) while a named consumer lags behind the store's horizon by more
//     (feed.Backpressure). It decides on a per-store verdict at most
//     lagVerdictTTL old, refreshed in the background: no add waits for etcd but a
//     store's first on this worker, and an etcd that cannot be read admits.
//   - Metrics come from the registry the server is given, never from the process-wide
//     default registry, so two servers in one test process do not share counters.
//   - Serve returns only after the listener is closed and in-flight requests have
//     finished or the shutdown timeout has passed; it leaves no goroutine behind.
//   - A merge route carries no fencing token (it merges unfenced) and goes through
//     the worker's one mergesvc.Service, so it never skips a newer master claim's
//     record, nor records one.
package httpapi
