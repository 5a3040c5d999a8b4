package merge

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
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/testutil/storetest"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// TestAdoptionDrainsTheShardOfAWorkerThatIsGoneAndFencesItShouldItReturn: w1
// acknowledges rows (some sealed, some only in WAL entries) and stops answering
// without closing anything; w2 adopts its shard. Production failure (DESIGN.md
// problem 5): a shard whose worker never returned stayed unmerged, its unsealed rows
// visible to no one. Invariants: after the adoption every acknowledged row of w1 is
// readable through w2 exactly once, nothing of w1's shard is pending, and the shard
// is retired; w1, still alive, is fenced on its next append (it never overwrites
// what the adopter replayed), opens a new epoch on the next one, and its rows then
// appear once, with the shard live again.
func TestAdoptionDrainsTheShardOfAWorkerThatIsGoneAndFencesItShouldItReturn(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	w1 := &fixture{bucket: b, s: storetest.Open(t, b, "w1", true)}
	w2 := &fixture{bucket: b, s: storetest.Open(t, b, "w2", false)}
	w1.add(t, 1, "a", "b")
	w1.seal(t)
	w1.add(t, 2, "b", "c") // acknowledged, never sealed
	w2.add(t, 7, "z")
	w2.seal(t)

	adopter := store.NewStores(store.Config{Bucket: b, Shard: "w2", Logger: quiet(), SnapshotTTL: -1,
		WALOptions: []wal.Option{wal.WithLogger(quiet())}}, 0)
	orphan, err := adopter.OpenShard(ctx, w1.s.Entry().Kind, w1.s.Entry().Name, "w1")
	if err != nil {
		t.Fatal(err)
	}
	m := New(Config{Logger: quiet()})
	res, err := m.Adopt(ctx, orphan, "w2")
	if err != nil {
		t.Fatal(err)
	}
	if err := orphan.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !res.Retired || res.Sealed != 2 || res.Merged.Generations != 2 {
		t.Fatalf("adoption %+v: want 2 rows sealed, 2 generations merged, retired", res)
	}
	want := map[string]int64{"a": 1, "b": 2, "c": 2, "z": 7}
	if got := w2.values(t); !equalValues(got, want) {
		t.Fatalf("through w2 after the adoption: %v, want %v", got, want)
	}
	sm, err := wal.LoadShard(ctx, b, w1.s.Entry().URI, "w1")
	if err != nil {
		t.Fatal(err)
	}
	if sm.Retired == nil || sm.Retired.By != "w2" || len(sm.Generations) != 0 {
		t.Fatalf("w1's shard after the adoption: retired %+v, %d generations; want retired by w2, none", sm.Retired, len(sm.Generations))
	}
	// Adopting it again finds it retired and changes nothing.
	again, err := adopter.OpenShard(ctx, w1.s.Entry().Kind, w1.s.Entry().Name, "w1")
	if err != nil {
		t.Fatal(err)
	}
	if res, err := m.Adopt(ctx, again, "w2"); err != nil || !res.Retired || res.Sealed != 0 || res.Merged.Generations != 0 {
		t.Fatalf("second adoption: %+v, %v; want retired, nothing done", res, err)
	}
	_ = again.Close(ctx)

	// w1 comes back to life: its first append is fenced, the next reopens.
	if err := w1.tryAdd(ctx, 3, "c"); !errors.Is(err, wal.ErrFenced) {
		t.Fatalf("append through the fenced writer: %v, want ErrFenced", err)
	}
	w1.add(t, 4, "c", "d")
	w1.seal(t)
	want = map[string]int64{"a": 1, "b": 2, "c": 4, "d": 4, "z": 7}
	for name, f := range map[string]*fixture{"w1": w1, "w2": w2} {
		if got := f.values(t); !equalValues(got, want) {
			t.Fatalf("through %s after w1 returned: %v, want %v", name, got, want)
		}
	}
	if sm, err = wal.LoadShard(ctx, b, w1.s.Entry().URI, "w1"); err != nil || sm.Retired != nil {
		t.Fatalf("w1's shard after it wrote again: %+v, %v; want live", sm, err)
	}
}

func equalValues(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestAdoptionRacingTheOldWriterLosesNoAcknowledgedRow: w1 is alive behind a
// partition (its lease lost) while w2 adopts its shard. Three interleavings, each
// an adversary of the fence: the whole adoption lands just before one of w1's
// entry writes; w1's entry write lands but its answer is lost, and the adoption
// (which then seals and deletes that entry) runs before w1 retries the position;
// and w1 appends without pause while adoptions run, many rounds. Invariant: every
// row w1 or w2 acknowledged is read exactly once through either worker, and a row
// whose append failed is read at most once.
func TestAdoptionRacingTheOldWriterLosesNoAcknowledgedRow(t *testing.T) {
	entryWrite := func(rule objstore.Rule) objstore.Rule {
		rule.Ops = []objstore.Op{objstore.OpPutIfAbsent}
		rule.KeyContains = "/_wal/w1/entries/"
		return rule
	}
	t.Run("adopted just before an entry write", func(t *testing.T) {
		r := newAdoptionRace(t)
		r.add(t, "before")
		r.faults.AddRule(entryWrite(objstore.Rule{Times: 1, Before: func(context.Context, objstore.Op, string) { r.adopt(t) }}))
		r.add(t, "during")
		r.add(t, "after")
		r.check(t)
	})
	t.Run("entry written, answer lost, adopted before the retry", func(t *testing.T) {
		r := newAdoptionRace(t)
		r.add(t, "before")
		r.faults.AddRule(entryWrite(objstore.Rule{Times: 1, AfterWrite: true}))
		r.add(t, "lost-answer")
		r.adopt(t)
		r.add(t, "retried")
		r.add(t, "after")
		r.check(t)
	})
	t.Run("appending without pause through adoptions", func(t *testing.T) {
		r := newAdoptionRace(t)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			// Paced like a busy worker, not a tight loop: seals back to back
			// would starve the adopter's epoch claim (its manifest edit loses
			// every race), which tests the edit's retry cap, not the fence.
			for i := 0; ctx.Err() == nil; i++ {
				r.add(t, fmt.Sprintf("n%04d", i))
				time.Sleep(time.Millisecond)
				if i%25 == 0 {
					if _, err := r.w1.s.Seal(ctx); err != nil && !errors.Is(err, wal.ErrFenced) && ctx.Err() == nil {
						t.Errorf("w1 seal: %v", err)
					}
				}
			}
		}()
		testwait.Until(t, 10*time.Second, "w1's first acknowledged append", func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			return len(r.acked) > 0
		})
		for range 10 {
			time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
			r.adopt(t)
		}
		cancel()
		<-done
		r.check(t)
	})
}

// adoptionRace is a store written by w1 through a fault-injecting bucket and
// adopted by w2, with what each acknowledged.
type adoptionRace struct {
	faults  *objstore.Faults
	w1, w2  *fixture
	adopter *store.Stores
	m       *Merger

	mu           sync.Mutex
	acked, maybe map[string]bool
}

func newAdoptionRace(t *testing.T) *adoptionRace {
	b := objstoretest.Mem(t)
	faults := objstore.NewFaults(nil)
	r := &adoptionRace{faults: faults, acked: map[string]bool{}, maybe: map[string]bool{}, m: New(Config{Logger: quiet()})}
	r.w1 = &fixture{bucket: b, s: storetest.Open(t, objstore.WithFaults(b, faults), "w1", true)}
	r.w2 = &fixture{bucket: b, s: storetest.Open(t, b, "w2", false)}
	r.adopter = store.NewStores(store.Config{Bucket: b, Shard: "w2", Logger: quiet(), SnapshotTTL: -1,
		WALOptions: []wal.Option{wal.WithLogger(quiet())}}, 0)
	return r
}

// add appends id through w1 and records whether it was acknowledged.
func (r *adoptionRace) add(t *testing.T, id string) {
	err := r.w1.tryAdd(context.Background(), 1, id)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.acked[id] = true
	} else {
		r.maybe[id] = true
	}
}

// adopt has w2 adopt w1's shard.
func (r *adoptionRace) adopt(t *testing.T) {
	ctx := context.Background()
	s, err := r.adopter.OpenShard(ctx, r.w1.s.Entry().Kind, r.w1.s.Entry().Name, "w1")
	if err != nil {
		t.Errorf("open w1's shard: %v", err)
		return
	}
	defer func() { _ = s.Close(ctx) }()
	if _, err := r.m.Adopt(ctx, s, "w2"); err != nil && !errors.Is(err, wal.ErrFenced) {
		// Fenced: w1 reopened its shard meanwhile; the next adoption goes on.
		t.Errorf("adopt: %v", err)
	}
}

// check seals what w1 holds, adopts what is left, and reads every row through
// both workers.
func (r *adoptionRace) check(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	r.faults.Clear()
	if _, err := r.w1.s.Seal(ctx); err != nil && !errors.Is(err, wal.ErrFenced) {
		t.Fatalf("final seal: %v", err)
	}
	r.adopt(t)
	for name, f := range map[string]*fixture{"w1": r.w1, "w2": r.w2} {
		got := f.values(t) // fails on an id listed twice
		for id := range r.acked {
			if _, ok := got[id]; !ok {
				t.Errorf("through %s: acknowledged %s is missing", name, id)
			}
		}
		for id := range got {
			if !r.acked[id] && !r.maybe[id] {
				t.Errorf("through %s: %s was never written", name, id)
			}
		}
	}
	if len(r.acked) == 0 {
		t.Fatal("nothing was acknowledged: the race proved nothing")
	}
}
