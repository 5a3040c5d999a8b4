package store_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/testutil/storetest"
)

// A list (paged or streamed) or a get that leaves a store's blob column out of
// its answer does not read it from the base table: the rows it returns from
// there come without it (what is not in a row batch was not read), while a row
// still in a pending generation, in memory already, comes with every column.
// What it guards: a list of rollout records read every record's binary_payload
// (up to a request body each) from storage only to drop it.
func TestReadsLeavingABlobOutDoNotReadItFromTheBaseTable(t *testing.T) {
	ctx := context.Background()
	s := rolloutStore(t, -1)
	add := func(ids ...string) {
		t.Helper()
		addRollouts(t, s, func(id string) []byte { return []byte("payload of " + id) }, ids...)
	}
	add("a", "b")
	if _, err := merge.New(merge.Config{Logger: storetest.Quiet()}).Merge(ctx, s, true); err != nil {
		t.Fatal(err)
	}
	add("c") // pending

	cols := s.ColumnsExcept(s.BlobColumns())
	has := func(rec arrow.RecordBatch) bool {
		return len(rec.Schema().FieldIndices(schema.BinaryPayloadColumn)) > 0
	}
	recs, err := s.List(ctx, store.ListOptions{Limit: 10, Columns: cols})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, rec := range recs {
		ids, _, err := rowkey.Columns(rec)
		if err != nil {
			t.Fatal(err)
		}
		got[ids.Value(0)] = has(rec)
		rec.Release()
	}
	if want := map[string]bool{"a": false, "b": false, "c": true}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("list: rows with their payload %v, want %v (base rows without it, the pending row with it)", got, want)
	}
	got = map[string]bool{}
	err = s.Stream(ctx, store.ListOptions{Columns: cols}, func(rec arrow.RecordBatch, i int) error {
		ids, _, err := rowkey.Columns(rec)
		if err != nil {
			return err
		}
		got[ids.Value(i)] = has(rec)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]bool{"a": false, "b": false, "c": true}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("stream: rows with their payload %v, want %v", got, want)
	}
	for id, want := range map[string]bool{"a": false, "c": true} {
		n := 0
		err := s.GetMany(ctx, []string{id}, cols, func(rec arrow.RecordBatch) error {
			n++
			if has(rec) != want {
				t.Errorf("get %s: payload read %v, want %v", id, has(rec), want)
			}
			return nil
		})
		if err != nil || n != 1 {
			t.Fatalf("get %s: %d rows, %v", id, n, err)
		}
	}
	// Without Columns every column is read, as before.
	recs, err = s.List(ctx, store.ListOptions{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		if !has(rec) {
			t.Errorf("list without Columns: a row without its payload")
		}
		rec.Release()
	}
}

// BenchmarkListLeavingBlobsOut lists a page of 100 rollout records whose 256 KiB
// payloads are all in the base table, reading every column (what a list did) and
// reading every column but the payload (Columns: what a list does). B/op is the
// memory a list allocates: the payloads read only to be dropped, or not.
func BenchmarkListLeavingBlobsOut(b *testing.B) {
	ctx := context.Background()
	s := rolloutStore(b, 0)
	ids := make([]string, 100)
	for i := range ids {
		ids[i] = fmt.Sprintf("r%03d", i)
	}
	payload := make([]byte, 256<<10)
	addRollouts(b, s, func(string) []byte { return payload }, ids...)
	if _, err := merge.New(merge.Config{Logger: storetest.Quiet()}).Merge(ctx, s, true); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cols []string
	}{{"every-column", nil}, {"without-payload", s.ColumnsExcept(s.BlobColumns())}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				recs, err := s.List(ctx, store.ListOptions{Limit: 100, Columns: c.cols})
				if err != nil || len(recs) != 100 {
					b.Fatalf("%d rows, %v", len(recs), err)
				}
				for _, r := range recs {
					r.Release()
				}
			}
		})
	}
}

// rolloutStore opens a new rollout store on a memory bucket, whose handle's
// snapshots live snapshotTTL (store.Config.SnapshotTTL).
func rolloutStore(t testing.TB, snapshotTTL time.Duration) *store.Store {
	t.Helper()
	ctx := context.Background()
	ss := store.NewStores(store.Config{Bucket: objstoretest.Mem(t), Shard: "w1", Logger: storetest.Quiet(), SnapshotTTL: snapshotTTL,
		WALOptions: []wal.Option{wal.WithLogger(storetest.Quiet())}}, 0)
	t.Cleanup(func() { _ = ss.Close(context.Background()) })
	if _, err := ss.Create(ctx, registry.Entry{Kind: registry.KindRollout, Name: "r"}); err != nil {
		t.Fatal(err)
	}
	s, release, err := ss.Open(ctx, registry.KindRollout, "r")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return s
}

// addRollouts adds one record per id, with payload(id) as its binary_payload,
// and seals them into one generation.
func addRollouts(t testing.TB, s *store.Store, payload func(id string) []byte, ids ...string) {
	t.Helper()
	ctx := context.Background()
	var raw []json.RawMessage
	for _, id := range ids {
		raw = append(raw, json.RawMessage(fmt.Sprintf(`{"id":%q,"rollout_id":"r1","binary_payload":%q}`,
			id, base64.StdEncoding.EncodeToString(payload(id)))))
	}
	rec, err := schema.DecodeRollouts(raw, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	if err := s.Append(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Seal(ctx); err != nil {
		t.Fatal(err)
	}
}
