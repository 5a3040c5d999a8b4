package table

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

// Prefetch reads, at once, the row group of each fragment the walk's next n rows
// come from, and only those: after it, Row reads nothing for those n rows, and a
// fragment whose rows all lie past them is not read. The rows read are the same
// as without it.
func TestPrefetchReadsTheRowGroupsOfTheNextRowsOnly(t *testing.T) {
	ctx := context.Background()
	f := objstore.NewFaults(rand.NewPCG(3, 4))
	bucket := objstore.WithFaults(memBucket(t), f)
	tb := createTable(t, bucket, rowGroups(64))
	// Three fragments interleaved over "k-000".."k-299", and one whose range
	// starts among them (so the walk opens it at once) but whose rows after the
	// walk's start all lie past the rows read.
	for i := range 3 {
		var rows []row
		for j := i; j < 300; j += 3 {
			rows = append(rows, row{fmt.Sprintf("k-%03d", j), 1, int64(j)})
		}
		mustAppend(t, tb, rows...)
	}
	far := []row{{"k-005x", 1, 999}}
	for j := range 50 {
		far = append(far, row{fmt.Sprintf("k-2%02dx", j), 1, int64(1000 + j)})
	}
	mustAppend(t, tb, far...)
	read := func(prefetch bool) (ids []string, values []int64, prefetchReqs, rowReqs int64) {
		t.Helper()
		fresh, err := Open(ctx, bucket, "rollout/t")
		if err != nil {
			t.Fatal(err)
		}
		it, err := fresh.Iter(ctx, fresh.Latest(), "k-010", false)
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		more, err := it.Next(ctx)
		if err != nil || !more {
			t.Fatalf("first row: %v %v", more, err)
		}
		if prefetch {
			f.ResetCounters()
			if err := it.Prefetch(ctx, nil, 30); err != nil {
				t.Fatal(err)
			}
			prefetchReqs = f.TotalRequests()
		}
		f.ResetCounters()
		for range 30 {
			rec, i, err := it.Row(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, it.ID())
			values = append(values, rec.Column(1).(*array.Int64).Value(i))
			if more, err = it.Next(ctx); err != nil || !more {
				t.Fatalf("row %d: %v %v", len(ids), more, err)
			}
		}
		return ids, values, prefetchReqs, f.TotalRequests()
	}
	ids, values, _, lazy := read(false)
	pids, pvalues, pre, after := read(true)
	if fmt.Sprint(ids, values) != fmt.Sprint(pids, pvalues) {
		t.Fatalf("rows with Prefetch %v %v, without %v %v", pids, pvalues, ids, values)
	}
	if ids[0] != "k-011" || ids[29] != "k-040" {
		t.Fatalf("rows %v", ids)
	}
	if after != 0 {
		t.Fatalf("Row read %d times after Prefetch (%v), want none", after, f.RequestCounts())
	}
	// One read per interleaved fragment (each of its footer and row group), none
	// for the far one: what the rows read without it, read before they are asked.
	if pre == 0 || pre > lazy {
		t.Fatalf("Prefetch made %d requests; Row alone made %d", pre, lazy)
	}
}

// A walk takes the key-index blocks it finds cached without a request: a walk by
// pages, each a new walk from the last page's id, pays a round trip only when it
// reaches a block no earlier walk read, and then reads that one and the
// indexReadAhead-1 after it at once. (Reading ahead past a cached block at every
// open made a page by cursor wait for a block it did not need.)
func TestAWalkTakesCachedBlocksWithoutARequest(t *testing.T) {
	ctx := context.Background()
	f := objstore.NewFaults(rand.NewPCG(5, 6))
	bucket := objstore.WithFaults(memBucket(t), f)
	tb := createTable(t, bucket)
	var rows []row
	for j := range 6000 { // ids sharing little, so that blocks hold a few hundred
		rows = append(rows, row{fmt.Sprintf("%016x", uint64(j+1)*0x9e3779b97f4a7c15), 1, int64(j)})
	}
	m := mustAppend(t, tb, rows...)
	if len(m.Fragments) != 1 || !m.Fragments[0].Sorted {
		t.Fatalf("want one sorted fragment, got %+v", m.Fragments)
	}
	fresh, err := Open(ctx, bucket, "rollout/t")
	if err != nil {
		t.Fatal(err)
	}
	top, err := fresh.indexTopOf(ctx, fresh.Latest().Fragments[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(top.blocks) < 2*indexReadAhead+1 {
		t.Fatalf("%d key-index blocks, want at least %d", len(top.blocks), 2*indexReadAhead+1)
	}
	// walk reads n ids from the first one after `after`, and says how many
	// requests it made.
	walk := func(after string, n int) int64 {
		t.Helper()
		f.ResetCounters()
		it, err := fresh.Iter(ctx, fresh.Latest(), after, false)
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		prev := after
		for range n {
			more, err := it.Next(ctx)
			if err != nil || !more {
				t.Fatalf("walk from %s: %v %v", after, more, err)
			}
			if it.ID() <= prev {
				t.Fatalf("walk from %s: %s after %s", after, it.ID(), prev)
			}
			prev = it.ID()
		}
		return f.TotalRequests()
	}
	if got := walk("", 10); got != 1 {
		t.Fatalf("a cold walk made %d requests, want 1 (blocks 0-%d at once)", got, indexReadAhead-1)
	}
	// Blocks 1..indexReadAhead-1 are cached, the one after them is not: a walk
	// from block 1 that stays in the cached ones reads nothing.
	if got := walk(top.blocks[1].first, 10); got != 0 {
		t.Fatalf("a walk in cached blocks made %d requests, want none", got)
	}
	// A walk into the first block not read reads it and the ones after at once.
	last := top.blocks[indexReadAhead-1]
	if got := walk(last.first, last.entries+top.blocks[indexReadAhead].entries); got != 1 {
		t.Fatalf("a walk past the cached blocks made %d requests, want 1", got)
	}
	if got := walk(top.blocks[indexReadAhead+1].first, 10); got != 0 {
		t.Fatalf("a walk in blocks read ahead made %d requests, want none", got)
	}
}

// A walk from a cursor (a page) through interleaved fragments with deletions
// returns what a walk from the start returns after that id, every column (a list
// among them), wherever the cursor lies in a row group, with a filter too.
func TestAWalkFromACursorReadsWhatAWholeWalkReads(t *testing.T) {
	ctx := context.Background()
	tb := createTable(t, memBucket(t), rowGroups(16))
	for i := range 3 { // three sorted fragments, interleaved
		var rows []row
		for j := i; j < 300; j += 3 {
			rows = append(rows, row{fmt.Sprintf("k-%03d", j), 1, int64(j)})
		}
		mustAppend(t, tb, rows...)
	}
	var over []row // overwritten: deletion vectors in the three
	for j := 0; j < 300; j += 7 {
		over = append(over, row{fmt.Sprintf("k-%03d", j), 2, int64(1000 + j)})
	}
	mustAppend(t, tb, over...)
	cell := func(it *Iter, filtered bool) string {
		t.Helper()
		if filtered {
			if ok, err := it.Match(ctx, []string{"id", "value", "_seq"}, func(rec arrow.RecordBatch) ([]bool, error) {
				out := make([]bool, rec.NumRows())
				for i, v := range rec.Column(1).(*array.Int64).Int64Values() {
					out[i] = v%2 == 0
				}
				return out, nil
			}); err != nil || !ok {
				return ""
			}
		}
		rec, i, err := it.Row(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%s=%s/%s", it.ID(), rec.Column(1).ValueStr(i), rec.Column(2).ValueStr(i))
	}
	walk := func(after string, all, filtered bool, n int) []string {
		t.Helper()
		it, err := tb.Iter(ctx, tb.Latest(), after, all)
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		var out []string
		for len(out) < n {
			more, err := it.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !more {
				break
			}
			if c := cell(it, filtered); c != "" {
				out = append(out, c)
			}
		}
		return out
	}
	for _, filtered := range []bool{false, true} {
		whole := walk("", true, filtered, 1000)
		if !filtered && len(whole) != 300 {
			t.Fatalf("%d rows, want 300", len(whole))
		}
		for s := 0; s < len(whole)-1; s += 5 {
			after := whole[s][:5]
			got := walk(after, false, filtered, 40)
			want := whole[s+1 : min(s+41, len(whole))]
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("filtered %v, after %s: %v, want %v", filtered, after, got, want)
			}
		}
	}
}
