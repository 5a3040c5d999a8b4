package merge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/testutil/storetest"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

func quiet() *slog.Logger { return storetest.Quiet() }

type fixture struct {
	bucket *objstore.Bucket
	s      *store.Store
	m      *Merger
}

func newFixture(t *testing.T, b *objstore.Bucket, cfg Config) *fixture {
	t.Helper()
	cfg.Logger = quiet()
	return &fixture{bucket: b, s: storetest.Open(t, b, "w1", true), m: New(cfg)}
}

// add appends one row per id with value v; it fails the test on error.
func (f *fixture) add(t testing.TB, v int64, ids ...string) {
	t.Helper()
	if err := f.tryAdd(context.Background(), v, ids...); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) tryAdd(ctx context.Context, v int64, ids ...string) error {
	return storetest.Append(ctx, f.s, v, ids...)
}

func (f *fixture) seal(t testing.TB) {
	t.Helper()
	if _, err := f.s.Seal(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// values lists the store: id -> v; a duplicate id fails the test.
func (f *fixture) values(t testing.TB) map[string]int64 { return storetest.Values(t, f.s) }

func (f *fixture) baseRows(t testing.TB) int64 {
	t.Helper()
	m, err := f.s.Table().Refresh(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return m.Stats().Rows
}

func TestMergeMovesPendingGenerationsIntoTheBase(t *testing.T) {
	f := newFixture(t, objstoretest.Mem(t), Config{MaxGenerations: DefaultMaxGenerations, MaxBytes: DefaultMaxBytes})
	for g := 0; g < 3; g++ {
		f.add(t, int64(g), fmt.Sprint("a", g), "shared")
		f.seal(t)
	}
	if n := PendingOwn(f.s); n != 3 {
		t.Fatalf("pending %d, want 3", n)
	}
	r, err := f.m.Merge(context.Background(), f.s, true)
	if err != nil {
		t.Fatal(err)
	}
	if r.Generations != 3 || r.Reclaimed != 3 {
		t.Fatalf("result %+v, want 3 generations merged and reclaimed", r)
	}
	if n := PendingOwn(f.s); n != 0 {
		t.Fatalf("pending %d after merge", n)
	}
	got := f.values(t)
	if len(got) != 4 || got["shared"] != 2 {
		t.Fatalf("rows %v, want a0 a1 a2 and shared=2", got)
	}
	if n := f.baseRows(t); n != 4 {
		t.Fatalf("base holds %d rows, want 4", n)
	}
	// Nothing pending: a second merge is a no-op.
	if r, err := f.m.Merge(context.Background(), f.s, true); err != nil || r.Generations != 0 {
		t.Fatalf("second merge: %+v %v", r, err)
	}
}

// While a merge reads generations from a slow store, adds and gets keep completing:
// they finish before the merge does.
func TestReadersAndAppendersAreNotBlockedDuringAMerge(t *testing.T) {
	ctx := context.Background()
	faults := objstore.NewFaults(nil)
	f := newFixture(t, objstore.WithFaults(objstoretest.Mem(t), faults), Config{})
	for g := 0; g < 4; g++ {
		f.add(t, 1, fmt.Sprint("r", g))
		f.seal(t)
	}
	faults.SetLatency(100*time.Millisecond, 0) // each of the merge's many requests is slow
	var mergeDone atomic.Bool
	done := make(chan error, 1)
	go func() {
		_, err := f.m.Merge(ctx, f.s, true)
		mergeDone.Store(true)
		done <- err
	}()
	testwait.Until(t, 30*time.Second, "the merge to start its reads", func() bool { return faults.InFlight() > 0 })
	var opsDuring int
	for i := 0; i < 3; i++ {
		if err := f.tryAdd(ctx, 5, fmt.Sprint("new", i)); err != nil {
			t.Fatal(err)
		}
		snap := f.s.Snapshot() // what every read starts with
		if snap == nil {
			t.Fatal("no snapshot")
		}
		if !mergeDone.Load() {
			opsDuring++
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if opsDuring == 0 {
		t.Fatal("no add completed while the merge ran: adds were blocked by it")
	}
	t.Logf("%d of 3 adds completed during the merge", opsDuring)
}

func TestAppendsDuringMergesAreNeitherLostNorDuplicated(t *testing.T) {
	ctx := context.Background()
	faults := objstore.NewFaults(nil)
	faults.SetLatency(time.Millisecond, 2*time.Millisecond)
	f := newFixture(t, objstore.WithFaults(objstoretest.Mem(t), faults), Config{MaxGenerations: 2})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	stopped := false
	halt := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer halt()
	var mu sync.Mutex
	acked := map[string]int64{}
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("w%d-%d", w, i)
				if err := f.tryAdd(ctx, int64(i), id); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				acked[id] = int64(i)
				mu.Unlock()
				if i%5 == 4 {
					if _, err := f.s.Seal(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}(w)
	}
	for i := 0; i < 6; i++ {
		if _, err := f.m.Merge(ctx, f.s, true); err != nil {
			t.Fatal(err)
		}
	}
	halt()
	f.seal(t)
	if _, err := f.m.Merge(ctx, f.s, true); err != nil {
		t.Fatal(err)
	}
	got := f.values(t)
	if len(got) != len(acked) {
		t.Fatalf("%d rows, %d acknowledged", len(got), len(acked))
	}
	for id, v := range acked {
		if got[id] != v {
			t.Fatalf("row %s = %d, want %d", id, got[id], v)
		}
	}
	if n := f.baseRows(t); n != int64(len(acked)) {
		t.Fatalf("base holds %d rows, want %d", n, len(acked))
	}
}

func TestFourConcurrentMergesOfOneShardAddEachRowOnce(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, objstoretest.File(t), Config{MaxGenerations: 2})
	want := 0
	for g := 0; g < 8; g++ {
		f.add(t, int64(g), fmt.Sprint("a", g), fmt.Sprint("b", g), "hot")
		f.seal(t)
		want += 2
	}
	want++ // hot
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := f.m.Merge(ctx, f.s, true); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := PendingOwn(f.s); n != 0 {
		t.Fatalf("%d generations still pending", n)
	}
	if n := f.baseRows(t); n != int64(want) {
		t.Fatalf("base holds %d live rows, want %d", n, want)
	}
	if got := f.values(t); got["hot"] != 7 || len(got) != want {
		t.Fatalf("rows %v", got)
	}
}

// A merge cancelled anywhere (prepare, commit, drain) loses nothing, and the next
// merge converges to every row exactly once.
func TestCancelledMergeLosesNothingAndTheNextConverges(t *testing.T) {
	faults := objstore.NewFaults(nil)
	f := newFixture(t, objstore.WithFaults(objstoretest.Mem(t), faults), Config{MaxGenerations: 3})
	rng := rand.New(rand.NewPCG(3, 4))
	want := map[string]int64{}
	for round := 0; round < 6; round++ {
		for g := 0; g < 3; g++ {
			id := fmt.Sprintf("r%d-%d", round, g)
			f.add(t, int64(round), id, "hot")
			want[id], want["hot"] = int64(round), int64(round)
			f.seal(t)
		}
		faults.SetLatency(2*time.Millisecond, 0)
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(40))*time.Millisecond)
		_, err := f.m.Merge(ctx, f.s, true)
		cancel()
		faults.SetLatency(0, 0)
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	if _, err := f.m.Merge(context.Background(), f.s, true); err != nil {
		t.Fatal(err)
	}
	got := f.values(t)
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d", len(got), len(want))
	}
	for id, v := range want {
		if got[id] != v {
			t.Fatalf("%s = %d, want %d", id, got[id], v)
		}
	}
	if n := f.baseRows(t); n != int64(len(want)) {
		t.Fatalf("base holds %d live rows, want %d", n, len(want))
	}
}

func TestMergePassesAreBoundedByCaps(t *testing.T) {
	ctx := context.Background()
	t.Run("generations", func(t *testing.T) {
		f := newFixture(t, objstoretest.Mem(t), Config{MaxGenerations: 3})
		for g := 0; g < 7; g++ {
			f.add(t, 1, fmt.Sprint(g))
			f.seal(t)
		}
		r, err := f.m.MergeOnce(ctx, f.s, true)
		if err != nil || r.Generations != 3 {
			t.Fatalf("one pass: %+v %v, want 3 generations", r, err)
		}
		r, err = f.m.Merge(ctx, f.s, true)
		if err != nil || r.Generations != 4 || r.Passes != 2 {
			t.Fatalf("the rest: %+v %v, want 4 generations in 2 passes", r, err)
		}
	})
	t.Run("bytes", func(t *testing.T) {
		f := newFixture(t, objstoretest.Mem(t), Config{MaxBytes: 1}) // every generation is oversized
		for g := 0; g < 3; g++ {
			f.add(t, 1, fmt.Sprint(g))
			f.seal(t)
		}
		r, err := f.m.MergeOnce(ctx, f.s, true)
		if err != nil || r.Generations != 1 {
			t.Fatalf("one pass: %+v %v, want exactly 1 (oversized) generation", r, err)
		}
		r, err = f.m.Merge(ctx, f.s, true)
		if err != nil || r.Generations != 2 {
			t.Fatalf("the rest: %+v %v", r, err)
		}
	})
	t.Run("memory budget", func(t *testing.T) {
		b := objstoretest.Mem(t)
		f := newFixture(t, b, Config{})
		for g := 0; g < 5; g++ {
			f.add(t, 1, fmt.Sprint(g))
			f.seal(t)
		}
		sm, err := wal.LoadShard(ctx, b, f.s.Entry().URI, f.s.Shard())
		if err != nil {
			t.Fatal(err)
		}
		gens := sm.Generations
		// A budget that pays for the first two generations at PassCostFactor, not three.
		f.m = New(Config{BudgetBytes: PassCostFactor * (gens[0].Bytes + gens[1].Bytes), Logger: quiet()})
		r, err := f.m.MergeOnce(ctx, f.s, true)
		if err != nil || r.Generations != 2 {
			t.Fatalf("one pass: %+v %v, want the 2 generations the budget pays for", r, err)
		}
		r, err = f.m.Merge(ctx, f.s, true)
		if err != nil || r.Generations != 3 || r.Passes != 2 {
			t.Fatalf("the rest: %+v %v, want 3 generations in 2 passes", r, err)
		}
	})
}

func TestTryMergeDoesNotWaitForABusySlot(t *testing.T) {
	f := newFixture(t, objstoretest.Mem(t), Config{Concurrency: 1})
	f.add(t, 1, "a")
	f.seal(t)
	if err := f.m.slots.Acquire(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.Merge(context.Background(), f.s, false); !errors.Is(err, ErrBusy) {
		t.Fatalf("try-merge with every slot taken: %v, want ErrBusy", err)
	}
	f.m.slots.Release(1)
	if r, err := f.m.Merge(context.Background(), f.s, false); err != nil || r.Generations != 1 {
		t.Fatalf("try-merge with a free slot: %+v %v", r, err)
	}
}

func TestAMergeRidesOutThrottling(t *testing.T) {
	f := objstore.NewFaults(rand.NewPCG(7, 8))
	b := objstore.WithFaults(objstoretest.Mem(t), f)
	fx := newFixture(t, b, Config{})
	for g := 0; g < 3; g++ {
		fx.add(t, int64(g), fmt.Sprint(g), "same")
		fx.seal(t)
	}
	// Every kind of request is refused (503 SlowDown) a few times first.
	for _, op := range objstore.Ops() {
		f.AddRule(objstore.Rule{Ops: []objstore.Op{op}, Times: 3, Err: objstore.ErrThrottled})
	}
	r, err := fx.m.Merge(context.Background(), fx.s, true)
	if err != nil || r.Generations != 3 {
		t.Fatalf("merge under throttling: %+v %v", r, err)
	}
	if f.Injected() == 0 {
		t.Fatal("nothing was throttled")
	}
	if got := fx.values(t); len(got) != 4 || got["same"] != 2 {
		t.Fatalf("values after the merge: %v", got)
	}
}

// Merging counts the merges holding a slot, prepared or running, and not the
// slots a compaction reserves: compactions yield to merges, not to each other.
func TestMergingCountsMergesNotReservations(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, objstoretest.Mem(t), Config{Concurrency: 3})
	release, err := f.m.Reserve(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if n := f.m.Merging(); n != 0 {
		t.Fatalf("a reservation counts as %d merges", n)
	}
	f.add(t, 1, "a")
	f.seal(t)
	p, err := f.m.prepare(ctx, f.s, true)
	if err != nil {
		t.Fatal(err)
	}
	if n := f.m.Merging(); n != 1 {
		t.Fatalf("a prepared merge: Merging %d, want 1", n)
	}
	if _, err := p.commit(ctx); err != nil {
		t.Fatal(err)
	}
	release()
	if n := f.m.Merging(); n != 0 {
		t.Fatalf("after the commit and the release: Merging %d", n)
	}
}
