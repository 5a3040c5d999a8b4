package master

import (
	"crypto/tls"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/master/workerhttp"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/scanner"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// Defaults of the master's own settings (LEASE_TTL, SHUTDOWN_TIMEOUT, and
// TaskRetention's TASK_RETENTION_COUNT and TASK_RETENTION_AGE; the prune interval
// is derived from the age, PruneIntervalFor); its parts' are their packages'
// (scanner, fanout) and the scheduler's.
const (
	DefaultLeaseTTL        = 10 * time.Second
	DefaultShutdownTimeout = 30 * time.Second
	DefaultProbeInterval   = 15 * time.Second
	DefaultPruneInterval   = time.Hour
	DefaultRetentionCount  = 10000
	DefaultRetentionAge    = 7 * 24 * time.Hour
)

// Config is what a Master needs. The parts' own configurations are taken whole,
// one field per setting under the name its flag and variable have
// (MERGE_WAL_MIN_GENERATIONS, --merge-wal-min-generations: MergeSweep.MinGenerations);
// a zero setting takes its default. New sets the fields that tie the parts
// together (the logger, the metrics registry, the session lease, the stats rows
// the fan-out reads, the orphan tracker, the hooks), so a caller cannot wire them
// inconsistently.
type Config struct {
	// Client is the etcd client (pkg/coord/etcdcli.New). Required.
	Client *clientv3.Client
	// Prefix is the etcd key prefix P (keys.DefaultPrefix when empty).
	Prefix string
	// Bucket holds the store registries and the stores (DATA_URL). Required.
	Bucket *objstore.Bucket
	// Registry is the store registry in Bucket (registry.New(Bucket) when nil).
	Registry *registry.Registry
	// Discovery lists the workers merge_wal calls (membership.Discovery on Client and
	// Prefix when nil; a fanout.StaticDiscovery for WORKER_ENDPOINTS).
	Discovery fanout.Discovery
	// Caller calls the workers; required unless Runners replaces merge_wal's.
	Caller fanout.Caller
	// Runners add to or replace the built-in runners by kind: merge_wal's
	// fanout.FanOut, and fanout.Maintenance for compact, verify and repair (with a
	// Caller that can call WorkerService.Maintain, as the GRPCCaller can).
	Runners map[tasks.Kind]Runner

	// GRPCListener serves the AdminService (with health and reflection), and
	// HTTPListener the HTTP API and /metrics; either may be nil to not serve it.
	// Run closes them.
	GRPCListener net.Listener
	HTTPListener net.Listener

	// ID names this replica in claim tokens and coordination keys, MASTER_ID
	// (default "<hostname>:<pid>").
	ID string
	// LeaseTTL is the TTL of the master's session lease, LEASE_TTL (whole
	// seconds, at least 2 s; DefaultLeaseTTL): claims, target locks and
	// coordination locks die this long after the master does.
	LeaseTTL time.Duration
	// ShutdownTimeout is how long shutdown lets running tasks finish before
	// releasing them to the queue, and lets the servers finish their requests,
	// SHUTDOWN_TIMEOUT (DefaultShutdownTimeout).
	ShutdownTimeout time.Duration
	// ProbeInterval is how often the master checks etcd (master_etcd_up, gRPC
	// health) and reads the queue depth (DefaultProbeInterval).
	ProbeInterval time.Duration

	// Scan configures the stats scan (STATS_SCAN_INTERVAL: Scan.Interval); New
	// sets its Logger and Registerer.
	Scan scanner.Config
	// MergeSweep configures the merge sweep (MERGE_WAL_INTERVAL,
	// MERGE_WAL_MIN_GENERATIONS); New sets its
	// ScanInterval (Scan's), Rescan, Orphans, Logger and Registerer.
	MergeSweep scanner.MergeSweepConfig
	// MergeDemand configures merges on demand (MERGE_MAX_DELAY:
	// MergeDemand.MaxDelay); New sets its MinGenerations (MergeSweep's),
	// RetryAfterFailure (MergeSweep's interval), Logger and Registerer.
	MergeDemand scanner.DemandConfig
	// CompactionSweep configures the compaction sweep (COMPACTION_INTERVAL,
	// MIN_FRAGMENTS, COMPACTION_DELETED_RATIO; CleanupEveryVersions and
	// MaxEnqueues are no settings, their defaults apply when zero); New sets its
	// Logger and Registerer.
	CompactionSweep scanner.CompactionSweepConfig
	// FanOut configures merge_wal's fan-out (MERGE_FANOUT: FanOut.Shape;
	// WorkerTimeout, when zero, is WorkerTimeoutFor the task timeout); New sets its
	// Discovery, Caller, Row, Orphans, OnWorkerDone and Logger.
	FanOut fanout.Config
	// OrphanGrace is how long a shard's worker must be unregistered before the
	// shard is adopted, ORPHAN_GRACE (fanout.DefaultOrphanGrace).
	OrphanGrace time.Duration
	// Scheduler configures the scheduler (TASK_CONCURRENCY, TASK_TIMEOUT;
	// MergeConcurrency, when zero, is MergeConcurrencyFor the task concurrency);
	// New sets its Tasks, Lease, Runners,
	// OnFinish, OnPhase and Logger.
	Scheduler SchedulerConfig
	// TaskRetention is how long finished tasks are kept.
	TaskRetention TaskRetention

	// Metrics is the registry /metrics serves (refmetrics.NewProcessRegistry() when nil).
	Metrics *prometheus.Registry
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger

	// Auth guards the AdminService (and reflection) and the task, stats and
	// workers HTTP routes; gRPC health, HTTP health and metrics stay open. nil:
	// no authentication (--auth-disabled).
	Auth *auth.Guard
	// TLS, if set, serves the AdminService and the HTTP API over TLS with it.
	TLS *tls.Config
	// WorkerHTTP configures the client the HTTP API and the dashboard read records
	// with through a worker's HTTP data API (its Token and TLS are the master's
	// outgoing credential); New sets its Discovery and Logger.
	WorkerHTTP workerhttp.Config
	// Dashboard configures the operator dashboard under /ui/ of the HTTP API.
	Dashboard DashboardConfig
}

// TaskRetention is how long finished tasks are kept, and how often the others
// are deleted.
type TaskRetention struct {
	// PruneInterval is the period of the deletion (the first at startup);
	// zero is PruneIntervalFor(Age), no setting sets it.
	PruneInterval time.Duration
	// Count is how many of the most recent finished tasks are kept,
	// TASK_RETENTION_COUNT (DefaultRetentionCount).
	Count int
	// Age is the age past which a finished task is deleted, TASK_RETENTION_AGE
	// (DefaultRetentionAge).
	Age time.Duration
}

// DashboardConfig configures the operator dashboard (package dashboard).
type DashboardConfig struct {
	// Disabled serves no dashboard (DASHBOARD=false).
	Disabled bool
}

func setDefault[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}
