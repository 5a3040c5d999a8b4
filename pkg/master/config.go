package master

import (
	"crypto/tls"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/pkg/coord/tasks"
	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/master/scanner"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/registry"
)

// Defaults of the master's settings (MASTER_LEASE_TTL, TASK_CONCURRENCY,
// MERGE_WAL_CONCURRENCY, MERGE_WAL_WORKER_TIMEOUT, SHUTDOWN_TIMEOUT, ...).
const (
	DefaultLeaseTTL         = 10 * time.Second
	DefaultTaskConcurrency  = 2
	DefaultMergeConcurrency = 2
	DefaultWorkerTimeout    = 10 * time.Minute
	DefaultTaskTimeout      = time.Hour
	DefaultShutdownTimeout  = 30 * time.Second
	DefaultPruneInterval    = time.Hour
	DefaultPruneKeep        = 10000
	DefaultPruneMaxAge      = 7 * 24 * time.Hour
	DefaultProbeInterval    = 15 * time.Second
)

// Config is what a Master needs.
type Config struct {
	// Client is the etcd client (internal/etcdcli.New). Required.
	Client *clientv3.Client
	// Prefix is the etcd key prefix P (keys.DefaultPrefix when empty).
	Prefix string
	// Bucket holds the store registries and the stores (DATA_URL). Required.
	Bucket *objstore.Bucket
	// Registry is the store registry in Bucket (registry.New(Bucket) when nil).
	Registry *registry.Registry
	// Discovery lists the workers merge_wal calls (membership.Discovery on Client and
	// Prefix when nil; a StaticDiscovery for WORKER_ENDPOINTS).
	Discovery fanout.Discovery
	// Caller calls the workers; required unless Runners replaces merge_wal's.
	Caller fanout.Caller
	// Runners add to or replace the built-in runners by kind: merge_wal's serial
	// FanOut, and Maintenance for compact, verify and repair (with a Caller that
	// can call WorkerService.Maintain, as the GRPCCaller can).
	Runners map[tasks.Kind]Runner

	// GRPCListener serves the AdminService (with health and reflection), and
	// HTTPListener the HTTP API and /metrics; either may be nil to not serve it.
	// Run closes them.
	GRPCListener net.Listener
	HTTPListener net.Listener

	// ScanInterval is STATS_SCAN_INTERVAL, SweepInterval MERGE_WAL_INTERVAL,
	// MinGenerations MERGE_WAL_MIN_GENERATIONS and MaxEnqueues
	// MERGE_WAL_MAX_ENQUEUES (the scanner package's defaults when zero).
	ScanInterval   time.Duration
	SweepInterval  time.Duration
	MinGenerations int
	MaxEnqueues    int
	// Compaction configures the compaction sweep; New sets its Logger and
	// Registerer.
	Compaction scanner.CompactionSweepConfig

	// TaskConcurrency bounds the running tasks of each kind other than merge_wal
	// (TASK_CONCURRENCY), MergeConcurrency the running merge_wal tasks
	// (MERGE_WAL_CONCURRENCY): merges of different targets may run at once, one
	// target never has two.
	TaskConcurrency  int
	MergeConcurrency int
	// WorkerTimeout bounds one worker's merge in a fan-out
	// (MERGE_WAL_WORKER_TIMEOUT); TaskTimeout bounds one task run (TASK_TIMEOUT),
	// so it must allow for a fan-out over every worker.
	WorkerTimeout time.Duration
	// FanOut is merge_wal's shape (MERGE_FANOUT): fanout.TwoPhase (the default,
	// when empty) or fanout.Serial. PrepareConcurrency bounds the two-phase
	// shape's prepares in flight (MERGE_PREPARE_CONCURRENCY; 0: every worker).
	FanOut             fanout.Shape
	PrepareConcurrency int
	// OrphanGrace is how long a shard's worker must be unregistered before the
	// shard is adopted (fanout.DefaultOrphanGrace; ORPHAN_GRACE).
	OrphanGrace time.Duration
	TaskTimeout time.Duration
	// PollInterval is how often an idle scheduler looks for work (1 s).
	PollInterval time.Duration

	// LeaseTTL is the TTL of the master's session lease (MASTER_LEASE_TTL, whole
	// seconds, at least 2 s): claims, target locks and coordination locks die
	// this long after the master does.
	LeaseTTL time.Duration
	// ShutdownTimeout is how long shutdown lets running tasks finish before
	// releasing them to the queue, and lets the servers finish their requests.
	ShutdownTimeout time.Duration

	// PruneInterval, PruneKeep and PruneMaxAge drive the deletion of finished
	// tasks (hourly, keep the 10000 most recent, none older than 7 days).
	PruneInterval time.Duration
	PruneKeep     int
	PruneMaxAge   time.Duration
	// ProbeInterval is how often the master checks etcd (master_etcd_up, gRPC
	// health) and reads the queue depth (15 s).
	ProbeInterval time.Duration

	// Holder names this replica in claim tokens and coordination keys (default
	// "<hostname>:<pid>").
	Holder string
	// Metrics is the registry /metrics serves (refmetrics.NewProcessRegistry() when nil).
	Metrics *prometheus.Registry
	Logger  *slog.Logger

	// Auth guards the AdminService (and reflection) and the task, stats and
	// workers HTTP routes; gRPC health, HTTP health and metrics stay open. nil:
	// no authentication (--auth-disabled).
	Auth *auth.Guard
	// TLS, if set, serves the AdminService and the HTTP API over TLS with it.
	TLS *tls.Config
	// Dashboard configures the operator dashboard under /ui/ of the HTTP API.
	Dashboard DashboardConfig
}

// DashboardConfig configures the operator dashboard (package dashboard).
type DashboardConfig struct {
	// Disabled serves no dashboard (DASHBOARD=false).
	Disabled bool
	// WorkerToken and WorkerTLS are the credential the dashboard reads records
	// with through a worker's HTTP data API: the master's outgoing one.
	WorkerToken string
	WorkerTLS   *tls.Config
}

func setDefault[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}
