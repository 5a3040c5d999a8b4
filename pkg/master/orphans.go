package master

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/pkg/scanner"
)

// DefaultOrphanGrace is ORPHAN_GRACE: how long a shard's worker must be missing
// from P/workers/ before the shard is adopted. Several worker lease TTLs (10 s),
// so an ordinary restart of a worker that keeps its INSTANCE_ID never triggers one.
const DefaultOrphanGrace = time.Minute

// orphans tracks, for every active shard of every store (scanner.Row.ActiveShards),
// since when no registered worker has its name. A shard missing for the grace
// period is orphaned: the merge sweep enqueues merge_wal for its target, and the
// fan-out has a live worker adopt it.
//
// The clock starts when this replica first sees the shard missing, so a master
// that takes over starts it again: a takeover delays adoption by up to the grace,
// never hastens it.
type orphans struct {
	disc  Discovery
	grace time.Duration
	clock clock.PassiveClock
	gauge prometheus.Gauge

	mu      sync.Mutex
	missing map[string]time.Time // "<target>\x00<shard>" -> first seen missing
}

func newOrphans(disc Discovery, grace time.Duration, clk clock.PassiveClock, reg prometheus.Registerer) *orphans {
	o := &orphans{disc: disc, grace: grace, clock: clk, missing: map[string]time.Time{},
		gauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tidemark_orphaned_shards",
			Help: "Shards whose worker has not been registered for ORPHAN_GRACE, as of the last merge sweep (adopted by the next merge_wal of their store).",
		})}
	reg.MustRegister(o.gauge)
	return o
}

// check is the merge sweep's scanner.OrphanCheck: it lists the live workers once
// and returns a function naming the orphaned shards of a row. Shards found live,
// or no longer active, are forgotten.
func (o *orphans) check(ctx context.Context) (func(scanner.Row) []string, error) {
	workers, err := o.disc.Workers(ctx)
	if err != nil {
		return nil, fmt.Errorf("orphaned shards: discover workers: %w", err)
	}
	live := make(map[string]bool, len(workers))
	for _, w := range workers {
		live[w.InstanceID] = true
	}
	now := o.clock.Now()
	seen := map[string]bool{}
	count := 0
	var mu sync.Mutex
	return func(r scanner.Row) []string {
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
func (o *orphans) orphaned(r scanner.Row, live map[string]bool, now time.Time, seen map[string]bool) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for _, shard := range r.ActiveShards {
		key := r.Target + "\x00" + shard
		if live[shard] {
			delete(o.missing, key)
			continue
		}
		seen[key] = true
		since, ok := o.missing[key]
		if !ok {
			o.missing[key] = now
			since = now
		}
		if now.Sub(since) >= o.grace {
			out = append(out, shard)
		}
	}
	return out
}

// forget drops the missing shards of target that its row no longer lists.
func (o *orphans) forget(seen map[string]bool, target string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	prefix := target + "\x00"
	for key := range o.missing {
		if len(key) > len(prefix) && key[:len(prefix)] == prefix && !seen[key] {
			delete(o.missing, key)
		}
	}
}

// of returns the orphaned shards of row among live workers (the fan-out's view).
func (o *orphans) of(r scanner.Row, live []Worker) []string {
	set := make(map[string]bool, len(live))
	for _, w := range live {
		set[w.InstanceID] = true
	}
	return o.orphaned(r, set, o.clock.Now(), map[string]bool{})
}

// adopterFor picks the live worker that adopts shard: the same one for a shard
// while the live workers stay the same, spread over them by the shard's hash.
func adopterFor(shard string, live []Worker) Worker {
	h := fnv.New32a()
	_, _ = h.Write([]byte(shard))
	return live[int(h.Sum32()%uint32(len(live)))]
}
