package scanner

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/pkg/coord/stats"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/table"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
)

// observation is what the Scanner knows about one store after observing it. It is
// an immutable value: a new observation replaces the cached one, so a round and a
// Rescan of the same store never edit the same value. The table handle is shared
// between observations (a Table is safe for concurrent use).
type observation struct {
	kind  registry.Kind
	name  string
	table *table.Table
	base  table.Stats
	wal   *wal.Snapshot
	// openedAt is when the handle was opened from scratch; the handle is trusted
	// until openedAt + fullObserveAfter.
	openedAt time.Time
}

// observeMode says how much a store's observation cost.
type observeMode string

const (
	// modeProbe: base version unchanged; only latest-version probes of the base
	// table and of each WAL shard, and one listing of the shards.
	modeProbe observeMode = "probe"
	// modeFull: the base manifest was read (new store, changed version, or a
	// cached handle past its age).
	modeFull observeMode = "full"
)

// observe observes one store, starting from prev (nil: from scratch).
//
// The WAL snapshot is refreshed before the base table is probed. A merge commits
// the base watermark before it drains the shard manifest, so a base read after the
// snapshot covers every generation the snapshot shows as merged: generations merged
// meanwhile are never counted as pending (they would cause a useless merge task).
// Generations sealed after the snapshot are counted by the next round.
func (s *Scanner) observe(ctx context.Context, kind registry.Kind, name string, prev *observation) (*observation, observeMode, error) {
	now := s.cfg.Clock.Now()
	if prev == nil || now.Sub(prev.openedAt) >= s.cfg.FullObserveAfter {
		// The registry entry names the store's directory (one per life of the
		// name: registry.IncarnationDir); a store created again is picked up here.
		e, err := s.reg.Get(ctx, kind, name)
		if err != nil {
			return nil, "", err
		}
		dir := e.URI
		snap, err := wal.LoadSnapshot(ctx, s.bucket, dir)
		if err != nil {
			return nil, "", err
		}
		t, err := table.Open(ctx, s.bucket, dir, s.tableOpts...)
		if err != nil {
			return nil, "", err
		}
		return &observation{kind: kind, name: name, table: t, base: t.Latest().Stats(), wal: snap, openedAt: now}, modeFull, nil
	}
	snap, err := prev.wal.Refresh(ctx, s.bucket)
	if err != nil {
		return nil, "", err
	}
	v, err := prev.table.LatestVersion(ctx)
	if err != nil {
		return nil, "", err
	}
	next := &observation{kind: kind, name: name, table: prev.table, base: prev.base, wal: snap, openedAt: prev.openedAt}
	if v == prev.base.Version {
		return next, modeProbe, nil
	}
	m, err := prev.table.Refresh(ctx)
	if err != nil {
		return nil, "", err
	}
	next.base = m.Stats()
	return next, modeFull, nil
}

// row is the stats row of the observation, scanned at now.
func (o *observation) row(now time.Time) stats.Row {
	r := stats.Row{
		Target:        registry.NewTarget(o.kind, o.name),
		Kind:          o.kind,
		Name:          o.name,
		Version:       o.base.Version,
		RowCount:      o.base.Rows,
		FragmentCount: o.base.Fragments,
		Bytes:         o.base.Bytes,
		DeletedRows:   o.base.DeletedRows,
		Shards:        len(o.wal.Shards),

		Level0Fragments:   o.base.Level0,
		UnsortedFragments: o.base.Unsorted,
		SpillingLevels:    o.base.Spilling,
		LastUpdated:       o.base.UpdatedAt.UTC(),
		ScannedAt:         now.UTC(),
	}
	for name, m := range o.wal.Shards {
		if m.Retired == nil || filesDue(m, now) {
			r.ActiveShards = append(r.ActiveShards, name)
		}
	}
	slices.Sort(r.ActiveShards)
	for _, g := range o.wal.Pending(o.base.MergedGenerations) {
		if r.PendingByShard == nil {
			r.PendingByShard = map[string]int{}
		}
		r.PendingByShard[g.Shard]++
		r.PendingWALGenerations++
		r.PendingWALRows += g.Rows
		r.PendingWALBytes += g.Bytes
	}
	return r
}

// RetiredFilesAfter is how long after a drain a retired shard's drained files are
// taken as due for deletion: the default WAL delete delay (5 min) with a margin. A
// retired shard that lists older ones is active again, so an adopter drains them
// out of its manifest for its cleanup sweeper to delete (merge.Merger.Adopt); with a
// longer delete delay (wal.WithDeleteDelay) it drains only what is due, and the shard
// stays active until the rest is.
const RetiredFilesAfter = 10 * time.Minute

// filesDue reports whether retired shard m lists a drained file due for deletion.
func filesDue(m *wal.Manifest, now time.Time) bool {
	for _, d := range m.DeferredDeletes {
		if now.Sub(d.DrainedAt) >= RetiredFilesAfter {
			return true
		}
	}
	return false
}

// observations caches the latest observation per target between rounds, at most
// max of them.
type observations struct {
	mu  sync.Mutex
	max int
	m   map[registry.Target]*observation
}

func (c *observations) get(target registry.Target) *observation {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[target]
}

// put caches o unless the cache is full and target is new; it reports whether o
// was cached.
func (c *observations) put(target registry.Target, o *observation) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[target]; !ok && len(c.m) >= c.max {
		return false
	}
	c.m[target] = o
	return true
}

func (c *observations) drop(target registry.Target) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, target)
}

// retain drops every target not in keep (stores no longer registered).
func (c *observations) retain(keep map[registry.Target]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for t := range c.m {
		if !keep[t] {
			delete(c.m, t)
		}
	}
}

func (c *observations) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// describe wraps an observation error with its target.
func describe(target registry.Target, err error) error {
	return fmt.Errorf("observe %s: %w", target, err)
}
