package wal

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
)

// rolloutSchema is a rollout-shaped row: identifiers, a role, ~1 KiB of text and a
// list<int32> of tokens, ~1.5 KiB per row in an entry.
var rolloutSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.BinaryTypes.String},
	{Name: "rollout_id", Type: arrow.BinaryTypes.String},
	{Name: "problem_id", Type: arrow.BinaryTypes.String},
	{Name: "dataset", Type: arrow.BinaryTypes.String},
	{Name: "sequence_order", Type: arrow.PrimitiveTypes.Int32},
	{Name: "role", Type: arrow.BinaryTypes.String},
	{Name: "content", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "model_output_string", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "output_tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
	{Name: "reward", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
}, nil)

// rolloutRows builds n rows; ids are unique per (prefix, i).
func rolloutRows(prefix string, n int) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, rolloutSchema)
	defer b.Release()
	content := strings.Repeat("The assistant reasons step by step about the problem. ", 16) // ~900 B
	output := strings.Repeat("Answer: 42. ", 32)                                            // ~380 B
	tokens := make([]int32, 64)
	for i := range tokens {
		tokens[i] = int32(1000 + i*7)
	}
	for i := range n {
		b.Field(0).(*array.StringBuilder).Append(fmt.Sprintf("%s-%08d", prefix, i))
		b.Field(1).(*array.StringBuilder).Append("rollout-" + prefix)
		b.Field(2).(*array.StringBuilder).Append("problem-17")
		b.Field(3).(*array.StringBuilder).Append("gsm8k")
		b.Field(4).(*array.Int32Builder).Append(int32(i))
		b.Field(5).(*array.StringBuilder).Append("assistant")
		b.Field(6).(*array.StringBuilder).Append(content)
		b.Field(7).(*array.StringBuilder).Append(output)
		lb := b.Field(8).(*array.ListBuilder)
		lb.Append(true)
		lb.ValueBuilder().(*array.Int32Builder).AppendValues(tokens, nil)
		b.Field(9).(*array.Float32Builder).Append(0.5)
	}
	return b.NewRecordBatch()
}

// encodedEntry is the entry object a batch of n rollout rows becomes.
func encodedEntry(b testing.TB, n int) []byte {
	schema, err := storeSchema(rolloutSchema)
	if err != nil {
		b.Fatal(err)
	}
	in := rolloutRows("raw", n)
	defer in.Release()
	clk := hlc{clock: buildOptions(nil).Clock}
	rec, _, err := buildBatch(schema, []arrow.RecordBatch{in}, &clk)
	if err != nil {
		b.Fatal(err)
	}
	defer rec.Release()
	data, err := encodeEntry(schema, rec, "bench", randomHex(16), 1, 0)
	if err != nil {
		b.Fatal(err)
	}
	return data
}

// BenchmarkDurableAppend measures acknowledged single-row appends per second on
// file:// with 1, 8 and 64 concurrent appenders, next to the physical limit of the
// same storage measured in the same run: writing the same bytes as plain objects,
// one after another, as 1-row and as 64-row entries (64 single-row appenders can at
// best fill one 64-row entry per write). x-raw64 is 64-appender throughput over that
// batched limit.
func BenchmarkDurableAppend(b *testing.B) {
	ctx := context.Background()
	row1, row64 := encodedEntry(b, 1), encodedEntry(b, 64)
	rowBytes := float64(len(row64)) / 64
	var raw64 float64 // rows/s of the 64-row raw baseline, for the ratio

	raw := func(rows int, data []byte) func(b *testing.B) {
		return func(b *testing.B) {
			bucket := objstoretest.File(b)
			b.ResetTimer()
			for i := range b.N {
				if err := bucket.PutIfAbsent(ctx, fmt.Sprintf("raw/%020d.arrow", i), data); err != nil {
					b.Fatal(err)
				}
			}
			perSec := float64(b.N*rows) / b.Elapsed().Seconds()
			b.ReportMetric(perSec, "rows/s")
			b.ReportMetric(perSec*rowBytes/1e6, "MB/s")
			if rows == 64 {
				raw64 = perSec
			}
		}
	}
	b.Run("raw/entry=1row", raw(1, row1))
	b.Run("raw/entry=64rows", raw(64, row64))

	for _, c := range []struct {
		appenders int
		name      string
		opts      []Option
	}{
		{1, "", nil},
		{8, "", nil},
		{64, "", nil},
		{64, "/linger=off", []Option{WithLinger(-1)}},
	} {
		appenders := c.appenders
		b.Run(fmt.Sprintf("appenders=%d%s", appenders, c.name), func(b *testing.B) {
			bucket := objstoretest.File(b)
			w, err := OpenWriter(ctx, bucket, "rollout/bench", "w1", rolloutSchema, c.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = w.Close(ctx) }()
			recs := make([]arrow.RecordBatch, appenders)
			for i := range recs {
				recs[i] = rolloutRows(fmt.Sprintf("g%02d", i), 1)
				defer recs[i].Release()
			}
			startPos := w.Stats().LastEntryPosition
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for g := range appenders {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						if err := w.Append(ctx, recs[g]); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			perSec := float64(b.N) / b.Elapsed().Seconds()
			entries := w.Stats().LastEntryPosition - startPos
			b.ReportMetric(perSec, "rows/s")
			b.ReportMetric(perSec*rowBytes/1e6, "MB/s")
			b.ReportMetric(float64(b.N)/float64(max(entries, 1)), "rows/entry")
			if raw64 > 0 {
				b.ReportMetric(perSec/raw64, "x-raw64")
			}
			// The memtable holds every row: keep it from growing across b.N rounds.
			if _, err := w.Seal(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
}
