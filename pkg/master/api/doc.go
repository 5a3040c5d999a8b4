// Package api is the master's operator surface: the AdminService over gRPC
// (service.go: tasks, stats, workers, rescans; adopt.go: forced adoptions) and the
// HTTP API (the reference system's routes and Tidemark's own), which mounts the
// dashboard under /ui/.
//
// Invariants:
//
//   - Errors become codes in one place (classify, by errclass), for gRPC and HTTP
//     alike: bad input is INVALID_ARGUMENT (400) naming the problem, a missing task,
//     store, stats row or shard NOT_FOUND (404), a refused action
//     FAILED_PRECONDITION (409), a corrupt object DATA_LOSS naming it, etcd or the
//     object store not answering UNAVAILABLE (503). An internal error's details are
//     logged, never answered.
//   - Every call's etcd and object-store work is bounded (DefaultCallTimeout), so a
//     call made while etcd is away answers UNAVAILABLE instead of hanging; only a
//     rescan of every store is bounded by the client's deadline alone.
//   - An enqueue checks the target is a registered store first and deduplicates
//     onto a live task of the same kind and target; it wakes the scheduler.
//   - Every route but health (gRPC health and GET /api/v1/health) and metrics
//     needs the credential the auth.Guard checks.
package api
