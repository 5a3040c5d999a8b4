package table

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

// BenchmarkMergeOnSlowBucket measures one merge-shaped commit the way a worker of the
// commit storm makes it: a fresh table handle (the base's fragments were written by
// other workers, so nothing of theirs is cached), 200 incoming rows with ids inside
// every fragment's id bounds, of which
// `updates` replace rows spread over the base's 20 fragments (so the conflict check
// must read those fragments' key indexes), on a bucket where every request takes
// 10 ms. It reports object-store requests per merge (total and by kind) and the
// merge's wall time; the latency dominates, so the wall time is mostly how many
// requests the merge waits for one after another.
func BenchmarkMergeOnSlowBucket(b *testing.B) {
	const fragments, rowsEach, incoming = 20, 200, 200
	for _, updates := range []int{0, 16} {
		b.Run(fmt.Sprintf("updates=%d", updates), func(b *testing.B) {
			ctx := context.Background()
			raw := memBucket(b)
			f := objstore.NewFaults(rand.NewPCG(1, 2))
			bucket := objstore.WithFaults(raw, f)
			tb := createTable(b, bucket)
			for i := range fragments {
				rows := make([]row, rowsEach)
				for j := range rows {
					rows[j] = row{fmt.Sprintf("f%02d-%05d", i, j), 1, int64(j)}
				}
				mustAppend(b, tb, rows...)
			}
			rng := rand.New(rand.NewPCG(3, 4))
			f.SetLatency(10*time.Millisecond, 0)
			var requests int64
			counts := map[objstore.Op]int64{}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				rows := make([]row, incoming)
				for j := range rows {
					// New ids inside the fragments' id bounds, as random ids are: every
					// fragment's bloom filter is consulted.
					rows[j] = row{fmt.Sprintf("f%02d-%05d-n%04d", j%fragments, rng.IntN(rowsEach), i), uint64(i + 2), int64(j)}
				}
				for j := range updates { // one existing row in each of `updates` fragments
					rows[j].id = fmt.Sprintf("f%02d-%05d", j%fragments, rng.IntN(rowsEach))
				}
				rec := batch(rows...)
				fresh, err := Open(ctx, bucket, "rollout/t")
				if err != nil {
					b.Fatal(err)
				}
				f.ResetCounters()
				b.StartTimer()
				if _, err := appendRows(ctx, fresh, Append{Records: []arrow.RecordBatch{rec}, Shard: "w", Generation: uint64(i + 1)}); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				rec.Release()
				requests += f.TotalRequests()
				for op, n := range f.RequestCounts() {
					counts[op] += n
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(requests)/float64(b.N), "requests/merge")
			for op, n := range counts {
				if n > 0 {
					b.ReportMetric(float64(n)/float64(b.N), string(op)+"/merge")
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/merge")
		})
	}
}
