package wal_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// TestStaleWriterIsFenced: a worker that lost its shard (a second process started
// with the same INSTANCE_ID, or a paused process that came back) must stop at its
// next write instead of writing beside the new owner.
func TestStaleWriterIsFenced(t *testing.T) {
	for _, firstCall := range []string{"append", "seal"} {
		t.Run("first call after the takeover is "+firstCall, func(t *testing.T) {
			ctx := context.Background()
			b := objstoretest.Mem(t)
			a := openWriter(t, b, testShard)
			mustAppend(t, a, "a1", "a2")
			mustSeal(t, a)
			mustAppend(t, a, "a3")

			bw := openWriter(t, b, testShard)
			if got := bw.Stats().Epoch; got != a.Stats().Epoch+1 {
				t.Fatalf("new writer has epoch %d, want %d", got, a.Stats().Epoch+1)
			}
			var err error
			if firstCall == "append" {
				err = appendIDs(ctx, a, "a-late-1")
			} else {
				_, err = a.Seal(ctx)
			}
			if !errors.Is(err, wal.ErrFenced) {
				t.Fatalf("stale writer's %s: %v, want ErrFenced", firstCall, err)
			}
			// Fenced is sticky: every later call fails the same way.
			if err := appendIDs(ctx, a, "a-late-2"); !errors.Is(err, wal.ErrFenced) {
				t.Fatalf("append after fencing: %v, want ErrFenced", err)
			}
			if _, err := a.Seal(ctx); !errors.Is(err, wal.ErrFenced) {
				t.Fatalf("seal after fencing: %v, want ErrFenced", err)
			}
			if !a.Stats().Fenced {
				t.Error("Stats().Fenced is false")
			}

			mustAppend(t, bw, "b1")
			mustSeal(t, bw)
			got := sealedRows(t, b, testShard)
			checkExactlyOnce(t, got, []string{"a1", "a2", "a3", "b1"})
			for _, id := range []string{"a-late-1", "a-late-2"} {
				if len(got[id]) != 0 {
					t.Errorf("%s was written after the fence", id)
				}
			}
			if n := len(got); n != 4 {
				t.Errorf("%d ids sealed, want 4", n)
			}
		})
	}
}

// TestTakeoverDuringConcurrentAppends races a new writer's open against a stale
// writer's stream of appends: whatever the stale writer acknowledged, before or
// around the fence, the new writer must have, and no append that failed with
// ErrFenced may have been written.
func TestTakeoverDuringConcurrentAppends(t *testing.T) {
	objstoretest.ForEachDriver(t, func(t *testing.T, open func(testing.TB) *objstore.Bucket) {
		ctx := context.Background()
		b := open(t)
		a := openWriter(t, b, testShard)
		var (
			mu            sync.Mutex
			acked, fenced []string
			started       atomic.Int64
			wg            sync.WaitGroup
		)
		for g := range 8 {
			wg.Go(func() {
				for i := 0; ; i++ {
					id := fmt.Sprintf("a%d-%04d", g, i)
					started.Add(1)
					err := appendIDs(ctx, a, id)
					mu.Lock()
					switch {
					case err == nil:
						acked = append(acked, id)
					case errors.Is(err, wal.ErrFenced):
						fenced = append(fenced, id)
					default:
						t.Errorf("append %s: %v", id, err)
					}
					mu.Unlock()
					if err != nil {
						return
					}
				}
			})
		}
		testwait.Until(t, 30*time.Second, "100 appends of the stale writer to start", func() bool { return started.Load() >= 100 })
		bw := openWriter(t, b, testShard)
		wg.Wait()
		mustAppend(t, bw, "b1")
		mustSeal(t, bw)
		got := sealedRows(t, b, testShard)
		checkExactlyOnce(t, got, append(acked, "b1"))
		for _, id := range fenced {
			if len(got[id]) != 0 {
				t.Errorf("append of %s failed with ErrFenced but its row was written", id)
			}
		}
		t.Logf("stale writer: %d acknowledged, %d fenced", len(acked), len(fenced))
	})
}

// TestStaleWriterIsFencedAfterTheNewWriterSealed: the new owner seals (deleting the
// entries it sealed) before the stale writer, still alive, writes again; then a
// third writer takes over and seals too, and both stale writers write. Production
// failure: a seal deleted the new writer's fence entries with the rest, the stale
// writer's put-if-absent found its next position free below replay_after, and it
// acknowledged rows no replay would ever read. Invariant: every stale writer is
// fenced however many seals ran since, and every acknowledged row is sealed once.
func TestStaleWriterIsFencedAfterTheNewWriterSealed(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	a := openWriter(t, b, testShard)
	mustAppend(t, a, "a1")
	mustSeal(t, a)
	mustAppend(t, a, "a2") // unsealed: the next writer replays it

	bw := openWriter(t, b, testShard)
	mustAppend(t, bw, "b1")
	mustSeal(t, bw)
	cw := openWriter(t, b, testShard)
	mustAppend(t, cw, "c1")
	mustSeal(t, cw)

	var acked []string
	for i, w := range []*wal.Writer{a, bw, a, bw} {
		id := fmt.Sprintf("late-%d", i)
		if err := appendIDs(ctx, w, id); err == nil {
			acked = append(acked, id)
		} else if !errors.Is(err, wal.ErrFenced) {
			t.Fatalf("stale append %s: %v, want ErrFenced", id, err)
		}
	}
	if len(acked) > 0 {
		t.Fatalf("stale writers acknowledged %v after newer epochs sealed", acked)
	}
	mustAppend(t, cw, "c2")
	mustSeal(t, cw)
	checkExactlyOnce(t, sealedRows(t, b, testShard), []string{"a1", "a2", "b1", "c1", "c2"})
}
