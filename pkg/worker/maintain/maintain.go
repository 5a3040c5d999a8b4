// Package maintain runs a store's table maintenance on a worker: compaction of its
// base table followed by garbage collection of the table and of its WAL shards
// (the compact task), and verification with an optional repair (the verify and
// repair tasks). The master schedules these as tasks under the store's target
// lock, so maintenance and merges of one store never run at once; nothing here
// depends on that for correctness, only for not wasting work:
//
//   - A compaction commits optimistically like a merge: a merge that deleted rows
//     of its sources meanwhile is rebased onto, never lost (table.Compact).
//   - Garbage collection deletes only what no kept version references and what is
//     older than the safety window, so a transaction staged before it and committed
//     after it, and a reader holding a version younger than the retention age, keep
//     working (table.Cleanup, wal.Cleanup).
//   - Repair removes data only when an operator asked for it (the repair kind), and
//     logs every fragment it drops.
//
// Compaction takes one of the worker's merge slots and a charge on the merge memory
// budget, so a worker never runs more rewrites at once than it is sized for.
package maintain

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/dustin/go-humanize/english"
	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/internal/backoff"
	"github.com/tidemark-io/tidemark/pkg/storage/table"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// Reserver hands out merge slots and memory budget (merge.Merger.Reserve), and
// says how many merges hold one (merge.Merger.Merging).
type Reserver interface {
	Reserve(ctx context.Context, charge int64) (release func(), err error)
	Merging() int
}

// Config configures a Maintainer. Zero fields take the defaults of the packages
// that own them (table.CompactOptions, table.Retention, wal.Retention).
type Config struct {
	Compact   table.CompactOptions
	Retention table.Retention
	WAL       wal.Retention
	// Reserver, if set, is asked for a merge slot and budget before a compaction,
	// and the compaction yields to its merges (Maintainer.yield).
	Reserver Reserver
	// CostFactor times the estimated bytes of one output fragment is what a
	// compaction charges the budget (merge.PassCostFactor).
	CostFactor int64
	Logger     *slog.Logger
}

// Maintainer runs maintenance tasks on stores.
type Maintainer struct {
	cfg Config
	log *slog.Logger
	// sleep waits d or until ctx ends (tests replace it).
	sleep func(ctx context.Context, d time.Duration) error
}

// New returns a Maintainer for cfg.
func New(cfg Config) *Maintainer {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.CostFactor <= 0 {
		cfg.CostFactor = 4
	}
	return &Maintainer{cfg: cfg, log: cfg.Logger, sleep: func(ctx context.Context, d time.Duration) error {
		return backoff.Sleep(ctx, clock.RealClock{}, d)
	}}
}

// Report is what one maintenance task did.
type Report struct {
	// Version is the base table version after the task; 0 if it committed nothing.
	Version uint64
	// Compaction sums the compactions the task committed (Compactions of them);
	// its Version is the last one's.
	Compaction  table.CompactResult
	Compactions int
	Table       table.CleanupResult
	WAL         wal.CleanupResult // summed over the store's shards
	Shards      int               // WAL shards cleaned
	Verify      *table.VerifyReport
	// Dropped and DroppedRows are what a repair removed.
	Dropped     int
	DroppedRows int64
}

// maxCompactions bounds the compactions of one compact task.
const maxCompactions = 32

// addCompaction adds c to a task's total t.
func addCompaction(t *table.CompactResult, c table.CompactResult) {
	t.Version, t.Level = c.Version, c.Level
	t.Sources += c.Sources
	t.Outputs += c.Outputs
	t.Moved += c.Moved
	t.RowsWritten += c.RowsWritten
	t.RowsDropped += c.RowsDropped
	t.BytesRead += c.BytesRead
	t.BytesWritten += c.BytesWritten
}

// Summary is the report in one line, for a task's detail.
func (r Report) Summary() string {
	var parts []string
	if c := r.Compaction; c.Sources > 0 {
		in := ""
		if r.Compactions > 1 {
			in = fmt.Sprintf(" in %d compactions", r.Compactions)
		}
		moved := ""
		if c.Moved > 0 {
			moved = fmt.Sprintf(", %d of them moved down a level as they were", c.Moved)
		}
		parts = append(parts, fmt.Sprintf("compacted %s into %d%s (%d rows, %d deleted rows dropped%s, version %d)",
			plural(c.Sources, "fragment"), c.Outputs, in, c.RowsWritten, c.RowsDropped, moved, c.Version))
	} else if r.Verify == nil {
		parts = append(parts, "nothing to compact")
	}
	if r.Verify == nil {
		parts = append(parts, fmt.Sprintf("deleted %s and %s (%s) of the table, %s of %s",
			plural(r.Table.ManifestsDeleted, "manifest"), plural(r.Table.FilesDeleted, "file"),
			humanize.IBytes(uint64(max(r.Table.BytesDeleted, 0))), plural(r.WAL.ManifestsDeleted+r.WAL.FilesDeleted, "WAL object"),
			plural(r.Shards, "shard")))
	}
	if v := r.Verify; v != nil {
		parts = append(parts, fmt.Sprintf("verified version %d: %s checked, %s", v.Version,
			plural(v.Objects, "object"), plural(len(v.Problems), "problem")))
		for i, p := range v.Problems {
			if i == 5 {
				parts = append(parts, fmt.Sprintf("and %d more", len(v.Problems)-5))
				break
			}
			parts = append(parts, p.Path+": "+p.Problem)
		}
		if r.Dropped > 0 {
			parts = append(parts, fmt.Sprintf("repair dropped %s (%d rows), version %d", plural(r.Dropped, "fragment"), r.DroppedRows, r.Version))
		}
	}
	return strings.Join(parts, "; ")
}

// Compact compacts s's base table, then deletes what retention lets go in the
// table and in each of its WAL shards. The cleanup runs after the compaction so
// that the fragments it replaced go as soon as no kept version lists them.
func (m *Maintainer) Compact(ctx context.Context, s *store.Store) (Report, error) {
	var r Report
	log := m.log.With("target", s.Target())
	if m.cfg.Reserver != nil {
		release, err := m.cfg.Reserver.Reserve(ctx, m.charge(s.Table().Latest()))
		if err != nil {
			return r, fmt.Errorf("compact %s: wait for a merge slot: %w", s.Target(), err)
		}
		defer release()
	}
	// One compaction moves level 0 or one fragment's worth of a level past its
	// target; the table reaches its shape in a few, so a task runs them until
	// there is nothing left to do, at most maxCompactions. Each is bounded in
	// memory on its own: they run one after another under the same reservation.
	// The first takes level 0 from two fragments on (the task was asked for, by
	// the master's MIN_FRAGMENTS or by an operator); the others wait for
	// Level0Trigger, so a task does not spend its compactions rewriting the base
	// level for each merge that lands meanwhile.
	for i := range maxCompactions {
		start := time.Now()
		o := m.cfg.Compact
		if i == 0 {
			o = m.first()
		}
		if m.cfg.Reserver != nil {
			o.Yield = m.yield
		}
		c, err := s.Table().Compact(ctx, o)
		if err != nil {
			return r, fmt.Errorf("compact %s: %w", s.Target(), err)
		}
		if c.Sources == 0 {
			break
		}
		r.Compactions++
		addCompaction(&r.Compaction, c)
		r.Version = c.Version
		log.Info("compacted", "sources", c.Sources, "outputs", c.Outputs, "moved", c.Moved, "level", c.Level, "rows", c.RowsWritten,
			"deleted_rows_dropped", c.RowsDropped, "bytes_read", c.BytesRead, "bytes_written", c.BytesWritten,
			"version", c.Version, "duration", time.Since(start).String())
	}
	var err error
	if r.Table, err = s.Table().Cleanup(ctx, m.cfg.Retention); err != nil {
		return r, fmt.Errorf("clean up the base table of %s: %w", s.Target(), err)
	}
	shards, err := wal.Shards(ctx, s.Bucket(), s.Entry().URI)
	if err != nil {
		return r, fmt.Errorf("clean up the WAL of %s: %w", s.Target(), err)
	}
	for _, shard := range shards {
		w, err := wal.Cleanup(ctx, s.Bucket(), s.Entry().URI, shard, m.cfg.WAL, s.WALOptions()...)
		if err != nil {
			return r, fmt.Errorf("clean up WAL shard %s of %s: %w", shard, s.Target(), err)
		}
		r.WAL.ManifestsDeleted += w.ManifestsDeleted
		r.WAL.FilesDeleted += w.FilesDeleted
		r.WAL.BytesDeleted += w.BytesDeleted
		r.Shards++
	}
	log.Info("cleaned up", "manifests_deleted", r.Table.ManifestsDeleted, "files_deleted", r.Table.FilesDeleted,
		"bytes_deleted", r.Table.BytesDeleted, "oldest_version", r.Table.OldestVersion,
		"wal_manifests_deleted", r.WAL.ManifestsDeleted, "wal_files_deleted", r.WAL.FilesDeleted, "shards", r.Shards)
	return r, nil
}

// yield paces a rewrite while merges of this worker run: after each row group
// that took worked, it waits as long again, so a compaction takes at most about
// half of what it would of the worker's CPU and bucket requests while merges
// need them. A compaction is background work; the merges keep the stores fresh
// (BENCHMARKS.md, 1c: a hot store's merge ran 8 s instead of 0.9 s beside its
// compaction, and its pending generations peaked). Without merges it runs at
// full speed.
func (m *Maintainer) yield(ctx context.Context, worked time.Duration) error {
	if m.cfg.Reserver.Merging() == 0 || worked <= 0 {
		return nil
	}
	return m.sleep(ctx, worked)
}

// first is the options of a task's first compaction (Compact).
func (m *Maintainer) first() table.CompactOptions {
	o := m.cfg.Compact
	if o.Level0Trigger <= 0 || o.Level0Trigger > 2 {
		o.Level0Trigger = 2
	}
	return o
}

// charge estimates what one compaction of m holds in memory: one output
// fragment's rows, decoded (rows are streamed through it), with the Parquet
// writer's dictionaries and compressor state. Fragments are stored compressed, so
// their bytes say little about that: the long-run benchmark (BENCHMARKS.md, "Table
// maintenance over a long run") measured peaks up to 47 times a charge of 4x the
// compressed bytes, and 18 MiB for a 28k-row output of small rows. The charge is
// therefore decodedFactor times the compressed estimate, and never below
// minCharge.
func (m *Maintainer) charge(latest *table.Manifest) int64 {
	if latest == nil {
		return 0
	}
	rows, bytes := table.PlanCompaction(latest, m.first()).Rows()
	if rows == 0 {
		return 0
	}
	target := m.cfg.Compact.TargetRows
	if target <= 0 {
		target = table.DefaultTargetRows
	}
	target = min(target, rows)
	return max(m.cfg.CostFactor*decodedFactor*bytes/rows*target, minCharge)
}

// decodedFactor and minCharge size a compaction's charge (see charge).
const (
	decodedFactor = 16
	minCharge     = 32 << 20
)

// Verify checks every object s's newest base version references. With repair it
// then commits a version without the fragments it found missing or damaged.
func (m *Maintainer) Verify(ctx context.Context, s *store.Store, repair bool) (Report, error) {
	var r Report
	rep, err := s.Table().Verify(ctx, true)
	if err != nil {
		return r, fmt.Errorf("verify %s: %w", s.Target(), err)
	}
	r.Verify = &rep
	for _, p := range rep.Problems {
		m.log.Warn("verify found a problem", "target", s.Target(), "version", rep.Version,
			"path", p.Path, "fragment", p.Fragment, "problem", p.Problem)
	}
	if !repair || len(rep.Problems) == 0 {
		return r, nil
	}
	man, n, rows, err := s.Table().DropMissing(ctx, rep)
	if err != nil {
		return r, fmt.Errorf("repair %s: %w", s.Target(), err)
	}
	r.Dropped, r.DroppedRows = n, rows
	if man != nil {
		r.Version = man.Version
	}
	m.log.Warn("repair dropped fragments", "target", s.Target(), "fragments", n, "rows", rows, "version", r.Version)
	return r, nil
}

func plural(n int, noun string) string { return english.Plural(n, noun, noun+"s") }
