package sweep

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/worker/mergesvc"
)

type sweepFixture struct {
	sw      *Sweeper
	merger  *merge.Merger
	metrics *Metrics
	merges  *mergesvc.Metrics
	s       *store.Store
}

// newSweepFixture is a sweeper of one rollout store; mergePending is
// Config.MergePending (a standalone worker's).
func newSweepFixture(t *testing.T, mergePending bool) *sweepFixture {
	return newSweepFixtureOn(t, mergePending, objstoretest.Mem(t), nil)
}

// newSweepFixtureOn is newSweepFixture on bucket b; with a delete queue it is
// wired as worker.New wires it: the WAL writers' drains hand the files that came
// due to the sweeper, and extra WAL options follow.
func newSweepFixtureOn(t *testing.T, mergePending bool, b *objstore.Bucket, deletes *wal.DeleteQueue, opts ...wal.Option) *sweepFixture {
	t.Helper()
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	walOpts := []wal.Option{wal.WithLogger(quiet)}
	if deletes != nil {
		walOpts = append(walOpts, wal.WithDeleteQueue(deletes))
	}
	ss := store.NewStores(store.Config{Bucket: b, Shard: "w1", Logger: quiet, SnapshotTTL: -1,
		WALOptions: append(walOpts, opts...)}, 0)
	t.Cleanup(func() { _ = ss.Close(context.Background()) })
	if _, err := ss.Create(ctx, registry.Entry{Kind: registry.KindRollout, Name: "r"}); err != nil {
		t.Fatal(err)
	}
	s, rel, err := ss.Open(ctx, registry.KindRollout, "r")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rel)
	m := merge.New(merge.Config{Concurrency: 1, Logger: quiet})
	metrics := NewMetrics(prometheus.NewRegistry())
	merges := mergesvc.NewMetrics(prometheus.NewRegistry())
	svc, err := mergesvc.New(mergesvc.Config{Stores: ss, Merger: m, Metrics: merges, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := New(Config{Stores: ss, Merger: m, Merges: svc, Metrics: metrics, MergePending: mergePending,
		Deletes: deletes, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return &sweepFixture{sw: sw, merger: m, metrics: metrics, merges: merges, s: s}
}

// addAndFlush adds one record and runs a flush pass (which seals it).
func (f *sweepFixture) addAndFlush(t *testing.T, id string) {
	t.Helper()
	rec, err := schema.DecodeRollouts([]json.RawMessage{json.RawMessage(fmt.Sprintf(`{"id":%q,"rollout_id":"r1"}`, id))}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	if err := f.s.Append(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	f.sw.FlushPass(context.Background())
}

func (f *sweepFixture) count(c *prometheus.CounterVec, labels ...string) int {
	return int(testutil.ToFloat64(c.WithLabelValues(labels...)))
}

// A standalone worker (no etcd: no master decides its merges) merges everything
// pending of its own shard at every flush pass, right after the seal. Failure it
// guards: a standalone worker whose WAL only grows, since nobody else merges it.
func TestAStandaloneFlushPassSealsAndMergesEverythingPending(t *testing.T) {
	f := newSweepFixture(t, true)
	for _, id := range []string{"a", "b", "c"} {
		f.addAndFlush(t, id)
		if n := merge.PendingOwn(f.s); n != 0 {
			t.Fatalf("%d pending after the flush pass that sealed %s, want 0", n, id)
		}
	}
	if n := f.count(f.merges.Flushes, mergesvc.ResultOK, "rollout"); n != 3 {
		t.Fatalf("flush successes %d, want 3", n)
	}
	if n := f.count(f.metrics.Cleanups, ResultMerged, "rollout"); n != 3 {
		t.Fatalf("merge reported %d times under cleanup, want 3", n)
	}
	if n := f.count(f.merges.Merges, mergesvc.TriggerTime, "success"); n != 3 {
		t.Fatalf("%d time-triggered merges counted, want 3", n)
	}
	recs, err := f.s.List(context.Background(), store.ListOptions{})
	if err != nil || len(recs) != 3 {
		t.Fatalf("list after the merges: %d rows, %v", len(recs), err)
	}
	for _, r := range recs {
		r.Release()
	}
}

// In a cluster (a worker with etcd) the master alone decides when a store is
// merged: the flush pass seals and never merges, however much is pending. Failure
// it guards: two owners of one decision, the worker's own triggers racing the
// master's merges for the same slots and shards.
func TestInAClusterTheFlushPassSealsAndNeverMerges(t *testing.T) {
	f := newSweepFixture(t, false)
	for i := 0; i < 5; i++ {
		f.addAndFlush(t, fmt.Sprint(i))
	}
	if n := merge.PendingOwn(f.s); n != 5 {
		t.Fatalf("%d pending, want the 5 generations sealed and none merged", n)
	}
	if n := f.count(f.merges.Flushes, mergesvc.ResultOK, "rollout"); n != 5 {
		t.Fatalf("flush successes %d, want 5", n)
	}
	if n := f.count(f.metrics.Cleanups, ResultMerged, "rollout") + f.count(f.metrics.Cleanups, ResultBusy, "rollout"); n != 0 {
		t.Fatalf("%d sweeper merges tried, want none", n)
	}
}

// A standalone flush pass only tries for a merge slot: with every slot taken it
// seals, counts the merge as busy, and returns; with a slot free it merges.
func TestFlushPassNeverWaitsOnABusyMergeSlot(t *testing.T) {
	f := newSweepFixture(t, true)
	release, err := f.merger.AcquireSlot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { f.addAndFlush(t, "a"); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second): // liveness bound: a waiting pass never returns
		t.Fatal("the flush pass waited for a merge slot")
	}
	release()
	if n := f.count(f.metrics.Cleanups, ResultBusy, "rollout"); n != 1 {
		t.Fatalf("busy count %d, want 1", n)
	}
	if n := f.count(f.merges.Flushes, mergesvc.ResultOK, "rollout"); n != 1 {
		t.Fatalf("the seal was not done while the slot was busy (%d)", n)
	}
	if n := merge.PendingOwn(f.s); n != 1 {
		t.Fatalf("%d pending while busy, want 1", n)
	}
	f.sw.FlushPass(context.Background()) // slot free now
	if n := merge.PendingOwn(f.s); n != 0 {
		t.Fatalf("%d pending after a pass with a free slot, want 0", n)
	}
}
