package store

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
)

const testSpec = `{"columns":[["id",{"type":"string"}],["v",{"type":"int64","nullable":true}]]}`

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func newStores(t testing.TB, b *objstore.Bucket, shard string) *Stores {
	t.Helper()
	ss := NewStores(Config{Bucket: b, Shard: shard, Logger: quiet(), SnapshotTTL: -1,
		WALOptions: []wal.Option{wal.WithLogger(quiet())}}, 0)
	t.Cleanup(func() { _ = ss.Close(context.Background()) })
	return ss
}

func createGeneric(t testing.TB, ss *Stores, name string) registry.Entry {
	t.Helper()
	spec, err := schema.ParseSpec([]byte(testSpec))
	if err != nil {
		t.Fatal(err)
	}
	canon, _ := spec.MarshalJSON()
	e, err := ss.Create(context.Background(), registry.Entry{Kind: registry.KindGeneric, Name: name, Schema: canon})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func open(t testing.TB, ss *Stores, name string) *Store {
	t.Helper()
	s, rel, err := ss.Open(context.Background(), registry.KindGeneric, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rel)
	return s
}

// rows builds a batch of the test spec from id=value pairs.
func rows(t testing.TB, s *Store, kv ...any) arrow.RecordBatch {
	t.Helper()
	var raw []json.RawMessage
	for i := 0; i < len(kv); i += 2 {
		raw = append(raw, json.RawMessage(fmt.Sprintf(`{"id":%q,"v":%d}`, kv[i], kv[i+1])))
	}
	spec, err := schema.ParseSpec([]byte(testSpec))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := spec.Codec().Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func appendRows(t testing.TB, s *Store, kv ...any) {
	t.Helper()
	rec := rows(t, s, kv...)
	defer rec.Release()
	if err := s.Append(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
}

// values lists the store and returns id -> v, failing on a duplicate id.
func values(t testing.TB, s *Store) map[string]int64 {
	t.Helper()
	recs, err := s.List(context.Background(), ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, r := range recs {
		id := r.Column(0).(*array.String).Value(0)
		if _, dup := out[id]; dup {
			t.Fatalf("id %s listed twice", id)
		}
		out[id] = r.Column(1).(*array.Int64).Value(0)
		r.Release()
	}
	return out
}

var _ = objstoretest.Mem
