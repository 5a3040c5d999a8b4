package pending

import (
	"context"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/pkg/coord/follow"
	"github.com/tidemark-io/tidemark/pkg/coord/keys"
	"github.com/tidemark-io/tidemark/pkg/registry"
)

// Demand is one store's pending work, summed over the workers' entries.
type Demand struct {
	Target      registry.Target
	Generations int
	Bytes       int64
	// Age is how long the oldest of them has waited since its seal, as of the
	// Demand call: the largest over the entries of the entry's age when its
	// worker wrote it (both ends on the worker's clock) plus how long ago the View
	// received it (its own clock).
	Age time.Duration
	// Workers counts the entries (one per worker shard) that list the store.
	Workers int
}

// observed is an entry as the View holds it: when it arrived (the View's clock)
// and its mod revision, which tells a relisted entry from a changed one.
type observed struct {
	v          value
	modRev     int64
	receivedAt time.Time
}

// View follows every worker's pending entries. Run keeps it current; Demand sums
// them. It is safe for concurrent use.
type View struct {
	client *clientv3.Client
	prefix string
	clock  clock.Clock
	log    *slog.Logger

	mu      sync.Mutex
	entries map[string]observed // by key
	synced  bool
	rev     int64 // the etcd revision the entries are current to
	changed chan struct{}
}

// NewView returns a View of the entries under prefix P (keys.DefaultPrefix when
// empty), timing arrivals on clk (the real clock when nil).
func NewView(client *clientv3.Client, prefix string, clk clock.Clock, log *slog.Logger) *View {
	if clk == nil {
		clk = clock.RealClock{}
	}
	if log == nil {
		log = slog.Default()
	}
	return &View{
		client: client, prefix: keys.Under(prefix).PendingPrefix(), clock: clk,
		log:     log.With("component", "pending-view"),
		entries: map[string]observed{},
		changed: make(chan struct{}, 1),
	}
}

// Changed receives after every change to the entries (changes coalesce: one
// receive may stand for many).
func (v *View) Changed() <-chan struct{} { return v.changed }

// Synced reports whether the View has listed the entries at least once.
func (v *View) Synced() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.synced
}

// Revision is the etcd revision the View is current to: every change to the
// entries up to it is applied.
func (v *View) Revision() int64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.rev
}

// Run lists the entries and follows them with a watch until ctx is done (package
// follow): a change made while the watch was broken arrives late, never lost.
func (v *View) Run(ctx context.Context) {
	follow.Run(ctx, v.client, v.prefix, (*viewHandler)(v), v.clock, v.log, "pending entries")
}

// viewHandler is the View as follow's Handler: Reset and Apply are not the View's
// API.
type viewHandler View

// Reset replaces the entries by a fresh listing.
func (h *viewHandler) Reset(kvs []*mvccpb.KeyValue, rev int64) {
	v := (*View)(h)
	now := v.clock.Now()
	v.mu.Lock()
	old := v.entries
	v.entries = make(map[string]observed, len(kvs))
	for _, kv := range kvs {
		key := string(kv.Key)
		if prev, ok := old[key]; ok && prev.modRev == kv.ModRevision {
			v.entries[key] = prev // unchanged: it arrived when it first did
			continue
		}
		v.putLocked(key, kv.Value, kv.ModRevision, now)
	}
	v.synced = true
	v.rev = rev
	v.mu.Unlock()
	v.signal()
}

// Apply applies one watch response's events.
func (h *viewHandler) Apply(events []*clientv3.Event, rev int64) {
	v := (*View)(h)
	now := v.clock.Now()
	v.mu.Lock()
	v.rev = max(v.rev, rev)
	for _, ev := range events {
		key := string(ev.Kv.Key)
		if ev.Type == mvccpb.DELETE {
			delete(v.entries, key)
			continue
		}
		v.putLocked(key, ev.Kv.Value, ev.Kv.ModRevision, now)
	}
	v.mu.Unlock()
	v.signal()
}

func (v *View) putLocked(key string, data []byte, modRev int64, now time.Time) {
	// P/pending/<instance>/<target>: instance ids have no slash.
	// The key is where the target's text enters: parsed here, once.
	_, text, ok := strings.Cut(strings.TrimPrefix(key, v.prefix), "/")
	target, err := registry.ParseTarget(text)
	var val value
	if err == nil {
		val, err = decode(target, data)
	}
	if !ok || err != nil {
		// A hint we cannot read is a hint we do without: the stats scan still
		// sees the worker's shards.
		v.log.Warn("pending entry skipped", "key", key, "err", err)
		delete(v.entries, key)
		return
	}
	v.entries[key] = observed{v: val, modRev: modRev, receivedAt: now}
}

func (v *View) signal() {
	select {
	case v.changed <- struct{}{}:
	default:
	}
}

// Generations sums the pending generations every worker's entry lists for target:
// the store's pending count across its shards, as current as the workers' last
// publications (a worker writes within MinInterval of a change), with no
// object-store request. A worker that only writes sees only its own shard in its
// snapshot; this is how it sees the others' (its add backpressure).
func (v *View) Generations(target registry.Target) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := 0
	for _, o := range v.entries {
		if o.v.Entry.Target == target {
			n += o.v.Entry.Generations
		}
	}
	return n
}

// Demand sums the entries by store, most pending generations first (then by
// target), aged as of now (the View's clock). An entry written before etcd
// revision since(target) does not count towards that target: the caller knows its
// pending work was taken by a merge claimed at that revision (its fencing token),
// and waits for the worker's next entry. Revisions, not clocks: the claim and the
// write are stamped by one etcd, whatever the skew between machines. since may be
// nil.
func (v *View) Demand(now time.Time, since func(target registry.Target) int64) []Demand {
	v.mu.Lock()
	defer v.mu.Unlock()
	by := map[registry.Target]*Demand{}
	for _, o := range v.entries {
		e := o.v.Entry
		if since != nil && o.modRev < since(e.Target) {
			continue
		}
		d := by[e.Target]
		if d == nil {
			d = &Demand{Target: e.Target}
			by[e.Target] = d
		}
		d.Generations += e.Generations
		d.Bytes += e.Bytes
		d.Workers++
		age := max(o.v.PublishedAt.Sub(e.OldestSealedAt), 0) + max(now.Sub(o.receivedAt), 0)
		d.Age = max(d.Age, age)
	}
	out := make([]Demand, 0, len(by))
	for _, d := range by {
		out = append(out, *d)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Generations != out[j].Generations {
			return out[i].Generations > out[j].Generations
		}
		return out[i].Target.Compare(out[j].Target) < 0
	})
	return out
}
