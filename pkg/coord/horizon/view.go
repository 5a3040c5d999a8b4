package horizon

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/pkg/coord/follow"
	"github.com/tidemark-io/tidemark/pkg/coord/keys"
	"github.com/tidemark-io/tidemark/pkg/registry"
)

// ErrNotSynced means the View has not listed the records yet (etcd away since the
// process started): no horizon is known, so the feed cannot answer.
var ErrNotSynced = errors.New("horizon: the records are not listed yet (etcd unreachable?)")

// View follows every shard's record; Horizon answers a store's horizon. It is safe
// for concurrent use.
type View struct {
	client *clientv3.Client
	prefix string
	clock  clock.Clock
	log    *slog.Logger

	mu      sync.Mutex
	stores  map[registry.Target]map[string]Record // target -> shard -> record
	synced  bool
	changed chan struct{} // closed and replaced at every change
}

// NewView returns a View of the records under prefix P.
func NewView(client *clientv3.Client, prefix string, clk clock.Clock, log *slog.Logger) *View {
	if log == nil {
		log = slog.Default()
	}
	return &View{
		client: client, prefix: keys.Under(prefix).HorizonPrefix(), clock: clk,
		log:     log.With("component", "horizon-view"),
		stores:  map[registry.Target]map[string]Record{},
		changed: make(chan struct{}),
	}
}

// Run follows the records until ctx is done.
func (v *View) Run(ctx context.Context) {
	follow.Run(ctx, v.client, v.prefix, (*viewHandler)(v), v.clock, v.log, "horizon records")
}

// Horizon returns the horizon of the store target as of the View's copy; ok is
// false when no shard of the store has a record (nothing was ever written to it).
// Before the first listing it waits for it until ctx is done.
func (v *View) Horizon(ctx context.Context, target registry.Target) (h uint64, ok bool, err error) {
	for {
		v.mu.Lock()
		synced, changed := v.synced, v.changed
		if synced {
			recs := make([]Record, 0, len(v.stores[target]))
			for _, r := range v.stores[target] {
				recs = append(recs, r)
			}
			v.mu.Unlock()
			h, ok = Of(recs)
			return h, ok, nil
		}
		v.mu.Unlock()
		select {
		case <-ctx.Done():
			return 0, false, errors.Join(ErrNotSynced, ctx.Err())
		case <-changed:
		}
	}
}

// Records returns the records of the store's shards, by shard.
func (v *View) Records(target registry.Target) map[string]Record {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[string]Record, len(v.stores[target]))
	for s, r := range v.stores[target] {
		out[s] = r
	}
	return out
}

// Changed is closed at the next change of any record (or listing).
func (v *View) Changed() <-chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.changed
}

// viewHandler is the View as follow's Handler.
type viewHandler View

func (h *viewHandler) Reset(kvs []*mvccpb.KeyValue, _ int64) {
	v := (*View)(h)
	v.mu.Lock()
	v.stores = map[registry.Target]map[string]Record{}
	for _, kv := range kvs {
		v.putLocked(string(kv.Key), kv.Value)
	}
	v.synced = true
	v.signalLocked()
	v.mu.Unlock()
}

func (h *viewHandler) Apply(events []*clientv3.Event, _ int64) {
	v := (*View)(h)
	v.mu.Lock()
	for _, ev := range events {
		if ev.Type == mvccpb.DELETE {
			if target, shard, ok := v.split(string(ev.Kv.Key)); ok {
				delete(v.stores[target], shard)
				if len(v.stores[target]) == 0 {
					delete(v.stores, target)
				}
			}
			continue
		}
		v.putLocked(string(ev.Kv.Key), ev.Kv.Value)
	}
	v.signalLocked()
	v.mu.Unlock()
}

// split parses P/horizon/<target>/<shard>, the target's text back into the value
// the View is asked by; shards hold no slash. A key whose target does not parse
// names no store anyone can ask about: not ok.
func (v *View) split(key string) (target registry.Target, shard string, ok bool) {
	rest := strings.TrimPrefix(key, v.prefix)
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 || i == len(rest)-1 {
		return registry.Target{}, "", false
	}
	target, err := registry.ParseTarget(rest[:i])
	if err != nil {
		return registry.Target{}, "", false
	}
	return target, rest[i+1:], true
}

func (v *View) putLocked(key string, data []byte) {
	target, shard, ok := v.split(key)
	r, err := decode(data)
	if !ok || err != nil {
		// A record we cannot read would let the horizon pass its shard: hold the
		// store at 0 instead (open, promise 0) until it is fixed.
		v.log.Error("horizon record unreadable; holding the store's feed back", "key", key, "err", err)
		r = Record{Open: true}
		if !ok {
			return
		}
	}
	m := v.stores[target]
	if m == nil {
		m = map[string]Record{}
		v.stores[target] = m
	}
	m[shard] = r
}

func (v *View) signalLocked() {
	close(v.changed)
	v.changed = make(chan struct{})
}
