package httpapi

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark-io/tidemark/internal/httpjson"
	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// listBenchRows is the size of the store the Arrow list benchmarks read: the
// issue's store of a million small rows (4 columns).
const listBenchRows = 1_000_000

// BenchmarkListArrowFull reads a store of listBenchRows rows (merged, with
// overwrites merged over them and some pending) whole as one Arrow stream, in
// storage order (the snapshot read) and in id order, through net/http and
// arrow-go's IPC reader, and reports rows/s and the peak of the process's live
// heap (server and client together): it stays far below the store's size when
// batches are streamed, not gathered. No time is asserted.
func BenchmarkListArrowFull(b *testing.B) {
	url := newArrowBenchStore(b)
	for _, tc := range []struct{ name, query string }{
		{"order=storage", "?order=storage"},
		{"order=storage/zstd", "?order=storage&compression=zstd"},
		{"order=id", ""},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			peak := watchHeap()
			rows := 0
			start := time.Now()
			for b.Loop() {
				rows += readArrowRows(b, url+tc.query)
			}
			b.ReportMetric(float64(rows)/time.Since(start).Seconds(), "rows/s")
			b.ReportMetric(float64(peak())/(1<<20), "peak-heap-MiB")
		})
	}
}

// readArrowRows reads the Arrow stream at url and counts its rows.
func readArrowRows(b *testing.B, url string) int {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Accept", httpjson.ArrowStreamType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		b.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	rdr, err := ipc.NewReader(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	defer rdr.Release()
	n := 0
	for rdr.Next() {
		n += int(rdr.RecordBatch().NumRows())
	}
	if err := rdr.Err(); err != nil {
		b.Fatal(err)
	}
	if n < listBenchRows {
		b.Fatalf("GET %s: %d rows, want %d", url, n, listBenchRows)
	}
	return n
}

// watchHeap samples the live heap until the returned function is called, which
// returns the highest sample.
func watchHeap() func() uint64 {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	var mu sync.Mutex
	var peak uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(sample)
			mu.Lock()
			peak = max(peak, sample[0].Value.Uint64())
			mu.Unlock()
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak
	}
}

// newArrowBenchStore serves a worker with generic store "bench" of listBenchRows
// rows of 4 small columns: every row merged, a tenth overwritten and merged
// again, 10,000 overwritten and pending. It returns the store's rows URL.
func newArrowBenchStore(b *testing.B) string {
	b.Helper()
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	ss := store.NewStores(store.Config{Bucket: objstoretest.File(b), Shard: "w1", Logger: quiet, SnapshotTTL: -1,
		WALOptions: []wal.Option{wal.WithLogger(quiet)}}, 0)
	b.Cleanup(func() { _ = ss.Close(ctx) })
	reg := prometheus.NewRegistry()
	srv, err := NewServer(ServerConfig{InstanceID: "w1", Logger: quiet, Metrics: reg, Stores: ss,
		Merger: merge.New(merge.Config{Logger: quiet}), Series: NewMetrics(reg)})
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	b.Cleanup(hs.Close)
	const spec = `{"columns":[["id",{"type":"string"}],["score",{"type":"float64","nullable":true}],["n",{"type":"int64","nullable":false}],["label",{"type":"string","nullable":true}]]}`
	post := func(path, body string, want int) {
		resp, err := http.Post(hs.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			b.Fatalf("POST %s: %d %s", path, resp.StatusCode, out)
		}
	}
	post("/api/v1/generic", `{"name":"bench","schema":`+spec+`}`, http.StatusCreated)
	st, release, err := ss.Open(ctx, registry.KindGeneric, "bench")
	if err != nil {
		b.Fatal(err)
	}
	defer release()
	parsed, err := schema.ParseSpec([]byte(spec))
	if err != nil {
		b.Fatal(err)
	}
	add := func(from, to, round int) {
		const batch = 64 << 10
		for lo := from; lo < to; lo += batch {
			bld := array.NewRecordBuilder(memory.DefaultAllocator, parsed.Schema())
			for i := lo; i < min(lo+batch, to); i++ {
				bld.Field(0).(*array.StringBuilder).Append(fmt.Sprintf("%016x", uint64(i)*0x9e3779b97f4a7c15))
				bld.Field(1).(*array.Float64Builder).Append(float64(i) / 7)
				bld.Field(2).(*array.Int64Builder).Append(int64(i + round))
				bld.Field(3).(*array.StringBuilder).Append(fmt.Sprintf("label-%d", i%100))
			}
			rec := bld.NewRecordBatch()
			bld.Release()
			err := st.Append(ctx, rec)
			rec.Release()
			if err != nil {
				b.Fatal(err)
			}
		}
		if _, err := st.Seal(ctx); err != nil {
			b.Fatal(err)
		}
	}
	add(0, listBenchRows, 0)
	post("/api/v1/internal/merge-wal/generic:bench", "", http.StatusOK)
	add(0, listBenchRows/10, 1)
	post("/api/v1/internal/merge-wal/generic:bench", "", http.StatusOK)
	add(listBenchRows/2, listBenchRows/2+10_000, 2)
	return hs.URL + "/api/v1/generic/bench/rows"
}
