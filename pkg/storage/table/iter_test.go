package table

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

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
