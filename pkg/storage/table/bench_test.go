package table

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
)

// BenchmarkAppend measures a merge-shaped commit: prepare (dedupe, write a Parquet
// fragment and bloom filter, resolve against existing fragments, write deletion
// vectors) plus commit, of 10,000 new rows into a table that already holds some.
func BenchmarkAppend(b *testing.B) {
	const rowsPerCommit = 10_000
	for _, d := range objstoretest.Drivers()[:2] { // mem, file
		b.Run(d.Name, func(b *testing.B) {
			ctx := context.Background()
			tb := createTable(b, d.Open(b))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				rows := make([]row, rowsPerCommit)
				for j := range rows {
					rows[j] = row{fmt.Sprintf("r%08d-%05d", i, j), uint64(i + 1), int64(j)}
				}
				rec := batch(rows...)
				if _, err := appendRows(ctx, tb, Append{Records: []arrow.RecordBatch{rec}, Shard: "w", Generation: uint64(i + 1)}); err != nil {
					b.Fatal(err)
				}
				rec.Release()
			}
			b.ReportMetric(float64(b.N*rowsPerCommit)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// BenchmarkGet measures point lookups by id over 16 fragments of 10,000 rows, with
// the decoded-object cache warm (the steady state of a worker) and disabled (every
// lookup reads blooms, key columns and a row group from storage).
func BenchmarkGet(b *testing.B) {
	const fragments, rowsEach = 16, 10_000
	ctx := context.Background()
	bucket := objstoretest.File(b)
	tb := createTable(b, bucket)
	for f := 0; f < fragments; f++ {
		rows := make([]row, rowsEach)
		for j := range rows {
			rows[j] = row{fmt.Sprintf("f%02d-%05d", f, j), 1, int64(j)}
		}
		mustAppend(b, tb, rows...)
	}
	for _, c := range []struct {
		name  string
		cache int64
	}{{"warm", 256 << 20}, {"nocache", 0}} {
		b.Run(c.name, func(b *testing.B) {
			h, err := Open(ctx, bucket, "rollout/t", WithCacheBytes(c.cache))
			if err != nil {
				b.Fatal(err)
			}
			m := h.Latest()
			rng := rand.New(rand.NewPCG(1, 2))
			if c.cache > 0 { // warm every fragment's key index and bloom
				for f := 0; f < fragments; f++ {
					rec, _, err := h.Get(ctx, m, fmt.Sprintf("f%02d-%05d", f, 0))
					if err != nil || rec == nil {
						b.Fatal(err)
					}
					rec.Release()
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				id := fmt.Sprintf("f%02d-%05d", rng.IntN(fragments), rng.IntN(rowsEach))
				rec, _, err := h.Get(ctx, m, id)
				if err != nil || rec == nil {
					b.Fatalf("get %s: %v %v", id, rec, err)
				}
				rec.Release()
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
		})
	}
}
