// Package devcluster runs a whole Tidemark cluster on one machine, for development
// and for trying Tidemark out (`master dev`, `make run`): an embedded single-node
// etcd, a master and N workers on loopback, sharing one store: file://<dir>/store,
// or the user's own bucket (Config.DataURL, `master dev --data-url s3://...`).
//
// The layout under the data directory (./data by default):
//
//	etcd/          the embedded etcd's data
//	store/         DATA_URL of every process (file://<dir>/store) unless DataURL is set
//	logs/<name>.log  every process's log (etcd.log, master.log, w1.log, ...), appended
//	auth-token     the cluster's bearer token (0600), made on the first run
//
// Invariants:
//
//   - Workers are separate processes (the worker binary, `worker serve`), each with
//     its own INSTANCE_ID (w1..wN), shard, HTTP and gRPC ports; the master is a
//     separate process too (this binary, `master serve`). Nothing of a child runs
//     in this process, so the cluster behaves as it does in production.
//   - Everything in the data directory is reused: running twice in a row starts on
//     the same etcd data and the same stores.
//   - Shutdown is ordered and complete: the master gets SIGTERM first (it releases
//     the tasks it runs), then every worker (each seals and deregisters), then etcd
//     stops. A child that ignores SIGTERM past the shutdown timeout is killed.
//     Children run in their own process group, so a terminal's Ctrl-C reaches only
//     this process, which orders the shutdown; on Linux a child is killed if this
//     process dies without shutting it down.
//   - A child that exits on its own stops the cluster with an error naming it.
//   - Settings: a child's environment is this process's environment, over the dev
//     defaults (short flush, scan and sweep intervals, a small merge threshold, the
//     worker count trigger off), under what the cluster must decide itself
//     (INSTANCE_ID, addresses, DATA_URL, ETCD_ENDPOINTS, ETCD_PREFIX). So
//     `FLUSH_INTERVAL=1s master dev` works, and `HTTP_ADDR=...` cannot break it.
//     A bucket's credentials (AWS_*, GOOGLE_APPLICATION_CREDENTIALS,
//     AZURE_STORAGE_*) reach the children the same way; this process never opens it.
//   - Every child requires the cluster's token (AUTH_TOKEN_FILE=<dir>/auth-token),
//     as in production: the banner prints how `master admin` and curl send it.
package devcluster
