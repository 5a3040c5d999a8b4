package pending

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/internal/testutil/etcdtest"
	"github.com/tidemark-io/tidemark/internal/testutil/testwait"
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

func demandOf(v *View, target string) Demand {
	for _, d := range v.Demand(nil) {
		if d.Target == target {
			return d
		}
	}
	return Demand{}
}

func TestViewSumsTheWorkersRecordsAndForgetsAWorkerWithItsLease(t *testing.T) {
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

	sources[0].set(Entry{Target: "a", Generations: 3, Bytes: 30, OldestSealedAt: t0.Add(time.Second)}, Entry{Target: "idle"})
	sources[1].set(Entry{Target: "a", Generations: 5, Bytes: 50, OldestSealedAt: t0})
	pubs[0].Notify()
	pubs[1].Notify()
	testwait.For(t, 10*time.Second, "both records summed", func() (bool, string) {
		d := demandOf(view, "a")
		return d.Generations == 8 && d.Bytes == 80 && d.Workers == 2 && d.OldestSealedAt.Equal(t0), fmt.Sprintf("%+v", view.Demand(nil))
	})
	if d := demandOf(view, "idle"); d.Target != "" {
		t.Fatalf("a store with nothing pending is listed: %+v", d)
	}

	// A merge took worker 0's generations: its record goes.
	sources[0].set()
	pubs[0].Notify()
	testwait.For(t, 10*time.Second, "worker 0's record deleted", func() (bool, string) {
		resp, err := client.Get(context.Background(), prefix+"/pending/w0")
		return err == nil && len(resp.Kvs) == 0 && demandOf(view, "a").Generations == 5, fmt.Sprintf("%+v", view.Demand(nil))
	})

	// Worker 1 dies: its record goes with its lease.
	if _, err := client.Revoke(context.Background(), clientv3.LeaseID(leases[1].Load())); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "worker 1's record gone with its lease", func() (bool, string) {
		return len(view.Demand(nil)) == 0, fmt.Sprintf("%+v", view.Demand(nil))
	})

	// It registers again under a new lease: the record comes back without a Notify
	// (the refresh notices the lease).
	leases[1].Store(int64(grant(t, client)))
	testwait.For(t, 10*time.Second, "worker 1's record put under its new lease", func() (bool, string) {
		return demandOf(view, "a").Generations == 5, fmt.Sprintf("%+v", view.Demand(nil))
	})
}

func TestDemandLeavesOutRecordsThatArrivedBeforeSince(t *testing.T) {
	client, _ := etcdtest.Start(t)
	const prefix = "/pending-since"
	var src source
	lease := grant(t, client)
	pub := NewPublisher(client, src.get, func() clientv3.LeaseID { return lease },
		PublisherConfig{Prefix: prefix, Instance: "w", MinInterval: time.Millisecond})
	run(t, pub.Run)
	view := NewView(client, prefix, nil, nil)
	run(t, view.Run)

	src.set(Entry{Target: "a", Generations: 9}, Entry{Target: "b", Generations: 1})
	pub.Notify()
	testwait.For(t, 10*time.Second, "record seen", func() (bool, string) { return len(view.Demand(nil)) == 2, "" })

	cut := view.Revision() + 1 // a merge of a claimed after the record was written
	since := func(target string) int64 {
		if target == "a" {
			return cut
		}
		return 0
	}
	if got := view.Demand(since); len(got) != 1 || got[0].Target != "b" {
		t.Fatalf("Demand(since) = %+v, want only b: a's record arrived before a's merge started", got)
	}
	src.set(Entry{Target: "a", Generations: 2}, Entry{Target: "b", Generations: 1})
	pub.Notify()
	testwait.For(t, 10*time.Second, "a counted again from its next record", func() (bool, string) {
		got := view.Demand(since)
		return len(got) == 2 && got[0].Target == "a" && got[0].Generations == 2, fmt.Sprintf("%+v", got)
	})
}

func TestRecordKeepsTheMostPendingStoresWithinItsBound(t *testing.T) {
	entries := make([]Entry, 0, MaxStores+10)
	for i := range MaxStores + 10 {
		entries = append(entries, Entry{Target: fmt.Sprintf("s%05d", i), Generations: i + 1})
	}
	r := newRecord("w", entries, time.Now())
	if len(r.Stores) != MaxStores || r.Omitted != 10 {
		t.Fatalf("record lists %d stores and omits %d, want %d and 10", len(r.Stores), r.Omitted, MaxStores)
	}
	for _, e := range r.Stores {
		if e.Generations <= 10 {
			t.Fatalf("kept %+v, one of the 10 least pending", e)
		}
	}
	for i := 1; i < len(r.Stores); i++ {
		if r.Stores[i-1].Target >= r.Stores[i].Target {
			t.Fatal("stores not sorted by target")
		}
	}
}
