// Package worker is the worker process: Config, New (which builds every part
// below from one Config, over one set of store handles, one merger and one merge
// service) and Run (which registers the worker in etcd, serves, and stops in
// order). Its parts, each a package:
//
//   - httpapi: the HTTP data API (/api/v1/...) and the Prometheus endpoint;
//   - rpc: the internal gRPC WorkerService the master calls;
//   - mergesvc: merges on request under fencing tokens, which httpapi and rpc
//     share, and the series merges and seals are counted in;
//   - sweep: the flush sweep (seals; merges only on a standalone worker) and the
//     deletes of drained WAL files;
//   - feed: the change feed's read path up to the horizon, consumers' lag and the
//     add backpressure by lag;
//   - store, maintain: store handles, and the compact, verify and repair tasks.
//
// Invariants:
//
//   - One owner per merge decision: with etcd the master alone decides when a store
//     is merged and the worker's sweeps only seal; without etcd (standalone) the
//     flush sweep merges what the worker's own shard holds pending. Explicit
//     requests (HTTP merge-wal, gRPC MergeWal and MergeStore) merge on either.
//   - HTTP and gRPC merges go through one mergesvc.Service, so they share its
//     record of fencing tokens.
//   - Metrics come from the registry the worker is given, never from the
//     process-wide default registry, so two workers in one test process do not
//     share counters; each part registers its own series there once.
//   - A stopping worker deregisters before its servers stop, and seals every open
//     store after they did (Worker.Run): nothing it acknowledged waits for it to
//     come back.
//   - A worker is listed under P/workers/<instance> in etcd only while it runs: the
//     record lives under a lease kept alive by the worker, is put back if the lease
//     is lost, and is deleted (lease revoked) when the worker stops.
package worker
