package feed

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/tidemark-io/tidemark/pkg/coord/consumers"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// seqAt is a _seq its writer could have numbered at t (wal's hybrid clock:
// milliseconds above a 16-bit logical counter).
func seqAt(t time.Time, logical uint64) uint64 { return uint64(t.UnixMilli())<<16 | logical }

// countedLister counts the etcd reads of the verdicts (each List is one).
type countedLister struct {
	*consumers.Cursors
	n atomic.Int64
}

func (c *countedLister) List(ctx context.Context, target registry.Target, limit int) ([]consumers.Record, bool, error) {
	c.n.Add(1)
	return c.Cursors.List(ctx, target, limit)
}

// An add reads a cached verdict, not etcd: however many adds a store takes, its
// consumers are read once per lagVerdictTTL, in the background after the first.
// While etcd is away adds are admitted, and the refusal comes back with it.
// Production failure it guards: one etcd round trip on every add's path, which
// an etcd slowdown would turn into every store's add latency, or an etcd outage
// into a write outage.
func TestConsumerLagVerdictIsCachedAndAdmitsWhileEtcdIsAway(t *testing.T) {
	srv := etcdtest.StartServer(t)
	lister := &countedLister{Cursors: consumers.New(srv.Client(t), "/lagv")}
	clk := testingclock.NewFakePassiveClock(time.Now())
	t0 := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	target := registry.MustParseTarget("r")
	if _, err := lister.Commit(context.Background(), target, "trainer", rowkey.Position{Seq: seqAt(t0, 0)}); err != nil {
		t.Fatal(err)
	}
	b := newBackpressure(lister, storeHorizons{target: seqAt(t0.Add(time.Hour), 0)}, clk, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	refused := func() bool {
		err := b.Admit(ctx, target, time.Minute)
		if err != nil && !errors.Is(err, ErrConsumerLag) {
			t.Fatalf("admit: %v; want nil or ErrConsumerLag", err)
		}
		return err != nil
	}

	for range 100 {
		if !refused() {
			t.Fatal("an add admitted while the consumer lags 1h behind a limit of 1m")
		}
	}
	if n := lister.n.Load(); n != 1 {
		t.Fatalf("100 adds within one verdict's age read the consumers %d times; want once", n)
	}
	if err := b.Admit(ctx, target, 2*time.Hour); err != nil {
		t.Fatalf("a limit above the lag: %v; want the add admitted", err)
	}
	if err := b.Admit(ctx, registry.MustParseTarget("other"), 0); err != nil || lister.n.Load() != 1 {
		t.Fatalf("a store without max_consumer_lag: %v after %d reads; want admitted without a read", err, lister.n.Load())
	}

	srv.Stop()
	testwait.Until(t, 20*time.Second, "adds to be admitted with etcd away", func() bool {
		clk.SetTime(clk.Now().Add(lagVerdictTTL))
		return !refused()
	})
	srv.Restart(t)
	testwait.Until(t, 20*time.Second, "adds to be refused again with etcd back", func() bool {
		clk.SetTime(clk.Now().Add(lagVerdictTTL))
		return refused()
	})
}

// storeHorizons is the horizon of each store, as a test sets it (the verdicts
// read only Horizon).
type storeHorizons map[registry.Target]uint64

func (f storeHorizons) Horizon(_ context.Context, target registry.Target) (uint64, bool, error) {
	h, ok := f[target]
	return h, ok, nil
}
