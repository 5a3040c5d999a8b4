package store

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
)

// The rule AdmitAdd applies: nothing below warn, linear from warn up to refuse,
// refused at refuse; a zero or negative maximum never waits but still refuses.
func TestAddDelayGrowsLinearlyFromWarnAndRefusesAtRefuse(t *testing.T) {
	const warn, refuse = 256, 4096
	for _, c := range []struct {
		pending int
		max     time.Duration
		want    time.Duration
		refused bool
	}{
		{pending: 0, max: 2 * time.Second},
		{pending: warn - 1, max: 2 * time.Second},
		{pending: warn, max: 2 * time.Second},
		{pending: warn + (refuse-warn)/4, max: 2 * time.Second, want: 500 * time.Millisecond},
		{pending: warn + (refuse-warn)/2, max: 2 * time.Second, want: time.Second},
		{pending: refuse - 1, max: 2 * time.Second, want: 2 * time.Second * (refuse - 1 - warn) / (refuse - warn)},
		{pending: refuse, max: 2 * time.Second, refused: true},
		{pending: 1 << 40, max: 2 * time.Second, refused: true},
		{pending: refuse - 1, max: 0},
		{pending: refuse - 1, max: -1},
		{pending: refuse, max: -1, refused: true},
	} {
		got, ok := addDelay(c.pending, warn, refuse, c.max)
		if got != c.want || ok == c.refused {
			t.Errorf("addDelay(%d pending, max %s) = %s, admitted %v; want %s, admitted %v", c.pending, c.max, got, ok, c.want, !c.refused)
		}
	}
	// Thresholds set the wrong way round have no range in between: refuse wins.
	if d, ok := addDelay(10, 20, 10, time.Second); ok || d != 0 {
		t.Errorf("refuse below warn: %s, admitted %v; want refused", d, ok)
	}
	if d, ok := addDelay(9, 20, 10, time.Second); !ok || d != 0 {
		t.Errorf("refuse below warn, under both: %s, admitted %v; want no wait", d, ok)
	}
}

// The decision every add pays while its store keeps up: it reads the current
// snapshot and does no I/O, so it must cost nanoseconds beside the WAL write.
func BenchmarkAdmitAddBelowWarn(b *testing.B) {
	ss := newStores(b, objstoretest.Mem(b), "w1")
	createGeneric(b, ss, "g")
	s := open(b, ss, "g")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if a, err := s.AdmitAdd(ctx); err != nil || a.Delay != 0 {
			b.Fatalf("admission %+v, %v below warn", a, err)
		}
	}
}

// A worker that only writes holds a snapshot of its own shard: the store's count
// over every shard comes from the workers' published entries (Config.StorePending),
// and adds slow down and are refused on it. Invariant: backpressure acts on the
// fan-out a read of the store would pay, not on one shard's share of it.
func TestAdmitAddDecidesOnTheWholeStoresPendingCount(t *testing.T) {
	var others atomic.Int64
	b := objstoretest.Mem(t)
	ss := NewStores(Config{Bucket: b, Shard: "w1", Logger: quiet(), SnapshotTTL: -1, MaxAddDelay: time.Millisecond,
		WALOptions:   []wal.Option{wal.WithLogger(quiet())},
		StorePending: func(registry.Target) int { return int(others.Load()) }}, 0)
	t.Cleanup(func() { _ = ss.Close(context.Background()) })
	createGeneric(t, ss, "g")
	s := open(t, ss, "g")
	ctx := context.Background()
	if a, err := s.AdmitAdd(ctx); err != nil || a.Delay != 0 || a.Pending != 0 {
		t.Fatalf("nothing pending: %+v %v", a, err)
	}
	others.Store(DefaultWarnGenerations + (DefaultRefuseGenerations-DefaultWarnGenerations)/2)
	if a, err := s.AdmitAdd(ctx); err != nil || a.Delay <= 0 || a.Pending != int(others.Load()) {
		t.Fatalf("the other shards past warn: %+v %v, want a delay decided on %d", a, err, others.Load())
	}
	others.Store(DefaultRefuseGenerations)
	if a, err := s.AdmitAdd(ctx); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("the other shards at refuse: %+v %v, want ErrOverloaded", a, err)
	}
}
