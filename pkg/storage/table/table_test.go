package table

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

func TestCreateIsIdempotentAndRefusesAnotherSchema(t *testing.T) {
	ctx := context.Background()
	b := memBucket(t)
	createTable(t, b)
	again, err := Create(ctx, b, "rollout/t", testSchema)
	if err != nil {
		t.Fatalf("re-create with the same schema: %v", err)
	}
	if v := again.Latest().Version; v != 1 {
		t.Fatalf("version %d after re-create, want 1", v)
	}
	other := arrow.NewSchema([]arrow.Field{
		{Name: rowkey.IDColumn, Type: arrow.BinaryTypes.String},
		{Name: rowkey.SeqColumn, Type: arrow.PrimitiveTypes.Uint64},
	}, nil)
	if _, err := Create(ctx, b, "rollout/t", other); !errors.Is(err, ErrSchemaMismatch) {
		t.Fatalf("create with another schema: got %v, want ErrSchemaMismatch", err)
	}
}

func TestCreateRejectsSchemaWithoutKeyColumns(t *testing.T) {
	s := arrow.NewSchema([]arrow.Field{{Name: rowkey.IDColumn, Type: arrow.BinaryTypes.String, Nullable: true}}, nil)
	if _, err := Create(context.Background(), memBucket(t), "x", s); err == nil || !strings.Contains(err.Error(), `"id"`) {
		t.Fatalf("got %v, want an error naming the id column", err)
	}
}

func TestOpenMissingTableIsNotFound(t *testing.T) {
	if _, err := Open(context.Background(), memBucket(t), "rollout/none"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("got %v, want ErrNotFound", err)
	}
}

func TestAppendRoundTripsEveryColumn(t *testing.T) {
	ctx := context.Background()
	tb := createTable(t, memBucket(t))
	m := mustAppend(t, tb, row{"a", 1, 10}, row{"b", 2, 20})
	if m.Version != 2 {
		t.Fatalf("version %d, want 2", m.Version)
	}
	rec, _, err := tb.Get(ctx, m, "b")
	if err != nil || rec == nil {
		t.Fatalf("get b: %v %v", rec, err)
	}
	defer rec.Release()
	if !rec.Schema().Equal(testSchema) {
		t.Fatalf("schema %s, want %s", rec.Schema(), testSchema)
	}
	if got := rec.Column(1).(*array.Int64).Value(0); got != 20 {
		t.Fatalf("value %d, want 20", got)
	}
	toks := rec.Column(2).(*array.List)
	vals := toks.ListValues().(*array.Int32)
	start, end := toks.ValueOffsets(0)
	if end-start != 2 || vals.Value(int(start)) != 20 || vals.Value(int(start)+1) != 2 {
		t.Fatalf("tokens of b = %v", toks)
	}
	if rec, _, err := tb.Get(ctx, m, "zzz"); err != nil || rec != nil {
		t.Fatalf("get of a missing id: %v %v, want nil, nil", rec, err)
	}
	// A fresh handle (another worker) reads the same version from storage alone.
	other, err := Open(ctx, tb.bucket, "rollout/t")
	if err != nil {
		t.Fatal(err)
	}
	if got := liveRows(t, other, other.Latest()); len(got) != 2 || got["a"].value != 10 {
		t.Fatalf("rows through a fresh handle: %v", got)
	}
}

func TestNewerRowWinsAcrossFragments(t *testing.T) {
	ctx := context.Background()
	tb := createTable(t, memBucket(t))
	mustAppend(t, tb, row{"a", 5, 50}, row{"b", 5, 50})
	mustAppend(t, tb, row{"a", 3, 30})                      // older: must not replace
	m := mustAppend(t, tb, row{"b", 7, 70}, row{"c", 1, 1}) // newer: replaces
	got := liveRows(t, tb, m)
	want := map[string]int64{"a": 50, "b": 70, "c": 1}
	if len(got) != len(want) {
		t.Fatalf("live rows %v, want %v", got, want)
	}
	for id, v := range want {
		if got[id].value != v {
			t.Fatalf("%s = %d, want %d (rows %v)", id, got[id].value, v, got)
		}
		rec, _, err := tb.Get(ctx, m, id)
		if err != nil {
			t.Fatal(err)
		}
		if g := rec.Column(1).(*array.Int64).Value(0); g != v {
			t.Fatalf("Get(%s) = %d, want %d", id, g, v)
		}
		rec.Release()
	}
	if s := m.Stats(); s.Rows != 3 || s.Fragments != 3 || s.DeletedRows != 2 {
		t.Fatalf("stats %+v, want 3 live rows in 3 fragments with 2 deleted", s)
	}
}

// Two shards merge the same ids in either order; last-write-wins must follow _seq,
// not merge order.
func TestNewerWinsAcrossShardsWhateverTheMergeOrder(t *testing.T) {
	ctx := context.Background()
	shardA := []row{{"x", 10, 1}, {"y", 1, 1}}
	shardB := []row{{"x", 5, 2}, {"y", 20, 2}}
	for _, order := range [][]string{{"A", "B"}, {"B", "A"}} {
		t.Run(strings.Join(order, "then"), func(t *testing.T) {
			tb := createTable(t, memBucket(t))
			var m *Manifest
			for _, s := range order {
				rows := shardA
				if s == "B" {
					rows = shardB
				}
				rec := batch(rows...)
				var err error
				m, err = appendRows(ctx, tb, Append{Records: []arrow.RecordBatch{rec}, Shard: s, Generation: 1})
				rec.Release()
				if err != nil {
					t.Fatal(err)
				}
			}
			got := liveRows(t, tb, m)
			if got["x"].value != 1 || got["y"].value != 2 || len(got) != 2 {
				t.Fatalf("rows %v: want x from shard A, y from shard B", got)
			}
			if m.Watermark("A") != 1 || m.Watermark("B") != 1 {
				t.Fatalf("watermarks %v", m.MergedGenerations)
			}
		})
	}
}

func TestDuplicateIdsInOneAppendKeepTheNewest(t *testing.T) {
	tb := createTable(t, memBucket(t))
	r1 := batch(row{"a", 1, 1}, row{"a", 9, 9}, row{"b", 2, 2})
	r2 := batch(row{"a", 4, 4}, row{"b", 3, 3})
	defer r1.Release()
	defer r2.Release()
	m, err := appendRows(context.Background(), tb, Append{Records: []arrow.RecordBatch{r1, r2}})
	if err != nil {
		t.Fatal(err)
	}
	got := liveRows(t, tb, m)
	if got["a"].value != 9 || got["b"].value != 3 || len(got) != 2 {
		t.Fatalf("rows %v, want a=9 b=3", got)
	}
	if m.Fragments[0].Rows != 2 {
		t.Fatalf("fragment holds %d rows, want the 2 winners only", m.Fragments[0].Rows)
	}
}

// A merge whose acknowledgement was lost is retried with the same watermark; the
// retry must add nothing.
func TestCommittingTheSameWatermarkTwiceAddsNothing(t *testing.T) {
	ctx := context.Background()
	tb := createTable(t, memBucket(t))
	base := tb.Latest()
	rec := batch(row{"a", 1, 1}, row{"b", 2, 2})
	defer rec.Release()
	a := Append{Records: []arrow.RecordBatch{rec}, Shard: "w1", Generation: 3}
	first, err := tb.Prepare(ctx, base, a)
	if err != nil {
		t.Fatal(err)
	}
	second, err := tb.Prepare(ctx, base, a) // prepared before the first landed
	if err != nil {
		t.Fatal(err)
	}
	m, err := first.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := second.Commit(ctx); !errors.Is(err, ErrAlreadyCommitted) {
		t.Fatalf("second commit: %v, want ErrAlreadyCommitted", err)
	}
	if _, err := tb.Prepare(ctx, m, a); !errors.Is(err, ErrAlreadyCommitted) {
		t.Fatalf("prepare over a covering watermark: %v, want ErrAlreadyCommitted", err)
	}
	latest, err := tb.Refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if latest.Version != m.Version {
		t.Fatalf("version %d after the duplicate, want %d", latest.Version, m.Version)
	}
	if got := liveRows(t, tb, latest); len(got) != 2 {
		t.Fatalf("rows %v, want 2", got)
	}
	// The losing transaction cleaned up its staged files.
	objs, err := tb.bucket.List(ctx, "rollout/t/data/")
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 3 { // one fragment, its bloom filter and key index
		t.Fatalf("data objects %v, want only the committed fragment, bloom filter and key index", objs)
	}
}

func TestRebaseResolvesAgainstFragmentsAddedMeanwhile(t *testing.T) {
	ctx := context.Background()
	tb := createTable(t, memBucket(t))
	mustAppend(t, tb, row{"a", 1, 1})
	base := tb.Latest()
	older := batch(row{"a", 2, 2}, row{"b", 2, 2})
	defer older.Release()
	slow, err := tb.Prepare(ctx, base, Append{Records: []arrow.RecordBatch{older}})
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, tb, row{"a", 9, 9}, row{"b", 1, 1}) // lands first
	m, err := slow.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := liveRows(t, tb, m)
	if got["a"].value != 9 || got["b"].value != 2 || len(got) != 2 {
		t.Fatalf("rows %v, want a=9 (newer, landed first) and b=2 (newer, landed second)", got)
	}
}

func TestRetryTimeoutSaysTooManyConcurrentWritersAndCountsAttempts(t *testing.T) {
	ctx := context.Background()
	tb := createTable(t, memBucket(t), WithRetryTimeout(0))
	base := tb.Latest()
	r1, r2 := batch(row{"a", 1, 1}), batch(row{"b", 1, 1})
	defer r1.Release()
	defer r2.Release()
	x1, err := tb.Prepare(ctx, base, Append{Records: []arrow.RecordBatch{r1}})
	if err != nil {
		t.Fatal(err)
	}
	x2, err := tb.Prepare(ctx, base, Append{Records: []arrow.RecordBatch{r2}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = x2.Commit(ctx)
	if !errors.Is(err, ErrTooManyWriters) || !strings.Contains(err.Error(), "too many concurrent writers") ||
		!strings.Contains(err.Error(), "1 attempts") {
		t.Fatalf("got %v, want a too-many-concurrent-writers error with the attempt count", err)
	}
}

func TestScanProjectsAndFiltersByID(t *testing.T) {
	ctx := context.Background()
	tb := createTable(t, memBucket(t))
	for f := 0; f < 4; f++ {
		var rows []row
		for i := 0; i < 50; i++ {
			rows = append(rows, row{fmt.Sprintf("f%d-%03d", f, i), 1, int64(f*100 + i)})
		}
		mustAppend(t, tb, rows...)
	}
	m := tb.Latest()
	var got []string
	err := tb.Scan(ctx, m, ScanOptions{Columns: []string{"value"}, IDs: []string{"f1-007", "f3-049", "nope"}}, func(rec arrow.RecordBatch, _ string) error {
		if rec.NumCols() != 1 || rec.Schema().Field(0).Name != "value" {
			return fmt.Errorf("projection not applied: %s", rec.Schema())
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			got = append(got, fmt.Sprint(rec.Column(0).(*array.Int64).Value(i)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "107,349" {
		t.Fatalf("filtered scan = %v, want [107 349]", got)
	}
	got = nil
	err = tb.Scan(ctx, m, ScanOptions{Columns: []string{"value", rowkey.IDColumn}, IDs: []string{"f2-000"}}, func(rec arrow.RecordBatch, _ string) error {
		got = append(got, fmt.Sprint(rec.Column(0).(*array.Int64).Value(0), rec.Column(1).(*array.String).Value(0)))
		return nil
	})
	if err != nil || strings.Join(got, ",") != "200f2-000" {
		t.Fatalf("scan projecting id after value: %v %v", got, err)
	}
	if err := tb.Scan(ctx, m, ScanOptions{Columns: []string{"nope"}}, func(arrow.RecordBatch, string) error { return nil }); err == nil {
		t.Fatal("scan of an unknown column succeeded")
	}
}

func TestLatestVersionWithoutOrWithStaleHint(t *testing.T) {
	ctx := context.Background()
	b := memBucket(t)
	tb := createTable(t, b)
	for i := 0; i < 3; i++ {
		mustAppend(t, tb, row{fmt.Sprint(i), 1, 1})
	}
	if err := b.Delete(ctx, "rollout/t/"+latestHint); err != nil {
		t.Fatal(err)
	}
	fresh, err := Open(ctx, b, "rollout/t")
	if err != nil {
		t.Fatal(err)
	}
	if v := fresh.Latest().Version; v != 4 {
		t.Fatalf("version %d without a hint, want 4", v)
	}
	if err := b.Put(ctx, "rollout/t/"+latestHint, []byte("2\n")); err != nil {
		t.Fatal(err)
	}
	fresh, err = Open(ctx, b, "rollout/t")
	if err != nil {
		t.Fatal(err)
	}
	if v := fresh.Latest().Version; v != 4 {
		t.Fatalf("version %d with a stale hint, want 4", v)
	}
}

// RefreshFrom a version the caller was told exists (the previous commit of a
// two-phase fan-out) reads it and checks the next in one round of two requests,
// and still finds the newest when the version told is behind, or pruned. Failure
// it guards: each commit of a fan-out searched for the newest version, two to
// three round trips one after another, inside the serial part of the merge.
func TestRefreshFromAVersionToldReadsItInOneRound(t *testing.T) {
	ctx := context.Background()
	f := objstore.NewFaults(nil)
	b := objstore.WithFaults(memBucket(t), f)
	tb := createTable(t, b)
	other, err := Open(ctx, b, "rollout/t")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		mustAppend(t, tb, row{fmt.Sprint(i), 1, 1})
	}
	f.SetLatency(100*time.Millisecond, 0) // long enough that requests sent at once overlap
	f.ResetCounters()
	m, err := other.RefreshFrom(ctx, 4)
	if err != nil || m.Version != 4 {
		t.Fatalf("refresh from 4: %v, %v; want version 4", m, err)
	}
	if n, peak := f.TotalRequests(), f.PeakInFlight(); n != 2 || peak != 2 {
		t.Fatalf("refresh from the newest: %d requests, %d at once; want 2, at once", n, peak)
	}
	f.SetLatency(0, 0)

	mustAppend(t, tb, row{"x", 1, 1}) // version 5
	if m, err := other.RefreshFrom(ctx, 4); err != nil || m.Version != 5 {
		t.Fatalf("refresh from 4 with 5 committed: %v, %v; want version 5", m, err)
	}
	mustAppend(t, tb, row{"y", 1, 1}) // version 6
	if err := b.Delete(ctx, tb.versionKey(5)); err != nil {
		t.Fatal(err)
	}
	if m, err := other.RefreshFrom(ctx, 5); err != nil || m.Version != 6 {
		t.Fatalf("refresh from 5, which is gone: %v, %v; want version 6", m, err)
	}
	if m, err := other.RefreshFrom(ctx, 0); err != nil || m.Version != 6 {
		t.Fatalf("refresh from nothing told: %v, %v; want version 6", m, err)
	}
}
