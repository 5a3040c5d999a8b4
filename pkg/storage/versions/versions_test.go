package versions

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
)

func TestEmptyLogHasNoLatest(t *testing.T) {
	l := New(objstoretest.Mem(t), "t/_versions", "t/_latest_version")
	if _, err := l.Latest(context.Background(), 0); !errors.Is(err, ErrEmpty) {
		t.Fatalf("got %v, want ErrEmpty", err)
	}
}

func TestLatestFollowsCreatesWithStaleMissingOrBogusHint(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	l := New(b, "t/_versions", "t/_latest_version")
	for v := uint64(1); v <= 5; v++ {
		if _, err := l.Create(ctx, v, []byte(fmt.Sprint(v))); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string) {
		t.Helper()
		if v, err := l.Latest(ctx, 0); err != nil || v != 5 {
			t.Fatalf("%s: latest = %d, %v; want 5", what, v, err)
		}
	}
	check("fresh hint")
	if err := b.Put(ctx, "t/_latest_version", []byte("2\n")); err != nil {
		t.Fatal(err)
	}
	check("stale hint")
	if err := b.Put(ctx, "t/_latest_version", []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	check("bogus hint")
	if err := b.Delete(ctx, "t/_latest_version"); err != nil {
		t.Fatal(err)
	}
	check("no hint")
	if vs, err := l.List(ctx); err != nil || len(vs) != 5 {
		t.Fatalf("list = %v, %v", vs, err)
	}
}

func TestConcurrentCreatesOfOneVersionHaveOneWinner(t *testing.T) {
	ctx := context.Background()
	l := New(objstoretest.Mem(t), "t/_versions", "t/_latest_version")
	var wins, losses int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, err := l.Create(ctx, 1, []byte(fmt.Sprint(i)))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, objstore.ErrExists):
				losses++
			default:
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	if wins != 1 || losses != 7 {
		t.Fatalf("%d wins, %d losses; want 1 and 7", wins, losses)
	}
}

// Prune removes only the bottom of the log, and every search for the newest
// version still ends at the newest one afterwards, whether it starts from a pruned
// version the caller knew, from a hint left below the new bottom, or from nothing.
func TestPruneKeepsTheLogDenseAndSearchesFindTheNewest(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	l := New(b, "t/_versions", "t/_latest_version")
	for v := uint64(1); v <= 10; v++ {
		if _, err := l.Create(ctx, v, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := l.Prune(ctx, 3, time.Now().Add(-time.Hour)); err != nil || len(got) != 0 {
		t.Fatalf("prune with every version younger than the cutoff deleted %v, %v; want none", got, err)
	}
	got, err := l.Prune(ctx, 3, time.Now().Add(time.Hour))
	if err != nil || !slices.Equal(got, []uint64{1, 2, 3, 4, 5, 6, 7}) {
		t.Fatalf("prune deleted %v, %v; want 1..7", got, err)
	}
	if left, err := l.List(ctx); err != nil || !slices.Equal(left, []uint64{8, 9, 10}) {
		t.Fatalf("left %v, %v; want 8, 9, 10", left, err)
	}
	for _, known := range []uint64{0, 2, 7, 8, 10} {
		if v, err := l.Latest(ctx, known); err != nil || v != 10 {
			t.Fatalf("Latest(known %d) = %d, %v; want 10", known, v, err)
		}
	}
	// A hint written late by a stalled committer, below the new bottom.
	if err := b.Put(ctx, "t/_latest_version", []byte("3\n")); err != nil {
		t.Fatal(err)
	}
	if v, err := l.Latest(ctx, 0); err != nil || v != 10 {
		t.Fatalf("Latest with a hint below the oldest version = %d, %v; want 10", v, err)
	}
	if _, err := l.Create(ctx, 11, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if v, err := l.Latest(ctx, 5); err != nil || v != 11 {
		t.Fatalf("Latest after a new version = %d, %v; want 11", v, err)
	}
}

// A caller that knows the newest version (a writer of its own log) learns that it
// is still the newest in one round of requests sent at once: the hint read and the
// probe of known and known+1. Failure it guards: every WAL seal and drain, and
// every table refresh by the handle that committed last, waited two round trips.
// A known version that is stale, behind the hint, or pruned still finds the newest.
func TestLatestFromAKnownVersionTakesOneRound(t *testing.T) {
	ctx := context.Background()
	f := objstore.NewFaults(nil)
	b := objstore.WithFaults(objstoretest.Mem(t), f)
	l := New(b, "t/_versions", "t/_latest_version")
	for v := uint64(1); v <= 5; v++ {
		if _, err := l.Create(ctx, v, []byte(fmt.Sprint(v))); err != nil {
			t.Fatal(err)
		}
	}
	f.SetLatency(100*time.Millisecond, 0) // long enough that requests sent at once overlap
	f.ResetCounters()
	if v, err := l.Latest(ctx, 5); err != nil || v != 5 {
		t.Fatalf("latest from 5 = %d, %v; want 5", v, err)
	}
	if n, peak := f.TotalRequests(), f.PeakInFlight(); n != 3 || peak != 3 {
		t.Fatalf("latest from the newest: %d requests, %d at once; want 3, all at once", n, peak)
	}
	f.SetLatency(0, 0)

	if v, err := l.Latest(ctx, 3); err != nil || v != 5 {
		t.Fatalf("latest from stale 3 = %d, %v; want 5", v, err)
	}
	if err := b.Put(ctx, "t/_latest_version", []byte("2\n")); err != nil {
		t.Fatal(err)
	}
	if v, err := l.Latest(ctx, 4); err != nil || v != 5 {
		t.Fatalf("latest from 4 with a hint behind it = %d, %v; want 5", v, err)
	}
	for v := uint64(1); v <= 3; v++ {
		if err := b.Delete(ctx, l.Key(v)); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := l.Latest(ctx, 2); err != nil || v != 5 {
		t.Fatalf("latest from pruned 2 with a stale hint = %d, %v; want 5", v, err)
	}
}
