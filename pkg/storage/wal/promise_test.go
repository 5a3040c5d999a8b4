package wal_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
)

// A promise is what the change feed's horizon is made of, so it must hold under
// every interleaving of appends, seals and faults: once Promise returns P, every
// acknowledged row with _seq <= P is in the shard's manifest read right after, and
// every append that starts after it gets a _seq above P. Appenders, a sealer and a
// promiser race here against a bucket that fails a fifth of requests, half of the
// failed writes after they landed (the write whose rows come back through
// resolveTaken).
func TestPromiseCoversEverySealedRowAndBoundsEveryLaterOne(t *testing.T) {
	ctx := context.Background()
	raw, err := objstore.Open(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	f := objstore.NewFaults(rand.NewPCG(3, 5))
	b := objstore.WithFaults(raw, f)
	w := openWriter(t, raw, testShard)
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	f.SetErrorRate(0.2)
	f.SetWritePhase(objstore.FailBeforeOrAfterWrite)
	for attempt := 0; ; attempt++ {
		if w, err = wal.OpenWriter(ctx, b, testDir, testShard, inputSchema, wal.WithLogger(testLogger(t))); err == nil {
			break
		}
		if attempt == 50 {
			t.Fatalf("open under faults: %v", err)
		}
	}
	t.Cleanup(func() { _ = w.Close(context.Background()) })

	type promised struct{ p, maxSeq uint64 }
	var (
		mu      sync.Mutex
		acked   []uint64
		records []promised
		last    atomic.Uint64 // the latest promise returned
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	for a := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				before := last.Load()
				rec := batch("a" + string(rune('0'+a)))
				seq, err := w.AppendAfter(ctx, rec, 0)
				rec.Release()
				if err != nil {
					if errors.Is(err, wal.ErrFenced) {
						t.Errorf("append: %v", err)
						return
					}
					continue
				}
				if seq <= before {
					t.Errorf("append started after promise %d got _seq %d", before, seq)
				}
				mu.Lock()
				acked = append(acked, seq)
				mu.Unlock()
			}
		}()
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			_, _ = w.Seal(ctx)
		}
	}()
	go func() {
		defer wg.Done()
		var prev uint64
		for {
			select {
			case <-stop:
				return
			default:
			}
			p, ok := w.Promise()
			if !ok {
				t.Error("promise refused by a writer that is not fenced")
				return
			}
			if p < prev {
				t.Errorf("promise went back from %d to %d", prev, p)
			}
			prev = p
			last.Store(p)
			m, err := wal.LoadShard(ctx, raw, testDir, testShard)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			records = append(records, promised{p, m.MaxSeq})
			mu.Unlock()
			time.Sleep(time.Millisecond)
		}
	}()
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()

	if len(acked) < 20 || len(records) < 20 {
		t.Fatalf("%d appends acknowledged, %d promises: too few to say anything", len(acked), len(records))
	}
	for _, r := range records {
		for _, s := range acked {
			// Rows of one writer are sealed in _seq order: a sealed row is one at or
			// below the manifest's max_seq.
			if s <= r.p && s > r.maxSeq {
				t.Fatalf("promise %d, but acknowledged row %d was not sealed in the manifest read after it (max_seq %d)", r.p, s, r.maxSeq)
			}
		}
	}
}
