package cli

import (
	"slices"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// tidemarkSettings are the environment variables of every Tidemark binary's
// settings. A binary sees only its own flags, but deployments share one
// environment between worker and master (the Kubernetes base's ConfigMap), so a
// variable of the other binary must not be warned about as unknown. Each
// binary's test holds its flags to this list (UnlistedEnv).
var tidemarkSettings = []string{
	"ADD_BACKPRESSURE_MAX_DELAY", "ADMIN_OUTPUT", "ADMIN_TIMEOUT", "ADVERTISE_GRPC_ADDR", "ADVERTISE_HTTP_ADDR",
	"AUTH_DATA_ROUTES",
	"AUTH_DISABLED", "AUTH_TOKEN", "AUTH_TOKEN_FILE", "CLEANUP_EVERY_VERSIONS", "CLEANUP_INTERVAL",
	"COMPACTION_DELETED_RATIO", "COMPACTION_INTERVAL", "COMPACTION_MAX_ENQUEUES",
	"COMPACTION_MAX_SOURCE_FRAGMENTS", "DASHBOARD", "DATA_URL", "DEV_DIR", "DEV_ECHO_LEVEL",
	"DEV_ETCD_ADDR", "DEV_ETCD_UNSAFE_NO_FSYNC", "DEV_MASTER", "DEV_MASTER_BINARY",
	"DEV_MASTER_GRPC_ADDR", "DEV_MASTER_HTTP_ADDR", "DEV_SHUTDOWN_TIMEOUT", "DEV_START_TIMEOUT",
	"DEV_WORKERS", "DEV_WORKER_BINARY", "DEV_WORKER_GRPC_PORT", "DEV_WORKER_HTTP_PORT",
	"ETCD_CA_CERT", "ETCD_CLIENT_CERT", "ETCD_CLIENT_KEY", "ETCD_DIAL_TIMEOUT", "ETCD_ENDPOINTS",
	"ETCD_PASSWORD", "ETCD_PREFIX", "ETCD_USERNAME", "FEED_HORIZON_INTERVAL", "FEED_MAX_WAIT", "FLUSH_INTERVAL", "GC_SAFETY_WINDOW",
	"GENERATION_CACHE_BYTES", "GRPC_ADDR", "HTTP_ADDR", "INSTANCE_ID", "LOAD_BATCH",
	"LOAD_CONCURRENCY", "LOAD_DURATION", "LOAD_FLUSH", "LOAD_GENERIC_STORE", "LOAD_RATE",
	"LOAD_ROLLOUT_STORE", "LOAD_ROWS", "LOAD_RUN_ID", "LOAD_WORKERS", "LOG_LEVEL", "MASTER_ADDR",
	"MASTER_ID", "MASTER_LEASE_TTL", "MAX_BODY_BYTES", "MAX_OPEN_STORES", "MERGE_AFTER_GENERATIONS",
	"MERGE_CONCURRENCY", "MERGE_FANOUT", "MERGE_MAX_BYTES", "MERGE_MAX_DELAY", "MERGE_MAX_GENERATIONS",
	"MERGE_MEMORY_BUDGET", "MERGE_PREPARED_TTL", "MERGE_WAL_CONCURRENCY",
	"MERGE_WAL_INTERVAL", "MERGE_WAL_MIN_GENERATIONS",
	"MERGE_WAL_WORKER_TIMEOUT", "MIN_FRAGMENTS", "OBJECT_STORE_THROTTLE_RETRY", "OBJECT_STORE_TIMEOUT",
	"ORPHAN_GRACE",
	"ROLLOUT_LARGE_BLOB_LOG_BYTES", "ROLLOUT_MAX_INFLIGHT_BLOB_BYTES", "SEAL_AFTER_BYTES", "SHUTDOWN_TIMEOUT", "SNAPSHOT_TTL",
	"STATS_SCAN_INTERVAL", "SWEEP_STEP_TIMEOUT", "TABLE_CACHE_BYTES", "TAIL_CONSUMER", "TAIL_CURSOR",
	"TAIL_FOLLOW", "TAIL_LIMIT", "TAIL_URL", "TAIL_WAIT", "TARGET_ROWS_PER_FRAGMENT",
	"TASK_CONCURRENCY", "TASK_PRUNE_INTERVAL", "TASK_RETENTION_AGE", "TASK_RETENTION_COUNT",
	"TASK_TIMEOUT", "TLS_CA", "TLS_CERT", "TLS_CLIENT_CA", "TLS_KEY", "VERSION_RETENTION_AGE",
	"VERSION_RETENTION_COUNT", "WAL_MANIFEST_RETENTION_COUNT", "WAL_PENDING_MAX_GENERATIONS",
	"WAL_PENDING_WARN_GENERATIONS", "WORKER_DIAL_TIMEOUT", "WORKER_ENDPOINTS", "WORKER_LEASE_TTL",
	// Read outside the flags: the chaos build's faults file, the Azurite address of tests.
	"TIDEMARK_CHAOS_FAULTS_FILE", "TIDEMARK_AZURITE_ADDR",
}

// UnlistedEnv returns the environment variables bound to the flags of cmd and its
// subcommands that tidemarkSettings lacks; each binary's test calls it, so the
// list cannot fall behind the flags.
func UnlistedEnv(cmd *cobra.Command) []string {
	var missing []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			for _, env := range f.Annotations[envAnnotation] {
				if !slices.Contains(tidemarkSettings, env) {
					missing = append(missing, env+" (--"+f.Name+" of "+c.CommandPath()+")")
				}
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(cmd)
	return missing
}
