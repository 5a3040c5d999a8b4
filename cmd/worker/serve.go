package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/internal/cli"
	"github.com/tidemark-io/tidemark/internal/refmetrics"
	"github.com/tidemark-io/tidemark/pkg/coord/etcdcli"
	"github.com/tidemark-io/tidemark/pkg/coord/membership"
	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/table"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/worker"
	"github.com/tidemark-io/tidemark/pkg/worker/feed"
	"github.com/tidemark-io/tidemark/pkg/worker/httpapi"
	"github.com/tidemark-io/tidemark/pkg/worker/maintain"
	"github.com/tidemark-io/tidemark/pkg/worker/store"
	"github.com/tidemark-io/tidemark/pkg/worker/sweep"
	"github.com/tidemark-io/tidemark/tools/chaos"
)

type serveFlags struct {
	dataURL    string
	httpAddr   string
	instanceID string
	logLevel   string
	shutdown   time.Duration

	grpcAddr                     string
	advertiseGRPC, advertiseHTTP string
	etcd                         etcdcli.Config
	horizonInterval              time.Duration
	leaseTTL                     time.Duration

	flushInterval, cleanupInterval, stepTimeout time.Duration
	mergeAfterGenerations                       int
	mergeMaxGenerations, mergeConcurrency       int
	mergeMaxBytes, mergeBudget                  int64
	pendingWarn, pendingMax                     int
	addMaxDelay                                 time.Duration
	maxOpenStores                               int
	generationCache, tableCache, maxBodyBytes   int64
	maxInflightBlobBytes                        int64
	largeBlobLogBytes                           int64
	sealAfterBytes                              int64
	opTimeout, snapshotTTL                      time.Duration
	throttleRetry                               time.Duration
	preparedTTL                                 time.Duration
	feedMaxWait                                 time.Duration

	targetRows                    int64
	compactMaxSources             int
	compactDeletedRatio           float64
	versionRetention, walManifest int
	versionAge, gcWindow          time.Duration

	auth           auth.Flags
	authDataRoutes bool
}

func newServeCmd() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the worker's HTTP API and gRPC WorkerService until SIGINT or SIGTERM",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(cmd, f)
		},
	}
	fs := cmd.Flags()
	bind := func(name, env string) { cli.BindEnv(fs, name, env) }
	fs.StringVar(&f.dataURL, "data-url", "file://./data", "object storage URL of every store (file://, mem://, s3://, azblob://, gs://; ?prefix= optional)")
	bind("data-url", "DATA_URL")
	fs.StringVar(&f.httpAddr, "http-addr", "127.0.0.1:8080", "address the HTTP API and /metrics listen on")
	bind("http-addr", "HTTP_ADDR")
	fs.StringVar(&f.grpcAddr, "grpc-addr", "127.0.0.1:9090", "address the gRPC WorkerService (with health and reflection) listens on")
	bind("grpc-addr", "GRPC_ADDR")
	fs.StringVar(&f.advertiseGRPC, "advertise-grpc-addr", "", "gRPC address registered in etcd for the master to call (default: the gRPC listener's address, the hostname for an any-address)")
	bind("advertise-grpc-addr", "ADVERTISE_GRPC_ADDR")
	fs.StringVar(&f.advertiseHTTP, "advertise-http-addr", "", "HTTP address registered in etcd (default: the HTTP listener's address, the hostname for an any-address)")
	bind("advertise-http-addr", "ADVERTISE_HTTP_ADDR")
	f.etcd.AddFlags(fs, "empty: the worker does not register (the master then needs WORKER_ENDPOINTS)")
	fs.DurationVar(&f.leaseTTL, "worker-lease-ttl", membership.DefaultLeaseTTL, "TTL of the lease the worker's etcd registration lives under: how long a dead worker stays listed")
	bind("worker-lease-ttl", "WORKER_LEASE_TTL")
	fs.DurationVar(&f.horizonInterval, "feed-horizon-interval", worker.DefaultHorizonInterval,
		"how often the worker publishes its shards' change-feed promises to etcd when nothing seals: how long an idle shard may hold a store's change feed back (one etcd transaction per interval)")
	bind("feed-horizon-interval", "FEED_HORIZON_INTERVAL")
	fs.StringVar(&f.instanceID, "instance-id", "", "this worker's stable id, and its shard name in every store (default: the hostname)")
	bind("instance-id", "INSTANCE_ID")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	bind("log-level", "LOG_LEVEL")
	fs.DurationVar(&f.shutdown, "shutdown-timeout", worker.DefaultShutdownTimeout, "how long shutdown waits for in-flight requests (the final seal has its own budget of the same length)")
	bind("shutdown-timeout", "SHUTDOWN_TIMEOUT")
	fs.DurationVar(&f.flushInterval, "flush-interval", sweep.DefaultFlushInterval, "period of the flush sweeper: seal every resident store, then the count trigger")
	bind("flush-interval", "FLUSH_INTERVAL")
	fs.DurationVar(&f.cleanupInterval, "cleanup-interval", 5*time.Minute, "period of the cleanup sweeper: seal and merge everything pending in this worker's shards (its deletes of drained WAL files do not wait for it: a drain wakes them)")
	bind("cleanup-interval", "CLEANUP_INTERVAL")
	fs.DurationVar(&f.stepTimeout, "sweep-step-timeout", sweep.DefaultStepTimeout, "bound on one store's step of a sweep")
	bind("sweep-step-timeout", "SWEEP_STEP_TIMEOUT")
	fs.IntVar(&f.mergeAfterGenerations, "merge-after-generations", 0, "count trigger: merge a store once this worker's shard has this many pending generations; 0 disables it")
	bind("merge-after-generations", "MERGE_AFTER_GENERATIONS")
	fs.IntVar(&f.mergeMaxGenerations, "merge-max-generations", merge.DefaultMaxGenerations, "generations one merge pass reads at most; 0 means all")
	bind("merge-max-generations", "MERGE_MAX_GENERATIONS")
	fs.Int64Var(&f.mergeMaxBytes, "merge-max-bytes", merge.DefaultMaxBytes, "generation bytes one merge pass reads at most (a generation is never split); 0 means no cap")
	bind("merge-max-bytes", "MERGE_MAX_BYTES")
	fs.DurationVar(&f.preparedTTL, "merge-prepared-ttl", 5*time.Minute, // unused since the two-phase fan-out went (issue 43); the settings change drops the flag
		"how long a merge prepared for the master's two-phase fan-out waits for its commit before it is aborted (it holds a merge slot and its memory charge)")
	bind("merge-prepared-ttl", "MERGE_PREPARED_TTL")
	fs.IntVar(&f.mergeConcurrency, "merge-concurrency", 4, "merge slots: merges running at once on this worker")
	bind("merge-concurrency", "MERGE_CONCURRENCY")
	fs.Int64Var(&f.mergeBudget, "merge-memory-budget", 2<<30, "bytes of prepared merge data held at once by this worker")
	bind("merge-memory-budget", "MERGE_MEMORY_BUDGET")
	fs.IntVar(&f.pendingWarn, "wal-pending-warn-generations", 256, "log reads that fan out over more pending generations than this; adds to a store with at least this many wait (--add-backpressure-max-delay)")
	bind("wal-pending-warn-generations", "WAL_PENDING_WARN_GENERATIONS")
	fs.IntVar(&f.pendingMax, "wal-pending-max-generations", 4096, "refuse reads (503) over more pending generations than this, and adds (503) at this many")
	bind("wal-pending-max-generations", "WAL_PENDING_MAX_GENERATIONS")
	fs.DurationVar(&f.addMaxDelay, "add-backpressure-max-delay", store.DefaultMaxAddDelay, "longest wait of an add to a store behind on its merges: from 0 at --wal-pending-warn-generations pending to this just under --wal-pending-max-generations; 0 disables the wait (adds are still refused at the max)")
	bind("add-backpressure-max-delay", "ADD_BACKPRESSURE_MAX_DELAY")
	fs.IntVar(&f.maxOpenStores, "max-open-stores", 1024, "store handles kept open; the least recently used are sealed and closed")
	bind("max-open-stores", "MAX_OPEN_STORES")
	fs.Int64Var(&f.generationCache, "generation-cache-bytes", 256<<20, "budget of the decoded-generation cache for reads")
	bind("generation-cache-bytes", "GENERATION_CACHE_BYTES")
	fs.Int64Var(&f.sealAfterBytes, "seal-after-bytes", 64<<20, "seal a store's memtable as soon as it holds this many bytes (bounds memory between flush sweeps)")
	bind("seal-after-bytes", "SEAL_AFTER_BYTES")
	fs.Int64Var(&f.tableCache, "table-cache-bytes", 64<<20, "per-store budget of decoded base-table objects (key indexes, blooms, deletion vectors, footers)")
	bind("table-cache-bytes", "TABLE_CACHE_BYTES")
	fs.DurationVar(&f.feedMaxWait, "feed-max-wait", feed.DefaultMaxWait, "longest a change-feed long poll (GET .../changes?wait=) waits for rows; a longer wait asked for is cut to this")
	bind("feed-max-wait", "FEED_MAX_WAIT")
	fs.DurationVar(&f.snapshotTTL, "snapshot-ttl", time.Second, "how stale a read's view of other workers' seals and merges may be before it refreshes (more object-store requests when shorter)")
	bind("snapshot-ttl", "SNAPSHOT_TTL")
	fs.Int64Var(&f.maxBodyBytes, "max-body-bytes", httpapi.DefaultMaxBodyBytes, "largest request body accepted (413 above)")
	bind("max-body-bytes", "MAX_BODY_BYTES")
	fs.Int64Var(&f.maxInflightBlobBytes, "rollout-max-inflight-blob-bytes", httpapi.DefaultMaxInflightBlobBytes,
		"bytes that adds and blob downloads may hold in memory at once (503 above; a lone larger request is admitted); 0 disables the budget")
	bind("rollout-max-inflight-blob-bytes", "ROLLOUT_MAX_INFLIGHT_BLOB_BYTES")
	fs.Int64Var(&f.largeBlobLogBytes, "rollout-large-blob-log-bytes", httpapi.DefaultLargeBlobLogBytes,
		"an added rollout blob of at least this many bytes is logged at warn level with its store and record id; 0 disables the log")
	bind("rollout-large-blob-log-bytes", "ROLLOUT_LARGE_BLOB_LOG_BYTES")
	fs.DurationVar(&f.opTimeout, "object-store-timeout", objstore.DefaultOpTimeout, "bound on every object-store request")
	bind("object-store-timeout", "OBJECT_STORE_TIMEOUT")
	fs.DurationVar(&f.throttleRetry, "object-store-throttle-retry", objstore.DefaultThrottleRetry, "how long a request the object store throttles (S3 503 SlowDown, GCS 429, Azure ServerBusy) is sent again before it fails and the client is answered 503 OVERLOADED")
	bind("object-store-throttle-retry", "OBJECT_STORE_THROTTLE_RETRY")
	fs.Int64Var(&f.targetRows, "target-rows-per-fragment", 65536, "compaction writes fragments of at most this many rows, and rewrites fragments with fewer than half as many live rows")
	bind("target-rows-per-fragment", "TARGET_ROWS_PER_FRAGMENT")
	fs.IntVar(&f.compactMaxSources, "compaction-max-source-fragments", 64, "fragments one compaction rewrites at most")
	bind("compaction-max-source-fragments", "COMPACTION_MAX_SOURCE_FRAGMENTS")
	fs.Float64Var(&f.compactDeletedRatio, "compaction-deleted-ratio", 0.2, "compaction rewrites a fragment whatever its size when at least this share of its rows is deleted")
	bind("compaction-deleted-ratio", "COMPACTION_DELETED_RATIO")
	fs.IntVar(&f.versionRetention, "version-retention-count", 10, "base table versions kept by cleanup (the newest ones), besides those younger than --version-retention-age")
	bind("version-retention-count", "VERSION_RETENTION_COUNT")
	fs.DurationVar(&f.versionAge, "version-retention-age", time.Hour, "base table versions younger than this are kept by cleanup: a reader holding one keeps reading for this long")
	bind("version-retention-age", "VERSION_RETENTION_AGE")
	fs.DurationVar(&f.gcWindow, "gc-safety-window", time.Hour, "cleanup never deletes an object younger than this (longer than any transaction: a file staged before a cleanup and committed after it stays)")
	bind("gc-safety-window", "GC_SAFETY_WINDOW")
	fs.IntVar(&f.walManifest, "wal-manifest-retention-count", 10, "WAL shard manifest versions kept by cleanup (the newest ones), besides those younger than --gc-safety-window")
	bind("wal-manifest-retention-count", "WAL_MANIFEST_RETENTION_COUNT")
	f.auth.AddServerFlags(fs)
	fs.BoolVar(&f.authDataRoutes, "auth-data-routes", false, "the data routes (stores, rows, flush) need the credential too; the WorkerService, merge-wal, compact and internal routes always do")
	bind("auth-data-routes", "AUTH_DATA_ROUTES")
	return cmd
}

// checkMaintenance refuses compaction and retention settings that a default would
// silently replace or that would make cleanup unsafe, naming the flag and its
// variable.
func (f serveFlags) checkMaintenance() error {
	var errs []error
	if f.targetRows < 1 {
		errs = append(errs, fmt.Errorf("--target-rows-per-fragment (TARGET_ROWS_PER_FRAGMENT) must be at least 1, got %d", f.targetRows))
	}
	if f.compactMaxSources < 2 {
		errs = append(errs, fmt.Errorf("--compaction-max-source-fragments (COMPACTION_MAX_SOURCE_FRAGMENTS) must be at least 2, got %d", f.compactMaxSources))
	}
	if f.compactDeletedRatio <= 0 || f.compactDeletedRatio > 1 {
		errs = append(errs, fmt.Errorf("--compaction-deleted-ratio (COMPACTION_DELETED_RATIO) must be in (0, 1], got %g", f.compactDeletedRatio))
	}
	if f.versionRetention < 1 {
		errs = append(errs, fmt.Errorf("--version-retention-count (VERSION_RETENTION_COUNT) must be at least 1, got %d", f.versionRetention))
	}
	if f.walManifest < 2 {
		errs = append(errs, fmt.Errorf("--wal-manifest-retention-count (WAL_MANIFEST_RETENTION_COUNT) must be at least 2, got %d", f.walManifest))
	}
	if f.versionAge <= 0 {
		errs = append(errs, fmt.Errorf("--version-retention-age (VERSION_RETENTION_AGE) must be positive, got %s", f.versionAge))
	}
	if f.gcWindow <= 0 {
		errs = append(errs, fmt.Errorf("--gc-safety-window (GC_SAFETY_WINDOW) must be positive, got %s", f.gcWindow))
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
	instanceID := f.instanceID
	if instanceID == "" {
		if instanceID, err = os.Hostname(); err != nil {
			return fmt.Errorf("instance id: none given (--instance-id, INSTANCE_ID) and no hostname: %w", err)
		}
	}
	if err := wal.ValidateShard(instanceID); err != nil {
		return fmt.Errorf("instance id (--instance-id, INSTANCE_ID): %w", err)
	}
	if f.mergeAfterGenerations < 0 || f.mergeMaxGenerations < 0 || f.mergeMaxBytes < 0 || f.preparedTTL <= 0 {
		if f.preparedTTL <= 0 {
			return fmt.Errorf("--merge-prepared-ttl (MERGE_PREPARED_TTL) %s: must be > 0", f.preparedTTL)
		}
		return fmt.Errorf("merge settings must not be negative (0 disables or uncaps)")
	}
	if f.maxInflightBlobBytes < 0 {
		return fmt.Errorf("--rollout-max-inflight-blob-bytes (ROLLOUT_MAX_INFLIGHT_BLOB_BYTES) %d: must not be negative (0 disables the budget)", f.maxInflightBlobBytes)
	}
	if f.largeBlobLogBytes < 0 {
		return fmt.Errorf("--rollout-large-blob-log-bytes (ROLLOUT_LARGE_BLOB_LOG_BYTES) %d: must not be negative (0 disables the log)", f.largeBlobLogBytes)
	}
	if err := f.checkMaintenance(); err != nil {
		return err
	}
	reg := refmetrics.NewProcessRegistry()
	// Credentials are checked before anything is opened: a worker that would
	// serve its control surface to anyone refuses to start.
	authn, err := f.auth.Server(log, reg)
	if err != nil {
		return err
	}
	if f.authDataRoutes && authn.Guard == nil {
		return fmt.Errorf("--auth-data-routes (AUTH_DATA_ROUTES) with authentication disabled: configure a token or a client CA")
	}
	bucket, err := objstore.Open(ctx, f.dataURL, objstore.WithOpTimeout(f.opTimeout))
	if err != nil {
		return fmt.Errorf("data url (--data-url, DATA_URL): %w", err)
	}
	defer bucket.Close()
	// Before anything is written: a bucket without conditional writes would let
	// two commits of one version both win, and corrupt a table long after.
	if err := objstore.CheckConditionalWrites(ctx, objstore.WithRetry(bucket, objstore.ThrottleBackoff, clock.RealClock{}, f.throttleRetry)); err != nil {
		return fmt.Errorf("data url (--data-url, DATA_URL): %w", err)
	}
	if bucket, err = chaos.WrapBucket(bucket, log); err != nil { // faults only in -tags chaos builds
		return err
	}

	seqClock, err := chaos.Clock(log) // skewed only in -tags chaos builds
	if err != nil {
		return err
	}

	// etcd is checked before anything is served: a worker that cannot register
	// should fail at startup with the endpoints it tried, not run unseen.
	var client *clientv3.Client
	if f.etcd.Enabled() {
		if client, err = etcdcli.New(ctx, f.etcd); err != nil {
			return err
		}
		defer client.Close()
	}
	ln, err := net.Listen("tcp", f.httpAddr)
	if err != nil {
		return fmt.Errorf("http addr (--http-addr, HTTP_ADDR): %w", err)
	}
	defer ln.Close()
	gln, err := net.Listen("tcp", f.grpcAddr)
	if err != nil {
		return fmt.Errorf("grpc addr (--grpc-addr, GRPC_ADDR): %w", err)
	}
	defer gln.Close()
	w, err := worker.New(worker.Config{
		InstanceID:      instanceID,
		Version:         cli.Version(),
		HTTPListener:    ln,
		GRPCListener:    gln,
		AdvertiseHTTP:   f.advertiseHTTP,
		AdvertiseGRPC:   f.advertiseGRPC,
		Etcd:            client,
		Prefix:          f.etcd.NormalizedPrefix(),
		LeaseTTL:        f.leaseTTL,
		HorizonInterval: f.horizonInterval,
		Store: store.Config{
			Bucket:            bucket,
			ThrottleRetry:     f.throttleRetry,
			Generations:       wal.NewGenerationCache(f.generationCache),
			SealAfterBytes:    f.sealAfterBytes,
			SnapshotTTL:       f.snapshotTTL,
			WarnGenerations:   f.pendingWarn,
			RefuseGenerations: f.pendingMax,
			MaxAddDelay:       zeroDisables(f.addMaxDelay),
			TableOptions:      []table.Option{table.WithLogger(log), table.WithCacheBytes(f.tableCache)},
			WALOptions:        []wal.Option{wal.WithLogger(log), wal.WithClock(seqClock)},
		},
		MaxOpenStores: f.maxOpenStores,
		Merge: merge.Config{
			MaxGenerations: f.mergeMaxGenerations,
			MaxBytes:       f.mergeMaxBytes,
			Concurrency:    f.mergeConcurrency,
			BudgetBytes:    f.mergeBudget,
		},
		Sweep: sweep.Config{
			FlushInterval: f.flushInterval,
			StepTimeout:   f.stepTimeout,
		},
		Maintain: maintain.Config{
			Compact:   table.CompactOptions{TargetRows: f.targetRows, MaxSources: f.compactMaxSources, DeletedRatio: f.compactDeletedRatio},
			Retention: table.Retention{KeepVersions: f.versionRetention, KeepAge: f.versionAge, SafetyWindow: f.gcWindow},
			WAL:       wal.Retention{KeepManifests: f.walManifest, SafetyWindow: f.gcWindow},
		},
		FeedMaxWait:  f.feedMaxWait,
		MaxBodyBytes: f.maxBodyBytes,
		// The flags' 0 (no budget, no log) is a negative here.
		MaxInflightBlobBytes: zeroDisables(f.maxInflightBlobBytes),
		LargeBlobLogBytes:    zeroDisables(f.largeBlobLogBytes),
		Auth:                 authn.Guard,
		AuthDataRoutes:       f.authDataRoutes,
		TLS:                  authn.TLS,
		ShutdownTimeout:      f.shutdown,
		Metrics:              reg,
		Logger:               log,
	})
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// zeroDisables maps a flag whose 0 disables what it sets (the reference's
// meaning of ROLLOUT_MAX_INFLIGHT_BLOB_BYTES=0 and ROLLOUT_LARGE_BLOB_LOG_BYTES=0,
// and ADD_BACKPRESSURE_MAX_DELAY=0) to worker.Config's terms (zero is the default
// there, negative disables).
func zeroDisables[T int64 | time.Duration](flag T) T {
	if flag == 0 {
		return -1
	}
	return flag
}
