// Package worker is the worker process's server: the HTTP data API (/api/v1/...), the
// Prometheus endpoint and, in later issues, the internal gRPC WorkerService, the shard
// WAL sweepers and the etcd registration.
//
// What exists now is the HTTP skeleton every later route plugs into. Its invariants:
//
//   - Every error answer, including an unknown route or a wrong method, is JSON of the
//     shape {"error":{"code":"NOT_FOUND","message":"..."}}; clients never have to parse
//     plain text.
//   - Metrics come from the registry the server is given, never from the process-wide
//     default registry, so two servers in one test process do not share counters.
//   - Serve returns only after the listener is closed and in-flight requests have
//     finished or the shutdown timeout has passed; it leaves no goroutine behind.
package worker
