package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// benchSpec is the "4 small columns".
const benchSpec = `{"columns":[["id",{"type":"string"}],["score",{"type":"float64","nullable":true}],` +
	`["n",{"type":"int64"}],["tag",{"type":"string","nullable":true}]]}`

const benchRows = 10_000

// BenchmarkAdd compares durable adds of 10,000-row batches of 4 small columns
// as JSON and as an Arrow IPC stream, through the real HTTP route onto a
// file:// bucket (each add a WAL entry on disk), in one run. The bodies are
// built once, so the client's encoding is left out: rows/s is the worker's.
//
//	go test -run '^$' -bench BenchmarkAdd -benchtime 50x ./pkg/worker/httpapi/
func BenchmarkAdd(b *testing.B) {
	quiet := slog.New(slog.DiscardHandler)
	ss := store.NewStores(store.Config{Bucket: objstoretest.File(b), Shard: "w1", Logger: quiet, SnapshotTTL: -1,
		WALOptions: []wal.Option{wal.WithLogger(quiet)}}, 0)
	b.Cleanup(func() { _ = ss.Close(context.Background()) })
	srv, err := NewServer(ServerConfig{InstanceID: "w1", Logger: quiet, Metrics: prometheus.NewRegistry(), Stores: ss,
		Merger: merge.New(merge.Config{Logger: quiet})})
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	b.Cleanup(hs.Close)
	post := func(path, ctype string, body []byte) {
		resp, err := http.Post(hs.URL+path, ctype, bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			b.Fatalf("POST %s: %d %s", path, resp.StatusCode, out)
		}
	}
	for _, name := range []string{"json", "arrow"} {
		post("/api/v1/generic", "application/json", []byte(`{"name":"`+name+`","schema":`+benchSpec+`}`))
	}

	rows := make([]string, benchRows)
	ids := array.NewStringBuilder(memory.DefaultAllocator)
	scores := array.NewFloat64Builder(memory.DefaultAllocator)
	ns := array.NewInt64Builder(memory.DefaultAllocator)
	tags := array.NewStringBuilder(memory.DefaultAllocator)
	for i := range benchRows {
		id, tag := fmt.Sprintf("row-%08d", i), fmt.Sprintf("tag-%d", i%16)
		rows[i] = fmt.Sprintf(`{"id":%q,"score":%v,"n":%d,"tag":%q}`, id, float64(i)/7, i, tag)
		ids.Append(id)
		scores.Append(float64(i) / 7)
		ns.Append(int64(i))
		tags.Append(tag)
	}
	jsonBody := []byte(`{"rows":[` + strings.Join(rows, ",") + `]}`)
	if !json.Valid(jsonBody) {
		b.Fatal("invalid JSON body")
	}
	rec := newBatch([]arrow.Field{{Name: "id", Type: arrow.BinaryTypes.String}, {Name: "score", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "n", Type: arrow.PrimitiveTypes.Int64}, {Name: "tag", Type: arrow.BinaryTypes.String, Nullable: true}},
		ids.NewArray(), scores.NewArray(), ns.NewArray(), tags.NewArray())
	defer rec.Release()
	arrowBody := arrowStream(b, rec.Schema(), rec)

	for _, c := range []struct {
		name, ctype string
		body        []byte
	}{{"json", "application/json", jsonBody}, {"arrow", ArrowStreamType, arrowBody}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			start := time.Now()
			for b.Loop() {
				post("/api/v1/generic/"+c.name+"/rows", c.ctype, c.body)
			}
			b.ReportMetric(float64(benchRows*b.N)/time.Since(start).Seconds(), "rows/s")
		})
	}
}
