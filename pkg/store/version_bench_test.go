package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/testutil/storetest"
)

// BenchmarkReadAtVersion compares a page of 100 rows and a get of one id read
// now (a snapshot refreshed at every read, the worst case of SNAPSHOT_TTL, and
// one refreshed once a second, the default) with the
// same reads at the newest version and at an older one, on a bucket whose
// requests take 2 ms: what a read at a version costs in requests and time. The
// table holds 5 merges of 1,000 rows; nothing is pending.
func BenchmarkReadAtVersion(b *testing.B) {
	ctx := context.Background()
	w, cached, faults, versions := benchStore(b)
	newest, older := versions[len(versions)-1], versions[1]
	type source interface {
		List(context.Context, store.ListOptions) ([]arrow.RecordBatch, error)
		Get(context.Context, string) (arrow.RecordBatch, error)
	}
	cases := []struct {
		name string
		src  func() (source, error)
	}{
		{"now", func() (source, error) { return w, nil }},
		{"now-ttl1s", func() (source, error) { return cached, nil }},
		{"at-newest", func() (source, error) { return w.At(ctx, newest) }},
		{"at-older", func() (source, error) { return w.At(ctx, older) }},
	}
	faults.SetLatency(2*time.Millisecond, 0)
	for _, c := range cases {
		for _, op := range []string{"list100", "get"} {
			b.Run(c.name+"/"+op, func(b *testing.B) {
				faults.ResetCounters()
				for i := 0; b.Loop(); i++ {
					src, err := c.src()
					if err != nil {
						b.Fatal(err)
					}
					switch op {
					case "list100":
						recs, err := src.List(ctx, store.ListOptions{Limit: 100, Offset: 100 * (i % 10)})
						if err != nil || len(recs) != 100 {
							b.Fatalf("list: %d rows, %v", len(recs), err)
						}
						for _, r := range recs {
							r.Release()
						}
					case "get":
						rec, err := src.Get(ctx, fmt.Sprintf("m1-%04d", i%1000))
						if err != nil || rec == nil {
							b.Fatalf("get: %v %v", rec, err)
						}
						rec.Release()
					}
				}
				b.ReportMetric(float64(faults.TotalRequests())/float64(b.N), "requests/op")
			})
		}
	}
}

// benchStore is the store the read benchmarks read: a generic store whose base
// table holds 5 merges of 1,000 rows (ids m<merge>-<0000..0999>, v = merge),
// nothing pending, on a bucket whose faults the benchmark sets. It returns the
// handle that wrote it (refreshing at every read), a handle of another worker
// with the default snapshot TTL (1 s: reads now mostly cost no metadata
// request), and the version each merge committed.
func benchStore(b *testing.B) (w, cached *store.Store, faults *objstore.Faults, versions []uint64) {
	ctx := context.Background()
	faults = objstore.NewFaults(nil)
	w = storetest.Open(b, objstore.WithFaults(objstoretest.Mem(b), faults), "w1", true)
	mg := merge.New(merge.Config{Logger: storetest.Quiet()})
	for m := range 5 {
		ids := make([]string, 1000)
		for i := range ids {
			ids[i] = fmt.Sprintf("m%d-%04d", m, i)
		}
		if err := storetest.Append(ctx, w, int64(m), ids...); err != nil {
			b.Fatal(err)
		}
		if _, err := w.Seal(ctx); err != nil {
			b.Fatal(err)
		}
		res, err := mg.Merge(ctx, w, true)
		if err != nil {
			b.Fatal(err)
		}
		versions = append(versions, res.Version)
	}
	ss := store.NewStores(store.Config{Bucket: w.Bucket(), Shard: "r", Logger: storetest.Quiet()}, 0)
	b.Cleanup(func() { _ = ss.Close(context.Background()) })
	cached, release, err := ss.Open(ctx, registry.KindGeneric, "g")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(release)
	return w, cached, faults, versions
}
