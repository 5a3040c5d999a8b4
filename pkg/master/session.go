package master

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/internal/backoff"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"k8s.io/utils/clock"
)

// sessionOpTimeout bounds each attempt to start a session (lease check, grant):
// short, so that an attempt begun while etcd was away does not delay the next one
// long after etcd is back (an etcd restart resets lease TTLs, so a prompt attempt
// still finds the old lease). revokeTimeout bounds the revoke at shutdown.
const (
	sessionOpTimeout = 2 * time.Second
	revokeTimeout    = 5 * time.Second
)

// errNoSession means the master has no live etcd session right now: its lease's
// keepalive ended and a new session is not up yet (etcd unreachable).
var errNoSession = errors.New("no live etcd session (etcd unreachable?)")

// sessionKeeper keeps the master's etcd session. The session's lease carries the
// replica's claims, target locks and coordination locks.
//
// A session ends when its keepalive stream gets no answer for a TTL (etcd
// unreachable) or learns the lease is gone (expired, revoked). The keeper then
// starts a new session: on the same lease if etcd still has it (an etcd restart
// resets lease TTLs, so a short outage keeps every claim), on a new lease
// otherwise. Everything that needs the lease asks for it at each use (the
// scheduler at each claim, the scanner and sweep at each round), so the new lease
// is picked up without restarting anything; claims made under a lost lease fail
// their Finish with tasks.ErrClaimLost and their tasks are recovered as orphans.
type sessionKeeper struct {
	client *clientv3.Client
	ttl    int // seconds
	log    *slog.Logger
	// lost, if set, is told a lease that is gone once a session started on a new
	// one (the scheduler's AbandonLease stops the runs of its claims).
	lost func(clientv3.LeaseID)

	mu     sync.Mutex
	cur    *concurrency.Session
	ctx    context.Context // every session's keepalive context; ended by close
	cancel context.CancelFunc
}

// sessionRetry spaces the attempts to start a new session while etcd does not
// answer: soon at first (a blip), at most every 2 s (the claims wait on it).
var sessionRetry = backoff.Policy{Min: 250 * time.Millisecond, Max: 2 * time.Second}

// start opens the first session.
func (k *sessionKeeper) start(ctx context.Context) error {
	k.mu.Lock()
	if k.ctx == nil {
		k.ctx, k.cancel = context.WithCancel(context.Background())
	}
	k.mu.Unlock()
	s, _, err := k.open(ctx, clientv3.NoLease)
	if err != nil {
		return err
	}
	k.set(s)
	k.log.Info("etcd session started", "lease", leaseHex(s.Lease()), "ttl_seconds", k.ttl)
	return nil
}

// open starts a session on lease reuse if etcd still has it, else on a new lease.
func (k *sessionKeeper) open(ctx context.Context, reuse clientv3.LeaseID) (*concurrency.Session, bool, error) {
	octx, cancel := context.WithTimeout(ctx, sessionOpTimeout)
	defer cancel()
	id := clientv3.NoLease
	if reuse != clientv3.NoLease {
		resp, err := k.client.TimeToLive(octx, reuse)
		if err != nil {
			return nil, false, fmt.Errorf("check lease %s: %w", leaseHex(reuse), err)
		}
		if resp.TTL > 0 {
			id = reuse
		}
	}
	reused := id != clientv3.NoLease
	if !reused {
		resp, err := k.client.Grant(octx, int64(k.ttl))
		if err != nil {
			return nil, false, fmt.Errorf("grant a lease of %ds: %w", k.ttl, err)
		}
		id = resp.ID
	}
	// The keepalive runs on the keeper's context, not ctx: it must outlive the
	// call, and end only when the keeper closes.
	s, err := concurrency.NewSession(k.client, concurrency.WithLease(id), concurrency.WithTTL(k.ttl),
		concurrency.WithContext(k.ctx))
	if err != nil {
		return nil, false, fmt.Errorf("keep lease %s alive: %w", leaseHex(id), err)
	}
	return s, reused, nil
}

func (k *sessionKeeper) set(s *concurrency.Session) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.cur = s
}

func (k *sessionKeeper) current() *concurrency.Session {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cur
}

// lease is the current session's lease (the scheduler's Lease). After the
// session ended and before a new one is up it is the old lease: a claim under it
// fails if etcd no longer has it, and the scheduler backs off.
func (k *sessionKeeper) lease() clientv3.LeaseID {
	if s := k.current(); s != nil {
		return s.Lease()
	}
	return clientv3.NoLease
}

// scannerLease is the scanner's and sweep's scanner.Lease: the current lease
// while its session lives, errNoSession otherwise (the round fails and the next
// one asks again).
func (k *sessionKeeper) scannerLease(context.Context) (clientv3.LeaseID, error) {
	s := k.current()
	if s == nil {
		return clientv3.NoLease, errNoSession
	}
	select {
	case <-s.Done():
		return clientv3.NoLease, errNoSession
	default:
		return s.Lease(), nil
	}
}

// run replaces the session whenever it ends, until ctx is done.
func (k *sessionKeeper) run(ctx context.Context) {
	for {
		old := k.current()
		select {
		case <-ctx.Done():
			return
		case <-old.Done():
		}
		if ctx.Err() != nil {
			return
		}
		k.log.Warn("etcd session ended: no keepalive answer within the lease TTL (etcd unreachable?) or the lease is gone; starting a new one",
			"lease", leaseHex(old.Lease()))
		retry := sessionRetry.Start()
		for {
			s, reused, err := k.open(ctx, old.Lease())
			if err == nil {
				k.set(s)
				if reused {
					k.log.Info("etcd session resumed on the same lease: claims and locks kept", "lease", leaseHex(s.Lease()))
				} else {
					k.log.Warn("etcd session started on a new lease: claims and locks of the old one are lost",
						"lease", leaseHex(s.Lease()), "old_lease", leaseHex(old.Lease()))
					if k.lost != nil {
						k.lost(old.Lease())
					}
				}
				break
			}
			if ctx.Err() != nil {
				return
			}
			wait := retry.Next()
			k.log.Warn("etcd session not started; retrying", "err", err, "retry_in", wait.String())
			if backoff.Sleep(ctx, clock.RealClock{}, wait) != nil {
				return
			}
		}
	}
}

// close ends the keepalive and revokes the lease, which deletes every key under
// it (claims, target locks, coordination locks) at once. Call it after run
// returned.
func (k *sessionKeeper) close() error {
	s := k.current()
	defer func() {
		if k.cancel != nil {
			k.cancel()
		}
	}()
	if s == nil {
		return nil
	}
	s.Orphan()
	ctx, cancel := context.WithTimeout(context.Background(), revokeTimeout)
	defer cancel()
	_, err := k.client.Revoke(ctx, s.Lease())
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("revoke lease %s: %w", leaseHex(s.Lease()), err)
	}
	k.log.Info("etcd session closed: lease revoked", "lease", leaseHex(s.Lease()))
	return nil
}
