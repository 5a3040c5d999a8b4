package scanner

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/pkg/coord/stats"
	"github.com/tidemark-io/tidemark/pkg/registry"
)

// Defaults of the scan's settings (Config).
const (
	// Merges are enqueued on what a scan counted, so a store that became busy just
	// after a scan waits up to a scan interval plus a sweep interval for its first
	// merge: at 20 workers sealing a generation a second each, 300 s and 60 s let
	// 7,000 generations pile up, past the read refusal limit (BENCHMARKS.md,
	// sustained ingest). A scan of an unchanged store is a few probes.
	DefaultScanInterval     = 60 * time.Second
	DefaultConcurrency      = 16
	DefaultStoreTimeout     = 30 * time.Second
	DefaultMaxCachedStores  = 10000
	DefaultFullObserveAfter = time.Hour
)

// Defaults of the merge sweep's settings (MergeSweepConfig).
const (
	DefaultMergeSweepInterval = 10 * time.Second
	DefaultMinGenerations     = 8
	DefaultMergeMaxEnqueues   = 256
)

// Defaults of the compaction sweep's settings (CompactionSweepConfig).
const (
	DefaultCompactionInterval    = 10 * time.Minute
	DefaultMinFragments          = 8
	DefaultDeletedRatio          = 0.2
	DefaultCleanupEveryVersions  = 100
	DefaultCompactionMaxEnqueues = 16
)

// Coordination lock names: P/coordination/scanner, P/coordination/merge-sweep and
// P/coordination/compaction-sweep.
const (
	ScannerLock         = "scanner"
	MergeSweepLock      = "merge-sweep"
	CompactionSweepLock = "compaction-sweep"
)

// Config configures a Scanner. Zero fields take their defaults.
type Config struct {
	// Interval is the scan's period, STATS_SCAN_INTERVAL (DefaultScanInterval).
	Interval time.Duration
	// Concurrency bounds the stores observed at once (DefaultConcurrency), and
	// StoreTimeout one store's observation (DefaultStoreTimeout).
	Concurrency  int
	StoreTimeout time.Duration
	// MaxCachedStores bounds how many stores keep a table handle and WAL snapshot
	// between rounds (DefaultMaxCachedStores; negative: none). A store beyond the
	// bound is observed in full every round: correct, only dearer.
	MaxCachedStores int
	// FullObserveAfter is how long a cached store is trusted
	// (DefaultFullObserveAfter): after that the Scanner drops the cached handle
	// and observes the store from scratch, which bounds how long a store deleted
	// and re-created between two rounds can show the old store's numbers.
	FullObserveAfter time.Duration

	// Clock times intervals, cache ages and timestamps (the real clock; tests
	// inject a fake one). Leases still run on etcd's clock.
	Clock clock.Clock
	// Logger receives structured logs (slog.Default()).
	Logger *slog.Logger
	// Registerer registers the metrics (none are registered without it). Loops
	// sharing one registerer share their series.
	Registerer prometheus.Registerer

	// beforeWrite, if set, runs after a round's observations and before its first
	// etcd write (tests revoke the lease there).
	beforeWrite func(ctx context.Context)
}

func (c Config) withDefaults() Config {
	c.Clock, c.Logger = orDefault(c.Clock, c.Logger)
	setDefault(&c.Interval, DefaultScanInterval)
	setDefault(&c.Concurrency, DefaultConcurrency)
	setDefault(&c.StoreTimeout, DefaultStoreTimeout)
	setDefault(&c.FullObserveAfter, DefaultFullObserveAfter)
	switch {
	case c.MaxCachedStores == 0:
		c.MaxCachedStores = DefaultMaxCachedStores
	case c.MaxCachedStores < 0:
		c.MaxCachedStores = 0
	}
	return c
}

// MergeSweepConfig configures a MergeSweeper. Zero fields take their defaults.
type MergeSweepConfig struct {
	// Interval is the sweep's period, MERGE_WAL_INTERVAL
	// (DefaultMergeSweepInterval).
	Interval time.Duration
	// MinGenerations is MERGE_WAL_MIN_GENERATIONS (DefaultMinGenerations): a
	// merge is enqueued for targets with at least this many pending generations.
	MinGenerations int
	// MaxEnqueues caps the new tasks one sweep enqueues
	// (DefaultMergeMaxEnqueues); enqueues that deduplicate onto a live task do
	// not count. No setting since merges on demand (MERGE_WAL_MAX_ENQUEUES is
	// retired): tests lower it.
	MaxEnqueues int
	// ScanInterval is the stats scan's period (Config.Interval,
	// DefaultScanInterval): a row scanned before its target's last merge is
	// waited for at most two of them.
	ScanInterval time.Duration
	// Rescan, if set, observes again a target whose row predates its last merge,
	// instead of waiting for the next scan: a busy store is then merged every
	// sweep, not every scan.
	Rescan Rescan
	// Orphans, if set, names the orphaned shards of a row: a target with any is
	// enqueued whatever its pending count (none: orphaned shards are not swept).
	Orphans OrphanCheck

	// Clock, Logger and Registerer are as in Config.
	Clock      clock.Clock
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

func (c MergeSweepConfig) withDefaults() MergeSweepConfig {
	c.Clock, c.Logger = orDefault(c.Clock, c.Logger)
	setDefault(&c.Interval, DefaultMergeSweepInterval)
	setDefault(&c.MinGenerations, DefaultMinGenerations)
	setDefault(&c.MaxEnqueues, DefaultMergeMaxEnqueues)
	setDefault(&c.ScanInterval, DefaultScanInterval)
	return c
}

// CompactionSweepConfig configures a CompactionSweeper. Zero fields take their
// defaults.
type CompactionSweepConfig struct {
	// Interval is the sweep's period, COMPACTION_INTERVAL
	// (DefaultCompactionInterval).
	Interval time.Duration
	// MinFragments is MIN_FRAGMENTS (DefaultMinFragments): a compaction is
	// enqueued for targets with at least this many level-0 fragments (each of
	// which a point read probes).
	MinFragments int
	// DeletedRatio is COMPACTION_DELETED_RATIO (DefaultDeletedRatio): a
	// compaction is enqueued for targets whose deleted rows are at least this
	// share of all their fragments' rows.
	DeletedRatio float64
	// CleanupEveryVersions (DefaultCleanupEveryVersions; no setting since issue
	// 43): a compact task (whose cleanup deletes what
	// retention lets go) is enqueued for targets that committed this many
	// versions since their last one, even with nothing to compact.
	CleanupEveryVersions int
	// MaxEnqueues caps the new compact tasks one sweep enqueues
	// (DefaultCompactionMaxEnqueues; no setting since issue 43).
	MaxEnqueues int

	// Clock, Logger and Registerer are as in Config.
	Clock      clock.Clock
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

func (c CompactionSweepConfig) withDefaults() CompactionSweepConfig {
	c.Clock, c.Logger = orDefault(c.Clock, c.Logger)
	setDefault(&c.Interval, DefaultCompactionInterval)
	setDefault(&c.MinFragments, DefaultMinFragments)
	setDefault(&c.DeletedRatio, DefaultDeletedRatio)
	setDefault(&c.CleanupEveryVersions, DefaultCleanupEveryVersions)
	setDefault(&c.MaxEnqueues, DefaultCompactionMaxEnqueues)
	return c
}

// Lease returns the lease the coordination locks are taken under: the master's
// session lease. It is asked at every round, so a master that had to start a new
// session (its lease expired while etcd was away) hands the new lease on, and the
// lock is taken again under it.
type Lease func(ctx context.Context) (clientv3.LeaseID, error)

// StaticLease is a Lease that is always id.
func StaticLease(id clientv3.LeaseID) Lease {
	return func(context.Context) (clientv3.LeaseID, error) { return id, nil }
}

// OrphanCheck is asked once per merge sweep for a function that names the
// orphaned shards of a stats row (ActiveShards whose worker has been gone for the
// grace period); the sweep enqueues merge_wal for a target that has any, whatever
// its pending count, and the task has them adopted.
type OrphanCheck func(ctx context.Context) (func(stats.Row) []string, error)

// Rescan observes one target now and returns its fresh stats row
// (Scanner.Rescan).
type Rescan func(ctx context.Context, target registry.Target) (stats.Row, error)

func orDefault(clk clock.Clock, log *slog.Logger) (clock.Clock, *slog.Logger) {
	if clk == nil {
		clk = clock.RealClock{}
	}
	if log == nil {
		log = slog.Default()
	}
	return clk, log
}

// setDefault replaces a zero or negative setting with def.
func setDefault[T int | float64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}
