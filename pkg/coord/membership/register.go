package membership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/internal/backoff"
	"github.com/tidemark-io/tidemark/pkg/coord/keys"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
)

// Registration defaults (the worker's LEASE_TTL, the retry backoff).
const (
	DefaultLeaseTTL    = 10 * time.Second
	minLeaseTTL        = 2 * time.Second
	defaultBackoffMin  = 500 * time.Millisecond
	defaultBackoffMax  = 30 * time.Second
	registrationOpWait = 5 * time.Second // bound on each etcd call of a registration
)

// Registration keeps this worker's record in etcd for as long as Run runs:
//
//   - The record lives under a lease of its own (TTL WithLeaseTTL) kept alive by
//     the client, so a worker that dies or loses etcd for longer than the TTL
//     disappears from P/workers/ and the master stops calling it.
//   - A lost lease (expired while etcd was unreachable, or revoked by someone) is
//     replaced: Run grants a new one and puts the record again, retrying with
//     exponential backoff and jitter while etcd refuses, and right after an
//     attempt that etcd did not answer (it waited already), so the record is back
//     moments after etcd is.
//   - A record deleted by hand while the lease lives is put back at once.
//   - When Run's context ends, the lease is revoked, which deletes the record, so a
//     worker stopping cleanly leaves the master's list at once instead of after a
//     TTL.
type Registration struct {
	client *clientv3.Client
	record Worker
	key    string
	value  []byte
	opts   options
	log    *slog.Logger
	// last is the lease of the previous registration, used by Run only: finding our
	// own record still under it is expected after a lost keepalive, not a conflict.
	last clientv3.LeaseID
	// current is the lease the record lives under now (0 while unregistered), for
	// records that must live and die with this worker's (Lease).
	current atomic.Int64
}

type options struct {
	prefix     string
	ttl        time.Duration
	backoffMin time.Duration
	backoffMax time.Duration
	clock      clock.Clock
	logger     *slog.Logger
}

// Option configures a Registration.
type Option func(*options)

// WithPrefix sets the key prefix P (keys.DefaultPrefix when empty).
func WithPrefix(p string) Option {
	return func(o *options) {
		if p != "" {
			o.prefix = p
		}
	}
}

// WithLeaseTTL sets the TTL of the registration's lease, rounded up to whole
// seconds (etcd's unit); at least 2 s. Zero keeps DefaultLeaseTTL.
func WithLeaseTTL(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.ttl = d
		}
	}
}

// WithBackoff sets the bounds of the backoff between registration attempts.
func WithBackoff(minDelay, maxDelay time.Duration) Option {
	return func(o *options) {
		if minDelay > 0 {
			o.backoffMin = minDelay
		}
		if maxDelay > 0 {
			o.backoffMax = maxDelay
		}
	}
}

// WithClock sets the clock the backoff waits on (tests inject one).
func WithClock(c clock.Clock) Option {
	return func(o *options) {
		if c != nil {
			o.clock = c
		}
	}
}

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.logger = l
		}
	}
}

// NewRegistration returns the registration of rec (InstanceID required; StartedAt
// defaults to now); call Run to register.
func NewRegistration(client *clientv3.Client, rec Worker, opts ...Option) (*Registration, error) {
	o := options{
		prefix:     keys.DefaultPrefix,
		ttl:        DefaultLeaseTTL,
		backoffMin: defaultBackoffMin,
		backoffMax: defaultBackoffMax,
		clock:      clock.RealClock{},
		logger:     slog.New(slog.DiscardHandler),
	}
	for _, opt := range opts {
		opt(&o)
	}
	if client == nil {
		return nil, errors.New("worker registration: no etcd client")
	}
	// The instance id is a key segment: the shard-name rules keep '/' out of it.
	if err := wal.ValidateShard(rec.InstanceID); err != nil {
		return nil, fmt.Errorf("worker registration: instance id: %w", err)
	}
	if o.ttl < minLeaseTTL {
		return nil, fmt.Errorf("worker registration: lease TTL %s is shorter than %s", o.ttl, minLeaseTTL)
	}
	if o.backoffMax < o.backoffMin {
		o.backoffMax = o.backoffMin
	}
	if rec.StartedAt.IsZero() {
		rec.StartedAt = o.clock.Now()
	}
	rec.StartedAt = rec.StartedAt.UTC()
	value, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("worker registration: %w", err)
	}
	key := keys.Under(o.prefix).Worker(rec.InstanceID)
	return &Registration{
		client: client, record: rec, key: key, value: value, opts: o,
		log: o.logger.With("key", key, "instance_id", rec.InstanceID),
	}, nil
}

// Key is the record's key, P/workers/<instance>.
func (r *Registration) Key() string { return r.key }

// Lease is the lease the worker record lives under now, 0 while the worker is not
// registered. A key put under it goes away when the worker does (its lease expires
// or is revoked at shutdown); after a lost lease the worker registers under a new
// one, and such a key must be put again under that.
func (r *Registration) Lease() clientv3.LeaseID { return clientv3.LeaseID(r.current.Load()) }

// Record is the registered record.
func (r *Registration) Record() Worker { return r.record }

// ttlSeconds is the lease TTL in etcd's unit, rounded up.
func (r *Registration) ttlSeconds() int64 {
	return int64((r.opts.ttl + time.Second - 1) / time.Second)
}

// Run registers the worker and keeps it registered until ctx is done, then revokes
// the lease (deleting the record) and returns nil. Failures while ctx lives are
// logged and retried, never returned: a worker keeps serving while etcd is away.
func (r *Registration) Run(ctx context.Context) error {
	// Jitter down to half a delay: workers that lost etcd together do not come
	// back in lockstep.
	retry := backoff.Policy{Min: r.opts.backoffMin, Max: r.opts.backoffMax, Jitter: 0.5}.Start()
	for {
		lease, rev, err := r.register(ctx)
		if err == nil {
			r.last = lease
			r.log.Info("worker registered", "lease", fmt.Sprintf("%x", int64(lease)), "ttl", r.opts.ttl.String(),
				"grpc_addr", r.record.GRPCAddr, "http_addr", r.record.HTTPAddr)
			held := r.opts.clock.Now()
			r.current.Store(int64(lease))
			lost := r.hold(ctx, lease, rev)
			r.current.Store(0)
			if !lost {
				r.revoke(ctx, lease)
				return nil
			}
			// Only a registration that lasted a TTL resets the backoff, so a lease
			// that keeps being lost at once does not turn into a busy loop.
			if r.opts.clock.Since(held) >= r.opts.ttl {
				retry.Reset()
			}
			wait := retry.Next()
			r.log.Warn("worker registration lost (lease expired or revoked); registering again", "retry_in", wait.String())
			if backoff.Sleep(ctx, r.opts.clock, wait) != nil {
				return nil
			}
		} else {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, context.DeadlineExceeded) {
				// etcd did not answer for registrationOpWait: the attempt itself
				// waited for it, so the next one starts soon instead of after a
				// backoff that grew through the outage. A worker that is
				// unregistered after etcd is back is skipped by every merge; the
				// etcd outage campaign saw it come back 24 s after etcd did.
				retry.Reset()
			}
			wait := retry.Next()
			r.log.Warn("worker registration failed; retrying", "err", err, "retry_in", wait.String())
			if backoff.Sleep(ctx, r.opts.clock, wait) != nil {
				return nil
			}
		}
	}
}

// register grants a lease and puts the record under it, returning the lease and
// the revision of the put.
func (r *Registration) register(ctx context.Context) (clientv3.LeaseID, int64, error) {
	gctx, cancel := context.WithTimeout(ctx, registrationOpWait)
	defer cancel()
	grant, err := r.client.Grant(gctx, r.ttlSeconds())
	if err != nil {
		return 0, 0, fmt.Errorf("grant lease for %s: %w", r.key, err)
	}
	// One put, no compare: the key belongs to this instance id. A record left by an
	// earlier process of the same instance (crashed, its lease not yet expired) is
	// replaced and moves to our lease, so that lease's expiry cannot delete it.
	resp, err := r.client.Put(gctx, r.key, string(r.value), clientv3.WithLease(grant.ID), clientv3.WithPrevKV())
	if err != nil {
		r.revoke(ctx, grant.ID)
		return 0, 0, fmt.Errorf("put %s: %w", r.key, err)
	}
	if prev := resp.PrevKv; prev != nil && r.last != 0 && clientv3.LeaseID(prev.Lease) == r.last {
		r.log.Info("moved the worker record from the lost lease to a new one")
	} else if prev != nil {
		r.log.Warn("replaced an existing worker record of this instance id: a previous process that did not "+
			"deregister, or another process running with the same INSTANCE_ID",
			"previous", string(prev.Value), "previous_lease", fmt.Sprintf("%x", prev.Lease))
	}
	return grant.ID, resp.Header.Revision, nil
}

// hold keeps lease alive until ctx is done (false) or the lease is lost (true).
// Meanwhile guard watches the record and puts it back if someone deletes it while
// the lease lives. The watch runs beside the keepalive, not in the same loop:
// clientv3's Watch blocks until etcd answers, and a lease lost while etcd is away
// must still be noticed when its keepalive gives up, so the next registration
// attempt is scheduled instead of waiting for etcd to come back first.
func (r *Registration) hold(ctx context.Context, lease clientv3.LeaseID, rev int64) (lost bool) {
	hctx, cancel := context.WithCancel(ctx)
	// KeepAlive's channel closes when the lease expires, is revoked, or was not
	// renewed for a TTL (etcd unreachable): in each case the lease is gone for us.
	ka, err := r.client.KeepAlive(hctx, lease)
	if err != nil {
		cancel()
		if ctx.Err() != nil {
			return false
		}
		r.log.Warn("keepalive of the registration lease failed", "err", err)
		return true
	}
	gone := make(chan struct{})
	guarded := make(chan struct{})
	go func() {
		defer close(guarded)
		if r.guard(hctx, lease, rev) {
			close(gone)
		}
	}()
	defer func() {
		cancel()
		<-guarded
	}()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-gone:
			return ctx.Err() == nil
		case _, ok := <-ka:
			if !ok {
				return ctx.Err() == nil
			}
		}
	}
}

// guard watches the record from rev on until ctx is done (false) and puts it back
// under lease when it is deleted; it returns true when the record is gone and
// cannot be put back (the lease is gone too).
func (r *Registration) guard(ctx context.Context, lease clientv3.LeaseID, rev int64) (gone bool) {
	watch := r.client.Watch(ctx, r.key, clientv3.WithRev(rev+1))
	for {
		var wr clientv3.WatchResponse
		var ok bool
		select {
		case <-ctx.Done():
			return false
		case wr, ok = <-watch:
		}
		if ctx.Err() != nil {
			return false
		}
		if !ok || wr.Err() != nil {
			// Compacted or closed: check the key directly and watch again from now.
			next, gone := r.check(ctx, lease)
			if gone {
				return true
			}
			if next > 0 {
				rev = next
			}
			watch = r.client.Watch(ctx, r.key, clientv3.WithRev(rev+1))
			continue
		}
		for _, ev := range wr.Events {
			rev = ev.Kv.ModRevision
			switch {
			case ev.Type == mvccpb.DELETE:
				// Deleted by hand (a lease expiry would also close the keepalive).
				// Put it back under the same lease; if that lease is gone too, we
				// are lost.
				if _, err := r.put(ctx, lease); err != nil {
					r.log.Warn("worker record deleted and could not be put back", "err", err)
					return ctx.Err() == nil
				}
				r.log.Warn("worker record was deleted while its lease lived; put it back")
			case clientv3.LeaseID(ev.Kv.Lease) != lease:
				r.log.Error("another process wrote this worker's record: two workers share an INSTANCE_ID?",
					"value", string(ev.Kv.Value), "lease", fmt.Sprintf("%x", ev.Kv.Lease))
			}
		}
	}
}

// check reads the key after a watch failure: gone reports that the record is
// missing and cannot be put back under lease; rev is the revision read.
func (r *Registration) check(ctx context.Context, lease clientv3.LeaseID) (rev int64, gone bool) {
	gctx, cancel := context.WithTimeout(ctx, registrationOpWait)
	defer cancel()
	resp, err := r.client.Get(gctx, r.key)
	if err != nil {
		return 0, false // etcd away: the keepalive decides whether the lease is lost
	}
	if len(resp.Kvs) > 0 {
		return resp.Header.Revision, false
	}
	putRev, err := r.put(ctx, lease)
	if err != nil {
		return 0, true
	}
	return putRev, false
}

func (r *Registration) put(ctx context.Context, lease clientv3.LeaseID) (int64, error) {
	pctx, cancel := context.WithTimeout(ctx, registrationOpWait)
	defer cancel()
	resp, err := r.client.Put(pctx, r.key, string(r.value), clientv3.WithLease(lease))
	if err != nil {
		return 0, fmt.Errorf("put %s: %w", r.key, err)
	}
	return resp.Header.Revision, nil
}

// revoke revokes lease, deleting the record, even after ctx is done.
func (r *Registration) revoke(ctx context.Context, lease clientv3.LeaseID) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), registrationOpWait)
	defer cancel()
	if _, err := r.client.Revoke(rctx, lease); err != nil {
		r.log.Warn("revoking the registration lease failed; the record expires with it",
			"lease", fmt.Sprintf("%x", int64(lease)), "ttl", r.opts.ttl.String(), "err", err)
		return
	}
	r.log.Info("worker deregistered", "lease", fmt.Sprintf("%x", int64(lease)))
}
