package export_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/export"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
)

// BenchmarkExport exports a merged store of 200,000 rows (with overwrites, so
// deletion vectors apply) to file://, and reports rows/s and the peak heap the
// export added to what the store held before it: bounded by a row group and the
// scan, it must not grow with the store (compare a run with more rows).
func BenchmarkExport(b *testing.B) {
	const rows = 200_000
	ctx := context.Background()
	st := openStore(b)
	put(b, st, 0, rows, 1)
	mergeAll(b, st)
	put(b, st, 0, rows/10, 2)
	mergeAll(b, st)
	spec := export.Spec{Destination: "file:///unused"}
	b.ResetTimer()
	var peak atomic.Uint64
	for i := range b.N {
		dst := objstoretest.File(b)
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base := ms.HeapAlloc
		stop := sampleHeap(&peak, base)
		m, err := run(ctx, b, st, dst, spec, export.Options{TaskID: fmt.Sprintf("bench-%d", i), MaxFileBytes: 16 << 20})
		stop()
		if err != nil {
			b.Fatal(err)
		}
		if m.Rows != rows {
			b.Fatalf("exported %d rows, want %d", m.Rows, rows)
		}
	}
	b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(peak.Load())/(1<<20), "peak-heap-MiB")
}

// sampleHeap records the largest heap (runtime.MemStats.HeapAlloc, garbage not
// yet collected included) above base seen every 10 ms until the returned func
// is called.
func sampleHeap(peak *atomic.Uint64, base uint64) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > base && ms.HeapAlloc-base > peak.Load() {
				peak.Store(ms.HeapAlloc - base)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() { close(done); wg.Wait() }
}
