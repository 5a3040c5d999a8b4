package tasks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/testutil/etcdtest"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// Two master replicas must never run one task twice: only one of two claimers
// racing for a task wins it.
func TestOnlyOneOfTwoClaimersGetsTheTask(t *testing.T) {
	t.Parallel()
	s, client := newStore(t)
	leases := []clientv3.LeaseID{grant(t, client), grant(t, client)}
	for round := range 5 {
		task := enqueue(t, s, KindMergeWAL, fmt.Sprintf("r%d", round))
		var (
			wg     sync.WaitGroup
			mu     sync.Mutex
			claims []*Claim
			none   int
		)
		for _, lease := range leases {
			wg.Go(func() {
				c, err := s.Claim(context.Background(), lease, ClaimFilter{})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case errors.Is(err, ErrNoTask):
					none++
				case err != nil:
					t.Error(err)
				default:
					claims = append(claims, c)
				}
			})
		}
		wg.Wait()
		if len(claims) != 1 || none != 1 || claims[0].Task.ID != task.ID {
			t.Fatalf("round %d: %d claims and %d ErrNoTask, want exactly one claim of %s", round, len(claims), none, task.ID)
		}
		finish(t, s, claims[0], nil)
	}
}

func TestClaimsFollowEnqueueOrder(t *testing.T) {
	t.Parallel()
	s, client := newStore(t)
	var want []string
	for i := range 6 {
		want = append(want, enqueue(t, s, KindCompact, fmt.Sprintf("store-%d", 5-i)).ID)
	}
	lease := grant(t, client)
	for i, id := range want {
		c := claim(t, s, lease)
		if c.Task.ID != id {
			t.Fatalf("claim %d got %s (%s), want %s", i, c.Task.ID, c.Task.Target, id)
		}
	}
	noClaim(t, s, lease)
}

// A task due earlier overtakes the ones enqueued before it (a quiet store whose
// oldest rows have waited MERGE_MAX_DELAY goes before a busy store's merge, due
// later), ties go in enqueue order, and a task without a due time is due at its
// enqueue. A task whose target is held is passed over whatever its due time,
// and goes first once the target is free.
func TestClaimsTakeTheTaskDueFirst(t *testing.T) {
	t.Parallel()
	s, client := newStore(t)
	ctx := context.Background()
	lease := grant(t, client)
	now := time.Now()
	enqueueDue := func(kind Kind, target string, due time.Time) Task {
		t.Helper()
		task, dedup, err := s.EnqueueDue(ctx, kind, tgt(target), due)
		if err != nil || dedup {
			t.Fatalf("enqueue %s: dedup %v, %v", target, dedup, err)
		}
		return task
	}
	want := map[string]Task{}
	for _, e := range []struct {
		target string
		due    time.Duration
	}{{"hot", 25 * time.Second}, {"plain", 0}, {"quiet-a", -time.Second}, {"quiet-b", -time.Second}, {"late", -time.Minute}} {
		due := time.Time{}
		if e.due != 0 {
			due = now.Add(e.due)
		}
		want[e.target] = enqueueDue(KindMergeWAL, e.target, due)
	}
	for i, target := range []string{"late", "quiet-a", "quiet-b", "plain", "hot"} {
		c := claim(t, s, lease)
		if c.Task.ID != want[target].ID {
			t.Fatalf("claim %d got %s, want %s", i, c.Task.Target, target)
		}
		if !c.Task.DueAt.Equal(want[target].DueAt) {
			t.Fatalf("%s claimed due %v, enqueued due %v", target, c.Task.DueAt, want[target].DueAt)
		}
		finish(t, s, c, nil)
	}
	noClaim(t, s, lease)

	enqueueDue(KindCompact, "held", time.Time{})
	compact := claim(t, s, lease)
	overdue := enqueueDue(KindVerify, "held", now.Add(-time.Hour)) // the compact's lane
	next := enqueueDue(KindMergeWAL, "free", time.Time{})
	if c := claim(t, s, lease); c.Task.ID != next.ID {
		t.Fatalf("claimed %s %s while the overdue verify's store was held, want the merge of free", c.Task.Kind, c.Task.Target)
	}
	finish(t, s, compact, nil)
	if c := claim(t, s, lease); c.Task.ID != overdue.ID {
		t.Fatalf("claimed %s %s, want the overdue verify once its store is free", c.Task.Kind, c.Task.Target)
	}
}

// At most one running task per target and lane: a merge and a compaction of one
// store run side by side (their commits rebase onto each other), two merges or
// two maintenance tasks of one store never do, and each lane's fencing tokens
// grow on their own.
func TestOneRunningTaskPerTargetAndLane(t *testing.T) {
	t.Parallel()
	s, client := newStore(t)
	ctx := context.Background()
	lease := grant(t, client)
	merge := enqueue(t, s, KindMergeWAL, "r1")
	compact := enqueue(t, s, KindCompact, "r1")
	verify := enqueue(t, s, KindVerify, "r1")

	c1 := claim(t, s, lease)
	c2 := claim(t, s, lease)
	if c1.Task.ID != merge.ID || c2.Task.ID != compact.ID {
		t.Fatalf("claimed %s %s then %s %s, want the merge of r1 then its compact (the other lane)",
			c1.Task.Kind, c1.Task.Target, c2.Task.Kind, c2.Task.Target)
	}
	noClaim(t, s, lease) // the verify of r1 waits for the compact's lane
	for _, key := range []string{s.keys.Lock("r1"), s.keys.MaintenanceLock("r1")} {
		if v, _ := raw(t, client, key); v == "" {
			t.Fatalf("%s absent while its lane's task runs", key)
		}
	}

	// The merge ends and a new one of r1 starts while the compaction still runs:
	// its token is newer than the compaction's, and the compaction's still fences.
	finish(t, s, c1, nil)
	again := enqueue(t, s, KindMergeWAL, "r1")
	c3 := claim(t, s, lease)
	if c3.Task.ID != again.ID || c3.FencingToken <= c2.FencingToken {
		t.Fatalf("claimed %s (token %d) beside the compact (token %d), want the new merge of r1 with a newer token",
			c3.Task.ID, c3.FencingToken, c2.FencingToken)
	}
	held, err := s.Held(ctx, lease)
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[string]int64{}
	for _, h := range held {
		tokens[h.Task.ID] = h.FencingToken
	}
	if tokens[c2.Task.ID] != c2.FencingToken || tokens[c3.Task.ID] != c3.FencingToken {
		t.Fatalf("held claims' fencing tokens %v, want compact %d and merge %d (each its lane's lock)",
			tokens, c2.FencingToken, c3.FencingToken)
	}
	finish(t, s, c2, nil)
	if c4 := claim(t, s, lease); c4.Task.ID != verify.ID {
		t.Fatalf("claimed %s after the compact finished, want the verify of r1", c4.Task.ID)
	} else if c4.FencingToken <= c2.FencingToken {
		t.Fatalf("maintenance fencing token of r1 went from %d to %d, want it to grow", c2.FencingToken, c4.FencingToken)
	}
	if v, _ := raw(t, client, s.keys.Lock("r1")); v != c3.Token {
		t.Fatalf("merge lock of r1 is %q after the compact finished, want the running merge's token", v)
	}
}

func TestClaimFilterLeavesOutOtherKinds(t *testing.T) {
	t.Parallel()
	s, client := newStore(t)
	lease := grant(t, client)
	enqueue(t, s, KindMergeWAL, "r1")
	compact := enqueue(t, s, KindCompact, "r2")
	if c := claim(t, s, lease, KindCompact, KindVerify); c.Task.ID != compact.ID {
		t.Fatalf("claimed %s %s with a compact/verify filter", c.Task.Kind, c.Task.Target)
	}
	if _, err := s.Claim(context.Background(), lease, ClaimFilter{Kinds: []Kind{KindCompact}}); !errors.Is(err, ErrNoTask) {
		t.Fatalf("claim with only a merge queued and a compact filter: %v, want ErrNoTask", err)
	}
	if _, err := s.Claim(context.Background(), lease, ClaimFilter{Kinds: []Kind{"nope"}}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("claim with an unknown kind: %v, want ErrInvalidArgument", err)
	}
}

// A master whose session lease expired mid-merge leaves a running task that
// nobody would ever finish; it must run again, and the worker must be able to
// tell the new run from the old one.
func TestRevokedClaimIsRecoveredAndClaimedAgainWithAHigherFencingToken(t *testing.T) {
	t.Parallel()
	s, client := newStore(t)
	ctx := context.Background()
	task := enqueue(t, s, KindMergeWAL, "generic:gs")
	dead := grant(t, client)
	first := claim(t, s, dead)

	revoke(t, client, dead) // the claim and the target lock die with the lease
	n, err := s.RecoverOrphans(ctx)
	if err != nil || n != 1 {
		t.Fatalf("recover orphans: %d, %v; want 1", n, err)
	}
	got := get(t, s, task.ID)
	if got.State != StateQueued || got.Attempts != 1 || got.ClaimToken != "" || !got.StartedAt.IsZero() {
		t.Fatalf("recovered task %+v, want queued with 1 attempt and no claim", got)
	}
	if n, _ := s.RecoverOrphans(ctx); n != 0 {
		t.Fatalf("second recovery requeued %d tasks", n)
	}

	second := claim(t, s, grant(t, client))
	if second.Task.ID != task.ID || second.Task.Attempts != 2 {
		t.Fatalf("reclaimed %+v, want %s on its second attempt", second.Task, task.ID)
	}
	if second.FencingToken <= first.FencingToken {
		t.Fatalf("fencing token %d after recovery, want more than %d", second.FencingToken, first.FencingToken)
	}
	if done := finish(t, s, second, nil); done.FencingToken != second.FencingToken {
		t.Fatalf("finished record has fencing token %d, want %d", done.FencingToken, second.FencingToken)
	}
}

// Claim itself recovers orphans before it picks, so a replica that never calls
// RecoverOrphans still picks up a dead replica's work.
func TestClaimRecoversOrphansFirst(t *testing.T) {
	t.Parallel()
	s, client := newStore(t)
	task := enqueue(t, s, KindCompact, "r1")
	dead := grant(t, client)
	claim(t, s, dead)
	revoke(t, client, dead)
	if c := claim(t, s, grant(t, client)); c.Task.ID != task.ID {
		t.Fatalf("claimed %s, want the orphan %s", c.Task.ID, task.ID)
	}
}

func TestClaimUnderADeadLeaseChangesNothing(t *testing.T) {
	t.Parallel()
	s, client := newStore(t)
	task := enqueue(t, s, KindCompact, "r1")
	dead := grant(t, client)
	revoke(t, client, dead)
	_, err := s.Claim(context.Background(), dead, ClaimFilter{})
	if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("claim under a revoked lease: %v, want ErrLeaseNotFound", err)
	}
	if got := get(t, s, task.ID); got.State != StateQueued || got.Attempts != 0 {
		t.Fatalf("task after a failed claim: %+v", got)
	}
	if _, err := s.Claim(context.Background(), clientv3.NoLease, ClaimFilter{}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("claim without a lease: %v, want ErrInvalidArgument", err)
	}
}

func TestDependencyIsNotClaimableBeforeItsDependencyIsDone(t *testing.T) {
	t.Parallel()
	s, client := newStore(t)
	lease := grant(t, client)
	first := enqueue(t, s, KindMergeWAL, "r1")
	// Another target, so that only the dependency, not the target lock, holds it back.
	second := enqueue(t, s, KindCompact, "r2", first.ID)

	noClaimOf := func(when string) {
		t.Helper()
		c, err := s.Claim(context.Background(), lease, ClaimFilter{})
		if err == nil && c.Task.ID == second.ID {
			t.Fatalf("%s: claimed the dependent before its dependency was done", when)
		}
		if err != nil && !errors.Is(err, ErrNoTask) {
			t.Fatal(err)
		}
	}
	c := claim(t, s, lease)
	if c.Task.ID != first.ID {
		t.Fatalf("claimed %s first, want the dependency %s", c.Task.ID, first.ID)
	}
	noClaimOf("dependency running")
	finish(t, s, c, nil)
	if c := claim(t, s, lease); c.Task.ID != second.ID {
		t.Fatalf("claimed %s, want the dependent %s", c.Task.ID, second.ID)
	}
}

func TestFailedDependencyFailsItsDependents(t *testing.T) {
	t.Parallel()
	s, client := newStore(t)
	lease := grant(t, client)
	a := enqueue(t, s, KindMergeWAL, "r1")
	b := enqueue(t, s, KindCompact, "r2", a.ID)
	c := enqueue(t, s, KindVerify, "r3", b.ID)

	finish(t, s, claim(t, s, lease), errors.New("worker w2 unavailable"))
	noClaim(t, s, lease) // fails b, then c, on the way
	for dependent, dependency := range map[string]string{b.ID: a.ID, c.ID: b.ID} {
		got := get(t, s, dependent)
		want := fmt.Sprintf("dependency %s did not complete", dependency)
		if got.State != StateFailed || got.Error != want || got.FinishedAt.IsZero() {
			t.Errorf("dependent %s: state %s error %q, want failed with %q", dependent, got.State, got.Error, want)
		}
	}
	if !strings.Contains(get(t, s, b.ID).Detail, "worker w2 unavailable") {
		t.Errorf("detail of b does not carry a's error: %q", get(t, s, b.ID).Detail)
	}
	// Their kind+target are free again.
	enqueue(t, s, KindCompact, "r2")
	if n, _ := s.QueueDepth(context.Background()); n != 1 {
		t.Fatalf("queue depth %d, want 1", n)
	}
}

func TestReleaseRequeuesAtItsPlace(t *testing.T) {
	t.Parallel()
	s, client := newStore(t)
	ctx := context.Background()
	lease := grant(t, client)
	first := enqueue(t, s, KindCompact, "r1")
	enqueue(t, s, KindCompact, "r2")
	c := claim(t, s, lease)
	released, err := s.Release(ctx, c)
	if err != nil || released.State != StateQueued {
		t.Fatalf("release: %+v, %v", released, err)
	}
	if _, err := s.Release(ctx, c); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("second release: %v, want ErrClaimLost", err)
	}
	if _, err := s.Finish(ctx, c, Result{}); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("finish after release: %v, want ErrClaimLost", err)
	}
	again := claim(t, s, lease)
	if again.Task.ID != first.ID || again.Task.Attempts != 2 {
		t.Fatalf("claimed %+v after release, want %s again (attempt 2)", again.Task, first.ID)
	}
}

// While etcd is gone a claim is an error, never ErrNoTask (which a scheduler takes
// for "idle"), and claiming works again once etcd is back.
func TestClaimErrorsWhileEtcdIsDownAndWorksAfterRestart(t *testing.T) {
	t.Parallel()
	server := etcdtest.StartServer(t)
	client := server.Client(t)
	s := New(client, "/tidemark", WithHolder("test"))
	task := enqueue(t, s, KindMergeWAL, "r1")
	lease := grant(t, client)

	server.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_, err := s.Claim(ctx, lease, ClaimFilter{})
	cancel()
	if err == nil || errors.Is(err, ErrNoTask) {
		t.Fatalf("claim with etcd down: %v, want a transport error", err)
	}

	server.Restart(t)
	testwait.For(t, 15*time.Second, "the client to reconnect", func() (bool, string) {
		if err := etcdtest.Ping(context.Background(), client, time.Second); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	if c := claim(t, s, lease); c.Task.ID != task.ID {
		t.Fatalf("claimed %s after restart, want %s", c.Task.ID, task.ID)
	}
}

// A queue longer than one read page: the claimable task sits behind a full page
// of tasks that wait for a running dependency.
func TestClaimReadsPastTheFirstQueuePage(t *testing.T) {
	t.Parallel()
	s, client := newStore(t)
	lease := grant(t, client)
	blocker := enqueue(t, s, KindCompact, "blocker")
	claim(t, s, lease)
	for i := range queuePage {
		enqueue(t, s, KindMergeWAL, fmt.Sprintf("waits-%d", i), blocker.ID)
	}
	free := enqueue(t, s, KindMergeWAL, "free")
	if c := claim(t, s, lease); c.Task.ID != free.ID {
		t.Fatalf("claimed %s %s, want the task on the second page", c.Task.Kind, c.Task.Target)
	}
	noClaim(t, s, lease)
	if n, err := s.QueueDepth(context.Background()); err != nil || n != queuePage {
		t.Fatalf("queue depth %d, %v; want %d", n, err, queuePage)
	}
}
