package pending

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/pkg/coord/keys"
)

// Publisher defaults.
const (
	// DefaultMinInterval spaces a worker's record writes: a worker sealing many
	// stores a second writes once, and the master hears of a new generation
	// within about this long.
	DefaultMinInterval = 500 * time.Millisecond
	// DefaultRefresh is how often the record is checked even without a Notify:
	// it catches a new registration lease (the record died with the old one)
	// and pending work that changed without a seal or merge of this worker's
	// (another worker's merge of the store moved the watermark).
	DefaultRefresh = 5 * time.Second
	// opTimeout bounds each etcd call.
	opTimeout = 5 * time.Second
)

// Source returns this worker's pending generations, one entry per store (entries
// with none are dropped). It must not block on I/O: it reads what the worker holds.
type Source func() []Entry

// Lease returns the lease the record is put under: the worker's registration
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

// Publisher keeps a worker's P/pending/<instance> record up to date. Notify is
// safe to call from any goroutine; Run does the writes.
type Publisher struct {
	client *clientv3.Client
	source Source
	lease  Lease
	cfg    PublisherConfig
	key    string
	log    *slog.Logger
	wake   chan struct{}

	// What Run last wrote, and under which lease (Run's goroutine only).
	last      Record
	lastLease clientv3.LeaseID
	written   bool
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
	key := keys.Under(cfg.Prefix).Pending(cfg.Instance)
	return &Publisher{
		client: client, source: source, lease: lease, cfg: cfg, key: key,
		log:  cfg.Logger.With("component", "pending-publisher", "key", key),
		wake: make(chan struct{}, 1),
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
// at the next wake or refresh. It leaves the record to die with the lease: the
// worker revokes it when it stops.
func (p *Publisher) Run(ctx context.Context) {
	for {
		start := p.cfg.Clock.Now()
		if err := p.publish(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn("pending record not written; tried again at the next change", "err", err)
		}
		refresh := p.cfg.Clock.NewTimer(p.cfg.Refresh)
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

// publish writes the record if it changed or the lease did: a put of the stores
// with pending generations, or a delete when there are none.
func (p *Publisher) publish(ctx context.Context) error {
	lease := p.lease()
	if lease == 0 {
		p.written = false // whatever we wrote died with the old lease
		return nil
	}
	rec := newRecord(p.cfg.Instance, p.source(), p.cfg.Clock.Now())
	if p.written && lease == p.lastLease && sameContents(rec, p.last) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if len(rec.Stores) == 0 && rec.Omitted == 0 {
		if _, err := p.client.Delete(ctx, p.key); err != nil {
			return fmt.Errorf("delete %s: %w", p.key, err)
		}
	} else {
		value, err := json.Marshal(rec)
		if err != nil {
			return fmt.Errorf("pending record: %w", err)
		}
		if _, err := p.client.Put(ctx, p.key, string(value), clientv3.WithLease(lease)); err != nil {
			return fmt.Errorf("put %s: %w", p.key, err)
		}
	}
	p.last, p.lastLease, p.written = rec, lease, true
	return nil
}
