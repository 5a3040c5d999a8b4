// Package mergesvc is the worker's one way to merge a store on request, and what
// its other parts share about merges and seals: the record of fencing tokens the
// master's calls are checked against, the "store gone" classification of a
// failure, the merge triggers, and the series merges and seals are counted in.
// The HTTP data API (pkg/worker/httpapi) and the gRPC WorkerService
// (pkg/worker/rpc) both merge through one Service, and the sweeps
// (pkg/worker/sweep) count under its series, so none of them reaches into
// another.
//
// Invariants:
//
//   - Fencing tokens of a target only grow, here as in etcd: once a token has been
//     seen for a target's lane, a call with an older one is refused before it
//     touches the store (ErrStaleFencingToken). A stale master (one whose claim of
//     the target expired and was taken over) therefore cannot merge after its
//     successor has called. A request admitted before a newer one arrived may
//     still finish: merges are idempotent (the merged watermark is committed with
//     the data), so two overlapping merges of one shard never add rows twice.
//   - HTTP and gRPC merges of one worker go through one Service, so they share that
//     record; a token of 0 (the HTTP routes) skips fencing, a negative one is
//     invalid.
//   - A failure of an operation on a store that is no longer registered is
//     "deleted" (store.ErrDeleted), whatever the operation tripped over (StoreGone):
//     a 404 or NOT_FOUND, a skipped merge task, never a conflict to retry.
//   - Metrics come from the registry they are given, never from the process-wide
//     default one; the series keep the names and labels docs/METRICS.md lists.
package mergesvc
