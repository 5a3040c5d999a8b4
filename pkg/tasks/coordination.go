package tasks

import (
	"context"
	"errors"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

var (
	// ErrCoordinationHeld means another holder has the coordination lock, or this
	// holder has it under another acquisition (it is not re-entrant).
	ErrCoordinationHeld = errors.New("coordination lock held")
	// ErrCoordinationLost means the lock is no longer ours: our lease expired or
	// was revoked (and maybe someone else took the lock). A guarded write did not
	// happen.
	ErrCoordinationLost = errors.New("coordination lock lost")
)

// CoordinationLock is ownership of P/coordination/<name>, which makes one master
// replica at a time do a job such as scanning stores or sweeping merges.
//
// Holding the lock at the start of a job proves nothing later: the lease may
// expire mid-job and a session's Done channel says so late. So every write that
// needs ownership goes in a transaction that compares IsOwner (or through Do),
// like concurrency.Mutex.IsOwner.
type CoordinationLock struct {
	client *clientv3.Client
	key    string
	holder string
	lease  clientv3.LeaseID
	rev    int64 // create revision of key: our acquisition
}

// AcquireCoordination takes the coordination lock name under lease, without
// waiting: if anyone holds it, it returns ErrCoordinationHeld naming the holder.
// The lock is released by Release or by the end of lease.
//
// It is deliberately not re-entrant: two jobs of one replica on one lease must
// not both believe they hold the lock (as two concurrency.Mutex on one Session
// do, sharing a key).
func (s *Queue) AcquireCoordination(ctx context.Context, name string, lease clientv3.LeaseID) (*CoordinationLock, error) {
	if name == "" || strings.ContainsAny(name, "/\x00") {
		return nil, fmt.Errorf("%w: coordination lock name %q (non-empty, no '/')", ErrInvalidArgument, name)
	}
	if lease == clientv3.NoLease {
		return nil, fmt.Errorf("%w: coordination lock %q needs a lease, so that it dies with its holder", ErrInvalidArgument, name)
	}
	key := s.keys.Coordination(name)

	// Acquire transaction:
	//   if   create_revision(P/coordination/<name>) == 0      nobody holds it
	//   then put P/coordination/<name> = holder (our lease)    it dies with our lease; a lease that is
	//                                                         already gone fails the put, so no dead
	//                                                         acquisition succeeds
	//   else get P/coordination/<name>                         who holds it, for the error
	resp, err := s.client.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
	).Then(
		clientv3.OpPut(key, s.opts.holder, clientv3.WithLease(lease)),
	).Else(
		clientv3.OpGet(key),
	).Commit()
	if err != nil {
		return nil, fmt.Errorf("acquire %s under lease %x: %w", key, int64(lease), err)
	}
	if !resp.Succeeded {
		holder := "?"
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			holder = fmt.Sprintf("%s (lease %x)", kvs[0].Value, kvs[0].Lease)
		}
		return nil, fmt.Errorf("acquire %s: %w by %s", key, ErrCoordinationHeld, holder)
	}
	return &CoordinationLock{
		client: s.client,
		key:    key,
		holder: s.opts.holder,
		lease:  lease,
		rev:    resp.Header.Revision,
	}, nil
}

// Key is the lock's key.
func (l *CoordinationLock) Key() string { return l.key }

// Revision is the create revision of our acquisition: it grows with each
// acquisition, so it can fence writers as a claim's FencingToken does.
func (l *CoordinationLock) Revision() int64 { return l.rev }

// Holder is the value we wrote to the key: the store's holder name.
func (l *CoordinationLock) Holder() string { return l.holder }

// Lease is the lease the lock lives under.
func (l *CoordinationLock) Lease() clientv3.LeaseID { return l.lease }

// IsOwner is the compare that holds only while the lock is still this
// acquisition's; put it in every transaction that needs ownership.
func (l *CoordinationLock) IsOwner() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.rev)
}

// Check returns ErrCoordinationLost if the lock is no longer ours. It is a read:
// use it to stop a job early, and IsOwner or Do to guard its writes.
func (l *CoordinationLock) Check(ctx context.Context) error {
	resp, err := l.client.Get(ctx, l.key)
	if err != nil {
		return fmt.Errorf("check %s: %w", l.key, err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != l.rev {
		return fmt.Errorf("%s: %w", l.key, ErrCoordinationLost)
	}
	return nil
}

// Do applies ops (at most etcd's --max-txn-ops) if and only if the lock is still
// ours, and returns ErrCoordinationLost otherwise.
func (l *CoordinationLock) Do(ctx context.Context, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	// Guarded write transaction:
	//   if   create_revision(P/coordination/<name>) == our revision   still our acquisition
	//   then ops                                                        the caller's writes
	//   else nothing: ErrCoordinationLost
	resp, err := l.client.Txn(ctx).If(l.IsOwner()).Then(ops...).Commit()
	if err != nil {
		return nil, fmt.Errorf("write under %s: %w", l.key, err)
	}
	if !resp.Succeeded {
		return nil, fmt.Errorf("write under %s: %w", l.key, ErrCoordinationLost)
	}
	return resp, nil
}

// Release gives the lock up if it is still ours; if it is not, there is nothing
// to give up and Release returns nil.
func (l *CoordinationLock) Release(ctx context.Context) error {
	// Release transaction:
	//   if   create_revision(P/coordination/<name>) == our revision   still our acquisition: never delete
	//                                                                   a later holder's key
	//   then delete P/coordination/<name>
	if _, err := l.client.Txn(ctx).If(l.IsOwner()).Then(clientv3.OpDelete(l.key)).Commit(); err != nil {
		return fmt.Errorf("release %s: %w", l.key, err)
	}
	return nil
}
