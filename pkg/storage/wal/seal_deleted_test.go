package wal_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
)

// A worker whose store was deleted through another worker still holds a writer
// with unsealed rows, and its flush sweeper seals them. If the name was created
// again meanwhile, that seal must not land in the new store: its shard starts with
// no manifest, so the writer's version+1 would be put-if-absent into an empty
// directory and the deleted store's rows would show up in the new one (or, with the
// generation file removed by the new store's cleanup, fail every read of it).
func TestASealOfADeletedShardLandsNowhere(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	w := openWriter(t, b, testShard)
	mustAppend(t, w, "old-1", "old-2")
	objs, err := b.List(ctx, testDir+"/")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs { // the store's delete
		if err := b.Delete(ctx, o.Key); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Seal(ctx); !errors.Is(err, wal.ErrNoShard) {
		t.Fatalf("seal after the store's objects were deleted: %v, want ErrNoShard", err)
	}
	if left, err := b.List(ctx, testDir+"/"); err != nil || len(left) != 0 {
		t.Fatalf("the seal left %d objects in the deleted store's directory (%v): %v", len(left), err, left)
	}
}
