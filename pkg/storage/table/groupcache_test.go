package table

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"golang.org/x/sync/errgroup"
)

// TestWalksShareDecodedRowGroupsWithoutSeeingThemChange runs walks from random
// cursors at once over interleaved fragments, with a cache that holds a few
// decoded groups (so they are evicted while walks still hold them) and one that
// holds them all: every walk reads every row after its cursor with its value, and
// the race detector watches the shared batches.
func TestWalksShareDecodedRowGroupsWithoutSeeingThemChange(t *testing.T) {
	ctx := context.Background()
	for _, cacheBytes := range []int64{64 << 10, 64 << 20} {
		t.Run(fmt.Sprint(cacheBytes), func(t *testing.T) {
			tb := createTable(t, memBucket(t), rowGroups(16), WithCacheBytes(cacheBytes))
			for i := range 3 {
				var rows []row
				for j := i; j < 600; j += 3 {
					rows = append(rows, row{fmt.Sprintf("k-%03d", j), 1, int64(j)})
				}
				mustAppend(t, tb, rows...)
			}
			m := tb.Latest()
			g, gctx := errgroup.WithContext(ctx)
			for w := range 4 {
				g.Go(func() error {
					rng := rand.New(rand.NewPCG(uint64(w), 44))
					for range 20 {
						start := rng.IntN(600)
						it, err := tb.Iter(gctx, m, fmt.Sprintf("k-%03d", start), false)
						if err != nil {
							return err
						}
						want := start + 1
						for more, err := it.Next(gctx); more || err != nil; more, err = it.Next(gctx) {
							if err != nil {
								it.Close()
								return err
							}
							rec, i, err := it.Row(gctx, nil)
							if err != nil {
								it.Close()
								return err
							}
							id := rec.Column(0).(*array.String).Value(i)
							v := rec.Column(1).(*array.Int64).Value(i)
							if id != fmt.Sprintf("k-%03d", want) || v != int64(want) {
								it.Close()
								return fmt.Errorf("walk from %d: row %s = %d, want k-%03d = %d", start, id, v, want, want)
							}
							want++
						}
						it.Close()
						if want != 600 {
							return fmt.Errorf("walk from %d ended at %d", start, want)
						}
					}
					return nil
				})
			}
			if err := g.Wait(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
