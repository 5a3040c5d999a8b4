package main

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/internal/cli"
	"github.com/tidemark-io/tidemark/internal/dev/chaos"
	"github.com/tidemark-io/tidemark/internal/etcdcli"
	"github.com/tidemark-io/tidemark/internal/refmetrics"
	"github.com/tidemark-io/tidemark/pkg/coord/membership"
	"github.com/tidemark-io/tidemark/pkg/master"
	"github.com/tidemark-io/tidemark/pkg/master/dashboard"
	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/master/scanner"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

type serveFlags struct {
	etcd            etcdcli.Config
	dataURL         string
	workerEndpoints string
	grpcAddr        string
	httpAddr        string
	holder          string
	logLevel        string
	opTimeout       time.Duration

	scanInterval, sweepInterval time.Duration
	minGenerations, maxEnqueues int
	taskConcurrency, mergeConc  int
	workerTimeout, workerDial   time.Duration
	fanOut                      fanout.Shape
	prepareConc                 int
	orphanGrace                 time.Duration
	taskTimeout                 time.Duration
	leaseTTL, shutdown          time.Duration
	pruneInterval, retentionAge time.Duration
	retentionCount              int
	compactInterval             time.Duration
	minFragments, compactMax    int
	cleanupVersions             int
	deletedRatio                float64
	auth                        auth.Flags
	dashboard                   bool
}

func newServeCmd() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the master (scheduler, stats scanner, merge sweep, AdminService, HTTP API) until SIGINT or SIGTERM",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(cmd, f)
		},
	}
	fs := cmd.Flags()
	bind := func(name, env string) { cli.BindEnv(fs, name, env) }
	f.etcd.AddFlags(fs, "required: the master keeps its task queue, claims and stats in etcd")
	fs.StringVar(&f.dataURL, "data-url", "file://./data", "object storage URL of every store (file://, mem://, s3://, azblob://, gs://; ?prefix= optional)")
	bind("data-url", "DATA_URL")
	fs.StringVar(&f.workerEndpoints, "worker-endpoints", "", "static worker list, comma-separated host:port or instance=host:port gRPC addresses; set, it replaces discovery through etcd (P/workers/)")
	bind("worker-endpoints", "WORKER_ENDPOINTS")
	fs.StringVar(&f.grpcAddr, "grpc-addr", "127.0.0.1:7070", "address the gRPC AdminService (with health and reflection) listens on")
	bind("grpc-addr", "GRPC_ADDR")
	fs.StringVar(&f.httpAddr, "http-addr", "127.0.0.1:7080", "address the HTTP API and /metrics listen on")
	bind("http-addr", "HTTP_ADDR")
	fs.StringVar(&f.holder, "master-id", "", "this replica's name in claim tokens and coordination keys (default: <hostname>:<pid>)")
	bind("master-id", "MASTER_ID")
	fs.DurationVar(&f.scanInterval, "stats-scan-interval", scanner.DefaultScanInterval, "period of the stats scan of every store (the first at startup)")
	bind("stats-scan-interval", "STATS_SCAN_INTERVAL")
	fs.DurationVar(&f.sweepInterval, "merge-wal-interval", scanner.DefaultMergeSweepInterval, "period of the merge sweep that enqueues merge_wal tasks")
	bind("merge-wal-interval", "MERGE_WAL_INTERVAL")
	fs.IntVar(&f.minGenerations, "merge-wal-min-generations", scanner.DefaultMinGenerations, "the merge sweep enqueues merge_wal for targets with at least this many pending WAL generations")
	bind("merge-wal-min-generations", "MERGE_WAL_MIN_GENERATIONS")
	fs.IntVar(&f.maxEnqueues, "merge-wal-max-enqueues", scanner.DefaultMergeMaxEnqueues, "most new merge_wal tasks one sweep enqueues (worst targets first)")
	bind("merge-wal-max-enqueues", "MERGE_WAL_MAX_ENQUEUES")
	fs.DurationVar(&f.compactInterval, "compaction-interval", scanner.DefaultCompactionInterval, "period of the compaction sweep that enqueues compact tasks")
	bind("compaction-interval", "COMPACTION_INTERVAL")
	fs.IntVar(&f.minFragments, "min-fragments", scanner.DefaultMinFragments, "the compaction sweep enqueues compact for targets with at least this many level-0 base table fragments (what merges write; a point read probes each), besides those with a level over its capacity or fragments to sort")
	bind("min-fragments", "MIN_FRAGMENTS")
	fs.Float64Var(&f.deletedRatio, "compaction-deleted-ratio", scanner.DefaultDeletedRatio, "the compaction sweep enqueues compact for targets whose deleted rows are at least this share of their rows")
	bind("compaction-deleted-ratio", "COMPACTION_DELETED_RATIO")
	fs.IntVar(&f.cleanupVersions, "cleanup-every-versions", scanner.DefaultCleanupEveryVersions, "the compaction sweep enqueues compact (whose cleanup deletes old versions and unreferenced files) for targets that committed this many versions since their last one")
	bind("cleanup-every-versions", "CLEANUP_EVERY_VERSIONS")
	fs.IntVar(&f.compactMax, "compaction-max-enqueues", scanner.DefaultCompactionMaxEnqueues, "most new compact tasks one compaction sweep enqueues (most fragments first)")
	bind("compaction-max-enqueues", "COMPACTION_MAX_ENQUEUES")
	fs.IntVar(&f.taskConcurrency, "task-concurrency", master.DefaultTaskConcurrency, "running tasks per kind other than merge_wal (compact, verify, repair), on this replica")
	bind("task-concurrency", "TASK_CONCURRENCY")
	fs.IntVar(&f.mergeConc, "merge-wal-concurrency", master.DefaultMergeConcurrency, "merge_wal tasks running at once on this replica (different targets; each calls the workers one at a time)")
	bind("merge-wal-concurrency", "MERGE_WAL_CONCURRENCY")
	fs.DurationVar(&f.workerTimeout, "merge-wal-worker-timeout", master.DefaultWorkerTimeout, "bound on one worker's merge in a merge_wal fan-out (in the two-phase shape, on each of its prepare and commit)")
	bind("merge-wal-worker-timeout", "MERGE_WAL_WORKER_TIMEOUT")
	f.fanOut = fanout.TwoPhase
	fs.Var(&f.fanOut, "merge-fanout", "shape of a merge_wal fan-out: two-phase (every worker prepares at once, then they commit one after another) or serial (each worker prepares and commits in turn)")
	bind("merge-fanout", "MERGE_FANOUT")
	fs.IntVar(&f.prepareConc, "merge-prepare-concurrency", 0, "prepares in flight at once in a two-phase merge_wal fan-out; 0 means every worker of the task")
	bind("merge-prepare-concurrency", "MERGE_PREPARE_CONCURRENCY")
	fs.DurationVar(&f.orphanGrace, "orphan-grace", fanout.DefaultOrphanGrace, "a shard whose worker has been unregistered this long is adopted by a live worker (keep it several WORKER_LEASE_TTLs)")
	bind("orphan-grace", "ORPHAN_GRACE")
	fs.DurationVar(&f.workerDial, "worker-dial-timeout", 5*time.Second, "a worker not connected within this is skipped as unreachable")
	bind("worker-dial-timeout", "WORKER_DIAL_TIMEOUT")
	fs.DurationVar(&f.taskTimeout, "task-timeout", master.DefaultTaskTimeout, "bound on one task run; a merge_wal run calls every worker in turn, so allow for that")
	bind("task-timeout", "TASK_TIMEOUT")
	fs.DurationVar(&f.leaseTTL, "master-lease-ttl", master.DefaultLeaseTTL, "TTL of this replica's etcd lease: its claims and locks outlive a crash by this much")
	bind("master-lease-ttl", "MASTER_LEASE_TTL")
	fs.DurationVar(&f.shutdown, "shutdown-timeout", master.DefaultShutdownTimeout, "how long shutdown lets running tasks and requests finish (tasks still running are then released to the queue)")
	bind("shutdown-timeout", "SHUTDOWN_TIMEOUT")
	fs.DurationVar(&f.pruneInterval, "task-prune-interval", master.DefaultPruneInterval, "period of the deletion of old finished tasks")
	bind("task-prune-interval", "TASK_PRUNE_INTERVAL")
	fs.IntVar(&f.retentionCount, "task-retention-count", master.DefaultPruneKeep, "finished tasks kept (the most recent)")
	bind("task-retention-count", "TASK_RETENTION_COUNT")
	fs.DurationVar(&f.retentionAge, "task-retention-age", master.DefaultPruneMaxAge, "finished tasks older than this are deleted")
	bind("task-retention-age", "TASK_RETENTION_AGE")
	fs.DurationVar(&f.opTimeout, "object-store-timeout", objstore.DefaultOpTimeout, "bound on every object-store request")
	bind("object-store-timeout", "OBJECT_STORE_TIMEOUT")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	bind("log-level", "LOG_LEVEL")
	fs.BoolVar(&f.dashboard, "dashboard", true, "serve the operator dashboard under /ui/ of --http-addr (log in with the bearer token)")
	bind("dashboard", "DASHBOARD")
	f.auth.AddServerFlags(fs)
	return cmd
}

// check refuses settings that would be silently replaced by a default or make no
// sense, naming the flag and its variable.
func (f serveFlags) check() error {
	var errs []error
	positive := func(d time.Duration, flag, env string) {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("--%s (%s) must be positive, got %s", flag, env, d))
		}
	}
	atLeastOne := func(n int, flag, env string) {
		if n < 1 {
			errs = append(errs, fmt.Errorf("--%s (%s) must be at least 1, got %d", flag, env, n))
		}
	}
	positive(f.scanInterval, "stats-scan-interval", "STATS_SCAN_INTERVAL")
	positive(f.sweepInterval, "merge-wal-interval", "MERGE_WAL_INTERVAL")
	positive(f.workerTimeout, "merge-wal-worker-timeout", "MERGE_WAL_WORKER_TIMEOUT")
	if f.prepareConc < 0 {
		errs = append(errs, fmt.Errorf("--merge-prepare-concurrency (MERGE_PREPARE_CONCURRENCY) must not be negative, got %d", f.prepareConc))
	}
	positive(f.orphanGrace, "orphan-grace", "ORPHAN_GRACE")
	positive(f.workerDial, "worker-dial-timeout", "WORKER_DIAL_TIMEOUT")
	positive(f.taskTimeout, "task-timeout", "TASK_TIMEOUT")
	positive(f.shutdown, "shutdown-timeout", "SHUTDOWN_TIMEOUT")
	positive(f.pruneInterval, "task-prune-interval", "TASK_PRUNE_INTERVAL")
	positive(f.retentionAge, "task-retention-age", "TASK_RETENTION_AGE")
	positive(f.compactInterval, "compaction-interval", "COMPACTION_INTERVAL")
	atLeastOne(f.minFragments, "min-fragments", "MIN_FRAGMENTS")
	atLeastOne(f.cleanupVersions, "cleanup-every-versions", "CLEANUP_EVERY_VERSIONS")
	atLeastOne(f.compactMax, "compaction-max-enqueues", "COMPACTION_MAX_ENQUEUES")
	if f.deletedRatio <= 0 || f.deletedRatio > 1 {
		errs = append(errs, fmt.Errorf("--compaction-deleted-ratio (COMPACTION_DELETED_RATIO) must be in (0, 1], got %g", f.deletedRatio))
	}
	atLeastOne(f.minGenerations, "merge-wal-min-generations", "MERGE_WAL_MIN_GENERATIONS")
	atLeastOne(f.maxEnqueues, "merge-wal-max-enqueues", "MERGE_WAL_MAX_ENQUEUES")
	atLeastOne(f.taskConcurrency, "task-concurrency", "TASK_CONCURRENCY")
	atLeastOne(f.mergeConc, "merge-wal-concurrency", "MERGE_WAL_CONCURRENCY")
	atLeastOne(f.retentionCount, "task-retention-count", "TASK_RETENTION_COUNT")
	if f.leaseTTL < 2*time.Second {
		errs = append(errs, fmt.Errorf("--master-lease-ttl (MASTER_LEASE_TTL) must be at least 2s, got %s", f.leaseTTL))
	}
	return errors.Join(errs...)
}

func runServe(cmd *cobra.Command, f serveFlags) error {
	ctx := cmd.Context()
	log, err := cli.NewLogger(cmd.ErrOrStderr(), f.logLevel)
	if err != nil {
		return err
	}
	cli.LogEnvWarnings(ctx, log) // reference aliases used, unknown settings
	if err := f.check(); err != nil {
		return err
	}
	reg := refmetrics.NewProcessRegistry()
	// Checked before anything is opened: a master that would serve its
	// AdminService to anyone refuses to start. The same token (and --tls-ca with
	// the certificate as client certificate) goes on the calls to the workers.
	authn, err := f.auth.Server(log, reg)
	if err != nil {
		return err
	}
	var discovery fanout.Discovery
	if f.workerEndpoints != "" {
		static, err := fanout.ParseEndpoints(f.workerEndpoints)
		if err != nil {
			return fmt.Errorf("--worker-endpoints (WORKER_ENDPOINTS): %w", err)
		}
		if len(static) == 0 {
			return fmt.Errorf("--worker-endpoints (WORKER_ENDPOINTS) %q names no worker", f.workerEndpoints)
		}
		discovery = static
	}
	bucket, err := objstore.Open(ctx, f.dataURL, objstore.WithOpTimeout(f.opTimeout))
	if err != nil {
		return fmt.Errorf("data url (--data-url, DATA_URL): %w", err)
	}
	defer bucket.Close()
	if bucket, err = chaos.WrapBucket(bucket, log); err != nil { // faults only in -tags chaos builds
		return err
	}
	bucket = resendThrottled(bucket)
	// etcd is checked before anything listens: a master that cannot reach it fails
	// at startup with the endpoints it tried.
	client, err := etcdcli.New(ctx, f.etcd)
	if err != nil {
		return err
	}
	defer client.Close()
	prefix := f.etcd.NormalizedPrefix()
	if discovery == nil {
		discovery = &membership.Discovery{Client: client, Prefix: prefix}
	}
	caller := fanout.NewGRPCCaller(fanout.GRPCCallerConfig{DialTimeout: f.workerDial,
		DialOptions: auth.DialOptions(authn.Client.Token, authn.Client.TLS)})
	defer caller.Close()

	gln, err := net.Listen("tcp", f.grpcAddr)
	if err != nil {
		return fmt.Errorf("grpc addr (--grpc-addr, GRPC_ADDR): %w", err)
	}
	hln, err := net.Listen("tcp", f.httpAddr)
	if err != nil {
		_ = gln.Close()
		return fmt.Errorf("http addr (--http-addr, HTTP_ADDR): %w", err)
	}
	m, err := master.New(master.Config{
		Client:         client,
		Prefix:         prefix,
		Bucket:         bucket,
		Discovery:      discovery,
		Caller:         caller,
		GRPCListener:   gln,
		HTTPListener:   hln,
		ScanInterval:   f.scanInterval,
		SweepInterval:  f.sweepInterval,
		MinGenerations: f.minGenerations,
		MaxEnqueues:    f.maxEnqueues,
		Compaction: scanner.CompactionSweepConfig{
			Interval:             f.compactInterval,
			MinFragments:         f.minFragments,
			DeletedRatio:         f.deletedRatio,
			CleanupEveryVersions: f.cleanupVersions,
			MaxEnqueues:          f.compactMax,
		},
		TaskConcurrency:    f.taskConcurrency,
		MergeConcurrency:   f.mergeConc,
		WorkerTimeout:      f.workerTimeout,
		FanOut:             f.fanOut,
		PrepareConcurrency: f.prepareConc,
		OrphanGrace:        f.orphanGrace,
		TaskTimeout:        f.taskTimeout,
		LeaseTTL:           f.leaseTTL,
		ShutdownTimeout:    f.shutdown,
		PruneInterval:      f.pruneInterval,
		PruneKeep:          f.retentionCount,
		PruneMaxAge:        f.retentionAge,
		Holder:             f.holder,
		Metrics:            reg,
		Logger:             log,
		Auth:               authn.Guard,
		TLS:                authn.TLS,
		Dashboard: master.DashboardConfig{
			Disabled:    !f.dashboard,
			WorkerToken: authn.Client.Token,
			WorkerTLS:   authn.Client.TLS,
		},
	})
	if err != nil {
		_ = gln.Close()
		_ = hln.Close()
		return err
	}
	source := "etcd"
	if f.workerEndpoints != "" {
		source = "static"
	}
	dashboardURL := "off"
	if f.dashboard {
		scheme := "http"
		if authn.TLS != nil {
			scheme = "https"
		}
		dashboardURL = scheme + "://" + hln.Addr().String() + dashboard.Root
	}
	log.Info("master starting", "version", cli.Version(), "data_url", bucket.String(), "etcd_prefix", prefix,
		"workers", source, "grpc_addr", gln.Addr().String(), "http_addr", hln.Addr().String(), "dashboard", dashboardURL)
	return m.Run(ctx)
}

// resendThrottled makes b resend the requests the store throttles, with the
// stores' policy (objstore.ThrottleBackoff within objstore.DefaultThrottleRetry),
// so the master's registry reads and scans ride out throttling as a worker's
// reads do instead of failing a scan or an admin call at the first 503.
func resendThrottled(b *objstore.Bucket) *objstore.Bucket {
	return objstore.WithRetry(b, objstore.ThrottleBackoff, clock.RealClock{}, objstore.DefaultThrottleRetry)
}
