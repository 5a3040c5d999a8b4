package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark-io/tidemark/pkg/data/rowfilter"
	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/testutil/storetest"
)

// TestCompileFilterTakesEachKindsFilter: a generic store's filter is a SQL
// predicate over its columns, a rollout store's a JSON object of equalities;
// either one that is wrong is Invalid (a 400, an export task not retried),
// whoever compiles it (a list, the change feed, an export).
func TestCompileFilterTakesEachKindsFilter(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	g := storetest.Open(t, b, "w1", true)
	mask, cols, err := g.CompileFilter("v >= 2")
	if err != nil || len(cols) != 1 || cols[0] != "v" {
		t.Fatalf("generic: %v, %v", cols, err)
	}
	if err := storetest.Append(ctx, g, 1, "a"); err != nil {
		t.Fatal(err)
	}
	if err := storetest.Append(ctx, g, 2, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Seal(ctx); err != nil {
		t.Fatal(err)
	}
	sc, err := g.OpenScan(ctx, store.ScanOptions{Filter: mask, FilterColumns: cols})
	if err != nil {
		t.Fatal(err)
	}
	got, err := scanValues(ctx, sc)
	if err != nil || len(got) != 1 || got["b"] != 2 {
		t.Fatalf("scan with the compiled filter: %v, %v", got, err)
	}
	for _, bad := range []string{"nope = 1", "v = 'x'", "", "v >"} {
		_, _, err := g.CompileFilter(bad)
		if !errors.Is(err, rowfilter.ErrInvalid) || errclass.Of(err) != errclass.Invalid {
			t.Errorf("generic %q: %v (class %s)", bad, err, errclass.Of(err))
		}
	}

	ss := store.NewStores(store.Config{Bucket: b, Shard: "w1", Logger: storetest.Quiet(), SnapshotTTL: -1,
		WALOptions: []wal.Option{wal.WithLogger(storetest.Quiet())}}, 0)
	t.Cleanup(func() { _ = ss.Close(context.Background()) })
	if _, err := ss.Create(ctx, registry.Entry{Kind: registry.KindRollout, Name: "r"}); err != nil {
		t.Fatal(err)
	}
	r, rel, err := ss.Open(ctx, registry.KindRollout, "r")
	if err != nil {
		t.Fatal(err)
	}
	defer rel()
	var m func(arrow.RecordBatch) ([]bool, error)
	if m, cols, err = r.CompileFilter(`{"dataset":"gsm8k","include_in_training":true}`); err != nil || m == nil || len(cols) != 2 {
		t.Fatalf("rollout: %v, %v", cols, err)
	}
	if m, cols, err = r.CompileFilter(""); err != nil || m != nil || cols != nil {
		t.Fatalf("rollout, no filter: %v, %v", cols, err)
	}
	for _, bad := range []string{`{"nope":"x"}`, `{"dataset":1}`, `v >= 2`} {
		_, _, err := r.CompileFilter(bad)
		if !errors.Is(err, schema.ErrInvalid) || errclass.Of(err) != errclass.Invalid {
			t.Errorf("rollout %q: %v (class %s)", bad, err, errclass.Of(err))
		}
	}
}
