package store_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"golang.org/x/sync/errgroup"

	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/table"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/testutil/storetest"
)

// viewValues reads a view three ways (List, Stream, Get of each listed id) and
// fails unless they agree; it returns id -> v.
func viewValues(ctx context.Context, view *store.View) (map[string]int64, error) {
	recs, err := view.List(ctx, store.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	listed := map[string]int64{}
	for _, r := range recs {
		listed[r.Column(0).(*array.String).Value(0)] = r.Column(1).(*array.Int64).Value(0)
		r.Release()
	}
	streamed := map[string]int64{}
	err = view.Stream(ctx, store.ListOptions{}, func(rec arrow.RecordBatch, i int) error {
		id := rec.Column(0).(*array.String).Value(i)
		if _, dup := streamed[id]; dup {
			return fmt.Errorf("stream: id %s twice", id)
		}
		streamed[id] = rec.Column(1).(*array.Int64).Value(i)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("stream: %w", err)
	}
	if !maps.Equal(listed, streamed) {
		return nil, fmt.Errorf("list %v and stream %v disagree", listed, streamed)
	}
	for id, v := range listed {
		rec, err := view.Get(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("get %s: %w", id, err)
		}
		if rec == nil {
			return nil, fmt.Errorf("get %s: missing, listed as %d", id, v)
		}
		got := rec.Column(1).(*array.Int64).Value(0)
		rec.Release()
		if got != v {
			return nil, fmt.Errorf("get %s = %d, listed as %d", id, got, v)
		}
	}
	return listed, nil
}

// A read at version v is the base table at v: merged rows only, and the same rows
// every time, while other shards append, seal and merge new versions over the same
// ids and compactions rewrite the fragments v reads. Run with -race.
func TestReadAtVersionIsStableWhileMergesAndCompactionsCommit(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	w1 := storetest.Open(t, b, "w1", true)
	w2 := storetest.Open(t, b, "w2", false)
	reader := storetest.Open(t, b, "r", false) // loads every version it reads
	mg := merge.New(merge.Config{Logger: storetest.Quiet()})

	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for i, id := range ids {
		storetest.AppendAndSeal(t, w1, id, i)
	}
	res, err := mg.Merge(ctx, w1, true)
	if err != nil {
		t.Fatal(err)
	}
	v := res.Version
	// Sealed but not merged: newer than version v, so not in it.
	storetest.AppendAndSeal(t, w2, "a", 100, "pending", 1)

	view, err := w1.At(ctx, v)
	if err != nil {
		t.Fatal(err)
	}
	want, err := viewValues(ctx, view)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != len(ids) || want["a"] != 0 || want["h"] != 7 {
		t.Fatalf("version %d reads %v, want the 8 merged rows only", v, want)
	}
	if now := storetest.Values(t, w1); now["a"] != 100 || now["pending"] != 1 {
		t.Fatalf("a read without a version %v misses the pending rows", now)
	}

	// Writers: two shards overwrite every id, seal and merge, round after round,
	// and compactions fold the small fragments; readers keep reading version v.
	const rounds = 6
	var compactions atomic.Int32
	writers, wctx := errgroup.WithContext(ctx)
	for si, w := range []*store.Store{w1, w2} {
		writers.Go(func() error {
			for r := range rounds {
				if err := storetest.Append(wctx, w, int64(1000*(si+1)+r), ids...); err != nil {
					return err
				}
				if _, err := w.Seal(wctx); err != nil {
					return err
				}
				if _, err := mg.Merge(wctx, w, true); err != nil {
					return err
				}
				if si == 1 {
					continue
				}
				// Compactions race the other shard's merges.
				res, err := w.Table().Compact(wctx, table.CompactOptions{Level0Trigger: 2})
				switch {
				case errors.Is(err, table.ErrConflict):
				case err != nil:
					return err
				case res.Version != 0:
					compactions.Add(1)
				}
			}
			return nil
		})
	}
	done := make(chan error, 1)
	go func() { done <- writers.Wait() }()

	readers, rctx := errgroup.WithContext(ctx)
	stop := make(chan struct{})
	reads := make([]int, 2)
	for ri, s := range []*store.Store{w1, reader} {
		readers.Go(func() error {
			for {
				select {
				case <-stop:
					return nil
				default:
				}
				view, err := s.At(rctx, v)
				if err != nil {
					return err
				}
				got, err := viewValues(rctx, view)
				if err != nil {
					return err
				}
				if !maps.Equal(got, want) {
					return fmt.Errorf("read %d at version %d: %v, first read %v", reads[ri], v, got, want)
				}
				reads[ri]++
			}
		})
	}
	werr := <-done
	close(stop)
	if err := readers.Wait(); err != nil {
		t.Fatal(err)
	}
	if werr != nil {
		t.Fatal(werr)
	}
	latest, err := w1.Table().LatestVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if latest < v+2*rounds {
		t.Fatalf("newest version %d: the writers committed fewer than %d versions over %d", latest, 2*rounds, v)
	}
	if compactions.Load() == 0 {
		t.Fatal("no compaction committed during the reads")
	}
	if reads[0] == 0 || reads[1] == 0 {
		t.Fatalf("reads at version %d during the merges: %v", v, reads)
	}
	t.Logf("%d and %d reads at version %d while versions %d..%d committed (%d compactions)", reads[0], reads[1], v, v+1, latest, compactions.Load())
}

// A version retention pruned is refused with the readable range, by a handle that
// held its manifest and by one that never read it; never served from the held
// manifest while garbage collection deletes its files.
func TestReadAtAPrunedVersionNamesTheOldestReadable(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	w1 := storetest.Open(t, b, "w1", true)
	other := storetest.Open(t, b, "r", false)
	mg := merge.New(merge.Config{Logger: storetest.Quiet()})
	var versions []uint64
	for r := range 3 {
		storetest.AppendAndSeal(t, w1, "a", r)
		res, err := mg.Merge(ctx, w1, true)
		if err != nil {
			t.Fatal(err)
		}
		versions = append(versions, res.Version)
	}
	old := versions[0]
	if _, err := w1.At(ctx, old); err != nil { // now held by w1
		t.Fatal(err)
	}
	// A retention of one version, with no age: everything but the newest goes,
	// files and all.
	if _, err := w1.Table().Cleanup(ctx, table.Retention{KeepVersions: 1, KeepAge: time.Nanosecond, SafetyWindow: time.Nanosecond}); err != nil {
		t.Fatal(err)
	}
	newest := versions[len(versions)-1]
	for _, s := range []*store.Store{w1, other} {
		_, err := s.At(ctx, old)
		var ve *store.VersionError
		if !errors.As(err, &ve) || !errors.Is(err, store.ErrVersionNotFound) {
			t.Fatalf("read at pruned version %d: %v, want a VersionError", old, err)
		}
		if !ve.Pruned || ve.Oldest != newest || ve.Newest != newest {
			t.Fatalf("read at pruned version %d: %+v, want pruned and the range %d..%d", old, ve, newest, newest)
		}
	}
	_, err := w1.At(ctx, newest+5)
	var ve *store.VersionError
	if !errors.As(err, &ve) || ve.Pruned || ve.Newest != newest {
		t.Fatalf("read at future version: %v (%+v)", err, ve)
	}
	if _, err := w1.At(ctx, 0); !errors.Is(err, store.ErrVersionNotFound) {
		t.Fatalf("read at version 0: %v", err)
	}
	view, err := w1.At(ctx, newest)
	if err != nil {
		t.Fatal(err)
	}
	got, err := viewValues(ctx, view)
	if err != nil || got["a"] != 2 {
		t.Fatalf("read at the newest version %d: %v %v", newest, got, err)
	}
}

// Pending reads the rows not yet merged, newest per id, and none of the base
// table's; what a merge takes in leaves it.
func TestPendingReadsTheUnmergedRowsAlone(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	w1 := storetest.Open(t, b, "w1", true)
	w2 := storetest.Open(t, b, "w2", false)
	mg := merge.New(merge.Config{Logger: storetest.Quiet()})
	storetest.AppendAndSeal(t, w1, "merged", 1, "both", 2)
	if _, err := mg.Merge(ctx, w1, true); err != nil {
		t.Fatal(err)
	}
	storetest.AppendAndSeal(t, w2, "both", 20, "pending", 3)
	pending, err := w1.Pending(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := viewValues(ctx, pending)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["both"] != 20 || got["pending"] != 3 {
		t.Fatalf("pending rows %v, want both=20 and pending=3 (w2's unmerged rows), not merged=1", got)
	}
	if _, err := mg.Merge(ctx, w2, true); err != nil {
		t.Fatal(err)
	}
	if pending, err = w1.Pending(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := viewValues(ctx, pending); err != nil || len(got) != 0 {
		t.Fatalf("after merging them: pending rows %v, %v; want none", got, err)
	}
}
