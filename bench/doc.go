// Package bench reproduces the production incidents Tidemark was designed against
// (docs/DESIGN.md, "The production failures it exists to avoid") and measures the
// pieces' throughput, with numbers from one run on one machine. `make bench` runs it through
// cmd/tidemark-bench and writes the "Incident reproductions" section of
// BENCHMARKS.md.
//
// Scenarios, each old shape next to the new one in the same run:
//
//   - RunStorm, the commit storm: 20 workers with pending generations on one store,
//     a slow and throttled bucket. OldShapePerWorkerTimers (every worker merges its
//     own shard at once) against NewShapeSerialFanOut (one merge_wal task in etcd,
//     the master's Scheduler and FanOut calling the workers' gRPC WorkerService one
//     after another).
//   - RunIngest, sustained ingest: workers seal a generation every second while a
//     real master (master.New) scans, sweeps and merges; do pending generations stay
//     bounded, with the serial and the gather fan-out?
//   - RunSkew, skewed ingest (issue 31): the cluster of RunIngest with one hot
//     store taking 90% of the rows and 50 quiet stores sharing the rest; is every
//     quiet store merged within MERGE_MAX_DELAY plus one merge time, and the hot
//     store bounded? (only when named: over 5 minutes)
//   - RunOverload (issue 31): a probe measures what merges sustain, then writers
//     add through the workers' real HTTP add route at twice that; do adds slow
//     down instead of failing, and pending generations stay under the refusal
//     threshold? (only when named: over 5 minutes)
//   - RunLock, the lock held across the read: adds and gets while one worker
//     merges, and while two merge at once and their commits conflict.
//     OldShapeLockAcrossRead (the exclusive lock from the first read to the end of
//     the commit) against NewShapePrepareCommit (merge.Merger's pass with
//     Store.Commit, which holds no lock readers take).
//   - RunFanout, the read fan-out: a list over 0..1000 pending generations and
//     after their merge, with and without the generation cache.
//   - RunThroughput: durable adds per worker next to raw object writes, merge rate,
//     scanner rounds over 1,000 and 10,000 stores, the master's task cycle next to
//     plain etcd puts.
//   - RunMemory: the peak RSS of a worker process merging a 1 GiB backlog.
//   - RunMaintenance: one store merged 2,000 times without maintenance and with the
//     compaction sweep's compact tasks (its own BENCHMARKS.md section).
//   - RunScale: generic stores of millions of rows built through the write path
//     and compacted into levels, read, merged into and compacted on file:// and
//     behind a latency, against issue 29's goals (its own BENCHMARKS.md section;
//     only when named: tens of minutes at its default sizes).
//   - RunFeed, the change feed (issue 32): a master and 20 worker processes
//     (devcluster) sealing every second under a steady writer, one consumer
//     following with long polls and commits; the delay from acknowledgement to
//     delivery, the horizon's lag, and the rows/s of a consumer catching up
//     beside the list route's (its own BENCHMARKS.md section; only when named).
//
// Invariants:
//
//   - The old shapes exist only here, behind the names above; production code has
//     no mode that behaves like them.
//   - Every scenario checks its data before it reports: every acknowledged row is in
//     the base table exactly once and no generation is left pending (a shape that
//     did not drain in time is drained afterwards, without faults, and then
//     checked). A shape cannot win by losing rows. The feed scenario checks what
//     it reads instead: every acknowledged row reached the consumer, and each
//     catch-up read, feed and list alike, answered every row of its store.
//   - Runs are repeatable: rows, ids, jitter and client choices come from
//     generators seeded by Env.Seed. Timings still vary with the machine's load.
//   - Every run is bounded in time (deadlines, durations, fixed sizes), and the
//     package's tests run each scenario at a tiny size in seconds; the measured
//     sizes run only through the command.
package bench
