package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/testutil/storetest"
)

// getMany returns "id=v" of each row GetMany hands over, in order.
func getMany(t testing.TB, src interface {
	GetMany(context.Context, []string, []string, func(arrow.RecordBatch) error) error
}, ids ...string) string {
	t.Helper()
	var out []string
	err := src.GetMany(context.Background(), ids, nil, func(rec arrow.RecordBatch) error {
		out = append(out, fmt.Sprintf("%s=%d", rec.Column(0).(*array.String).Value(0), rec.Column(1).(*array.Int64).Value(0)))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(out, ",")
}

// GetMany answers each id as Get does (the newest of its base row and its
// pending rows), in the order asked, skipping missing ids; a view answers as of
// its version; fn's error stops the read and is returned.
func TestGetManyAnswersEachIDAsGetDoes(t *testing.T) {
	ctx := context.Background()
	w := storetest.Open(t, objstoretest.Mem(t), "w1", true)
	storetest.AppendAndSeal(t, w, "a", 1, "b", 1, "c", 1)
	res, err := merge.New(merge.Config{Logger: storetest.Quiet()}).Merge(ctx, w, true)
	if err != nil {
		t.Fatal(err)
	}
	storetest.AppendAndSeal(t, w, "b", 2, "d", 2) // pending: b replaced, d new

	if got, want := getMany(t, w, "d", "zz", "c", "b", "a"), "d=2,c=1,b=2,a=1"; got != want {
		t.Errorf("now: %s, want %s", got, want)
	}
	view, err := w.At(ctx, res.Version)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := getMany(t, view, "d", "c", "b", "a"), "c=1,b=1,a=1"; got != want {
		t.Errorf("at version %d: %s, want %s", res.Version, got, want)
	}
	if got := getMany(t, w); got != "" {
		t.Errorf("no ids: %s", got)
	}
	// With cols, a base row is read with those columns alone; a pending one,
	// in memory already, comes whole.
	var shapes []string
	err = w.GetMany(ctx, []string{"a", "d"}, []string{"id"}, func(rec arrow.RecordBatch) error {
		shapes = append(shapes, fmt.Sprintf("%s:%d", rec.Column(0).(*array.String).Value(0), rec.NumCols()))
		return nil
	})
	if err != nil || strings.Join(shapes, ",") != "a:1,d:3" {
		t.Errorf("projected to id: %v %v, want a:1 (base, id alone) and d:3 (pending: id, v, _seq)", shapes, err)
	}
	stop := errors.New("stop")
	calls := 0
	err = w.GetMany(ctx, []string{"a", "b", "c"}, nil, func(arrow.RecordBatch) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Errorf("fn's error: %v after %d calls, want it after 1", err, calls)
	}
}

// BenchmarkGetMany compares reading n ids in one GetMany with n Gets, on a
// bucket whose requests take 2 ms and a base table of 5 merges of 1,000 rows,
// through a handle that refreshes at every read (storetest's) and one with the
// default snapshot TTL (1 s).
func BenchmarkGetMany(b *testing.B) {
	ctx := context.Background()
	w, cached, faults, _ := benchStore(b)
	faults.SetLatency(2*time.Millisecond, 0)
	for _, h := range []struct {
		name string
		s    *store.Store
	}{{"refresh", w}, {"ttl1s", cached}} {
		for _, n := range []int{32, 512} {
			ids := make([]string, n)
			for i := range ids { // spread over the 5 merges' fragments
				ids[i] = fmt.Sprintf("m%d-%04d", i%5, (i*7)%1000)
			}
			b.Run(fmt.Sprintf("%s/getmany-%d", h.name, n), func(b *testing.B) {
				faults.ResetCounters()
				for b.Loop() {
					rows := 0
					if err := h.s.GetMany(ctx, ids, nil, func(arrow.RecordBatch) error { rows++; return nil }); err != nil || rows != n {
						b.Fatalf("%d rows, %v", rows, err)
					}
				}
				b.ReportMetric(float64(faults.TotalRequests())/float64(b.N), "requests/op")
			})
			b.Run(fmt.Sprintf("%s/get-x%d", h.name, n), func(b *testing.B) {
				faults.ResetCounters()
				for b.Loop() {
					for _, id := range ids {
						rec, err := h.s.Get(ctx, id)
						if err != nil || rec == nil {
							b.Fatalf("get %s: %v %v", id, rec, err)
						}
						rec.Release()
					}
				}
				b.ReportMetric(float64(faults.TotalRequests())/float64(b.N), "requests/op")
			})
		}
	}
}
