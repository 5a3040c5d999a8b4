package worker

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
	"github.com/tidemark-io/tidemark/pkg/worker/store"
)

type sweepFixture struct {
	sw      *Sweeper
	merger  *merge.Merger
	metrics *Metrics
	s       *store.Store
}

func newSweepFixture(t *testing.T, mergeAfter int) *sweepFixture {
	return newSweepFixtureOn(t, mergeAfter, objstoretest.Mem(t), nil)
}

// newSweepFixtureOn is newSweepFixture on bucket b; with a delete queue it is
// wired as worker.New wires it: the WAL writers' drains hand the files that came
// due to the sweeper, and extra WAL options follow.
func newSweepFixtureOn(t *testing.T, mergeAfter int, b *objstore.Bucket, deletes *wal.DeleteQueue, opts ...wal.Option) *sweepFixture {
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
	sw := NewSweeper(SweeperConfig{Stores: ss, Merger: m, Metrics: metrics, MergeAfterGenerations: mergeAfter,
		Deletes: deletes, Logger: quiet})
	return &sweepFixture{sw: sw, merger: m, metrics: metrics, s: s}
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

func TestCountTriggerMergesAtItsThresholdAndNotBelow(t *testing.T) {
	f := newSweepFixture(t, 3)
	f.addAndFlush(t, "a")
	f.addAndFlush(t, "b")
	if n := merge.PendingOwn(f.s); n != 2 {
		t.Fatalf("below the threshold: %d pending, want 2 (no merge)", n)
	}
	if n := f.count(f.metrics.Cleanups, ResultMerged, "rollout"); n != 0 {
		t.Fatalf("%d merges below the threshold", n)
	}
	f.addAndFlush(t, "c")
	if n := merge.PendingOwn(f.s); n != 0 {
		t.Fatalf("at the threshold: %d pending after the flush pass, want 0", n)
	}
	if n := f.count(f.metrics.Flushes, ResultOK, "rollout"); n != 3 {
		t.Fatalf("flush successes %d, want 3", n)
	}
	if n := f.count(f.metrics.Cleanups, ResultMerged, "rollout"); n != 1 {
		t.Fatalf("merge reported %d times under cleanup, want 1", n)
	}
}

// MERGE_AFTER_GENERATIONS=0 means disabled, never "merge at 0": the flush pass only
// seals, and the time trigger still drains everything.
func TestZeroDisablesTheCountTriggerWhileTheTimeTriggerDrains(t *testing.T) {
	f := newSweepFixture(t, 0)
	for i := 0; i < 5; i++ {
		f.addAndFlush(t, fmt.Sprint(i))
	}
	if n := merge.PendingOwn(f.s); n != 5 {
		t.Fatalf("%d pending with the count trigger disabled, want 5", n)
	}
	f.sw.CleanupPass(context.Background())
	if n := merge.PendingOwn(f.s); n != 0 {
		t.Fatalf("%d pending after the cleanup pass, want 0", n)
	}
	recs, err := f.s.List(context.Background(), store.ListOptions{})
	if err != nil || len(recs) != 5 {
		t.Fatalf("list after cleanup: %d rows, %v", len(recs), err)
	}
	for _, r := range recs {
		r.Release()
	}
}

// The flush pass only tries for a merge slot: with every slot taken it seals, counts
// the merge as busy, and returns; with a slot free it merges.
func TestFlushPassNeverWaitsOnABusyMergeSlot(t *testing.T) {
	f := newSweepFixture(t, 1)
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
	if n := f.count(f.metrics.Flushes, ResultOK, "rollout"); n != 1 {
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
