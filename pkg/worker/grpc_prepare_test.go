package worker

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"

	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// callTimeout bounds each call below: the env's merger has one slot, so a prepare
// that wrongly waits behind a held one would otherwise hang the test.
const callTimeout = 10 * time.Second

func (e *grpcEnv) prepare(t *testing.T, target string, token int64) (*tidemarkv1.PrepareMergeResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	return e.client.PrepareMerge(ctx, &tidemarkv1.PrepareMergeRequest{Target: target, FencingToken: token})
}

func (e *grpcEnv) commit(t *testing.T, target string, token int64) (*tidemarkv1.MergeWalResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	return e.client.CommitMerge(ctx, &tidemarkv1.CommitMergeRequest{Target: target, FencingToken: token})
}

func (e *grpcEnv) abortMerge(t *testing.T, target string, token int64) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	r, err := e.client.AbortMerge(ctx, &tidemarkv1.AbortMergeRequest{Target: target, FencingToken: token})
	if err != nil {
		t.Fatal(err)
	}
	return r.GetAborted()
}

// The two halves of the two-phase fan-out: a prepare commits nothing, a repeated
// prepare under the same token answers the held one, a commit under an older token
// is refused (the claim it carries is gone) and one under the prepare's token
// commits it. Invariant: only the claim that prepared may commit, and nothing is
// visible before it does.
func TestPrepareCommitsNothingAndOnlyItsTokenCommitsIt(t *testing.T) {
	e := newGRPCEnv(t, grpcEnvOptions{})
	e.pending(t, e.generic, "a")
	e.pending(t, e.generic, "b")
	version := e.generic.Table().Latest().Version

	r, err := e.prepare(t, "generic:gs", 5)
	if err != nil || r.GetGenerations() != 2 || r.GetRows() != 2 || r.GetInstanceId() != "w1" {
		t.Fatalf("prepare: %v, %v; want 2 generations, 2 rows", r, err)
	}
	if v := e.generic.Table().Latest().Version; v != version || merge.PendingOwn(e.generic) != 2 {
		t.Fatalf("after prepare: version %d (was %d), %d pending; want nothing committed", v, version, merge.PendingOwn(e.generic))
	}
	if r, err := e.prepare(t, "generic:gs", 5); err != nil || r.GetGenerations() != 2 {
		t.Fatalf("repeated prepare: %v, %v; want the held merge's answer", r, err)
	}
	_, err = e.commit(t, "generic:gs", 4)
	wantCode(t, err, codes.FailedPrecondition, "4", "5")
	if merge.PendingOwn(e.generic) != 2 {
		t.Fatal("a refused commit merged")
	}
	c, err := e.commit(t, "generic:gs", 5)
	if err != nil || c.GetGenerations() != 2 || c.GetBaseVersion() <= version {
		t.Fatalf("commit: %v, %v; want 2 generations in a new version", c, err)
	}
	if n := merge.PendingOwn(e.generic); n != 0 {
		t.Fatalf("after commit: %d pending", n)
	}
	if n := testutil.ToFloat64(e.metrics.Merges.WithLabelValues(TriggerMaster, "success")); n != 1 {
		t.Errorf("tidemark_merge_total{trigger=master,result=success} = %v, want 1", n)
	}
	// Committed: a second commit finds nothing prepared and merges what is pending
	// (nothing), as MergeWal would.
	if c, err := e.commit(t, "generic:gs", 5); err != nil || c.GetGenerations() != 0 {
		t.Fatalf("second commit: %v, %v", c, err)
	}
}

// A prepare holds a merge slot and staged files; each way it can end without a
// commit must give both back. Invariant: an abandoned prepare (its master died,
// its claim was superseded, the TTL passed) leaves no file and no slot behind.
func TestAPreparedMergeEndsByANewerTokenAnAbortOrItsTTL(t *testing.T) {
	b := objstoretest.Mem(t)
	e := newGRPCEnv(t, grpcEnvOptions{bucket: b, preparedTTL: 300 * time.Millisecond})
	e.pending(t, e.generic, "a")
	before := objstoretest.Keys(t, b)

	if _, err := e.prepare(t, "generic:gs", 5); err != nil {
		t.Fatal(err)
	}
	// The env's merger has one slot: this prepare waits for it unless the newer
	// token aborted the older prepare first.
	if _, err := e.prepare(t, "generic:gs", 6); err != nil {
		t.Fatalf("prepare under a newer token: %v", err)
	}
	_, err := e.commit(t, "generic:gs", 5)
	wantCode(t, err, codes.FailedPrecondition)
	if !e.abortMerge(t, "generic:gs", 6) {
		t.Fatal("abort of the held prepare said nothing was aborted")
	}
	if e.abortMerge(t, "generic:gs", 6) {
		t.Fatal("a second abort aborted something")
	}
	if got := objstoretest.Keys(t, b); !maps.Equal(got, before) {
		t.Fatalf("objects after abort: %d, want the %d from before the prepares (staged files deleted)", len(got), len(before))
	}

	if _, err := e.prepare(t, "generic:gs", 7); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, "the prepare to expire at its TTL", func() bool {
		e.svc.prepared.mu.Lock()
		defer e.svc.prepared.mu.Unlock()
		return len(e.svc.prepared.byTarget) == 0
	})
	// The expiry forgets the prepare, then deletes what it staged: wait for the
	// deletes (CI saw 12 objects for 10 right after the map emptied), bounded.
	testwait.For(t, 10*time.Second, "the staged files deleted after the TTL", func() (bool, string) {
		got := objstoretest.Keys(t, b)
		return maps.Equal(got, before), fmt.Sprintf("%d objects, want the %d from before the prepare", len(got), len(before))
	})
	// The slot is free again: MergeWal merges at once.
	if r, err := e.merge("generic:gs", 7); err != nil || r.GetGenerations() != 1 {
		t.Fatalf("merge after the TTL: %v, %v", r, err)
	}
}

// A newer claim that merges with MergeWal (a master in the serial shape, or a
// CommitMerge with nothing prepared) must not wait for the older claim's prepare
// to expire: the env's merger has one slot, which that prepare holds. Invariant:
// a prepare no claim can commit any more holds no slot.
func TestMergeWalUnderANewerTokenAbortsAnOlderPrepare(t *testing.T) {
	e := newGRPCEnv(t, grpcEnvOptions{})
	e.pending(t, e.generic, "a")
	if _, err := e.prepare(t, "generic:gs", 5); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	r, err := e.client.MergeWal(ctx, &tidemarkv1.MergeWalRequest{Target: "generic:gs", FencingToken: 6})
	if err != nil || r.GetGenerations() != 1 {
		t.Fatalf("MergeWal under a newer token: %v, %v; want the generation merged at once", r, err)
	}
	if e.abortMerge(t, "generic:gs", 5) {
		t.Fatal("the older prepare was still held")
	}
}

// A worker restarted between its prepare and its commit has nothing prepared: the
// commit merges now, so the task converges without another round.
func TestCommitWithNothingPreparedMergesAsMergeWal(t *testing.T) {
	e := newGRPCEnv(t, grpcEnvOptions{})
	e.pending(t, e.rollout, "a")
	c, err := e.commit(t, "gs", 3)
	if err != nil || c.GetGenerations() != 1 || merge.PendingOwn(e.rollout) != 0 {
		t.Fatalf("commit without prepare: %v, %v; want the pending generation merged", c, err)
	}
	_, err = e.commit(t, "gs", 0)
	wantCode(t, err, codes.InvalidArgument, "fencing_token")
	_, err = e.prepare(t, "generic:nope", 3)
	wantCode(t, err, codes.NotFound)
}
