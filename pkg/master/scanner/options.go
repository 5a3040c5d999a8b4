package scanner

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/pkg/coord/stats"
)

// Defaults (STATS_SCAN_INTERVAL, MERGE_WAL_INTERVAL, MERGE_WAL_MIN_GENERATIONS and
// the knobs without an environment variable).
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
	DefaultSweepInterval    = 10 * time.Second
	DefaultMinGenerations   = 8
	DefaultMaxEnqueues      = 256

	DefaultCompactionInterval    = 10 * time.Minute
	DefaultMinFragments          = 8
	DefaultDeletedRatio          = 0.2
	DefaultCleanupVersions       = 100
	DefaultMaxCompactionEnqueues = 16
)

// Coordination lock names: P/coordination/scanner and P/coordination/merge-sweep.
const (
	ScannerLock         = "scanner"
	MergeSweepLock      = "merge-sweep"
	CompactionSweepLock = "compaction-sweep"
)

// Lease returns the lease the coordination locks are taken under: the master's
// session lease. It is asked at every round, so a master that had to start a new
// session (its lease expired while etcd was away) hands the new lease on, and the
// lock is taken again under it.
type Lease func(ctx context.Context) (clientv3.LeaseID, error)

// StaticLease is a Lease that is always id.
func StaticLease(id clientv3.LeaseID) Lease {
	return func(context.Context) (clientv3.LeaseID, error) { return id, nil }
}

type options struct {
	clock      clock.Clock
	logger     *slog.Logger
	registerer prometheus.Registerer

	// Scanner.
	scanInterval     time.Duration
	concurrency      int
	storeTimeout     time.Duration
	maxCachedStores  int
	fullObserveAfter time.Duration

	// MergeSweeper.
	sweepInterval  time.Duration
	minGenerations int
	maxEnqueues    int
	orphans        OrphanCheck
	rescan         Rescan

	// CompactionSweeper.
	compactionInterval    time.Duration
	minFragments          int
	deletedRatio          float64
	cleanupVersions       uint64
	maxCompactionEnqueues int

	// beforeWrite, if set, runs after a round's observations and before its first
	// etcd write (tests revoke the lease there).
	beforeWrite func(ctx context.Context)
}

// Option configures a Scanner or a MergeSweeper. Options that concern only one of
// them are ignored by the other.
type Option func(*options)

// WithClock sets the clock of intervals, cache ages and timestamps (tests inject a
// fake one). Leases still run on etcd's clock.
func WithClock(c clock.Clock) Option {
	return func(o *options) {
		if c != nil {
			o.clock = c
		}
	}
}

// WithLogger sets the structured logger.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.logger = l
		}
	}
}

// WithRegisterer registers the metrics with r (none are registered without it).
// Scanners or sweepers sharing one registerer share their series.
func WithRegisterer(r prometheus.Registerer) Option {
	return func(o *options) { o.registerer = r }
}

// WithScanInterval sets the Scanner's period, STATS_SCAN_INTERVAL (60 s).
func WithScanInterval(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.scanInterval = d
		}
	}
}

// WithMaxCachedStores bounds how many stores a Scanner keeps a table handle and
// WAL snapshot for between rounds (10000). A store beyond the bound is observed in
// full every round: correct, only dearer.
func WithMaxCachedStores(n int) Option {
	return func(o *options) {
		if n >= 0 {
			o.maxCachedStores = n
		}
	}
}

// WithFullObserveAfter sets how long a cached store is trusted (1 h): after that
// the Scanner drops the cached handle and observes the store from scratch, which
// bounds how long a store deleted and re-created between two rounds can show the
// old store's numbers.
func WithFullObserveAfter(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.fullObserveAfter = d
		}
	}
}

// WithSweepInterval sets the MergeSweeper's period, MERGE_WAL_INTERVAL (10 s).
func WithSweepInterval(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.sweepInterval = d
		}
	}
}

// WithMinGenerations sets MERGE_WAL_MIN_GENERATIONS (8): the MergeSweeper enqueues
// a merge for targets with at least this many pending generations.
func WithMinGenerations(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.minGenerations = n
		}
	}
}

// WithMaxEnqueues caps the new tasks one sweep enqueues (256); enqueues that
// deduplicate onto a live task do not count.
func WithMaxEnqueues(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.maxEnqueues = n
		}
	}
}

// WithCompactionInterval sets the CompactionSweeper's period, COMPACTION_INTERVAL
// (10 min).
func WithCompactionInterval(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.compactionInterval = d
		}
	}
}

// WithMinFragments sets MIN_FRAGMENTS (8): the CompactionSweeper enqueues a
// compaction for targets with at least this many level-0 fragments (each of which
// a point read probes).
func WithMinFragments(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.minFragments = n
		}
	}
}

// WithDeletedRatio sets COMPACTION_DELETED_RATIO (0.2): the CompactionSweeper
// enqueues a compaction for targets whose deleted rows are at least this share of
// all their fragments' rows.
func WithDeletedRatio(r float64) Option {
	return func(o *options) {
		if r > 0 {
			o.deletedRatio = r
		}
	}
}

// WithCleanupVersions sets CLEANUP_EVERY_VERSIONS (100): the CompactionSweeper
// enqueues a compact task (whose cleanup deletes what retention lets go) for
// targets that committed this many versions since its last one, even with nothing
// to compact.
func WithCleanupVersions(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.cleanupVersions = uint64(n)
		}
	}
}

// WithMaxCompactionEnqueues caps the new compact tasks one compaction sweep
// enqueues, COMPACTION_MAX_ENQUEUES (16).
func WithMaxCompactionEnqueues(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.maxCompactionEnqueues = n
		}
	}
}

// OrphanCheck is asked once per merge sweep for a function that names the
// orphaned shards of a stats row (ActiveShards whose worker has been gone for the
// grace period); the sweep enqueues merge_wal for a target that has any, whatever
// its pending count, and the task has them adopted.
type OrphanCheck func(ctx context.Context) (func(stats.Row) []string, error)

// Rescan observes one target now and returns its fresh stats row
// (Scanner.Rescan).
type Rescan func(ctx context.Context, target string) (stats.Row, error)

// WithRescan lets the sweep rescan a target whose row predates the target's last
// merge, instead of waiting for the next scan (none: it waits). A busy store is
// then merged every sweep, not every scan.
func WithRescan(r Rescan) Option {
	return func(o *options) { o.rescan = r }
}

// WithOrphans sets the sweep's OrphanCheck (none: orphaned shards are not swept).
func WithOrphans(c OrphanCheck) Option {
	return func(o *options) { o.orphans = c }
}

func buildOptions(opts []Option) options {
	o := options{
		clock:            clock.RealClock{},
		logger:           slog.Default(),
		scanInterval:     DefaultScanInterval,
		concurrency:      DefaultConcurrency,
		storeTimeout:     DefaultStoreTimeout,
		maxCachedStores:  DefaultMaxCachedStores,
		fullObserveAfter: DefaultFullObserveAfter,
		sweepInterval:    DefaultSweepInterval,
		minGenerations:   DefaultMinGenerations,
		maxEnqueues:      DefaultMaxEnqueues,

		compactionInterval:    DefaultCompactionInterval,
		minFragments:          DefaultMinFragments,
		deletedRatio:          DefaultDeletedRatio,
		cleanupVersions:       DefaultCleanupVersions,
		maxCompactionEnqueues: DefaultMaxCompactionEnqueues,
	}
	for _, f := range opts {
		f(&o)
	}
	return o
}
