// Package e2e holds Tidemark's end-to-end tests: they build the binaries, run
// etcd (the embedded one of `master dev`), masters and workers as separate
// processes on loopback, write through the HTTP API, kill processes with SIGKILL
// and SIGSTOP, and inspect etcd with the real etcdctl. It also checks that
// docker-compose.yml matches the binaries' flags and environment variables.
//
// What the tests prove:
//
//   - Rows added through any worker are readable through every worker exactly
//     once, after the master merged them, and the task records an operator reads
//     with etcdctl say what happened.
//   - `master admin requeue-merge` enqueues a merge that runs to done.
//   - A worker killed during merges and restarted loses no acknowledged row and
//     duplicates none.
//   - A task whose master is killed while running it is finished by another
//     master once the first one's lease expires.
//   - `master dev` starts a working cluster, prints commands that work, stops
//     cleanly on SIGINT and reuses its data on the next run.
//
// They run with `go test ./...` (and `make test`), in parallel: every cluster has
// its own etcd, ports (freeAddr) and directories, and a child gets exactly the
// environment its test gives it, so two clusters never share anything but the
// machine. `-parallel` bounds the clusters running at once (GOMAXPROCS by
// default); the tests wait for events with deadlines (testwait), so a busier
// machine makes them slower, not wrong. `go test -short` skips the
// cluster tests. etcdctl is looked up in PATH, GOBIN and GOPATH/bin (`make
// etcdctl` installs it); without it the tests that need it skip, or fail under
// CI=true. TIDEMARK_E2E_RACE=1 builds the binaries with the race detector.
package e2e
