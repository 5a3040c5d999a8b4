package maintain

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/table"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/testutil/storetest"
)

// fill writes rounds of sealed rows through two workers' shards (new ids and
// overwrites of a few hot ids) and merges after each round, one generation a
// pass, so the table gets a fragment per round and deletion vectors. It returns
// the model: id -> last value.
func fill(t *testing.T, m *merge.Merger, shards []*store.Store, rounds int) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	want := map[string]int64{}
	for r := 0; r < rounds; r++ {
		s := shards[r%len(shards)]
		v := int64(r + 1)
		ids := []string{fmt.Sprintf("r%d-a", r), fmt.Sprintf("r%d-b", r), fmt.Sprintf("hot-%d", r%3)}
		if err := storetest.Append(ctx, s, v, ids...); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Seal(ctx); err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			want[id] = v
		}
		if _, err := m.Merge(ctx, s, true); err != nil {
			t.Fatal(err)
		}
	}
	return want
}

// A compact task rewrites the small fragments into one, then cleanup deletes the
// manifests and files retention lets go, of the table and of its WAL shards; every
// row reads its last value through both workers after it, and the merge budget
// lent to it is given back.
func TestCompactThenCleanupKeepsEveryRowAndBoundsTheTable(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	w1 := storetest.Open(t, b, "w1", true)
	w2 := storetest.Open(t, b, "w2", false)
	merger := merge.New(merge.Config{MaxGenerations: 1, Concurrency: 1, Logger: storetest.Quiet()})
	want := fill(t, merger, []*store.Store{w1, w2}, 24)
	before, err := w1.Table().Refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(before.Fragments) < 20 || before.Stats().DeletedRows == 0 {
		t.Fatalf("the fill left %d fragments, %d deleted rows; want many of both", len(before.Fragments), before.Stats().DeletedRows)
	}
	time.Sleep(20 * time.Millisecond) // past the tiny windows below

	m := New(Config{
		Compact:   table.CompactOptions{TargetRows: 1000},
		Retention: table.Retention{KeepVersions: 2, KeepAge: time.Millisecond, SafetyWindow: time.Millisecond},
		WAL:       wal.Retention{KeepManifests: 2, SafetyWindow: time.Millisecond},
		Reserver:  merger,
		Logger:    storetest.Quiet(),
	})
	r, err := m.Compact(ctx, w2)
	if err != nil {
		t.Fatal(err)
	}
	if r.Compaction.Sources < 20 || r.Compaction.Outputs != 1 || r.Compaction.RowsDropped == 0 {
		t.Fatalf("compaction %+v: want the small fragments rewritten into one, deleted rows dropped", r.Compaction)
	}
	if r.Table.ManifestsDeleted == 0 || r.WAL.ManifestsDeleted == 0 || r.Shards != 2 {
		t.Fatalf("cleanup %+v, WAL %+v over %d shards: want old manifests deleted", r.Table, r.WAL, r.Shards)
	}
	// The version before the compaction is still kept (retention keeps the one
	// that was newest when its window opened), and with it the replaced files:
	// they go once a later version replaces it.
	for k, v := range fill(t, merger, []*store.Store{w1}, 1) {
		want[k] = v
	}
	time.Sleep(20 * time.Millisecond)
	again, err := m.Compact(ctx, w2)
	if err != nil {
		t.Fatal(err)
	}
	if again.Table.FilesDeleted < r.Compaction.Sources {
		t.Fatalf("second task: cleanup %+v; want at least the %d replaced fragments deleted", again.Table, r.Compaction.Sources)
	}
	if s := r.Summary(); !strings.Contains(s, "compacted") || !strings.Contains(s, "deleted") {
		t.Fatalf("summary %q", s)
	}
	for _, s := range []*store.Store{w1, w2} {
		if got := storetest.Values(t, s); !maps.Equal(got, want) {
			t.Fatalf("after maintenance %s lists %v, want %v", s.Shard(), got, want)
		}
	}
	versions, err := w1.Table().Versions(ctx)
	if err != nil || len(versions) > 3 {
		t.Fatalf("versions left %v, %v; want at most the retention's few", versions, err)
	}
	// The slot and budget are back: a merge with wait=false finds a free slot.
	if _, err := merger.Merge(ctx, w1, false); err != nil {
		t.Fatalf("merge after maintenance: %v", err)
	}
	// The writers go on after their shards' manifests were pruned.
	storetest.AppendAndSeal(t, w1, "after", 99)
	storetest.WantValue(t, w2, "after", 99)
}

// Verify finds a deleted fragment and changes nothing; a repair drops it and only
// it, and the table reads again.
func TestVerifyFindsAMissingFragmentAndRepairDropsOnlyIt(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	w1 := storetest.Open(t, b, "w1", true)
	merger := merge.New(merge.Config{MaxGenerations: 1, Logger: storetest.Quiet()})
	fill(t, merger, []*store.Store{w1}, 6)
	m := New(Config{Logger: storetest.Quiet()})
	r, err := m.Verify(ctx, w1, false)
	if err != nil || len(r.Verify.Problems) != 0 {
		t.Fatalf("verify of a sound table: %+v, %v", r.Verify, err)
	}
	man, err := w1.Table().Refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	victim := man.Fragments[0]
	if err := b.Delete(ctx, w1.Table().Dir()+"/"+victim.Path); err != nil {
		t.Fatal(err)
	}
	r, err = m.Verify(ctx, w1, false)
	if err != nil || len(r.Verify.Problems) != 1 || r.Verify.Problems[0].Path != victim.Path || r.Dropped != 0 {
		t.Fatalf("verify after deleting %s: %+v (dropped %d), %v", victim.Path, r.Verify, r.Dropped, err)
	}
	r, err = m.Verify(ctx, w1, true)
	if err != nil || r.Dropped != 1 || r.DroppedRows != victim.LiveRows() {
		t.Fatalf("repair: dropped %d fragments (%d rows), %v; want %s (%d rows)", r.Dropped, r.DroppedRows, err, victim.Path, victim.LiveRows())
	}
	if r, err = m.Verify(ctx, w1, false); err != nil || len(r.Verify.Problems) != 0 {
		t.Fatalf("verify after the repair: %+v, %v", r.Verify, err)
	}
	if got := storetest.Values(t, w1); len(got) == 0 {
		t.Fatal("nothing listed after the repair")
	}
}

// mergingReserver is a Reserver whose merges in flight the test sets.
type mergingReserver struct{ merging int }

func (r *mergingReserver) Reserve(context.Context, int64) (func(), error) { return func() {}, nil }
func (r *mergingReserver) Merging() int                                   { return r.merging }

// A compaction yields to its worker's merges: while one runs, after each row
// group that took d it waits d again (about half the worker it would take);
// with none it does not wait; a wait ends with its context.
func TestACompactionYieldsToMergesInFlight(t *testing.T) {
	r := &mergingReserver{}
	m := New(Config{Reserver: r})
	var waits []time.Duration
	m.sleep = func(ctx context.Context, d time.Duration) error {
		waits = append(waits, d)
		return ctx.Err()
	}
	ctx := context.Background()
	if err := m.yield(ctx, 40*time.Millisecond); err != nil || len(waits) != 0 {
		t.Fatalf("no merge in flight: waited %v (%v)", waits, err)
	}
	r.merging = 2
	if err := m.yield(ctx, 40*time.Millisecond); err != nil || len(waits) != 1 || waits[0] != 40*time.Millisecond {
		t.Fatalf("merges in flight: waited %v (%v), want 40ms once", waits, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := m.yield(cctx, time.Millisecond); err != context.Canceled {
		t.Fatalf("a wait past its context: %v", err)
	}
	// The real wait ends with its context too.
	real := New(Config{Reserver: r})
	start := time.Now()
	if err := real.yield(cctx, time.Hour); err != context.Canceled || time.Since(start) > time.Minute {
		t.Fatalf("an hour's wait with an ended context: %v after %v", err, time.Since(start))
	}
}
