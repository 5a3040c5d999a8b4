package tasks

import (
	"context"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Held finds exactly the claims under one lease, as Release needs them, and
// forgets a claim once it is finished or released.
func TestHeldReturnsTheClaimsOfOneLeaseReadyToRelease(t *testing.T) {
	s, client := newStore(t)
	a, b := grant(t, client), grant(t, client)
	for _, target := range []string{"t1", "t2", "t3"} {
		enqueue(t, s, KindMergeWAL, target)
	}
	c1, c2, c3 := claim(t, s, a), claim(t, s, b), claim(t, s, a)
	held := func(lease clientv3.LeaseID) []*Claim {
		t.Helper()
		h, err := s.Held(context.Background(), lease)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	h := held(a)
	if len(h) != 2 {
		t.Fatalf("held under a: %d claims, want 2", len(h))
	}
	for _, got := range h {
		want := c1
		if got.Task.ID == c3.Task.ID {
			want = c3
		}
		if got.Task.ID != want.Task.ID || got.Token != want.Token || got.FencingToken != want.FencingToken || got.Lease != a {
			t.Fatalf("held %+v, want %+v", got, want)
		}
	}
	finish(t, s, c1, nil)
	if h = held(a); len(h) != 1 || h[0].Task.ID != c3.Task.ID {
		t.Fatalf("after finishing one, held %+v", h)
	}
	// What Held returns is a claim Release accepts.
	if _, err := s.Release(context.Background(), h[0]); err != nil {
		t.Fatal(err)
	}
	if h = held(a); len(h) != 0 {
		t.Fatalf("after releasing, held %+v", h)
	}
	if got := get(t, s, c3.Task.ID); got.State != StateQueued {
		t.Fatalf("released task is %s", got.State)
	}
	if got := get(t, s, c2.Task.ID); got.State != StateRunning {
		t.Fatalf("the other lease's task is %s", got.State)
	}
}
