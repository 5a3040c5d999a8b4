package wal_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
)

const (
	testDir   = "rollout/t"
	testShard = "w1"
)

// inputSchema is what tests append: a key, a nullable scalar, a nested list (the
// shape of token columns) and a nullable string.
var inputSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.BinaryTypes.String},
	{Name: "value", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
	{Name: "note", Type: arrow.BinaryTypes.String, Nullable: true},
}, nil)

// batch builds rows with the given ids; value is the row's index in the call.
func batch(ids ...string) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, inputSchema)
	defer b.Release()
	for i, id := range ids {
		b.Field(0).(*array.StringBuilder).Append(id)
		b.Field(1).(*array.Int64Builder).Append(int64(i))
		lb := b.Field(2).(*array.ListBuilder)
		lb.Append(true)
		lb.ValueBuilder().(*array.Int32Builder).AppendValues([]int32{1, 2, int32(i)}, nil)
		b.Field(3).(*array.StringBuilder).AppendNull()
	}
	return b.NewRecordBatch()
}

func appendIDs(ctx context.Context, w *wal.Writer, ids ...string) error {
	rec := batch(ids...)
	defer rec.Release()
	return w.Append(ctx, rec)
}

func mustAppend(t testing.TB, w *wal.Writer, ids ...string) {
	t.Helper()
	if err := appendIDs(context.Background(), w, ids...); err != nil {
		t.Fatalf("append %v: %v", ids, err)
	}
}

// openWriter opens the test shard and closes the writer when the test ends (closing
// twice, or after Abandon, is harmless).
func openWriter(t testing.TB, b *objstore.Bucket, shard string, opts ...wal.Option) *wal.Writer {
	t.Helper()
	opts = append([]wal.Option{wal.WithLogger(testLogger(t))}, opts...)
	w, err := wal.OpenWriter(context.Background(), b, testDir, shard, inputSchema, opts...)
	if err != nil {
		t.Fatalf("open writer %s: %v", shard, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Close(ctx)
	})
	return w
}

// testLogger sends the package's warnings to the test's output.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func mustSeal(t testing.TB, w *wal.Writer) *wal.Generation {
	t.Helper()
	g, err := w.Seal(context.Background())
	if err != nil {
		t.Fatalf("seal: %v", err)
	}
	return g
}

// sealedRow is one row found in a shard's generations.
type sealedRow struct {
	seq        uint64
	generation uint64
}

// sealedRows reads every generation the shard's latest manifest lists and returns
// id -> rows with that id (more than one is a bug the caller reports).
func sealedRows(t testing.TB, b *objstore.Bucket, shard string) map[string][]sealedRow {
	t.Helper()
	ctx := context.Background()
	m, err := wal.LoadShard(ctx, b, testDir, shard)
	if err != nil {
		t.Fatalf("load shard %s: %v", shard, err)
	}
	c := wal.NewGenerationCache(0)
	out := map[string][]sealedRow{}
	for _, g := range m.Generations {
		data, err := c.Read(ctx, b, wal.GenerationKey(testDir, g))
		if err != nil {
			t.Fatalf("read generation %d: %v", g.Generation, err)
		}
		if data.Rows != g.Rows {
			t.Errorf("generation %d: %d rows, manifest says %d", g.Generation, data.Rows, g.Rows)
		}
		for _, rec := range data.Records {
			ids := rec.Column(0).(*array.String)
			seqs := rec.Column(int(rec.NumCols()) - 1).(*array.Uint64)
			for i := range ids.Len() {
				out[ids.Value(i)] = append(out[ids.Value(i)], sealedRow{seqs.Value(i), g.Generation})
			}
		}
	}
	return out
}

// checkExactlyOnce fails t unless every acked id is sealed exactly once and no id is
// sealed twice. Ids that were not acked may be present (durable but unacknowledged).
func checkExactlyOnce(t testing.TB, sealed map[string][]sealedRow, acked []string) {
	t.Helper()
	for id, rows := range sealed {
		if len(rows) > 1 {
			t.Errorf("id %s sealed %d times: %v", id, len(rows), rows)
		}
	}
	missing := 0
	for _, id := range acked {
		if len(sealed[id]) == 0 {
			if missing < 10 {
				t.Errorf("acknowledged id %s is not in any generation", id)
			}
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d acknowledged ids lost", missing, len(acked))
	}
}

func entryKeys(t testing.TB, b *objstore.Bucket, shard string) []string {
	t.Helper()
	objs, err := b.List(context.Background(), fmt.Sprintf("%s/_wal/%s/entries/", testDir, shard))
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.Key
	}
	return keys
}
