package main

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/internal/cli"
	"github.com/tidemark-io/tidemark/internal/refmetrics"
	"github.com/tidemark-io/tidemark/pkg/coord/etcdcli"
	"github.com/tidemark-io/tidemark/pkg/master"
	"github.com/tidemark-io/tidemark/pkg/master/dashboard"
	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/master/workerhttp"
	"github.com/tidemark-io/tidemark/pkg/scanner"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/tools/chaos"
)

// serveFlags are serve's settings: cfg's fields are bound to their flags (and
// variables) directly, one name per setting; the rest are what runServe opens
// with them.
type serveFlags struct {
	cfg             master.Config
	etcd            etcdcli.Config
	dataURL         string
	workerEndpoints string
	grpcAddr        string
	httpAddr        string
	logLevel        string
	opTimeout       time.Duration
	auth            auth.Flags
	dashboard       bool
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
	f.bind(cmd.Flags())
	return cmd
}

// bind defines serve's flags on fs, each with its variable, setting f.
func (f *serveFlags) bind(fs *pflag.FlagSet) {
	bind := func(name, env string) { cli.BindEnv(fs, name, env) }
	c := &f.cfg
	f.etcd.AddFlags(fs, "required: the master keeps its task queue, claims and stats in etcd")
	// One bound on connecting to a peer (issue 43 folded WORKER_DIAL_TIMEOUT into it).
	dial := fs.Lookup("etcd-dial-timeout")
	dial.Usage = strings.Replace(dial.Usage, "bound on connecting to etcd at startup",
		"bound on connecting to etcd at startup, and to a worker before a call (a worker not connected within it is skipped as unreachable)", 1)
	fs.StringVar(&f.dataURL, "data-url", "file://./data", "object storage URL of every store (file://, mem://, s3://, azblob://, gs://; ?prefix= optional)")
	bind("data-url", "DATA_URL")
	fs.StringVar(&f.workerEndpoints, "worker-endpoints", "", "static worker list, comma-separated host:port or instance=host:port gRPC addresses; set, it replaces discovery through etcd (P/workers/)")
	bind("worker-endpoints", "WORKER_ENDPOINTS")
	fs.StringVar(&f.grpcAddr, "grpc-addr", "127.0.0.1:7070", "address the gRPC AdminService (with health and reflection) listens on")
	bind("grpc-addr", "GRPC_ADDR")
	fs.StringVar(&f.httpAddr, "http-addr", "127.0.0.1:7080", "address the HTTP API and /metrics listen on")
	bind("http-addr", "HTTP_ADDR")
	fs.StringVar(&c.ID, "master-id", "", "this replica's name in claim tokens and coordination keys (default: <hostname>:<pid>)")
	bind("master-id", "MASTER_ID")
	fs.DurationVar(&c.Scan.Interval, "stats-scan-interval", scanner.DefaultScanInterval, "period of the stats scan of every store (the first at startup)")
	bind("stats-scan-interval", "STATS_SCAN_INTERVAL")
	fs.DurationVar(&c.MergeSweep.Interval, "merge-wal-interval", scanner.DefaultMergeSweepInterval, "period of the merge sweep that enqueues merge_wal tasks")
	bind("merge-wal-interval", "MERGE_WAL_INTERVAL")
	fs.IntVar(&c.MergeSweep.MinGenerations, "merge-wal-min-generations", scanner.DefaultMinGenerations, "the merge sweep enqueues merge_wal for targets with at least this many pending WAL generations")
	bind("merge-wal-min-generations", "MERGE_WAL_MIN_GENERATIONS")
	// Folded (issue 31): merges are enqueued on demand as stores become due, so a
	// cap on one sweep's enqueues is a fixed bound now. Parsed and ignored with a
	// warning, so a deployment that sets it still starts.
	fs.Int("merge-wal-max-enqueues", scanner.DefaultMergeMaxEnqueues, "")
	_ = fs.MarkDeprecated("merge-wal-max-enqueues", "ignored: merges are enqueued on demand, at most 256 new ones a round")
	fs.DurationVar(&c.MergeDemand.MaxDelay, "merge-max-delay", scanner.DefaultMergeMaxDelay, "a store's oldest pending WAL generation is merged by this age however few it has: its merge is enqueued that much earlier as the slowest recent merge by age took from enqueue to finish (at most half of this); workers report pending generations within a second, and a store at --merge-wal-min-generations is merged at once")
	bind("merge-max-delay", "MERGE_MAX_DELAY")
	fs.DurationVar(&c.CompactionSweep.Interval, "compaction-interval", scanner.DefaultCompactionInterval, "period of the compaction sweep that enqueues compact tasks")
	bind("compaction-interval", "COMPACTION_INTERVAL")
	fs.IntVar(&c.CompactionSweep.MinFragments, "min-fragments", scanner.DefaultMinFragments, "the compaction sweep enqueues compact for targets with at least this many level-0 base table fragments (what merges write; a point read probes each), besides those with a level past its target or fragments to sort; a merge that leaves this many enqueues it at once")
	bind("min-fragments", "MIN_FRAGMENTS")
	fs.Float64Var(&c.CompactionSweep.DeletedRatio, "compaction-deleted-ratio", scanner.DefaultDeletedRatio, "the compaction sweep enqueues compact for targets whose deleted rows are at least this share of their rows")
	bind("compaction-deleted-ratio", "COMPACTION_DELETED_RATIO")
	fs.IntVar(&c.Scheduler.TaskConcurrency, "task-concurrency", master.DefaultTaskConcurrency, "running tasks per kind on this replica: this many each of compact, verify and repair, and 4x as many merge_wal (different stores; each occupies one merging worker and the drains of the others)")
	bind("task-concurrency", "TASK_CONCURRENCY")
	c.FanOut.Shape = fanout.Gather
	fs.Var(&c.FanOut.Shape, "merge-fanout", "shape of a merge_wal fan-out: gather (one worker merges every shard of the store in one commit, the others drain theirs; a worker without it makes the task serial) or serial (each worker prepares and commits in turn, the reference system's shape)")
	bind("merge-fanout", "MERGE_FANOUT")
	fs.DurationVar(&c.OrphanGrace, "orphan-grace", fanout.DefaultOrphanGrace, "a shard whose worker has been unregistered this long is adopted by a live worker (keep it several of the workers' LEASE_TTLs)")
	bind("orphan-grace", "ORPHAN_GRACE")
	fs.DurationVar(&c.Scheduler.TaskTimeout, "task-timeout", master.DefaultTaskTimeout, "bound on one task run; one worker's merge in a merge_wal run is bounded at a sixth of it (a serial run calls every worker in turn, so allow for that)")
	bind("task-timeout", "TASK_TIMEOUT")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", master.DefaultLeaseTTL, "TTL of this replica's etcd lease: its claims and locks outlive a crash by this much")
	bind("lease-ttl", "LEASE_TTL")
	cli.RenameFlag(fs, "master-lease-ttl", "lease-ttl")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", master.DefaultShutdownTimeout, "how long shutdown lets running tasks and requests finish (tasks still running are then released to the queue)")
	bind("shutdown-timeout", "SHUTDOWN_TIMEOUT")
	fs.IntVar(&c.TaskRetention.Count, "task-retention-count", master.DefaultRetentionCount, "finished tasks kept (the most recent)")
	bind("task-retention-count", "TASK_RETENTION_COUNT")
	fs.DurationVar(&c.TaskRetention.Age, "task-retention-age", master.DefaultRetentionAge, "finished tasks older than this are deleted (every hour, or every quarter of this when shorter)")
	bind("task-retention-age", "TASK_RETENTION_AGE")
	// Folded (issue 43): parsed and ignored, so a command line written for an
	// earlier Tidemark still starts; docs/CONFIGURATION.md says what replaced each.
	for name, why := range map[string]string{
		"cleanup-every-versions":   "a store is compacted (and cleaned up) at least every 100 versions",
		"compaction-max-enqueues":  "a compaction sweep enqueues at most 16 new tasks",
		"merge-wal-concurrency":    "merge_wal tasks run 4x --task-concurrency at once",
		"merge-wal-worker-timeout": "one worker's merge is bounded at a sixth of --task-timeout",
		"worker-dial-timeout":      "--etcd-dial-timeout bounds connecting to a worker too",
		"task-prune-interval":      "old tasks are deleted every hour, or every quarter of --task-retention-age when shorter",
	} {
		cli.RetireFlag(fs, name, why)
	}
	fs.DurationVar(&f.opTimeout, "object-store-timeout", objstore.DefaultOpTimeout, "bound on every object-store request")
	bind("object-store-timeout", "OBJECT_STORE_TIMEOUT")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	bind("log-level", "LOG_LEVEL")
	fs.BoolVar(&f.dashboard, "dashboard", true, "serve the operator dashboard under /ui/ of --http-addr (log in with the bearer token)")
	bind("dashboard", "DASHBOARD")
	f.auth.AddServerFlags(fs)
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
	c := f.cfg
	positive(c.Scan.Interval, "stats-scan-interval", "STATS_SCAN_INTERVAL")
	positive(c.MergeSweep.Interval, "merge-wal-interval", "MERGE_WAL_INTERVAL")
	positive(c.MergeDemand.MaxDelay, "merge-max-delay", "MERGE_MAX_DELAY")
	positive(c.OrphanGrace, "orphan-grace", "ORPHAN_GRACE")
	positive(c.Scheduler.TaskTimeout, "task-timeout", "TASK_TIMEOUT")
	positive(c.ShutdownTimeout, "shutdown-timeout", "SHUTDOWN_TIMEOUT")
	positive(c.TaskRetention.Age, "task-retention-age", "TASK_RETENTION_AGE")
	positive(c.CompactionSweep.Interval, "compaction-interval", "COMPACTION_INTERVAL")
	atLeastOne(c.CompactionSweep.MinFragments, "min-fragments", "MIN_FRAGMENTS")
	if r := c.CompactionSweep.DeletedRatio; r <= 0 || r > 1 {
		errs = append(errs, fmt.Errorf("--compaction-deleted-ratio (COMPACTION_DELETED_RATIO) must be in (0, 1], got %g", r))
	}
	atLeastOne(c.MergeSweep.MinGenerations, "merge-wal-min-generations", "MERGE_WAL_MIN_GENERATIONS")
	atLeastOne(c.Scheduler.TaskConcurrency, "task-concurrency", "TASK_CONCURRENCY")
	atLeastOne(c.TaskRetention.Count, "task-retention-count", "TASK_RETENTION_COUNT")
	if c.LeaseTTL < 2*time.Second {
		errs = append(errs, fmt.Errorf("--lease-ttl (LEASE_TTL) must be at least 2s, got %s", c.LeaseTTL))
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
	discovery, err := f.discovery()
	if err != nil {
		return err
	}
	bucket, err := objstore.Open(ctx, f.dataURL, objstore.WithOpTimeout(f.opTimeout))
	if err != nil {
		return fmt.Errorf("data url (--data-url, DATA_URL): %w", err)
	}
	defer bucket.Close()
	if bucket, err = chaos.WrapBucket(bucket, log); err != nil { // faults only in -tags chaos builds
		return err
	}
	bucket = resendThrottled(bucket, f.opTimeout)
	// etcd is checked before anything listens: a master that cannot reach it fails
	// at startup with the endpoints it tried.
	client, err := etcdcli.New(ctx, f.etcd)
	if err != nil {
		return err
	}
	defer client.Close()
	prefix := f.etcd.NormalizedPrefix()
	caller := fanout.NewGRPCCaller(fanout.GRPCCallerConfig{DialTimeout: f.etcd.DialTimeout,
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
	cfg := f.cfg
	cfg.Client, cfg.Prefix, cfg.Bucket, cfg.Discovery, cfg.Caller = client, prefix, bucket, discovery, caller
	cfg.GRPCListener, cfg.HTTPListener, cfg.Metrics, cfg.Logger = gln, hln, reg, log
	cfg.Auth, cfg.TLS = authn.Guard, authn.TLS
	cfg.WorkerHTTP = workerhttp.Config{Token: authn.Client.Token, TLS: authn.Client.TLS}
	cfg.Dashboard = master.DashboardConfig{Disabled: !f.dashboard}
	m, err := master.New(cfg)
	if err != nil {
		_ = gln.Close()
		_ = hln.Close()
		return err
	}
	source := "etcd"
	if discovery != nil {
		source = "static"
	}
	log.Info("master starting", "version", cli.Version(), "data_url", bucket.String(), "etcd_prefix", prefix,
		"workers", source, "grpc_addr", gln.Addr().String(), "http_addr", hln.Addr().String(),
		"dashboard", f.dashboardURL(hln.Addr(), authn.TLS != nil))
	return m.Run(ctx)
}

// discovery is the static worker list of --worker-endpoints, or nil for the
// workers registered in etcd.
func (f serveFlags) discovery() (fanout.Discovery, error) {
	if f.workerEndpoints == "" {
		return nil, nil
	}
	static, err := fanout.ParseEndpoints(f.workerEndpoints)
	if err != nil {
		return nil, fmt.Errorf("--worker-endpoints (WORKER_ENDPOINTS): %w", err)
	}
	if len(static) == 0 {
		return nil, fmt.Errorf("--worker-endpoints (WORKER_ENDPOINTS) %q names no worker", f.workerEndpoints)
	}
	return static, nil
}

// dashboardURL is where the dashboard is served on addr, or "off".
func (f serveFlags) dashboardURL(addr net.Addr, secure bool) string {
	if !f.dashboard {
		return "off"
	}
	scheme := "http"
	if secure {
		scheme = "https"
	}
	return scheme + "://" + addr.String() + dashboard.Root
}

// resendThrottled makes b resend the requests the store throttles, with the
// stores' policy (objstore.ThrottleBackoff within half of OBJECT_STORE_TIMEOUT,
// as a worker does), so the master's registry reads and scans ride out
// throttling as a worker's reads do instead of failing a scan or an admin call
// at the first 503.
func resendThrottled(b *objstore.Bucket, opTimeout time.Duration) *objstore.Bucket {
	return objstore.WithRetry(b, objstore.ThrottleBackoff, clock.RealClock{}, opTimeout/2)
}
