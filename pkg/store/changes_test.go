package store_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
	"github.com/tidemark-io/tidemark/pkg/storage/table"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/testutil/storetest"
)

// feedRow is a row as the feed answers it, or as a list says it should.
type feedRow struct {
	pos rowkey.Position
	v   int64
}

// liveRows lists s and returns its live rows in Position order, and the highest
// _seq among them.
func liveRows(t *testing.T, s *store.Store) ([]feedRow, uint64) {
	t.Helper()
	recs, err := s.List(context.Background(), store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []feedRow
	var top uint64
	for _, r := range recs {
		out = append(out, rowOf(t, r))
		top = max(top, out[len(out)-1].pos.Seq)
		r.Release()
	}
	slices.SortFunc(out, func(a, b feedRow) int { return a.pos.Compare(b.pos) })
	return out, top
}

// rowOf decodes a one-row batch of the storetest schema.
func rowOf(t *testing.T, r interface {
	Column(int) arrow.Array
}) feedRow {
	t.Helper()
	id := r.Column(0).(*array.String).Value(0)
	v := r.Column(1).(*array.Int64).Value(0)
	seq := r.Column(2).(*array.Uint64).Value(0)
	return feedRow{rowkey.Position{Seq: seq, ID: id}, v}
}

// follow pages s's feed from cursor `from` under horizon h with random limits
// until a page is not full, calling between after every page; it checks every
// page's order and next cursor, and returns the rows and the last next cursor.
func follow(t *testing.T, s *store.Store, from rowkey.Position, h uint64, rng *rand.Rand, between func(page int)) ([]feedRow, rowkey.Position) {
	t.Helper()
	ctx := context.Background()
	var got []feedRow
	cur := from
	for page := 0; ; page++ {
		limit := 1 + rng.IntN(7)
		p, err := s.Changes(ctx, store.ChangesOptions{After: cur, Horizon: h, Limit: limit})
		if err != nil {
			t.Fatalf("page %d after %+v: %v", page, cur, err)
		}
		last := cur
		for _, c := range p.Changes {
			r := rowOf(t, c.Row)
			if r.pos != c.Position {
				t.Fatalf("page %d: change at %+v holds the row at %+v", page, c.Position, r.pos)
			}
			if !last.Less(r.pos) || r.pos.Seq > h {
				t.Fatalf("page %d: row at %+v after %+v (horizon %d): out of order or past the horizon", page, r.pos, last, h)
			}
			last = r.pos
			got = append(got, r)
		}
		p.Release()
		if len(p.Changes) > limit {
			t.Fatalf("page %d: %d rows, limit %d", page, len(p.Changes), limit)
		}
		if len(p.Changes) == limit {
			if p.Next != last {
				t.Fatalf("page %d is full: next %+v, want its last row's %+v", page, p.Next, last)
			}
		} else {
			want := rowkey.After(h)
			if want.Less(cur) {
				want = cur
			}
			if p.Next != want {
				t.Fatalf("page %d is not full: next %+v, want %+v", page, p.Next, want)
			}
			return got, p.Next
		}
		cur = p.Next
		if between != nil {
			between(page)
		}
	}
}

// sameRows fails unless got and want are the same rows in the same order.
func sameRows(t *testing.T, what string, got, want []feedRow) {
	t.Helper()
	if slices.Equal(got, want) {
		return
	}
	seen := map[string]int{}
	for _, r := range got {
		seen[r.pos.ID]++
	}
	for id, n := range seen {
		if n > 1 {
			t.Errorf("%s: id %s answered %d times", what, id, n)
		}
	}
	t.Fatalf("%s: answered %d rows %v\nwant %d rows %v", what, len(got), got, len(want), want)
}

// randomHistory writes rounds of adds over a pool of ids (overwrites) through
// two shards, sealing every round and merging some: base fragments with
// deletion vectors, and pending generations of both shards.
func randomHistory(t *testing.T, rng *rand.Rand, ws []*store.Store, rounds int, merges bool) {
	t.Helper()
	ctx := context.Background()
	mg := merge.New(merge.Config{Logger: storetest.Quiet()})
	for r := range rounds {
		w := ws[rng.IntN(len(ws))]
		var ids []string
		for range 1 + rng.IntN(6) {
			ids = append(ids, fmt.Sprintf("id-%02d", rng.IntN(40)))
		}
		slices.Sort(ids)
		ids = slices.Compact(ids)
		if err := storetest.Append(ctx, w, int64(r), ids...); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Seal(ctx); err != nil {
			t.Fatal(err)
		}
		if merges && rng.IntN(3) == 0 {
			if _, err := mg.Merge(ctx, w, true); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A consumer paging from the zero cursor with random limits gets every live row
// exactly once, in Position order, at its newest Position: from base fragments
// (overwritten rows deleted by deletion vectors) and from the pending generations
// of two shards (overwritten rows older than another shard's).
func TestChangesPagesEveryLiveRowOnceInPositionOrder(t *testing.T) {
	for seed := range uint64(2) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 32))
			b := objstoretest.Mem(t)
			w1 := storetest.Open(t, b, "w1", true)
			w2 := storetest.Open(t, b, "w2", false)
			randomHistory(t, rng, []*store.Store{w1, w2}, 36, true)
			randomHistory(t, rng, []*store.Store{w1, w2}, 4, false) // pending generations for sure
			reader := storetest.Open(t, b, "r", false)
			want, h := liveRows(t, reader)
			deleted := false
			for _, f := range reader.Snapshot().Base.Fragments {
				deleted = deleted || f.Deletions != nil
			}
			if !deleted || reader.Snapshot().PendingCount() == 0 {
				t.Fatalf("the history left deletion vectors %v and %d pending generations; want both", deleted, reader.Snapshot().PendingCount())
			}
			got, _ := follow(t, reader, rowkey.Position{}, h, rng, nil)
			sameRows(t, "follow from the start", got, want)
		})
	}
}

// Merges and compactions between pages move rows between generations and
// fragments without changing their Positions: a consumer neither skips nor
// repeats a row.
func TestChangesAcrossMergesAndCompactionsNeitherSkipNorRepeat(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 32))
	b := objstoretest.Mem(t)
	w1 := storetest.Open(t, b, "w1", true)
	w2 := storetest.Open(t, b, "w2", false)
	ws := []*store.Store{w1, w2}
	randomHistory(t, rng, ws, 50, false)
	want, h := liveRows(t, w1)
	mg := merge.New(merge.Config{Logger: storetest.Quiet(), MaxGenerations: 3})
	compactions := 0
	got, _ := follow(t, w1, rowkey.Position{}, h, rng, func(page int) {
		switch page % 3 {
		case 0, 1:
			if _, err := mg.MergeOnce(ctx, ws[page%2], true); err != nil {
				t.Fatal(err)
			}
		case 2:
			res, err := w1.Table().Compact(ctx, table.CompactOptions{TargetRows: 16, Level0Trigger: 2})
			if err != nil && !errors.Is(err, table.ErrConflict) {
				t.Fatal(err)
			}
			if res.Version != 0 {
				compactions++
			}
		}
	})
	if compactions == 0 {
		t.Fatal("no compaction committed between pages")
	}
	sameRows(t, "follow across merges and compactions", got, want)
}

// Rows above the horizon are held back, and an id overwritten above it is not
// answered at its older Position: once the horizon passes them, the consumer
// gets them, each once, from the cursor the held-back page gave it.
func TestChangesHoldBackRowsAboveTheHorizon(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 32))
	b := objstoretest.Mem(t)
	w1 := storetest.Open(t, b, "w1", true)
	w2 := storetest.Open(t, b, "w2", false)
	ws := []*store.Store{w1, w2}
	randomHistory(t, rng, ws, 20, true)
	before, h1 := liveRows(t, w1)
	randomHistory(t, rng, ws, 20, true) // overwrites some ids of before, above h1
	after, h2 := liveRows(t, w1)

	// Under h1: the rows of the final state at or below h1, and none of the
	// older versions of ids overwritten since.
	var wantFirst, wantRest []feedRow
	for _, r := range after {
		if r.pos.Seq <= h1 {
			wantFirst = append(wantFirst, r)
		} else {
			wantRest = append(wantRest, r)
		}
	}
	if len(wantFirst) == len(before) || len(wantRest) == 0 {
		t.Fatalf("the second half overwrote none of the first's %d rows (%d still at or below the horizon)", len(before), len(wantFirst))
	}
	got, next := follow(t, w1, rowkey.Position{}, h1, rng, nil)
	sameRows(t, "under the first horizon", got, wantFirst)
	if next != rowkey.After(h1) {
		t.Fatalf("next cursor %+v, want After(%d)", next, h1)
	}
	// The horizon does not move: the cursor stays, nothing is answered, nothing read.
	p, err := w1.Changes(ctx, store.ChangesOptions{After: next, Horizon: h1, Limit: 10})
	if err != nil || len(p.Changes) != 0 || p.Next != next {
		t.Fatalf("page at the horizon: %d rows, next %+v, %v; want none and the same cursor", len(p.Changes), p.Next, err)
	}
	got, _ = follow(t, w1, next, h2, rng, nil)
	sameRows(t, "once the horizon passed them", got, wantRest)
}

// Rows with a filter that does not match, and stale candidates, do not shorten a
// page while matching live rows follow.
func TestChangesFilterFillsThePage(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	w1 := storetest.Open(t, b, "w1", true)
	mg := merge.New(merge.Config{Logger: storetest.Quiet()})
	for r := range 10 {
		ids := make([]string, 20)
		for i := range ids {
			ids[i] = fmt.Sprintf("r%d-%02d", r, i)
		}
		if err := storetest.Append(ctx, w1, int64(r), ids...); err != nil {
			t.Fatal(err)
		}
		if _, err := w1.Seal(ctx); err != nil {
			t.Fatal(err)
		}
		if r%2 == 0 {
			if _, err := mg.Merge(ctx, w1, true); err != nil {
				t.Fatal(err)
			}
		}
	}
	all, h := liveRows(t, w1)
	var want []feedRow
	for _, r := range all {
		if r.v == 9 || r.v == 8 {
			want = append(want, r)
		}
	}
	onlyLate := func(rec arrow.RecordBatch) ([]bool, error) {
		vs := rec.Column(1).(*array.Int64)
		out := make([]bool, vs.Len())
		for i := range out {
			out[i] = vs.Value(i) >= 8
		}
		return out, nil
	}
	p, err := w1.Changes(ctx, store.ChangesOptions{Horizon: h, Limit: 30, Filter: onlyLate, FilterColumns: []string{"v"}, Columns: []string{"id", "v"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release()
	var got []feedRow
	for _, c := range p.Changes {
		got = append(got, rowOf(t, c.Row))
	}
	sameRows(t, "filtered page", got, want[:30])
}

// Issue 32: a feed page costs what it returns plus the fragments whose _seq range
// overlaps the cursor, not a pass over the store. A consumer near the end of a
// store of many fragments reads none of the fragments behind its cursor.
func TestChangesAfterALateCursorReadOnlyTheFragmentsThatReachIt(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	w1 := storetest.Open(t, b, "w1", true)
	mg := merge.New(merge.Config{Logger: storetest.Quiet()})
	const merges, perMerge = 12, 50
	for m := range merges {
		ids := make([]string, perMerge)
		for i := range ids {
			ids[i] = fmt.Sprintf("k%03d", rand.IntN(1000)) // ids spread over every fragment's range
		}
		slices.Sort(ids)
		if err := storetest.Append(ctx, w1, int64(m), slices.Compact(ids)...); err != nil {
			t.Fatal(err)
		}
		if _, err := w1.Seal(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := mg.Merge(ctx, w1, true); err != nil {
			t.Fatal(err)
		}
	}
	frags := w1.Snapshot().Base.Fragments
	if len(frags) != merges {
		t.Fatalf("%d fragments, want one per merge (%d)", len(frags), merges)
	}
	slices.SortFunc(frags, func(a, b table.Fragment) int { return int(a.SeqMax) - int(b.SeqMax) })
	cursor := rowkey.After(frags[merges-3].SeqMax) // behind the last two fragments
	overlap := map[string]bool{}
	for _, f := range frags {
		if f.SeqMax >= cursor.Seq {
			overlap[fragmentName(f.Path)] = true
		}
	}

	faults := objstore.NewFaults(nil)
	reads := countFragmentReads(faults)
	reader := storetest.Open(t, objstore.WithFaults(b, faults), "r", false)
	all, h := liveRows(t, reader)
	reads.take()

	p, err := reader.Changes(ctx, store.ChangesOptions{After: cursor, Horizon: h, Limit: 30})
	if err != nil {
		t.Fatal(err)
	}
	var got []feedRow
	for _, c := range p.Changes {
		got = append(got, rowOf(t, c.Row))
	}
	p.Release()
	var want []feedRow
	for _, r := range all {
		if cursor.Less(r.pos) {
			want = append(want, r)
		}
	}
	sameRows(t, "page after a late cursor", got, want[:min(30, len(want))])
	touched := reads.take()
	for name := range touched {
		if !overlap[name] {
			t.Errorf("the page read fragment %s, whose _seq range lies before the cursor", name)
		}
	}
	if len(touched) == 0 {
		t.Fatal("the page read no fragment: the reads are not counted")
	}
}

// fragmentReads records the fragments whose objects a bucket's requests read.
type fragmentReads struct {
	mu      sync.Mutex
	touched map[string]bool
}

// countFragmentReads records, through faults, the fragments read.
func countFragmentReads(faults *objstore.Faults) *fragmentReads {
	r := &fragmentReads{touched: map[string]bool{}}
	faults.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpGet, objstore.OpGetRange}, KeyContains: "/data/",
		Before: func(_ context.Context, _ objstore.Op, key string) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.touched[fragmentName(key)] = true
		}})
	return r
}

// take returns the fragments read since the last take.
func (r *fragmentReads) take() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.touched
	r.touched = map[string]bool{}
	return out
}

// fragmentName is the name a fragment's objects share (data/<name>.parquet,
// .bloom, .idx).
func fragmentName(key string) string {
	base := path.Base(key)
	name, _, _ := strings.Cut(base, ".")
	return name
}
