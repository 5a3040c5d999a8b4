package wal_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
)

// entrySuffix is what an entry key at pos ends with, for fault rules.
func entrySuffix(pos uint64) string { return fmt.Sprintf("/entries/%020d.arrow", pos) }

// TestStaleWriterIsFencedAfterAnOpenDiedBeforeKeepingItsRange: an opener (epoch 2)
// writes its fences and dies before recording its kept range, or loses the shard to
// the next opener right then; the next opener (epoch 3) completes and seals. The
// writer of epoch 1 is still alive and its next position lies below epoch 3's top:
// the position of its own write whose answer was lost (epoch 2's top), or a hole
// epoch 2 left in its fence range. Production failure guarded against: epoch 3 kept
// only from its own top, its seal deleted that position, and the stale writer's
// retry then succeeded there, below replay_after, acknowledging rows no replay
// reads. Invariant: each append of a stale writer either fails with ErrFenced or its
// rows are sealed exactly once.
func TestStaleWriterIsFencedAfterAnOpenDiedBeforeKeepingItsRange(t *testing.T) {
	manifestWrites := objstore.Rule{Ops: []objstore.Op{objstore.OpPutIfAbsent}, KeyContains: "/_manifests/"}
	for _, tc := range []struct {
		name string
		// lostAnswer: epoch 1's write at 3 lands but its answer is lost, so it
		// retries at 3; epoch 2 lists 3 as its top and fences 4.
		lostAnswer bool
		// staleRaces: epoch 2 lists 2 as its top, then epoch 1 takes 3, so epoch 2
		// claims 4..5 (gap_from 4).
		staleRaces bool
		// kill fails requests of epoch 2 from its first fence on (its death).
		kill objstore.Rule
		// overtaken: epoch 3 opens while epoch 2 writes its keep edit, which then
		// fails with ErrFenced: no crash at all.
		overtaken bool
		// deadTop is the position of epoch 2's highest fence.
		deadTop uint64
	}{
		{name: "own write with a lost answer below the dead open's fence", lostAnswer: true, kill: manifestWrites, deadTop: 4},
		{name: "own write with a lost answer below the overtaken open's fence", lostAnswer: true, overtaken: true, deadTop: 4},
		{
			name: "hole the dead open left in its fence range", staleRaces: true, deadTop: 5,
			kill: objstore.Rule{Ops: []objstore.Op{objstore.OpPutIfAbsent}, KeyContains: entrySuffix(4)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			raw := objstoretest.Mem(t)
			staleFaults := objstore.NewFaults(nil)
			stale := openWriter(t, objstore.WithFaults(raw, staleFaults), testShard) // epoch 1, fence at 1
			mustAppend(t, stale, "a1")                                               // 2
			acked := []string{"a1"}
			if tc.lostAnswer {
				staleFaults.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpPutIfAbsent}, KeyContains: entrySuffix(3), Times: 1, AfterWrite: true})
				if err := appendIDs(ctx, stale, "a-lost-answer"); !errors.Is(err, objstore.ErrInjected) {
					t.Fatalf("append whose answer is lost: %v, want the injected error", err)
				}
			}

			var next *wal.Writer // epoch 3
			deadFaults := objstore.NewFaults(nil)
			_, err := wal.OpenWriter(ctx, objstore.WithFaults(raw, deadFaults), testDir, testShard, inputSchema,
				wal.WithLogger(testLogger(t)),
				wal.WithBeforeFence(func() {
					if tc.staleRaces {
						mustAppend(t, stale, "a2") // 3
						acked = append(acked, "a2")
					}
					if tc.kill.Ops != nil {
						deadFaults.AddRule(tc.kill)
					}
				}),
				wal.WithBeforeManifestWrite(func(txnID string) {
					if tc.overtaken && next == nil && strings.HasPrefix(txnID, "keep-") {
						next = openWriter(t, raw, testShard)
					}
				}))
			if err == nil || tc.overtaken != errors.Is(err, wal.ErrFenced) {
				t.Fatalf("open of epoch 2: %v; want it to fail (with ErrFenced: %v)", err, tc.overtaken)
			}
			if ok, err := raw.Exists(ctx, testDir+"/_wal/"+testShard+entrySuffix(tc.deadTop)); err != nil || !ok {
				t.Fatalf("epoch 2's fence at %d is missing (%v)", tc.deadTop, err)
			}
			if next == nil {
				next = openWriter(t, raw, testShard)
			}
			m, err := wal.LoadShard(ctx, raw, testDir, testShard)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range m.KeptEntries {
				if r.Epoch == 2 {
					t.Fatalf("epoch 2 recorded its range %+v", r)
				}
			}

			mustAppend(t, next, "c1")
			acked = append(acked, "c1")
			mustSeal(t, next) // deletes the sealed entries it does not keep

			// The stale writer's next appends: each must be fenced, or sealed.
			var fenced []string
			for i := range 3 {
				id := fmt.Sprintf("a-late-%d", i)
				switch err := appendIDs(ctx, stale, id); {
				case err == nil:
					acked = append(acked, id)
				case errors.Is(err, wal.ErrFenced):
					fenced = append(fenced, id)
				default:
					t.Fatalf("stale append %s: %v", id, err)
				}
			}
			if len(fenced) == 0 {
				t.Error("the stale writer was never fenced")
			}
			mustAppend(t, next, "c2")
			acked = append(acked, "c2")
			mustSeal(t, next)
			// A later owner replays whatever the last seal did not cover.
			last := openWriter(t, raw, testShard)
			mustSeal(t, last)

			got := sealedRows(t, raw, testShard)
			checkExactlyOnce(t, got, acked)
			for _, id := range fenced {
				if len(got[id]) != 0 {
					t.Errorf("append of %s failed with ErrFenced but its row was sealed", id)
				}
			}
		})
	}
}

var modelSeed = flag.Uint64("wal.seed", 0, "first seed of TestRandomOpensCrashesAndSealsNeverLoseAcknowledgedRows (0: from the clock)")

// TestRandomOpensCrashesAndSealsNeverLoseAcknowledgedRows interleaves, at random,
// appends through the shard's owner and through stale writers still alive (some
// with a lost answer, some failing before the write, which they retry at the same
// position), opens that complete (some raced by a stale writer taking positions
// under their fences), opens that die (before any fence, between fences leaving
// holes, before recording their kept range, or overtaken by the next open right
// then), seals by any writer, crashes of writers, and Cleanup with everything old.
// A final owner replays and seals what is left. Invariant (the model): every append
// that returned nil is sealed exactly once, none that failed with ErrFenced is
// sealed, and no row is sealed twice. Reproduce a failure with -wal.seed.
func TestRandomOpensCrashesAndSealsNeverLoseAcknowledgedRows(t *testing.T) {
	iterations, steps := 60, 30
	if testing.Short() {
		iterations = 15
	}
	base := *modelSeed
	if base == 0 {
		base = uint64(time.Now().UnixNano())
	}
	t.Logf("seeds %d..%d", base, base+uint64(iterations)-1)
	for i := range iterations {
		seed := base + uint64(i)
		if !t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runOpenCrashModel(t, seed, steps) }) {
			break
		}
	}
}

// modelWriter is a writer whose open completed, with the faults of its own requests.
type modelWriter struct {
	w      *wal.Writer
	faults *objstore.Faults
}

func runOpenCrashModel(t *testing.T, seed uint64, steps int) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	raw := objstoretest.Mem(t)
	quiet := wal.WithLogger(slog.New(slog.DiscardHandler))
	var (
		live          []*modelWriter // completed opens not crashed, oldest first
		acked, fenced []string
		appends       int
	)
	t.Cleanup(func() {
		for _, m := range live {
			m.w.Abandon()
		}
	})
	entryWrites := []objstore.Op{objstore.OpPutIfAbsent}

	// appendThrough appends one new row through m; fault 1 loses the answer of the
	// write (it lands), fault 2 fails it before it lands.
	appendThrough := func(m *modelWriter, fault int) {
		appends++
		id := fmt.Sprintf("r%d", appends)
		var h *objstore.RuleHandle
		if fault > 0 {
			h = m.faults.AddRule(objstore.Rule{Ops: entryWrites, KeyContains: "/entries/", Times: 1, AfterWrite: fault == 1})
		}
		err := appendIDs(ctx, m.w, id)
		if h != nil {
			h.Remove()
		}
		switch {
		case err == nil:
			acked = append(acked, id)
		case errors.Is(err, wal.ErrFenced):
			fenced = append(fenced, id)
		case !errors.Is(err, objstore.ErrInjected):
			t.Fatalf("append %s through epoch %d: %v", id, m.w.Stats().Epoch, err)
		}
	}
	anyLive := func() *modelWriter { return live[rng.IntN(len(live))] }
	// raceOpen lets a live writer (likely stale) take the positions an opener that
	// has just replayed is about to claim, so that it fences in more rounds.
	raceOpen := func() {
		if len(live) > 0 {
			m := anyLive()
			for range rng.IntN(3) {
				appendThrough(m, 0)
			}
		}
	}
	// open opens a writer; hooks builds its test hooks from the faults of its
	// requests and the function that kills it (cancels its context: requests in
	// flight may or may not land, nothing after them is written). A writer whose
	// open completed joins live.
	open := func(hooks func(f *objstore.Faults, kill func()) []wal.Option) error {
		f := objstore.NewFaults(nil)
		octx, kill := context.WithCancel(ctx)
		defer kill()
		opts := []wal.Option{quiet}
		if hooks != nil {
			opts = append(opts, hooks(f, kill)...)
		}
		w, err := wal.OpenWriter(octx, objstore.WithFaults(raw, f), testDir, testShard, inputSchema, opts...)
		f.Clear()
		if err == nil {
			live = append(live, &modelWriter{w: w, faults: f})
		}
		return err
	}
	mustOpen := func(hooks func(f *objstore.Faults, kill func()) []wal.Option) {
		if err := open(hooks); err != nil {
			t.Fatalf("open: %v", err)
		}
	}
	topEntry := func() uint64 {
		objs, err := raw.List(ctx, fmt.Sprintf("%s/_wal/%s/entries/", testDir, testShard))
		if err != nil {
			t.Fatal(err)
		}
		var top uint64
		for _, o := range objs {
			var pos uint64
			if _, err := fmt.Sscanf(path.Base(o.Key), "%d.arrow", &pos); err == nil {
				top = max(top, pos)
			}
		}
		return top
	}

	for range steps {
		if len(live) == 0 {
			mustOpen(nil)
			continue
		}
		switch k := rng.IntN(16); {
		case k < 7: // append, through the owner or any stale writer
			m := live[len(live)-1]
			if rng.IntN(2) == 0 {
				m = anyLive()
			}
			appendThrough(m, max(0, rng.IntN(5)-2))
		case k < 9: // seal by the owner or a stale writer (fenced)
			m := live[len(live)-1]
			if rng.IntN(3) == 0 {
				m = anyLive()
			}
			if _, err := m.w.Seal(ctx); err != nil && !errors.Is(err, wal.ErrFenced) {
				t.Fatalf("seal by epoch %d: %v", m.w.Stats().Epoch, err)
			}
		case k < 11: // an open that completes, maybe raced by a stale writer
			mustOpen(func(*objstore.Faults, func()) []wal.Option { return []wal.Option{wal.WithBeforeFence(raceOpen)} })
		case k < 14: // an open that dies, or completes if it was not killed in time
			mode := rng.IntN(4)
			overtaken := false
			err := open(func(f *objstore.Faults, kill func()) []wal.Option {
				return []wal.Option{
					wal.WithBeforeFence(func() {
						top := topEntry() // what the opener listed
						raceOpen()
						switch mode {
						case 0: // dies before any fence
							kill()
						case 1: // dies between its fences, maybe leaving holes
							f.AddRule(objstore.Rule{Ops: entryWrites, KeyContains: entrySuffix(top + 1 + uint64(rng.IntN(4))),
								Before: func(context.Context, objstore.Op, string) { kill() }})
						}
					}),
					wal.WithBeforeManifestWrite(func(txnID string) {
						if !strings.HasPrefix(txnID, "keep-") {
							return
						}
						switch {
						case mode == 2: // dies before recording its kept range
							kill()
						case mode == 3 && !overtaken: // the next open claims the shard first
							overtaken = true
							mustOpen(nil)
						}
					}),
				}
			})
			if err != nil && !errors.Is(err, context.Canceled) && !(overtaken && errors.Is(err, wal.ErrFenced)) {
				t.Fatalf("open that dies (mode %d): %v", mode, err)
			}
		case k < 15: // Cleanup, with every object older than the safety window
			mustCleanup(t, raw, wal.Retention{KeepManifests: 2}, later(), quiet)
		default: // a writer's process dies
			i := rng.IntN(len(live))
			live[i].w.Abandon()
			live = slices.Delete(live, i, i+1)
		}
	}

	// The last owner replays and seals whatever is left; then the model must hold.
	mustOpen(nil)
	if _, err := live[len(live)-1].w.Seal(ctx); err != nil {
		t.Fatalf("final seal: %v", err)
	}
	got := sealedRows(t, raw, testShard)
	checkExactlyOnce(t, got, acked)
	for _, id := range fenced {
		if len(got[id]) != 0 {
			t.Errorf("append of %s failed with ErrFenced but its row was sealed", id)
		}
	}
}
