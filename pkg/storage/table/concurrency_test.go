package table

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
)

type landed struct {
	rows []row
}

// checkHistory verifies the table after a set of commits: versions are dense from
// 1, every row of every landed commit is live unless a newer _seq for its id landed
// too, and no id is live twice (liveRows fails on that).
func checkHistory(t *testing.T, b *objstore.Bucket, dir string, commits []landed) {
	t.Helper()
	ctx := context.Background()
	objs, err := b.List(ctx, dir+"/"+versionsDir+"/")
	if err != nil {
		t.Fatal(err)
	}
	var versions []int
	for _, o := range objs {
		n, err := strconv.Atoi(strings.TrimSuffix(o.Key[strings.LastIndex(o.Key, "/")+1:], ".json"))
		if err != nil {
			t.Fatalf("unexpected object %s", o.Key)
		}
		versions = append(versions, n)
	}
	sort.Ints(versions)
	for i, v := range versions {
		if v != i+1 {
			t.Fatalf("versions %v are not dense from 1", versions)
		}
	}
	if len(versions) != len(commits)+1 {
		t.Fatalf("%d versions for %d landed commits (+1 for create)", len(versions), len(commits))
	}
	want := map[string]row{}
	for _, c := range commits {
		for _, r := range c.rows {
			if w, ok := want[r.id]; !ok || r.seq >= w.seq {
				want[r.id] = r
			}
		}
	}
	tb, err := Open(ctx, b, dir)
	if err != nil {
		t.Fatal(err)
	}
	got := liveRows(t, tb, tb.Latest())
	if len(got) != len(want) {
		t.Fatalf("%d live rows, want %d", len(got), len(want))
	}
	for id, w := range want {
		if got[id] != w {
			t.Fatalf("row %s = %+v, want %+v", id, got[id], w)
		}
	}
}

// The commit storm of the reference system: many writers commit into one base table.
// Every commit must either land or fail with the contention error; versions stay
// dense; nothing is lost or duplicated, and overlapping ids resolve by _seq.
func TestConcurrentCommittersLoseNothing(t *testing.T) {
	objstoretest.ForEachDriver(t, func(t *testing.T, open func(testing.TB) *objstore.Bucket) {
		ctx := context.Background()
		b := open(t)
		createTable(t, b)
		const writers, commitsEach = 8, 3
		var mu sync.Mutex
		var commits []landed
		var wg sync.WaitGroup
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				tb, err := Open(ctx, b, "rollout/t") // each writer is its own worker
				if err != nil {
					t.Error(err)
					return
				}
				for c := 0; c < commitsEach; c++ {
					seq := uint64(w*100 + c + 1)
					rows := []row{{fmt.Sprintf("shared-%d", c), seq, int64(seq)}}
					for i := 0; i < 5; i++ {
						rows = append(rows, row{fmt.Sprintf("w%d-c%d-%d", w, c, i), seq, int64(i)})
					}
					rec := batch(rows...)
					_, err := appendRows(ctx, tb, Append{Records: []arrow.RecordBatch{rec}, Shard: fmt.Sprint("w", w), Generation: uint64(c + 1)})
					rec.Release()
					switch {
					case err == nil:
						mu.Lock()
						commits = append(commits, landed{rows})
						mu.Unlock()
					case errors.Is(err, ErrTooManyWriters):
					default:
						t.Errorf("writer %d commit %d: %v", w, c, err)
					}
				}
			}(w)
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		checkHistory(t, b, "rollout/t", commits)
	})
}

// With transient errors on every kind of request, some of them after the write
// reached storage, each commit either lands whole or not at all, a retry of the same
// watermark never duplicates rows, and the table stays readable at every version.
func TestCommitsUnderInjectedFaultsSucceedOrFailCleanly(t *testing.T) {
	ctx := context.Background()
	clean := memBucket(t)
	faults := objstore.NewFaults(rand.NewPCG(7, 11))
	faulty := objstore.WithFaults(clean, faults)
	createTable(t, clean)
	tb, err := Open(ctx, faulty, "rollout/t", WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	faults.SetWritePhase(objstore.FailBeforeOrAfterWrite)
	var commits []landed
	failures := 0
	for gen := uint64(1); gen <= 30; gen++ {
		rows := []row{{fmt.Sprintf("g%d", gen), gen, int64(gen)}, {"hot", gen, int64(gen)}}
		rec := batch(rows...)
		// Retry each generation until it lands, the way a merge is retried: the
		// watermark must make a retry after an unknown outcome safe.
		for attempt := 0; ; attempt++ {
			faults.SetErrorRate(0.1)
			_, err := appendRows(ctx, tb, Append{Records: []arrow.RecordBatch{rec}, Shard: "w1", Generation: gen})
			faults.SetErrorRate(0)
			if err == nil || errors.Is(err, ErrAlreadyCommitted) {
				break
			}
			failures++
			if !errors.Is(err, objstore.ErrInjected) {
				t.Fatalf("generation %d: unexpected error %v", gen, err)
			}
			// Between attempts the table must be readable at its newest version.
			check, err := Open(ctx, clean, "rollout/t", WithCacheBytes(0))
			if err != nil {
				t.Fatalf("table unreadable after a failed commit: %v", err)
			}
			liveRows(t, check, check.Latest())
			if attempt > 200 {
				t.Fatalf("generation %d never landed", gen)
			}
		}
		rec.Release()
		commits = append(commits, landed{rows})
	}
	if failures == 0 {
		t.Fatal("no commit failed: the fault injection did not bite")
	}
	t.Logf("%d failed attempts, %d injected faults", failures, faults.Injected())
	checkHistory(t, clean, "rollout/t", commits)
}
