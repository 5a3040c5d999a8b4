// Package membership is the worker membership in etcd: the worker record, a
// worker's registration, and the master's discovery of the registered workers.
//
// A worker is a member while its record P/workers/<instance> exists (the key is
// keys.Schema.Worker; P is ETCD_PREFIX). The value is JSON, so an operator reads
// the membership with `etcdctl get --prefix P/workers/`:
//
//	{"instance_id":"w1","grpc_addr":"10.0.0.7:9090","http_addr":"10.0.0.7:8080",
//	 "started_at":"2026-03-01T12:00:00Z","version":"v1.2.3"}
//
// Invariants:
//
//   - A record lives under its worker's own lease: a worker that dies, or loses
//     etcd for longer than the TTL, stops being a member when the lease expires;
//     one that stops cleanly revokes its lease and leaves at once.
//   - While its Registration runs, a worker is a member whenever etcd is
//     reachable: a lost lease is replaced and a deleted record put back, so the
//     master never skips a live worker for longer than a retry.
//   - The instance id is a key segment and the name of the worker's WAL shard: it
//     passes wal.ValidateShard, so it never contains '/' and cannot escape
//     P/workers/.
//   - Discovery never returns a worker it could not call: a record that does not
//     decode or has no gRPC address is left out.
//   - Watch reports every change of the membership eventually, as the whole list
//     read after the change; a change missed while its watch was broken is
//     reported when the watch is restarted.
//
// One file holds one primitive: the record (worker.go), the registration
// (register.go), the advertised address (advertise.go), the list (discovery.go)
// and its watch (watch.go).
package membership
