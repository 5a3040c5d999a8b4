package fanout

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/pkg/coord/stats"
	"github.com/tidemark-io/tidemark/pkg/registry"
)

// DefaultOrphanGrace is ORPHAN_GRACE: how long a shard's worker must be missing
// from P/workers/ before the shard is adopted. Several worker lease TTLs (10 s),
// so an ordinary restart of a worker that keeps its INSTANCE_ID never triggers one.
const DefaultOrphanGrace = time.Minute

// Orphans tracks, for every active shard of every store (stats.Row.ActiveShards),
// since when no registered worker has its name. A shard missing for the grace
// period is orphaned: the merge sweep enqueues merge_wal for its target, and the
// fan-out has a live worker adopt it.
//
// The clock starts when this replica first sees the shard missing, so a master
// that takes over starts it again: a takeover delays adoption by up to the grace,
// never hastens it.
type Orphans struct {
	disc  Discovery
	grace time.Duration
	clock clock.PassiveClock
	gauge prometheus.Gauge

	mu      sync.Mutex
	missing map[string]missingEntry // "<target>\x00<shard>"
}

// missingEntry is one shard seen missing: since when, and from when it counts as
// orphaned (since + grace, or earlier when an operator forced its adoption).
type missingEntry struct {
	since      time.Time
	orphanedAt time.Time
}

// MissingShard is an active shard of a store that no registered worker has the
// name of, as this replica's tracker sees it.
type MissingShard struct {
	Shard string
	// Since is when this replica first saw it missing.
	Since time.Time
	// OrphanedAt is when it is (or was) orphaned: Since + ORPHAN_GRACE, or when
	// an operator forced its adoption.
	OrphanedAt time.Time
	// Orphaned: the next merge_wal of the store has it adopted.
	Orphaned bool
}

// NewOrphans returns a tracker of the shards disc's workers do not have, each
// orphaned grace after it was first seen missing, with its gauge registered in
// reg.
func NewOrphans(disc Discovery, grace time.Duration, clk clock.PassiveClock, reg prometheus.Registerer) *Orphans {
	o := &Orphans{disc: disc, grace: grace, clock: clk, missing: map[string]missingEntry{},
		gauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tidemark_orphaned_shards",
			Help: "Shards whose worker has not been registered for ORPHAN_GRACE, as of the last merge sweep (adopted by the next merge_wal of their store).",
		})}
	reg.MustRegister(o.gauge)
	return o
}

// Check is the merge sweep's scanner.OrphanCheck: it lists the live workers once
// and returns a function naming the orphaned shards of a row. Shards found live,
// or no longer active, are forgotten.
func (o *Orphans) Check(ctx context.Context) (func(stats.Row) []string, error) {
	workers, err := o.disc.Workers(ctx)
	if err != nil {
		return nil, fmt.Errorf("orphaned shards: discover workers: %w", err)
	}
	live := liveSet(workers)
	now := o.clock.Now()
	seen := map[string]bool{}
	count := 0
	var mu sync.Mutex
	return func(r stats.Row) []string {
		mu.Lock()
		defer mu.Unlock()
		out := o.orphaned(r, live, now, seen)
		count += len(out)
		o.gauge.Set(float64(count))
		o.forget(seen, r.Target)
		return out
	}, nil
}

// orphaned returns the shards of r missing for the grace period, recording since
// when each missing one is missing.
func (o *Orphans) orphaned(r stats.Row, live map[string]bool, now time.Time, seen map[string]bool) []string {
	var out []string
	for _, m := range o.observe(r, live, now, seen) {
		if m.Orphaned {
			out = append(out, m.Shard)
		}
	}
	return out
}

// observe records which active shards of r are missing among live (forgetting
// those found live), marks the missing ones in seen, and returns them in shard
// order.
func (o *Orphans) observe(r stats.Row, live map[string]bool, now time.Time, seen map[string]bool) []MissingShard {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []MissingShard
	for _, shard := range r.ActiveShards {
		key := orphanKey(r.Target, shard)
		if live[shard] {
			delete(o.missing, key)
			continue
		}
		seen[key] = true
		e, ok := o.missing[key]
		if !ok {
			e = missingEntry{since: now, orphanedAt: now.Add(o.grace)}
			o.missing[key] = e
		}
		out = append(out, MissingShard{Shard: shard, Since: e.since, OrphanedAt: e.orphanedAt, Orphaned: !now.Before(e.orphanedAt)})
	}
	return out
}

// forget drops the missing shards of target that its row no longer lists.
func (o *Orphans) forget(seen map[string]bool, target registry.Target) {
	o.mu.Lock()
	defer o.mu.Unlock()
	prefix := orphanKey(target, "")
	for key := range o.missing {
		if len(key) > len(prefix) && key[:len(prefix)] == prefix && !seen[key] {
			delete(o.missing, key)
		}
	}
}

// Of returns the orphaned shards of r among live workers (the fan-out's view).
func (o *Orphans) Of(r stats.Row, live []Worker) []string {
	return o.orphaned(r, liveSet(live), o.clock.Now(), map[string]bool{})
}

// MissingOf returns the missing shards of each row among live, for the stats an
// operator reads. It records what it sees as the sweep does: a look at the
// workers is as good an observation as the sweep's, and what the operator is
// shown is then what adoption goes by.
func (o *Orphans) MissingOf(rows []stats.Row, live []Worker) [][]MissingShard {
	set, now := liveSet(live), o.clock.Now()
	out := make([][]MissingShard, len(rows))
	for i, r := range rows {
		seen := map[string]bool{}
		out[i] = o.observe(r, set, now, seen)
		o.forget(seen, r.Target)
	}
	return out
}

// Force makes shard of target orphaned now, whatever the grace (an operator's
// `master admin adopt`), keeping since when it is missing. The caller checked that
// the target's stats row lists it as active and that no live worker has its name;
// a worker that registers under it before the adoption clears the mark, as it
// would the grace, and so does a row that no longer lists it.
func (o *Orphans) Force(target registry.Target, shard string) MissingShard {
	now := o.clock.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	key := orphanKey(target, shard)
	e, ok := o.missing[key]
	if !ok {
		e = missingEntry{since: now, orphanedAt: now}
	}
	if e.orphanedAt.After(now) {
		e.orphanedAt = now
	}
	o.missing[key] = e
	return MissingShard{Shard: shard, Since: e.since, OrphanedAt: e.orphanedAt, Orphaned: true}
}

func orphanKey(target registry.Target, shard string) string { return target.String() + "\x00" + shard }

func liveSet(workers []Worker) map[string]bool {
	set := make(map[string]bool, len(workers))
	for _, w := range workers {
		set[w.InstanceID] = true
	}
	return set
}

// ringFrom orders the live workers for a job keyed by key (a shard to adopt, a
// target to maintain): the first is the same one for a key while the live workers
// stay the same, spread over them by the key's hash; the others follow in ring
// order, to be asked when it cannot be reached.
func ringFrom(key string, live []Worker) []Worker {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	first := int(h.Sum32() % uint32(len(live)))
	return append(append([]Worker(nil), live[first:]...), live[:first]...)
}
