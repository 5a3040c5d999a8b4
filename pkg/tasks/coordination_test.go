package tasks

import (
	"context"
	"errors"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Two master replicas must not both scan stores or sweep merges.
func TestCoordinationLockExcludesASecondHolderUntilItsLeaseDies(t *testing.T) {
	t.Parallel()
	s, client := newStore(t)
	other := New(client, s.Prefix(), WithHolder("replica-2"))
	ctx := context.Background()
	first, second := grant(t, client), grant(t, client)

	lock, err := s.AcquireCoordination(ctx, "scan", first)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.AcquireCoordination(ctx, "scan", second); !errors.Is(err, ErrCoordinationHeld) || !strings.Contains(err.Error(), "test") {
		t.Fatalf("second holder: %v, want ErrCoordinationHeld naming the holder", err)
	}
	// Not re-entrant, even on the same lease.
	if _, err := s.AcquireCoordination(ctx, "scan", first); !errors.Is(err, ErrCoordinationHeld) {
		t.Fatalf("second acquisition on the same lease: %v, want ErrCoordinationHeld", err)
	}
	// Another name is another lock.
	if _, err := other.AcquireCoordination(ctx, "sweep", second); err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Do(ctx, clientv3.OpPut(s.Prefix()+"/stats/r1", "{}")); err != nil {
		t.Fatalf("guarded write while holding: %v", err)
	}

	revoke(t, client, first)
	// What Campaign gets wrong: the old holder must learn it lost the lock before
	// acting, and its guarded writes must not land.
	if err := lock.Check(ctx); !errors.Is(err, ErrCoordinationLost) {
		t.Fatalf("check after the lease died: %v, want ErrCoordinationLost", err)
	}
	taken, err := other.AcquireCoordination(ctx, "scan", second)
	if err != nil {
		t.Fatalf("acquire after the holder's lease died: %v", err)
	}
	if taken.Revision() <= lock.Revision() {
		t.Fatalf("revision %d after %d, want it to grow", taken.Revision(), lock.Revision())
	}
	if _, err := lock.Do(ctx, clientv3.OpPut(s.Prefix()+"/stats/r1", "stale")); !errors.Is(err, ErrCoordinationLost) {
		t.Fatalf("guarded write of the old holder: %v, want ErrCoordinationLost", err)
	}
	if v, _ := raw(t, client, s.Prefix()+"/stats/r1"); v != "{}" {
		t.Fatalf("old holder's write landed: %q", v)
	}
	// The old holder's Release must not free the new holder's lock.
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := taken.Check(ctx); err != nil {
		t.Fatalf("new holder after the old one's release: %v", err)
	}
	if err := taken.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireCoordination(ctx, "scan", grant(t, client)); err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
}

func TestCoordinationLockRefusesDeadLeaseAndBadName(t *testing.T) {
	t.Parallel()
	s, client := newStore(t)
	ctx := context.Background()
	dead := grant(t, client)
	revoke(t, client, dead)
	if _, err := s.AcquireCoordination(ctx, "scan", dead); err == nil {
		t.Fatal("acquired under a revoked lease")
	}
	if v, _ := raw(t, client, s.keys.Coordination("scan")); v != "" {
		t.Fatal("a dead acquisition left a key")
	}
	for _, name := range []string{"", "a/b"} {
		if _, err := s.AcquireCoordination(ctx, name, grant(t, client)); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("name %q: %v, want ErrInvalidArgument", name, err)
		}
	}
}
