package wal_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// TestFaultsNeverLoseAcknowledgedRows runs appenders and a sealer against a store
// that fails a fifth of all requests (half of the failed writes after the bytes
// landed: the lost-response case) with latency, then heals it. Appends may fail
// while it is sick, never silently: every acknowledged row must be sealed exactly
// once, the writer must never mistake its own landed write for a takeover, and
// appends must succeed again once the faults stop.
func TestFaultsNeverLoseAcknowledgedRows(t *testing.T) {
	objstoretest.ForEachDriver(t, func(t *testing.T, open func(testing.TB) *objstore.Bucket) {
		ctx := context.Background()
		raw := open(t)
		f := objstore.NewFaults(rand.NewPCG(7, 11))
		b := objstore.WithFaults(raw, f)
		f.SetLatency(0, 2*time.Millisecond)
		f.SetErrorRate(0.2)
		f.SetWritePhase(objstore.FailBeforeOrAfterWrite)

		var w *wal.Writer
		for attempt := 0; w == nil; attempt++ {
			var err error
			if w, err = wal.OpenWriter(ctx, b, testDir, testShard, inputSchema, wal.WithLogger(testLogger(t))); err != nil {
				if errors.Is(err, wal.ErrFenced) || attempt == 50 {
					t.Fatalf("open under faults, attempt %d: %v", attempt, err)
				}
			}
		}
		t.Cleanup(func() { _ = w.Close(context.Background()) })

		var (
			mu           sync.Mutex
			acked        []string
			failed, seal int
		)
		record := func(id string, err error) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				acked = append(acked, id)
			case errors.Is(err, wal.ErrFenced):
				t.Errorf("append %s: %v: the writer took its own landed write for a takeover", id, err)
			default:
				failed++
			}
		}
		stop := make(chan struct{})
		var sealer sync.WaitGroup
		sealer.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(3 * time.Millisecond):
				}
				_, err := w.Seal(ctx)
				if errors.Is(err, wal.ErrFenced) {
					t.Errorf("seal: %v", err)
				}
				mu.Lock()
				if err == nil {
					seal++
				}
				mu.Unlock()
			}
		})
		appendAll := func(phase string) {
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Go(func() {
					for i := range 60 {
						id := fmt.Sprintf("%s-%d-%03d", phase, g, i)
						record(id, appendIDs(ctx, w, id))
					}
				})
			}
			wg.Wait()
		}
		appendAll("sick")
		close(stop)
		sealer.Wait()
		mu.Lock()
		t.Logf("under faults: %d acknowledged, %d failed, %d seals; %d requests, %d injected faults",
			len(acked), failed, seal, f.TotalRequests(), f.Injected())
		if failed == 0 || len(acked) == 0 {
			t.Errorf("want some failed and some acknowledged appends under faults, got %d and %d", failed, len(acked))
		}
		failed = 0
		mu.Unlock()

		f.Clear()
		appendAll("healed")
		if failed != 0 {
			t.Errorf("%d appends failed after the faults stopped", failed)
		}
		mustSeal(t, w)
		if n := w.Stats().MemtableRows; n != 0 {
			t.Errorf("%d rows left in the memtable after a clean seal", n)
		}
		// A new writer on the healthy store sees the same thing.
		w.Abandon()
		w2 := openWriter(t, raw, testShard)
		mustSeal(t, w2)
		checkExactlyOnce(t, sealedRows(t, raw, testShard), acked)
	})
}

// TestOwnLandedWriteIsNotAFence: an entry write whose response is lost (it landed)
// fails its appenders; the next batch finds the position taken by this writer's own
// entry, adopts it and goes on - it must not conclude that a newer writer exists.
// The lost-response batch is durable, so it is sealed (durable but unacknowledged).
func TestOwnLandedWriteIsNotAFence(t *testing.T) {
	ctx := context.Background()
	raw := objstoretest.Mem(t)
	f := objstore.NewFaults(nil)
	b := objstore.WithFaults(raw, f)
	w := openWriter(t, b, testShard)

	f.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpPutIfAbsent}, KeyContains: "/entries/", Times: 1, AfterWrite: true})
	if err := appendIDs(ctx, w, "lost-response"); !errors.Is(err, objstore.ErrInjected) {
		t.Fatalf("append whose response was lost: %v, want the injected error", err)
	}
	mustAppend(t, w, "next")

	// The same at the manifest: a seal whose manifest write landed but reported an
	// error reads its version back and succeeds.
	f.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpPutIfAbsent}, KeyContains: "/_manifests/", Times: 1, AfterWrite: true})
	g := mustSeal(t, w)
	if g.Generation != 1 || g.Rows != 2 {
		t.Errorf("sealed generation %d with %d rows, want 1 with 2", g.Generation, g.Rows)
	}
	mustAppend(t, w, "after")
	if g := mustSeal(t, w); g.Generation != 2 || g.Rows != 1 {
		t.Errorf("second seal: generation %d with %d rows, want 2 with 1", g.Generation, g.Rows)
	}
	checkExactlyOnce(t, sealedRows(t, raw, testShard), []string{"lost-response", "next", "after"})
}

// TestFailedBatchFailsEveryAppenderInIt: group commit must not acknowledge part of
// a batch whose single write failed.
func TestFailedBatchFailsEveryAppenderInIt(t *testing.T) {
	ctx := context.Background()
	raw := objstoretest.Mem(t)
	f := objstore.NewFaults(nil)
	b := objstore.WithFaults(raw, f)
	w := openWriter(t, b, testShard) // fence at position 1
	f.SetLatency(50*time.Millisecond, 0)
	// Position 2 holds the first append alone; the appenders that queue behind it
	// share position 3, whose first write fails (before the write).
	f.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpPutIfAbsent}, KeyContains: fmt.Sprintf("/%020d.arrow", 3), Times: 1})
	first := make(chan error, 1)
	go func() { first <- appendIDs(ctx, w, "first") }()
	testwait.Until(t, 10*time.Second, "the first write to be in flight", func() bool { return f.InFlight() > 0 })
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		ok, fail []string
	)
	for i := range 10 {
		wg.Go(func() {
			id := fmt.Sprintf("grouped-%d", i)
			err := appendIDs(ctx, w, id)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				fail = append(fail, id)
			} else {
				ok = append(ok, id)
			}
		})
	}
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if len(fail) < 2 {
		t.Fatalf("%d appends failed (%v), want the whole group of the failed write", len(fail), fail)
	}
	f.Clear()
	mustSeal(t, w)
	got := sealedRows(t, raw, testShard)
	checkExactlyOnce(t, got, append(ok, "first"))
	for _, id := range fail {
		if len(got[id]) != 0 {
			t.Errorf("%s: its append failed before the write, yet it was sealed", id)
		}
	}
	t.Logf("failed group: %d appenders; later group: %d", len(fail), len(ok))
}

// TestSealWithUnknownOutcomeIsNotSealedTwice: a seal's manifest write lands but its
// response is lost and so is the read-back, so Seal reports an error. The next seal
// must notice that its rows are already sealed (replay_after moved) instead of
// sealing them into a second generation.
func TestSealWithUnknownOutcomeIsNotSealedTwice(t *testing.T) {
	ctx := context.Background()
	raw := objstoretest.Mem(t)
	f := objstore.NewFaults(nil)
	b := objstore.WithFaults(raw, f)
	w := openWriter(t, b, testShard)
	mustAppend(t, w, "a", "b")
	f.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpPutIfAbsent}, KeyContains: "/_manifests/", Times: 1, AfterWrite: true})
	f.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpGet}, KeyContains: "/_manifests/", Times: 1})
	if _, err := w.Seal(ctx); err == nil {
		t.Fatal("seal whose manifest write and read-back both failed reported success")
	}
	f.Clear()
	if g, err := w.Seal(ctx); err != nil || g != nil {
		t.Fatalf("next seal: %+v, %v; want nothing to seal (the rows landed in generation 1)", g, err)
	}
	mustAppend(t, w, "c")
	mustSeal(t, w)
	checkExactlyOnce(t, sealedRows(t, raw, testShard), []string{"a", "b", "c"})
	m, err := wal.LoadShard(ctx, raw, testDir, testShard)
	if err != nil {
		t.Fatal(err)
	}
	// The generation file of the unknown-outcome seal is referenced: it must exist.
	for _, g := range m.Generations {
		if ok, err := raw.Exists(ctx, wal.GenerationKey(testDir, g)); err != nil || !ok {
			t.Errorf("generation %d's file %s is missing (%v)", g.Generation, g.Path, err)
		}
	}
}
