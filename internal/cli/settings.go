package cli

import (
	"fmt"
	"maps"
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
	"ADMIN_OUTPUT", "ADMIN_TIMEOUT", "ADVERTISE_GRPC_ADDR", "ADVERTISE_HTTP_ADDR",
	"AUTH_DATA_ROUTES",
	"AUTH_DISABLED", "AUTH_TOKEN", "AUTH_TOKEN_FILE", "CACHE_BYTES",
	"COMPACTION_DELETED_RATIO", "COMPACTION_INTERVAL",
	"DASHBOARD", "DATA_URL", "DEV_DIR", "DEV_ECHO_LEVEL",
	"DEV_ETCD_ADDR", "DEV_ETCD_UNSAFE_NO_FSYNC", "DEV_MASTER", "DEV_MASTER_BINARY",
	"DEV_MASTER_GRPC_ADDR", "DEV_MASTER_HTTP_ADDR", "DEV_SHUTDOWN_TIMEOUT", "DEV_START_TIMEOUT",
	"DEV_WORKERS", "DEV_WORKER_BINARY", "DEV_WORKER_GRPC_PORT", "DEV_WORKER_HTTP_PORT",
	"ETCD_CA_CERT", "ETCD_CLIENT_CERT", "ETCD_CLIENT_KEY", "ETCD_DIAL_TIMEOUT", "ETCD_ENDPOINTS",
	"ETCD_PASSWORD", "ETCD_PREFIX", "ETCD_USERNAME", "FEED_HORIZON_INTERVAL", "FLUSH_INTERVAL", "GC_SAFETY_WINDOW",
	"GRPC_ADDR", "HTTP_ADDR", "INSTANCE_ID", "LEASE_TTL", "LOAD_BATCH",
	"LOAD_CONCURRENCY", "LOAD_DURATION", "LOAD_FLUSH", "LOAD_GENERIC_STORE", "LOAD_RATE",
	"LOAD_ROLLOUT_STORE", "LOAD_ROWS", "LOAD_RUN_ID", "LOAD_WORKERS", "LOG_LEVEL", "MASTER_ADDR",
	"MASTER_ID", "MAX_BODY_BYTES", "MAX_OPEN_STORES",
	"MERGE_CONCURRENCY", "MERGE_FANOUT", "MERGE_MAX_BYTES", "MERGE_MAX_DELAY", "MERGE_MAX_GENERATIONS",
	"MERGE_MEMORY_BUDGET",
	"MERGE_WAL_INTERVAL", "MERGE_WAL_MIN_GENERATIONS",
	"MIN_FRAGMENTS", "OBJECT_STORE_TIMEOUT",
	"ORPHAN_GRACE",
	"ROLLOUT_MAX_INFLIGHT_BLOB_BYTES", "SEAL_AFTER_BYTES", "SHUTDOWN_TIMEOUT", "SNAPSHOT_TTL",
	"STATS_SCAN_INTERVAL", "TAIL_CONSUMER", "TAIL_CURSOR",
	"TAIL_FOLLOW", "TAIL_LIMIT", "TAIL_URL", "TAIL_WAIT", "TARGET_ROWS_PER_FRAGMENT",
	"TASK_CONCURRENCY", "TASK_RETENTION_AGE", "TASK_RETENTION_COUNT",
	"TASK_TIMEOUT", "TLS_CA", "TLS_CERT", "TLS_CLIENT_CA", "TLS_KEY", "VERSION_RETENTION_AGE",
	"VERSION_RETENTION_COUNT", "WAL_PENDING_MAX_GENERATIONS",
	"WAL_PENDING_WARN_GENERATIONS", "WORKER_ENDPOINTS",
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

// RetireFlag keeps the flag of a removed setting parseable and ignored, so that a
// command line written for an earlier Tidemark still starts: pflag prints that it
// is ignored and why (its variable is warned about through retiredSettings).
func RetireFlag(fs *pflag.FlagSet, name, why string) {
	fs.String(name, "", "")
	_ = fs.MarkDeprecated(name, "ignored: "+why)
}

// RenameFlag makes old a second, deprecated name of the flag now called name,
// sharing its value: pflag prints the name to use instead.
func RenameFlag(fs *pflag.FlagSet, old, name string) {
	f := fs.Lookup(name)
	if f == nil {
		panic(fmt.Sprintf("cli: rename --%s: no flag --%s", old, name))
	}
	fs.Var(f.Value, old, "")
	_ = fs.MarkDeprecated(old, "use --"+name)
}

// ServeSettings returns the distinct environment variables bound to the flags of
// the given commands that an operator sees (hidden and deprecated flags are no
// settings): a flag and its variable are one setting, and a name that several
// commands share counts once.
func ServeSettings(cmds ...*cobra.Command) []string {
	seen := map[string]bool{}
	for _, c := range cmds {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Hidden || f.Deprecated != "" || f.Name == "help" {
				return
			}
			name := FlagEnv(f)
			if name == "" {
				name = "--" + f.Name
			}
			seen[name] = true
		})
	}
	return slices.Sorted(maps.Keys(seen))
}
