package rpc

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

// Two workers of one bucket, each with generations of its own shard: MergeStore on
// one commits both shards in one version and drains its own; DrainMerged on the
// other empties its shard. Both are fenced as MergeWal is: a stale token changes
// nothing.
func TestMergeStoreCommitsEveryShardOnceAndDrainMergedDrainsTheOwner(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	w1 := newGRPCEnv(t, grpcEnvOptions{bucket: b, instance: "w1"})
	w2 := newGRPCEnv(t, grpcEnvOptions{bucket: b, instance: "w2"})
	w1.pending(t, w1.generic, "a")
	w2.pending(t, w2.generic, "b")
	w2.pending(t, w2.generic, "c")
	before := w1.generic.Table().Latest().Version

	resp, err := w1.client.MergeStore(ctx, &tidemarkv1.MergeStoreRequest{Target: "generic:gs", FencingToken: 5})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetGenerations() != 3 || resp.GetBaseVersion() != before+1 || resp.GetMerged()["w1"] != 1 || resp.GetMerged()["w2"] != 2 {
		t.Fatalf("MergeStore answered %v, want 3 generations of w1 and w2 in version %d", resp, before+1)
	}
	// The master compacts on this count: the one fragment the commit wrote.
	if want := int64(w1.generic.Table().Latest().Levels().Level0); resp.GetLevel0Fragments() != want || want < 1 {
		t.Fatalf("MergeStore answered %d level-0 fragments, the table has %d", resp.GetLevel0Fragments(), want)
	}
	if n := merge.PendingOwn(w1.generic); n != 0 {
		t.Fatalf("w1 has %d generations pending after merging the store", n)
	}
	dr, err := w2.client.DrainMerged(ctx, &tidemarkv1.DrainMergedRequest{Target: "generic:gs", FencingToken: 5})
	if err != nil || dr.GetReclaimed() != 2 {
		t.Fatalf("DrainMerged on w2: %v %v, want its 2 generations drained", dr, err)
	}
	sm, err := wal.LoadShard(ctx, b, w2.generic.Entry().URI, "w2")
	if err != nil || len(sm.Generations) != 0 {
		t.Fatalf("w2's shard after its drain: %v %v, want no generation", sm, err)
	}
	for _, id := range []string{"a", "b", "c"} {
		rec, err := w2.generic.Get(ctx, id)
		if err != nil {
			t.Fatalf("get %s after the drain: %v", id, err)
		}
		rec.Release()
	}
	_, err = w1.client.MergeStore(ctx, &tidemarkv1.MergeStoreRequest{Target: "generic:gs", FencingToken: 4})
	wantCode(t, err, codes.FailedPrecondition, "4", "5")
	_, err = w2.client.DrainMerged(ctx, &tidemarkv1.DrainMergedRequest{Target: "generic:gs", FencingToken: 4})
	wantCode(t, err, codes.FailedPrecondition, "4", "5")
}
