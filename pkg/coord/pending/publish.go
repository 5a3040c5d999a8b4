package pending

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/pkg/coord/keys"
	"github.com/tidemark-io/tidemark/pkg/registry"
)

// Publisher defaults.
const (
	// DefaultMinInterval spaces a worker's writes: a worker sealing many stores a
	// second writes one transaction, and the master hears of a new generation
	// within about this long.
	DefaultMinInterval = 500 * time.Millisecond
	// DefaultRefresh is how often the entries are checked even without a Notify:
	// it catches pending work that changed without a seal or merge of this
	// worker's (another worker's merge of the store moved the watermark).
	DefaultRefresh = 5 * time.Second
	// opTimeout bounds each etcd call.
	opTimeout = 5 * time.Second
	// txnOps bounds the operations of one transaction, under etcd's default
	// --max-txn-ops (128).
	txnOps = 64
)

// Source returns this worker's pending generations, one entry per store (entries
// with none are dropped). It must not block on I/O: it reads what the worker holds.
type Source func() []Entry

// Lease returns the lease the entries are put under: the worker's registration
// lease, 0 while unregistered (nothing is published then).
type Lease func() clientv3.LeaseID

// PublisherConfig configures a Publisher. Zero fields take their defaults.
type PublisherConfig struct {
	Prefix      string // P (keys.DefaultPrefix)
	Instance    string
	MinInterval time.Duration
	Refresh     time.Duration
	Clock       clock.Clock
	Logger      *slog.Logger
}

// Publisher keeps a worker's P/pending/<instance>/ entries up to date. Notify is
// safe to call from any goroutine; Run does the writes.
type Publisher struct {
	client *clientv3.Client
	source Source
	lease  Lease
	cfg    PublisherConfig
	keys   keys.Schema
	log    *slog.Logger
	wake   chan struct{}

	// What Run last wrote, by target, and under which lease (Run's goroutine
	// only). Entries written under an older lease died with it.
	last      map[registry.Target]Entry
	lastLease clientv3.LeaseID
}

// NewPublisher returns a Publisher of source's entries under lease.
func NewPublisher(client *clientv3.Client, source Source, lease Lease, cfg PublisherConfig) *Publisher {
	if cfg.MinInterval <= 0 {
		cfg.MinInterval = DefaultMinInterval
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	k := keys.Under(cfg.Prefix)
	return &Publisher{
		client: client, source: source, lease: lease, cfg: cfg, keys: k,
		log:  cfg.Logger.With("component", "pending-publisher", "prefix", k.PendingOf(cfg.Instance)),
		wake: make(chan struct{}, 1),
		last: map[registry.Target]Entry{},
	}
}

// Notify says the pending work may have changed (a seal, a merge, a drain). It
// never blocks; notifications between two writes coalesce into one.
func (p *Publisher) Notify() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Run publishes at once, then after every Notify (at most once per MinInterval)
// and every Refresh, until ctx is done. A failed write is logged and tried again
// at the next wake or refresh. It leaves the entries to die with the lease: the
// worker revokes it when it stops.
func (p *Publisher) Run(ctx context.Context) {
	for {
		start := p.cfg.Clock.Now()
		if err := p.publish(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn("pending entries not written; tried again at the next change", "err", err)
		}
		// Unregistered: look again soon, so the first entries follow the
		// registration by moments, not by a Refresh.
		wait := p.cfg.Refresh
		if p.lastLease == 0 {
			wait = p.cfg.MinInterval
		}
		refresh := p.cfg.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			refresh.Stop()
			return
		case <-p.wake:
		case <-refresh.C():
		}
		refresh.Stop()
		// Space the writes: what changes meanwhile goes into the next one.
		if wait := p.cfg.MinInterval - p.cfg.Clock.Since(start); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-p.cfg.Clock.After(wait):
			}
		}
	}
}

// publish writes the entries that changed since the last write (all of them under
// a new lease) and deletes those of stores with nothing pending any more.
func (p *Publisher) publish(ctx context.Context) error {
	lease := p.lease()
	if lease != p.lastLease {
		// Under a new lease (or none) nothing of ours is left: the old lease's
		// entries died with it.
		clear(p.last)
		p.lastLease = lease
	}
	if lease == 0 {
		return nil
	}
	cur := map[registry.Target]Entry{}
	for _, e := range p.source() {
		if e.Generations > 0 {
			cur[e.Target] = e
		}
	}
	now := p.cfg.Clock.Now()
	type change struct {
		op    clientv3.Op
		entry Entry
		del   bool
	}
	var changes []change
	for _, target := range slices.SortedFunc(maps.Keys(cur), registry.Target.Compare) {
		e := cur[target]
		if old, ok := p.last[target]; ok && same(old, e) {
			continue
		}
		v, err := encode(e, now)
		if err != nil {
			return err
		}
		changes = append(changes, change{op: clientv3.OpPut(p.keys.Pending(p.cfg.Instance, target.String()), v, clientv3.WithLease(lease)), entry: e})
	}
	for _, target := range slices.SortedFunc(maps.Keys(p.last), registry.Target.Compare) {
		if _, ok := cur[target]; !ok {
			changes = append(changes, change{op: clientv3.OpDelete(p.keys.Pending(p.cfg.Instance, target.String())), entry: Entry{Target: target}, del: true})
		}
	}
	for batch := range slices.Chunk(changes, txnOps) {
		ops := make([]clientv3.Op, len(batch))
		for i, c := range batch {
			ops[i] = c.op
		}
		tctx, cancel := context.WithTimeout(ctx, opTimeout)
		_, err := p.client.Txn(tctx).Then(ops...).Commit()
		cancel()
		if err != nil {
			return fmt.Errorf("write %d pending entries under %s: %w", len(ops), p.keys.PendingOf(p.cfg.Instance), err)
		}
		for _, c := range batch {
			if c.del {
				delete(p.last, c.entry.Target)
			} else {
				p.last[c.entry.Target] = c.entry
			}
		}
	}
	return nil
}
