package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/worker"
	"github.com/tidemark-io/tidemark/pkg/worker/httpapi"
	"github.com/tidemark-io/tidemark/pkg/worker/maintain"
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

	flushInterval                         time.Duration
	mergeMaxGenerations, mergeConcurrency int
	mergeMaxBytes, mergeBudget            int64
	pendingWarn, pendingMax               int
	maxOpenStores                         int
	cacheBytes, maxBodyBytes              int64
	maxInflightBlobBytes                  int64
	sealAfterBytes                        int64
	opTimeout, snapshotTTL                time.Duration

	targetRows           int64
	versionRetention     int
	versionAge, gcWindow time.Duration

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
	fs.DurationVar(&f.leaseTTL, "lease-ttl", membership.DefaultLeaseTTL, "TTL of the lease the worker's etcd registration lives under: how long a dead worker stays listed")
	bind("lease-ttl", "LEASE_TTL")
	cli.RenameFlag(fs, "worker-lease-ttl", "lease-ttl")
	fs.DurationVar(&f.horizonInterval, "feed-horizon-interval", worker.DefaultHorizonInterval,
		"how often the worker publishes its shards' change-feed promises to etcd when nothing seals: how long an idle shard may hold a store's change feed back (one etcd transaction per interval)")
	bind("feed-horizon-interval", "FEED_HORIZON_INTERVAL")
	fs.StringVar(&f.instanceID, "instance-id", "", "this worker's stable id, and its shard name in every store (default: the hostname)")
	bind("instance-id", "INSTANCE_ID")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	bind("log-level", "LOG_LEVEL")
	fs.DurationVar(&f.shutdown, "shutdown-timeout", worker.DefaultShutdownTimeout, "how long shutdown waits for in-flight requests (the final seal has its own budget of the same length)")
	bind("shutdown-timeout", "SHUTDOWN_TIMEOUT")
	fs.DurationVar(&f.flushInterval, "flush-interval", sweep.DefaultFlushInterval, "period of the flush sweeper: seal every resident store; a worker without etcd (no master) also merges its shard of each then")
	bind("flush-interval", "FLUSH_INTERVAL")
	fs.IntVar(&f.mergeMaxGenerations, "merge-max-generations", merge.DefaultMaxGenerations, "generations one merge pass reads at most; 0 means all")
	bind("merge-max-generations", "MERGE_MAX_GENERATIONS")
	fs.Int64Var(&f.mergeMaxBytes, "merge-max-bytes", merge.DefaultMaxBytes, "generation bytes one merge pass reads at most (a generation is never split); 0 means no cap")
	bind("merge-max-bytes", "MERGE_MAX_BYTES")
	fs.IntVar(&f.mergeConcurrency, "merge-concurrency", 4, "merge slots: merges running at once on this worker")
	bind("merge-concurrency", "MERGE_CONCURRENCY")
	fs.Int64Var(&f.mergeBudget, "merge-memory-budget", 2<<30, "bytes of prepared merge data held at once by this worker")
	bind("merge-memory-budget", "MERGE_MEMORY_BUDGET")
	fs.IntVar(&f.pendingWarn, "wal-pending-warn-generations", 256, "pending generations at which a store counts as behind on its merges (the reference's warn threshold): a read over more is logged, and an add to it waits, from 0 here to 2 s just under --wal-pending-max-generations")
	bind("wal-pending-warn-generations", "WAL_PENDING_WARN_GENERATIONS")
	fs.IntVar(&f.pendingMax, "wal-pending-max-generations", 4096, "refuse reads (503) over more pending generations than this, and adds (503) at this many")
	bind("wal-pending-max-generations", "WAL_PENDING_MAX_GENERATIONS")
	fs.IntVar(&f.maxOpenStores, "max-open-stores", 1024, "store handles kept open; the least recently used are sealed and closed")
	bind("max-open-stores", "MAX_OPEN_STORES")
	fs.Int64Var(&f.cacheBytes, "cache-bytes", 256<<20, "budget of the read caches: the decoded-generation cache shared by every store has all of it, each open store's cache of decoded base-table objects (key indexes, blooms, deletion vectors, footers) a quarter of it")
	bind("cache-bytes", "CACHE_BYTES")
	fs.Int64Var(&f.sealAfterBytes, "seal-after-bytes", 64<<20, "seal a store's memtable as soon as it holds this many bytes (bounds memory between flush sweeps)")
	bind("seal-after-bytes", "SEAL_AFTER_BYTES")
	fs.DurationVar(&f.snapshotTTL, "snapshot-ttl", time.Second, "how stale a read's view of other workers' seals and merges may be before it refreshes (more object-store requests when shorter)")
	bind("snapshot-ttl", "SNAPSHOT_TTL")
	fs.Int64Var(&f.maxBodyBytes, "max-body-bytes", httpapi.DefaultMaxBodyBytes, "largest request body accepted (413 above)")
	bind("max-body-bytes", "MAX_BODY_BYTES")
	fs.Int64Var(&f.maxInflightBlobBytes, "rollout-max-inflight-blob-bytes", httpapi.DefaultMaxInflightBlobBytes,
		"bytes that adds and blob downloads may hold in memory at once (503 above; a lone larger request is admitted); 0 disables the budget")
	bind("rollout-max-inflight-blob-bytes", "ROLLOUT_MAX_INFLIGHT_BLOB_BYTES")
	fs.DurationVar(&f.opTimeout, "object-store-timeout", objstore.DefaultOpTimeout, "bound on every object-store request; a request the store throttles (S3 503 SlowDown, GCS 429, Azure ServerBusy) is sent again for half of this before it fails and the client is answered 503 OVERLOADED")
	bind("object-store-timeout", "OBJECT_STORE_TIMEOUT")
	fs.Int64Var(&f.targetRows, "target-rows-per-fragment", 65536, "compaction writes fragments of at most this many rows, and rewrites fragments with fewer than half as many live rows")
	bind("target-rows-per-fragment", "TARGET_ROWS_PER_FRAGMENT")
	fs.IntVar(&f.versionRetention, "version-retention-count", 10, "base table versions, and WAL shard manifest versions (at least 2), kept by cleanup (the newest ones), besides those younger than --version-retention-age (manifests: --gc-safety-window)")
	bind("version-retention-count", "VERSION_RETENTION_COUNT")
	fs.DurationVar(&f.versionAge, "version-retention-age", time.Hour, "base table versions younger than this are kept by cleanup: a reader holding one keeps reading for this long")
	bind("version-retention-age", "VERSION_RETENTION_AGE")
	fs.DurationVar(&f.gcWindow, "gc-safety-window", time.Hour, "cleanup never deletes an object younger than this (longer than any transaction: a file staged before a cleanup and committed after it stays)")
	bind("gc-safety-window", "GC_SAFETY_WINDOW")
	retireWorkerFlags(fs)
	f.auth.AddServerFlags(fs)
	fs.BoolVar(&f.authDataRoutes, "auth-data-routes", false, "the data routes (stores, rows, flush) need the credential too; the WorkerService, merge-wal, compact and internal routes always do")
	bind("auth-data-routes", "AUTH_DATA_ROUTES")
	return cmd
}

// retireWorkerFlags keeps the flags of the worker's folded settings (issue 43)
// parseable and ignored; docs/CONFIGURATION.md says what replaced each.
func retireWorkerFlags(fs *pflag.FlagSet) {
	for name, why := range map[string]string{
		"merge-after-generations":         "with etcd the master alone decides merges; without etcd the worker merges every --flush-interval",
		"cleanup-interval":                "with etcd the master alone decides merges; without etcd the worker merges every --flush-interval",
		"merge-prepared-ttl":              "the two-phase fan-out is gone",
		"sweep-step-timeout":              "a sweep's step is bounded at 60s",
		"add-backpressure-max-delay":      "an add waits at most 2s",
		"generation-cache-bytes":          "use --cache-bytes",
		"table-cache-bytes":               "each store's table cache is a quarter of --cache-bytes",
		"feed-max-wait":                   "a long poll waits at most 30s",
		"rollout-large-blob-log-bytes":    "blobs of 16 MiB or more are logged",
		"object-store-throttle-retry":     "throttled requests are sent again for half of --object-store-timeout",
		"compaction-max-source-fragments": "a compaction rewrites at most 64 fragments",
		"compaction-deleted-ratio":        "the master's COMPACTION_DELETED_RATIO decides; a fragment with a fifth of its rows deleted is rewritten",
		"wal-manifest-retention-count":    "--version-retention-count applies to WAL shard manifests too",
	} {
		cli.RetireFlag(fs, name, why)
	}
}

// checkMaintenance refuses compaction and retention settings that a default would
// silently replace or that would make cleanup unsafe, naming the flag and its
// variable.
func (f serveFlags) checkMaintenance() error {
	var errs []error
	if f.targetRows < 1 {
		errs = append(errs, fmt.Errorf("--target-rows-per-fragment (TARGET_ROWS_PER_FRAGMENT) must be at least 1, got %d", f.targetRows))
	}
	if f.versionRetention < 1 {
		errs = append(errs, fmt.Errorf("--version-retention-count (VERSION_RETENTION_COUNT) must be at least 1, got %d", f.versionRetention))
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
	if f.mergeMaxGenerations < 0 || f.mergeMaxBytes < 0 {
		return fmt.Errorf("merge settings must not be negative (0 uncaps)")
	}
	if f.maxInflightBlobBytes < 0 {
		return fmt.Errorf("--rollout-max-inflight-blob-bytes (ROLLOUT_MAX_INFLIGHT_BLOB_BYTES) %d: must not be negative (0 disables the budget)", f.maxInflightBlobBytes)
	}
	if f.cacheBytes < 0 {
		return fmt.Errorf("--cache-bytes (CACHE_BYTES) %d: must not be negative", f.cacheBytes)
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
	if err := objstore.CheckConditionalWrites(ctx, objstore.WithRetry(bucket, objstore.ThrottleBackoff, clock.RealClock{}, throttleRetry(f.opTimeout))); err != nil {
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
			ThrottleRetry:     throttleRetry(f.opTimeout),
			Generations:       wal.NewGenerationCache(f.cacheBytes),
			SealAfterBytes:    f.sealAfterBytes,
			SnapshotTTL:       f.snapshotTTL,
			WarnGenerations:   f.pendingWarn,
			RefuseGenerations: f.pendingMax,
			TableOptions:      []table.Option{table.WithLogger(log), table.WithCacheBytes(f.cacheBytes / 4)},
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
		},
		Maintain: maintain.Config{
			Compact:   table.CompactOptions{TargetRows: f.targetRows},
			Retention: table.Retention{KeepVersions: f.versionRetention, KeepAge: f.versionAge, SafetyWindow: f.gcWindow},
			WAL:       wal.Retention{KeepManifests: max(2, f.versionRetention), SafetyWindow: f.gcWindow},
		},
		MaxBodyBytes: f.maxBodyBytes,
		// The flag's 0 (no budget) is a negative here.
		MaxInflightBlobBytes: zeroDisables(f.maxInflightBlobBytes),
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

// throttleRetry is how long a request the object store throttles is sent again:
// half of OBJECT_STORE_TIMEOUT (objstore.DefaultThrottleRetry at its default), so
// a client waits for a throttled store about as long as for a slow one.
func throttleRetry(opTimeout time.Duration) time.Duration { return opTimeout / 2 }

// zeroDisables maps a flag whose 0 disables what it sets (the reference's
// meaning of ROLLOUT_MAX_INFLIGHT_BLOB_BYTES=0) to worker.Config's terms (zero
// is the default there, negative disables).
func zeroDisables[T int64 | time.Duration](flag T) T {
	if flag == 0 {
		return -1
	}
	return flag
}
