package tasks

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Held returns the claims that live under lease: the tasks its holder is running
// as far as etcd knows.
//
// A claimer needs it after a Claim whose answer it did not get (a timeout, or its
// context cancelled while the transaction was in flight): the transaction may
// have landed, and then the task runs under the claimer's lease with nobody
// running it. No orphan recovery frees it while the lease lives, and a master's
// lease lives as long as the master, so the claimer must find such claims itself
// and give them back (Release).
func (s *Queue) Held(ctx context.Context, lease clientv3.LeaseID) ([]*Claim, error) {
	resp, err := s.client.Get(ctx, s.keys.ClaimsPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", s.keys.ClaimsPrefix(), err)
	}
	var held []*Claim
	for _, kv := range resp.Kvs {
		if clientv3.LeaseID(kv.Lease) != lease {
			continue
		}
		id := string(kv.Key[len(s.keys.ClaimsPrefix()):])
		t, _, err := s.getTask(ctx, id)
		if errors.Is(err, ErrTaskNotFound) {
			continue // finished and pruned since the read: nothing held any more
		}
		if err != nil {
			return nil, err
		}
		token := string(kv.Value)
		if t.State != StateRunning || t.ClaimToken != token {
			continue // finished or released since the read
		}
		lock, err := s.client.Get(ctx, s.lock(t))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", s.lock(t), err)
		}
		if len(lock.Kvs) == 0 || string(lock.Kvs[0].Value) != token {
			continue // finished or released since the read
		}
		held = append(held, &Claim{Task: t, Token: token, FencingToken: lock.Kvs[0].CreateRevision, Lease: lease})
	}
	return held, nil
}
