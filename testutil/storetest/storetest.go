// Package storetest creates and opens real stores on a test bucket and writes and
// reads them by id and value, for the tests of the packages that work on stores
// (merges, adoption, maintenance, the master's). Every store it opens is the
// generic store "g" with the schema Spec: an id and an int64 value v.
package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// Spec is the schema of the stores opened here.
const Spec = `{"columns":[["id",{"type":"string"}],["v",{"type":"int64","nullable":true}]]}`

// Quiet is a logger that discards everything.
func Quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// Open opens generic store "g" as worker shard on b, creating it if create; opts
// are added to the shard's WAL options. Reads refresh at every call (no snapshot
// TTL). The store and its Stores are closed when the test ends.
func Open(t testing.TB, b *objstore.Bucket, shard string, create bool, opts ...wal.Option) *store.Store {
	t.Helper()
	ctx := context.Background()
	ss := store.NewStores(store.Config{Bucket: b, Shard: shard, Logger: Quiet(), SnapshotTTL: -1,
		WALOptions: append([]wal.Option{wal.WithLogger(Quiet())}, opts...)}, 0)
	t.Cleanup(func() { _ = ss.Close(context.Background()) })
	if create {
		if _, err := ss.Create(ctx, registry.Entry{Kind: registry.KindGeneric, Name: "g", Schema: canonical(t)}); err != nil {
			t.Fatal(err)
		}
	}
	s, rel, err := ss.Open(ctx, registry.KindGeneric, "g")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rel)
	return s
}

// Create registers a store in b for each target, as a worker's create does: a
// rollout store for "<name>", a generic store of Spec for "generic:<name>".
func Create(t testing.TB, b *objstore.Bucket, targets ...string) {
	t.Helper()
	ss := store.NewStores(store.Config{Bucket: b, Shard: "storetest", Logger: Quiet(), SnapshotTTL: -1,
		WALOptions: []wal.Option{wal.WithLogger(Quiet())}}, 0)
	defer func() { _ = ss.Close(context.Background()) }()
	for _, target := range targets {
		parsed, err := registry.ParseTarget(target)
		if err != nil {
			t.Fatal(err)
		}
		e := registry.Entry{Kind: parsed.Kind, Name: parsed.Name}
		if parsed.Kind == registry.KindGeneric {
			e.Schema = canonical(t)
		}
		if _, err := ss.Create(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
}

func canonical(t testing.TB) []byte {
	t.Helper()
	spec, err := schema.ParseSpec([]byte(Spec))
	if err != nil {
		t.Fatal(err)
	}
	canon, err := spec.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return canon
}

// Append appends one row per id, each with value v, to s's own shard.
func Append(ctx context.Context, s *store.Store, v int64, ids ...string) error {
	var raw []json.RawMessage
	for _, id := range ids {
		raw = append(raw, json.RawMessage(fmt.Sprintf(`{"id":%q,"v":%d}`, id, v)))
	}
	spec, err := schema.ParseSpec([]byte(Spec))
	if err != nil {
		return err
	}
	rec, err := spec.Codec().Decode(raw)
	if err != nil {
		return err
	}
	defer rec.Release()
	return s.Append(ctx, rec)
}

// AppendAndSeal appends id=value pairs (id string, value int) to s's own shard
// and seals them into one generation.
func AppendAndSeal(t testing.TB, s *store.Store, kv ...any) {
	t.Helper()
	for i := 0; i < len(kv); i += 2 {
		if err := Append(context.Background(), s, int64(kv[i+1].(int)), kv[i].(string)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Seal(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Values lists s: id -> v. An id listed twice fails the test.
func Values(t testing.TB, s *store.Store) map[string]int64 {
	t.Helper()
	recs, err := s.List(context.Background(), store.ListOptions{})
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

// WantValue fails unless a read of id through s returns value v.
func WantValue(t testing.TB, s *store.Store, id string, v int64) {
	t.Helper()
	rec, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	if rec == nil {
		t.Fatalf("get %s: missing, want %d", id, v)
	}
	defer rec.Release()
	if got := rec.Column(1).(*array.Int64).Value(0); got != v {
		t.Fatalf("get %s = %d, want %d", id, got, v)
	}
}
