// Package rpc is the worker's internal gRPC server: the tidemark.v1.WorkerService
// the master calls (MergeWal, MergeStore, DrainMerged, AdoptShard, Flush,
// Maintain, Export, Info), with the standard health service and server reflection. Its
// merges and their fencing are pkg/worker/mergesvc's, shared with the HTTP data
// API; grpcError maps an error's class to the gRPC code the master acts on.
//
// Invariants:
//
//   - Every call from the master carries a fencing token (> 0, the etcd revision
//     of its lock of the target): 0 is INVALID_ARGUMENT; a token older than the
//     newest seen for the target's lane is FAILED_PRECONDITION before the call
//     touches the store (mergesvc.ErrStaleFencingToken).
//   - A target names exactly one store: "generic:<name>" is the generic store
//     <name> and never the rollout store of the same name.
//   - UNAVAILABLE is never an answer of a call that reached a merge: the master
//     reads it as "this worker could not be reached" and moves on to the next
//     worker, which is only right when nothing ran. An export may answer it (its
//     store's horizon or its destination failed): the master runs the export
//     again, which its destination's rules make safe (package export).
//   - An export of a store now reads the store's horizon before the snapshot it
//     writes (Export), so the feed cursor its manifest records misses nothing.
//   - PrepareMerge, CommitMerge and AbortMerge (the two-phase fan-out, gone) answer
//     UNIMPLEMENTED, as the generated server does for any method not implemented.
//   - ServeGRPC returns only after the listener is closed and calls in flight have
//     finished or the shutdown timeout has passed (they are cancelled then); it
//     leaves no goroutine behind.
package rpc
