package pending

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// source is a worker's pending work that a test changes.
type source struct {
	mu      sync.Mutex
	entries []Entry
}

func (s *source) set(entries ...Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entries = entries
}

func (s *source) get() []Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Entry(nil), s.entries...)
}

func grant(t *testing.T, client *clientv3.Client) clientv3.LeaseID {
	t.Helper()
	resp, err := client.Grant(context.Background(), 30)
	if err != nil {
		t.Fatal(err)
	}
	return resp.ID
}

func run(t *testing.T, f func(ctx context.Context)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// rollout is the target of the rollout store named name.
func rollout(name string) registry.Target { return registry.NewTarget(registry.KindRollout, name) }

func demandOf(v *View, target string) Demand {
	for _, d := range v.Demand(time.Now(), nil) {
		if d.Target == rollout(target) {
			return d
		}
	}
	return Demand{}
}

func TestViewSumsTheWorkersEntriesAndForgetsAWorkerWithItsLease(t *testing.T) {
	client, _ := etcdtest.Start(t)
	const prefix = "/pending-test"
	t0 := time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC)

	var leases [2]atomic.Int64
	var sources [2]source
	pubs := make([]*Publisher, 2)
	for i := range pubs {
		leases[i].Store(int64(grant(t, client)))
		pubs[i] = NewPublisher(client, sources[i].get, func() clientv3.LeaseID { return clientv3.LeaseID(leases[i].Load()) },
			PublisherConfig{Prefix: prefix, Instance: fmt.Sprintf("w%d", i), MinInterval: time.Millisecond, Refresh: 50 * time.Millisecond})
		run(t, pubs[i].Run)
	}
	view := NewView(client, prefix, nil, nil)
	run(t, view.Run)

	sources[0].set(Entry{Target: rollout("a"), Generations: 3, Bytes: 30, OldestSealedAt: t0.Add(time.Second)}, Entry{Target: rollout("idle")})
	sources[1].set(Entry{Target: rollout("a"), Generations: 5, Bytes: 50, OldestSealedAt: t0})
	pubs[0].Notify()
	pubs[1].Notify()
	testwait.For(t, 10*time.Second, "both entries summed", func() (bool, string) {
		d := demandOf(view, "a")
		return d.Generations == 8 && d.Bytes == 80 && d.Workers == 2, fmt.Sprintf("%+v", view.Demand(time.Now(), nil))
	})
	if d := demandOf(view, "idle"); !d.Target.IsZero() {
		t.Fatalf("a store with nothing pending is listed: %+v", d)
	}
	if n, m := view.Generations(rollout("a")), view.Generations(rollout("idle")); n != 8 || m != 0 {
		t.Fatalf("Generations: a %d, idle %d; want 8 over both workers, and 0", n, m)
	}

	// A merge took worker 0's generations: its entry goes.
	sources[0].set()
	pubs[0].Notify()
	testwait.For(t, 10*time.Second, "worker 0's entries deleted", func() (bool, string) {
		resp, err := client.Get(context.Background(), prefix+"/pending/w0/", clientv3.WithPrefix())
		return err == nil && len(resp.Kvs) == 0 && demandOf(view, "a").Generations == 5, fmt.Sprintf("%+v", view.Demand(time.Now(), nil))
	})

	// Worker 1 dies: its entries go with its lease.
	if _, err := client.Revoke(context.Background(), clientv3.LeaseID(leases[1].Load())); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "worker 1's entries gone with its lease", func() (bool, string) {
		return len(view.Demand(time.Now(), nil)) == 0, fmt.Sprintf("%+v", view.Demand(time.Now(), nil))
	})

	// It registers again under a new lease: the entries come back without a Notify
	// (the refresh notices the lease).
	leases[1].Store(int64(grant(t, client)))
	testwait.For(t, 10*time.Second, "worker 1's entries put under its new lease", func() (bool, string) {
		return demandOf(view, "a").Generations == 5, fmt.Sprintf("%+v", view.Demand(time.Now(), nil))
	})
}

func TestDemandLeavesOutEntriesWrittenBeforeSince(t *testing.T) {
	client, _ := etcdtest.Start(t)
	const prefix = "/pending-since"
	var src source
	lease := grant(t, client)
	pub := NewPublisher(client, src.get, func() clientv3.LeaseID { return lease },
		PublisherConfig{Prefix: prefix, Instance: "w", MinInterval: time.Millisecond})
	run(t, pub.Run)
	view := NewView(client, prefix, nil, nil)
	run(t, view.Run)

	src.set(Entry{Target: rollout("a"), Generations: 9}, Entry{Target: rollout("b"), Generations: 1})
	pub.Notify()
	testwait.For(t, 10*time.Second, "entries seen", func() (bool, string) { return len(view.Demand(time.Now(), nil)) == 2, "" })

	cut := view.Revision() + 1 // a merge of a claimed after the entry was written
	since := func(target registry.Target) int64 {
		if target == rollout("a") {
			return cut
		}
		return 0
	}
	if got := view.Demand(time.Now(), since); len(got) != 1 || got[0].Target != rollout("b") {
		t.Fatalf("Demand(since) = %+v, want only b: a's entry was written before a's merge started", got)
	}
	src.set(Entry{Target: rollout("a"), Generations: 2}, Entry{Target: rollout("b"), Generations: 1})
	pub.Notify()
	testwait.For(t, 10*time.Second, "a counted again from its next entry", func() (bool, string) {
		got := view.Demand(time.Now(), since)
		return len(got) == 2 && got[0].Target == rollout("a") && got[0].Generations == 2, fmt.Sprintf("%+v", got)
	})
}

// An entry is aged by its worker's clock between seal and publication, plus the
// View's own clock since it arrived: a worker clock hours off changes nothing.
func TestDemandAgesEntriesWithoutComparingClocks(t *testing.T) {
	client, _ := etcdtest.Start(t)
	const prefix = "/pending-age"
	skewed := time.Now().Add(-3 * time.Hour) // the worker's clock, 3 h behind
	var src source
	lease := grant(t, client)
	pub := NewPublisher(client, src.get, func() clientv3.LeaseID { return lease },
		PublisherConfig{Prefix: prefix, Instance: "w", MinInterval: time.Millisecond,
			Clock: clocktesting.NewFakeClock(skewed.Add(20 * time.Second))})
	src.set(Entry{Target: rollout("a"), Generations: 1, OldestSealedAt: skewed})
	run(t, pub.Run)
	view := NewView(client, prefix, nil, nil)
	run(t, view.Run)
	testwait.For(t, 10*time.Second, "entry seen", func() (bool, string) {
		return len(view.Demand(time.Now(), nil)) == 1, ""
	})
	d := view.Demand(time.Now().Add(5*time.Second), nil)[0]
	if d.Age < 25*time.Second || d.Age > 35*time.Second {
		t.Fatalf("age %s, want about 25 s: 20 s old when published (the worker's clock) and 5 s since (the view's)", d.Age)
	}
}

// A seal of one store rewrites that store's entry only: the bytes a worker
// writes to etcd follow what changed, not how many stores it holds.
func TestPublisherWritesOnlyTheEntriesThatChanged(t *testing.T) {
	client, _ := etcdtest.Start(t)
	const prefix = "/pending-diff"
	var src source
	lease := grant(t, client)
	entries := make([]Entry, 100)
	for i := range entries {
		entries[i] = Entry{Target: rollout(fmt.Sprintf("s%03d", i)), Generations: 1, OldestSealedAt: time.Now()}
	}
	src.set(entries...)
	pub := NewPublisher(client, src.get, func() clientv3.LeaseID { return lease }, PublisherConfig{Prefix: prefix, Instance: "w"})
	ctx := context.Background()
	if err := pub.publish(ctx); err != nil {
		t.Fatal(err)
	}
	before, err := client.Get(ctx, prefix+"/pending/w/", clientv3.WithPrefix())
	if err != nil || len(before.Kvs) != 100 {
		t.Fatalf("after the first publish: %d entries, %v; want 100", len(before.Kvs), err)
	}
	entries[7].Generations = 2
	src.set(entries...)
	if err := pub.publish(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := client.Get(ctx, prefix+"/pending/w/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	changed := 0
	for i, kv := range after.Kvs {
		if kv.ModRevision != before.Kvs[i].ModRevision {
			changed++
		}
	}
	if changed != 1 {
		t.Fatalf("%d entries rewritten after one store's seal, want 1", changed)
	}
	if err := pub.publish(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := client.Get(ctx, prefix+"/pending/w/", clientv3.WithPrefix())
	if err != nil || again.Header.Revision != after.Header.Revision {
		t.Fatalf("a publish with nothing changed wrote (revision %d -> %d, %v)", after.Header.Revision, again.Header.Revision, err)
	}
}
